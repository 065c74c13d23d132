"""Choosing among a sweep's variants on validation alone.

A sweep is a suite whose labelled ``[[part]]`` rows vary one method's hyper-parameters (see
:mod:`zoo.runner.suite`). The choice is the variant with the best validation score of the task
kind (``selection_key``, e.g. ``val_accuracy``: the selected checkpoint's score on the validation
episodes), averaged over seeds, per method and setting. Test numbers are carried along to be
reported beside the choice and never read to make it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np


def select_variants(results: Iterable[Mapping[str, Any]], selection_key: str = "val_accuracy",
                    headline: str = "accuracy") -> list[dict[str, Any]]:
    """For each method and setting (training and test data set, way, shot), the variant with the
    highest mean ``selection_key`` over its seeds, with every variant's validation and test means.
    Results without a validation score (no validation split) cannot be chosen among: an error."""
    groups: dict[tuple, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        setting = (r["method"], r["train_dataset"], r["dataset"], r.get("way"), r.get("shot"))
        groups[setting][r.get("variant", "")].append(r)
    out = []
    for (method, train, test, way, shot), variants in sorted(groups.items(), key=str):
        scores = {}
        for variant, rows in variants.items():
            if any(r.get(selection_key) is None for r in rows):
                raise ValueError(f"{method} {variant!r} on {train}: no {selection_key} (its "
                                 "training data has no validation split); a sweep needs one")
            scores[variant] = (float(np.mean([r[selection_key] for r in rows])),
                               float(np.mean([r[headline] for r in rows])))
        chosen = max(scores, key=lambda v: scores[v][0])
        out.append({"method": method, "train_dataset": train, "dataset": test, "way": way,
                    "shot": shot, "chosen": chosen, selection_key: scores[chosen][0],
                    headline: scores[chosen][1],
                    "variants": {v: {selection_key: s[0], headline: s[1]}
                                 for v, s in scores.items()}})
    return out
