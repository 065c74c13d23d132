"""``benchmarks/gp_calibration/temperature_protocols.py``: each protocol's temperature is the
NLL-fitted one of the queries it names, and its ECE is that of the tempered probabilities."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from zoo.metrics import calibrated_confidence, ece_mce, fit_temperature

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/gp_calibration/temperature_protocols.py"


def load():
    spec = importlib.util.spec_from_file_location("temperature_protocols", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flat_predictions(g, n, classes=5):
    """Right 80% of the time with a largest probability near 0.3: under-confident, like a GP."""
    y = torch.randint(0, classes, (n,), generator=g)
    logits = 0.2 * torch.randn(n, classes, generator=g, dtype=torch.float64)
    right = torch.rand(n, generator=g) < 0.8
    logits[torch.arange(n), torch.where(right, y, (y + 1) % classes)] += 0.6
    return logits.softmax(1), y


def test_each_protocol_fits_on_the_queries_it_names_and_scores_the_same_queries():
    g = torch.Generator().manual_seed(0)
    probs, y = flat_predictions(g, 600)
    fit_probs, fit_y = flat_predictions(g, 600)
    rows = load().protocol_eces(probs, y, 0.7, fit_probs, fit_y)
    correct = (probs.argmax(1) == y).double().numpy()
    other = fit_temperature(fit_probs.log(), fit_y)
    own = fit_temperature(probs.log(), y)
    expected = {"raw": 1.0, "validation temperature (the zoo)": 0.7,
                "test-split temperature, other episodes (DKT's code)": other,
                "test-split temperature, in-sample": own}
    assert set(rows) == set(expected)
    for name, t in expected.items():
        ece = ece_mce(calibrated_confidence(probs, t).numpy(), correct)[0]
        assert rows[name] == pytest.approx((t, ece), rel=1e-12)
    assert own < 1 and other < 1  # an under-confident predictive is sharpened
    assert rows["test-split temperature, in-sample"][1] < rows["raw"][1]
