"""Control-variate estimators inside the latent-Gaussian classifiers: chosen by the ``estimator``
hyper-parameter, they give class probabilities that sum to one exactly (one design shared across
classes) and, for md-bfsc, drive the inner loop's expectations too (they are weighted rules)."""

from __future__ import annotations

import pytest
import torch

from zoo.testing import build_for_tests, toy_episode


@pytest.mark.parametrize("method", ["md-bfsc", "logistic-softmax"])
@pytest.mark.parametrize("estimator", ["poly-cv[degree=2]", "poly-cv[degree=1,samples=16]",
                                       "control-functional[samples=32]",
                                       "poly-cv[estimate=split,samples=64]"])
def test_cv_estimators_give_probabilities_that_sum_to_one(method, estimator):
    hparams = ({"steps_test": 2} if method == "md-bfsc"
               else {"gibbs_test_steps": 2, "mf_test_steps": 2, "prob_samples": 64})
    model = build_for_tests(method, way=3, estimator=estimator, **hparams)
    model.eval()
    with torch.no_grad():
        probs = model.predict(toy_episode(way=3, shot=2)).probs.double()
    assert torch.isfinite(probs).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(len(probs), dtype=torch.float64),
                               rtol=0, atol=1e-6)
