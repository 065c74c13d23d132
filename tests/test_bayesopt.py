"""Thompson sampling with a surrogate: simple regret is non-negative, non-increasing, seeded, and
a GP surrogate finds Forrester's minimum on a small candidate set faster than random search."""

from __future__ import annotations

import json

import pytest
import torch

from zoo.baselines.regression import ExactGP
from zoo.bayesopt import run, thompson_regret
from zoo.data.optimisation import load_forrester
from zoo.tasks.regression import sample_task


def test_thompson_sampling_regret_is_monotone_seeded_and_beats_random_search():
    family = load_forrester()
    gp = ExactGP(x_dim=1, y_dim=1, samples=4, lengthscale=0.1, variance=30.0, noise=0.06).eval()
    gp_final, random_final = [], []
    for i in range(4):
        params = sample_task(family, "test", 0, 1, i, 0).info["function"]
        curve = thompson_regret(gp, family, params, seed=i, iterations=10, candidates=60,
                                initial=1)
        assert curve == thompson_regret(gp, family, params, seed=i, iterations=10,
                                        candidates=60, initial=1)
        assert len(curve) == 11 and min(curve) >= 0
        assert all(b <= a for a, b in zip(curve, curve[1:]))
        gp_final.append(curve[-1])
        random_final.append(thompson_regret(None, family, params, seed=i, iterations=10,
                                            candidates=60, initial=1)[-1])
    assert sum(gp_final) < sum(random_final)


@pytest.mark.slow
def test_the_suite_entry_trains_a_surrogate_and_writes_curves_and_a_plot(tmp_path):
    settings = {"functions": ["forrester"], "surrogates": ["gp", "not-a-method"], "seed": 0,
                "tasks": 2, "iterations": 3, "initial": 1, "candidates": 50,
                "train_episodes": 4, "train_tasks": 4, "train_targets": 8,
                "train_max_context": 7, "val_episodes": 2, "val_every": 2,
                "hparams": {"samples": 2, "test_trng_steps": 3}}
    payload = run(tmp_path, None, "cpu", settings)
    assert set(payload["regret"]["forrester"]) == {"random", "gp"}
    saved = json.loads((tmp_path / "bo.json").read_text())
    assert len(saved["regret"]["forrester"]["gp"]["median"]) == 4
    assert (tmp_path / "regret.png").stat().st_size > 0
    assert (tmp_path / "models" / "forrester" / "gp" / "done").exists()
    torch.testing.assert_close(torch.tensor(payload["regret"]["forrester"]["gp"]["median"]),
                               torch.tensor(run(tmp_path, None, "cpu", settings)
                                            ["regret"]["forrester"]["gp"]["median"]))
