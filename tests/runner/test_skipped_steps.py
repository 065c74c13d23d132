"""Training steps skipped as non-finite are counted per cell, shown in the report, and a cell whose
skipped fraction exceeds the suite's ``max_skipped_fraction`` fails."""

from __future__ import annotations

import json

import pytest
import torch
from zoo_protonet import ProtoNet

from zoo.plugins import registry
from zoo.runner.bench import run_suite
from zoo.runner.report import load_report, markdown
from zoo.runner.validate import SettingError

from .conftest import tiny_suite


class Sometimes(ProtoNet):
    """ProtoNet whose loss is NaN on every third training step."""

    name = "sometimes-nan"
    calls = 0

    def meta_loss(self, episode):
        Sometimes.calls += 1
        loss = super().meta_loss(episode)
        return loss * torch.nan if Sometimes.calls % 3 == 0 else loss


@pytest.fixture
def sometimes():
    reg = registry()
    reg.register("methods", "sometimes-nan", Sometimes, owner="tests")
    Sometimes.calls = 0
    yield
    reg.unregister("methods", "sometimes-nan")


def test_skipped_steps_fail_a_cell_above_the_fraction(sometimes, tmp_path):
    suite = tiny_suite(methods=["sometimes-nan"], test_datasets=["glyphs"])
    outcome = run_suite(suite, out=tmp_path / "strict", device="cpu", progress=False)
    (failed,) = outcome.failed
    assert "2 of 6 training steps" in failed.error and "max_skipped_fraction" in failed.error


def test_skipped_steps_are_counted_and_shown(sometimes, tmp_path):
    suite = tiny_suite(methods=["sometimes-nan"], test_datasets=["glyphs"],
                       max_skipped_fraction=0.5)
    run_suite(suite, out=tmp_path, device="cpu", progress=False)
    result = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    assert (result["skipped_steps"], result["training_steps"]) == (2, 6)
    assert "[2 steps skipped]" in markdown(load_report(tmp_path))


def test_max_skipped_fraction_is_a_fraction():
    with pytest.raises(SettingError, match=r"must be in \[0, 1\]"):
        tiny_suite(max_skipped_fraction=1.5)


def test_finite_gradients_finds_any_nan_or_infinity_in_any_parameter():
    """One fused check over every gradient: a NaN, +inf, -inf (alone or beside +inf) in any
    parameter is found; values near the float32 limit, subnormals and -0 are finite and left as
    they were (bit for bit); missing gradients, mixed precisions, and the gradients the fused
    check does not take (sparse, complex), tested one by one, give the same answers."""
    from zoo.runner.train import FiniteGradients

    finite_gradients = FiniteGradients("cpu")

    def params(*grads):
        out = []
        for g in grads:
            p = torch.zeros_like(g) if g is not None else torch.zeros(2)
            p.grad = g
            out.append(p)
        return out

    big = torch.full((1000,), 3e38, dtype=torch.float32)
    odd = torch.tensor([1e-40, -0.0, -3.4e38, 1.0], dtype=torch.float32)  # subnormal, -0
    kept = [g.clone() for g in (big, odd)]
    assert finite_gradients(params(big, torch.ones(3, dtype=torch.float64), odd, None))
    assert all(torch.equal(g, k) and torch.equal(g.signbit(), k.signbit())
               for g, k in zip((big, odd), kept, strict=True))
    assert finite_gradients(params(None)) and finite_gradients([])
    for bad in (float("nan"), float("inf"), -float("inf")):
        g = torch.ones(4, 3)
        g[2, 1] = bad
        assert not finite_gradients(params(torch.ones(5), g))
        assert not finite_gradients(params(torch.tensor(bad)))
        assert not finite_gradients(params(None, torch.tensor([1.0, bad]), None))
        assert not finite_gradients(params(torch.ones(2, dtype=torch.float16),
                                           torch.tensor([bad], dtype=torch.bfloat16)))
        # after a bad step the flag is reset: a finite step is finite again
        assert finite_gradients(params(torch.ones(3)))
        sparse = torch.sparse_coo_tensor([[0, 2]], [1.0, bad], (4,), check_invariants=True)
        assert not finite_gradients(params(torch.ones(2), sparse))
        assert not finite_gradients(params(torch.tensor([complex(1.0, bad)])))
    assert not finite_gradients(params(torch.tensor([float("inf"), -float("inf")])))
    assert finite_gradients(params(torch.zeros(())))
    assert finite_gradients(params(torch.sparse_coo_tensor([[1]], [2.0], (3,), check_invariants=True),
                                   torch.tensor([complex(1.0, -2.0)])))
