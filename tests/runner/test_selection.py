"""A sweep's choice is made on validation scores; the test numbers never decide it."""

from __future__ import annotations

import pytest

from zoo.runner.selection import select_variants


def line(variant: str, val: float, test: float, seed: int = 0, shot: int = 1) -> dict:
    return {"method": "abml", "variant": variant, "train_dataset": "glyphs", "dataset": "glyphs",
            "way": 5, "shot": shot, "seed": seed, "val_accuracy": val, "accuracy": test}


def test_the_choice_follows_validation_not_test():
    results = [line("kl=1e-4", val=0.60, test=0.70), line("kl=1e-3", val=0.65, test=0.50),
               line("kl=1e-4", val=0.62, test=0.70, seed=1), line("kl=1e-3", val=0.61, test=0.5,
                                                                  seed=1)]
    (choice,) = select_variants(results)
    assert choice["chosen"] == "kl=1e-3"  # best mean validation (0.63 vs 0.61), worse on test
    assert choice["accuracy"] == pytest.approx(0.5)
    assert choice["variants"]["kl=1e-4"]["accuracy"] == pytest.approx(0.7)  # reported only


def test_swapping_test_numbers_never_changes_the_choice():
    results = [line("a", 0.6, 0.1), line("b", 0.5, 0.9), line("a", 0.6, 0.2, shot=5),
               line("b", 0.7, 0.3, shot=5)]
    swapped = [{**r, "accuracy": 1 - r["accuracy"]} for r in results]
    assert [c["chosen"] for c in select_variants(results)] == \
        [c["chosen"] for c in select_variants(swapped)] == ["a", "b"]


def test_no_validation_score_is_an_error():
    with pytest.raises(ValueError, match="no val_accuracy"):
        select_variants([{**line("a", 0.6, 0.1), "val_accuracy": None}])
