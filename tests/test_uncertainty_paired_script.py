"""``benchmarks/uncertainty/paired.py``: its per-episode E-AURC is the one the summaries average,
and its paired differences are the means over seeds of each seed's mean difference."""

from __future__ import annotations

import numpy as np
import pytest

from zoo.tasks.classification import selective

from .conftest import load_benchmark


def load():
    return load_benchmark("uncertainty/paired.py")


def records(rng, seeds=(0, 1, 2), episodes=4, queries=6):
    out = {}
    for s in seeds:
        for i in range(episodes):
            out[(s, queries, i)] = {
                "seed": 1000 * s + i, "index": i, "accuracy": float(rng.random()),
                "auroc_entropy": float(rng.random()), "auroc_uncertainty": float(rng.random()),
                "confidence": rng.random(queries).tolist(),
                "correct": (rng.random(queries) < 0.6).astype(float).tolist()}
    return out


def test_episode_eaurc_is_what_the_summary_averages():
    script, rng = load(), np.random.default_rng(0)
    rows = list(records(rng, seeds=(0,), episodes=7).values())
    assert np.mean([script.eaurc(r) for r in rows]) == pytest.approx(selective(rows)["eaurc"],
                                                                     rel=1e-12)


def test_paired_difference_is_the_mean_over_seeds_of_each_seeds_mean_difference():
    script, rng = load(), np.random.default_rng(1)
    a, b = records(rng), records(rng)
    b[(9, 6, 0)] = b[(0, 6, 0)]  # an episode only one row has is left out
    get = script.METRICS["accuracy"]
    diff, ci, episodes, seeds = script.difference(a, b, get, get)
    by_seed = [np.mean([a[k]["accuracy"] - b[k]["accuracy"] for k in a if k[0] == s])
               for s in (0, 1, 2)]
    assert diff == pytest.approx(np.mean(by_seed), rel=1e-12)
    assert (episodes, seeds) == (12, 3) and ci > 0
    same = script.difference(a, a, get, get)
    assert same[0] == 0 and same[1] == 0
    own, ent = script.METRICS["AUROC own"], script.METRICS["AUROC entropy"]
    within = script.difference(a, a, own, ent)[0]
    assert within == pytest.approx(np.mean([np.mean([a[k]["auroc_uncertainty"]
                                                     - a[k]["auroc_entropy"]
                                                     for k in a if k[0] == s])
                                            for s in (0, 1, 2)]), rel=1e-12)
    assert script.difference(a, a, script.METRICS["AUROC max-prob"], ent) is None  # not recorded


def test_variant_of_a_row():
    variant = load().variant
    assert variant("protonet") == "" and variant("protonet ensemble of seeds 0,1,2") == ""
    assert variant("protonet unknown=digits") == "unknown=digits"
    assert variant("protonet unknown=digits ensemble of seeds 0,1,2") == "unknown=digits"
