"""Control-variate estimators inside the latent-Gaussian classifiers: chosen by the ``estimator``
hyper-parameter, they give class probabilities that sum to one exactly (one design shared across
classes) and, for md-bfsc, drive the inner loop's expectations too (they are weighted rules)."""

from __future__ import annotations

import pytest
import torch

from zoo.errors import HyperParameterError
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


HPARAMS = {"md-bfsc": {"steps_test": 2, "steps_train": 1, "loss": "predictive",
                       "samples_train": 16},
           "logistic-softmax": {"gibbs_test_steps": 2, "mf_test_steps": 2, "prob_samples": 16,
                                "loss": "pl"},
           "bayes-last-layer": {"steps_test": 2, "steps_train": 1, "samples_train": 8,
                                "samples_test": 16}}


def _sums_to_one(model, episode) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        probs = model.predict(episode).probs.double()
    assert torch.isfinite(probs).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(len(probs), dtype=torch.float64),
                               rtol=0, atol=1e-6)
    return probs


@pytest.mark.parametrize("method", list(HPARAMS))
@pytest.mark.parametrize("estimator", ["neural-cv[samples=16,epochs=5,width=8]",
                                       "vv-cv[samples=8,tasks=4]"])
def test_fitted_cv_estimators_give_probabilities_that_sum_to_one(method, estimator):
    """Non-linear (neural) and coupled (vv) CVs: the centred potentials / the shared linear map
    keep the class probabilities' sum exactly, in every latent-Gaussian classifier."""
    model = build_for_tests(method, way=3, estimator=estimator, **HPARAMS[method])
    _sums_to_one(model, toy_episode(way=3, shot=2))


@pytest.mark.parametrize(("method", "field"),
                         [(m, "ones") for m in HPARAMS] + [("md-bfsc", "vector")])
def test_meta_cv_harvests_meta_training_integrals_and_is_checkpointed(method, field):
    """meta-cv meta-trains on the integrals the classifier evaluates while it meta-trains, its
    probabilities sum to one, and its meta-parameters travel with the method's state_dict."""
    spec = f"meta-cv[samples=8,width=8,meta_batch=4,field={field}]"
    model = build_for_tests(method, way=3, estimator=spec, **HPARAMS[method])
    model.eval()
    with pytest.raises(HyperParameterError, match="harvested no integrals"), torch.no_grad():
        model.predict(toy_episode(way=3, shot=2))
    model.train()
    state = model.estimator_state
    for seed in range(2):
        model.meta_loss(toy_episode(way=3, shot=2, seed=seed)).backward()
    assert state.harvested > 0 and state.meta is not None
    assert all(p.grad is None for p in state.meta.parameters())  # not the classifier's loss
    episode = toy_episode(way=3, shot=2, seed=5)
    probs = _sums_to_one(model, episode)
    fresh = build_for_tests(method, way=3, estimator=spec, **HPARAMS[method])
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(_sums_to_one(fresh, episode), probs)


def test_vector_field_neural_cv_gives_probabilities_that_sum_to_one():
    model = build_for_tests("md-bfsc", way=3, estimator="neural-cv[samples=16,epochs=5,width=8,"
                            "field=vector]", **HPARAMS["md-bfsc"])
    _sums_to_one(model, toy_episode(way=3, shot=2))


def test_ove_takes_the_fitted_estimators_on_its_pairwise_integrals():
    model = build_for_tests("ove", way=3, estimator="neural-cv[samples=8,epochs=2,width=4]",
                            test_steps=2)
    _sums_to_one(model, toy_episode(way=3, shot=2))


def test_an_unknown_field_is_refused():
    with pytest.raises(HyperParameterError, match="field"):
        build_for_tests("md-bfsc", way=3, estimator="neural-cv[field=diagonal]")


def test_meta_cv_is_refused_where_meta_training_integrates_nothing_through_the_estimator():
    with pytest.raises(HyperParameterError, match="evaluates none"):
        build_for_tests("md-bfsc", way=3, estimator="meta-cv", loss="elbo")
    # the Bayesian last layer pre-trained as a classifier integrates nothing before test either
    with pytest.raises(HyperParameterError, match="evaluates none"):
        build_for_tests("bayes-last-layer", way=3, estimator="meta-cv",
                        backbone_training="pretrain", num_classes=4)
