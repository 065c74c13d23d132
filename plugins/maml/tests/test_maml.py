"""Correctness of the MAML family: the inner loop, the meta-gradient, and conformance."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from zoo_maml import ANIL, FOMAML, MAML, MetaSGD

from zoo import Episode, HyperParameterError
from zoo.testing import TanhBackbone, build_for_tests, check_method, tiny_episode, toy_episode


def tiny(cls=MAML, **hparams) -> MAML:
    torch.manual_seed(0)
    hp = {"inner_lr": 0.5, "inner_steps": 2, "test_inner_steps": 2, **hparams}
    return cls(TanhBackbone(), way=2, **hp).double()


def forward(params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    w, b, hw, hb = params
    return F.linear(torch.tanh(F.linear(x, w, b)), hw, hb)


def meta_loss_by_hand(params: list[torch.Tensor], ep: Episode, lr: float, steps: int,
                      create_graph: bool) -> torch.Tensor:
    for _ in range(steps):
        loss = F.cross_entropy(forward(params, ep.support_x), ep.support_y)
        grads = torch.autograd.grad(loss, params, create_graph=create_graph)
        params = [p - lr * g for p, g in zip(params, grads)]
    return F.cross_entropy(forward(params, ep.query_x), ep.query_y)


def test_zero_inner_steps_is_the_unadapted_model():
    m, ep = tiny(test_inner_steps=0).eval(), tiny_episode()
    with torch.no_grad():
        probs = m.predict(ep).probs
        expected = torch.softmax(m.head(m.backbone(ep.query_x)), -1)
    assert torch.equal(probs, expected)


def test_one_inner_step_is_a_hand_written_sgd_step():
    m, ep = tiny(test_inner_steps=1).eval(), tiny_episode()
    with torch.no_grad():
        probs = m.predict(ep).probs
    params = [p.detach().requires_grad_() for p in (m.backbone.layer.weight, m.backbone.layer.bias,
                                                    m.head.weight, m.head.bias)]
    loss = F.cross_entropy(forward(params, ep.support_x), ep.support_y)
    grads = torch.autograd.grad(loss, params)
    stepped = [p - 0.5 * g for p, g in zip(params, grads)]
    expected = torch.softmax(forward(stepped, ep.query_x), -1)
    assert torch.allclose(probs, expected, atol=1e-12)


def meta_gradient(m: MAML, ep: Episode) -> torch.Tensor:
    m.train()
    m.zero_grad()
    m.meta_loss(ep).backward()
    return torch.cat([p.grad.flatten() for p in m.parameters()])


def finite_difference_gradient(m: MAML, ep: Episode, eps: float = 1e-6) -> torch.Tensor:
    m.train()
    out = []
    with torch.no_grad():
        for p in m.parameters():
            flat = p.view(-1)
            for i in range(flat.numel()):
                keep = flat[i].item()
                flat[i] = keep + eps
                with torch.enable_grad():
                    up = m.meta_loss(ep).item()
                flat[i] = keep - eps
                with torch.enable_grad():
                    down = m.meta_loss(ep).item()
                flat[i] = keep
                out.append((up - down) / (2 * eps))
    return torch.tensor(out, dtype=torch.float64)


def test_second_order_meta_gradient_matches_finite_differences():
    m, ep = tiny(), tiny_episode()
    assert torch.allclose(meta_gradient(m, ep), finite_difference_gradient(m, ep), atol=1e-7)


def test_first_order_differs_from_the_exact_gradient_and_equals_its_definition():
    ep = tiny_episode()
    exact, first = meta_gradient(tiny(), ep), meta_gradient(tiny(FOMAML), ep)
    assert (exact - first).norm() > 1e-3 * exact.norm()
    # FOMAML's meta-gradient: the query-loss gradient at the adapted weights, inner grads constant.
    m = tiny()
    params = [p.detach().requires_grad_() for p in m.parameters()]
    meta_loss_by_hand(params, ep, 0.5, 2, create_graph=False).backward()
    assert torch.allclose(first, torch.cat([p.grad.flatten() for p in params]), atol=1e-12)
    # ... and with no inner step there are no second-order terms: both coincide.
    assert torch.allclose(meta_gradient(tiny(inner_steps=0), ep),
                          meta_gradient(tiny(FOMAML, inner_steps=0), ep), atol=1e-14)


def test_second_order_gradient_equals_the_hand_written_one():
    m, ep = tiny(), tiny_episode()
    params = [p.detach().requires_grad_() for p in m.parameters()]
    meta_loss_by_hand(params, ep, 0.5, 2, create_graph=True).backward()
    assert torch.allclose(meta_gradient(m, ep), torch.cat([p.grad.flatten() for p in params]),
                          atol=1e-12)


def test_metasgd_step_uses_the_per_weight_learning_rates():
    torch.manual_seed(0)
    m, ep = MetaSGD(TanhBackbone(), way=2, inner_lr=0.5).double().eval(), tiny_episode()
    with torch.no_grad():
        for lr in m.inner_lrs:
            lr.uniform_(0.1, 1.0)
        probs = m.predict(ep).probs
    params = [p.detach().requires_grad_() for p in (m.backbone.layer.weight, m.backbone.layer.bias,
                                                    m.head.weight, m.head.bias)]
    grads = torch.autograd.grad(F.cross_entropy(forward(params, ep.support_x), ep.support_y),
                                params)
    stepped = [p - lr.detach() * g for p, lr, g in zip(params, m.inner_lrs, grads)]
    assert torch.allclose(probs, torch.softmax(forward(stepped, ep.query_x), -1), atol=1e-12)
    assert m.hparams["inner_steps"] == m.hparams["test_inner_steps"] == 1
    m.train()
    m.meta_loss(ep).backward()
    assert all(lr.grad is not None and lr.grad.abs().sum() > 0 for lr in m.inner_lrs)


def test_anil_adapts_only_the_head_and_backbone_gets_meta_gradient():
    m, ep = tiny(ANIL, test_inner_steps=1).eval(), tiny_episode()
    with torch.no_grad():
        probs = m.predict(ep).probs
        s, q = m.backbone(ep.support_x), m.backbone(ep.query_x)
    hw, hb = (p.detach().requires_grad_() for p in (m.head.weight, m.head.bias))
    gw, gb = torch.autograd.grad(F.cross_entropy(F.linear(s, hw, hb), ep.support_y), (hw, hb))
    expected = torch.softmax(F.linear(q, hw - 0.5 * gw, hb - 0.5 * gb), -1)
    assert torch.allclose(probs, expected, atol=1e-12)


def test_published_defaults_depend_on_the_protocol_and_can_be_overridden():
    five = build_for_tests("maml", 5).hparams
    assert (five["protocol"], five["inner_lr"], five["inner_steps"], five["test_inner_steps"],
            five["meta_batch"]) == ("omniglot", 0.4, 1, 3, 4)
    twenty = build_for_tests("maml", 20).hparams
    assert (twenty["inner_lr"], twenty["inner_steps"], twenty["test_inner_steps"]) == (0.1, 5, 5)
    mini = build_for_tests("maml", 5, protocol="miniimagenet").hparams
    assert (mini["inner_lr"], mini["inner_steps"], mini["test_inner_steps"]) == (0.01, 5, 10)
    given = build_for_tests("fomaml", 5, inner_lr="0.2", meta_batch="8")
    assert (given.hparams["inner_lr"], given.meta_batch) == (0.2, 8)


def test_bad_inner_loop_settings_are_refused_by_the_declarations():
    with pytest.raises(HyperParameterError,
                       match=r"protocol='cifar'.*one of 'auto', 'omniglot', 'miniimagenet'"):
        build_for_tests("maml", 5, protocol="cifar")
    with pytest.raises(HyperParameterError, match=r"inner_steps=-1.*an int >= 0 or None"):
        build_for_tests("anil", 5, inner_steps=-1)


def test_batch_norm_uses_batch_statistics_in_eval_mode_too():
    m = build_for_tests("maml", 5).eval()
    x = toy_episode(5, 1).support_x
    with torch.no_grad():
        assert torch.allclose(m.backbone(x), m.backbone.train()(x))
    assert not any("running" in k for k in m.state_dict())


def test_predict_reports_the_inner_objective_per_step():
    m = build_for_tests("maml", 5, test_inner_steps=4).eval()
    with torch.no_grad():
        objective = m.predict(toy_episode(5, 1)).extras["inner_objective"]
    assert len(objective) == 5 and objective[-1] < objective[0]


def test_conformance_anil():
    check_method("anil")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["maml", "fomaml", "metasgd"])
def test_conformance_full_network_adaptation(name):
    check_method(name)


def test_first_use_of_learn2learn_keeps_the_terminal_clean():
    """learn2learn imports gym, whose import prints a multi-line deprecation notice
    to stderr on every run; only that notice is dropped, anything else gym prints is kept."""
    import subprocess
    import sys

    code = ("import sys, warnings; from zoo.families.inner_loop import learn2learn_algorithms; "
            "print('before', file=sys.stderr); learn2learn_algorithms(); "
            "warnings.warn('a real warning'); print('after', file=sys.stderr)")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stderr
    assert "Gym has been unmaintained" not in err
    assert "before" in err and "a real warning" in err and "after" in err
