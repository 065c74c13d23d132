"""The latent-Gaussian family: methods whose prediction is features -> Gaussian latent marginals
``N(mean[q, c], var[q, c])`` per query and class -> class probabilities ``E[link(f)]``.

Function-space GP classifiers (:mod:`zoo.families.gp`) and Gaussian distributions over a linear
head's weights (:mod:`zoo.families.last_layer`) differ only in how they get the marginals; the
expectation step is shared and chosen by name (hyper-parameter ``estimator``, a spec such as
``sobol[samples=64]``, see :mod:`zoo.expectations`), its draws seeded by the episode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from zoo import expectations
from zoo.batching import per_episode
from zoo.control_variates import gaussian as cv_estimators
from zoo.episode import Episode
from zoo.errors import HyperParameterError
from zoo.expectations import (
    Estimator,
    FusedIntegrand,
    Integrand,
    Rule,
    build_estimator,
)
from zoo.hparams import HParam
from zoo.jitter import JitterPolicy
from zoo.method import Method, Prediction
from zoo.seeds import draw_seed, episode_own_seed

if TYPE_CHECKING:
    from zoo.plugins import Registry

ESTIMATORS: Mapping[str, type[Estimator]] = {**expectations.BUILTIN, **cv_estimators.BUILTIN}
"""The zoo's own expectation estimators by name (what it registers; a method built without a
registry looks its ``estimator`` up here)."""


def softmax(f: Tensor) -> Tensor:
    """The softmax link over the class axis."""
    return torch.softmax(f, dim=-1)


class LatentGaussianMethod(Method):
    """Base of methods that predict through Gaussian latent marginals per query and class.

    A subclass implements :meth:`latent`; :meth:`predict` returns ``E[link(f)]`` under those
    marginals with the estimator the ``estimator`` hyper-parameter names. ``link`` maps draws
    ``f [..., S, C]`` to probabilities (the softmax unless a subclass says otherwise).
    """

    hyperparameters: ClassVar[dict[str, HParam]] = {
        "estimator": HParam("sobol", doc="expectation estimator of the class probabilities: a "
                            "zoo.expectations spec such as sobol[samples=64] or gauss-hermite"),
    }

    def __init__(self, *args: Any, registry: Registry | None = None, **kwargs: Any):
        super().__init__(*args, registry=registry, **kwargs)
        self.estimators = ESTIMATORS if registry is None else registry.items("estimators")
        self.jitter = JitterPolicy()  # counted, reported with the results (counters)
        # an unknown estimator or option fails here, before training; a learning estimator's state
        # (meta-cv) is a submodule, checkpointed with the method
        self.estimator_state = build_estimator(self.hparams["estimator"], self.estimators).make_state()
        if self.estimator_state is not None and not self.integrates_in_training():
            raise HyperParameterError(
                f"{self.name}: estimator {self.hparams['estimator']!r} learns from the integrals "
                "meta-training evaluates through the estimator, and this objective evaluates none; "
                "use the method's predictive loss or another estimator")

    def integrates_in_training(self) -> bool:
        """Whether meta-training evaluates the predictive through the estimator (what a learning
        estimator, ``meta-cv``, is meta-trained on); a method whose objective does not says so."""
        return True

    def counters(self) -> dict[str, int]:
        return {"jitter": self.jitter.uses}

    def link(self, f: Tensor) -> Tensor:
        return softmax(f)

    def estimator(self, **fallback: Any) -> Estimator:
        """The configured estimator; ``fallback`` options (e.g. ``samples``) fill what its spec
        leaves unset."""
        return build_estimator(self.hparams["estimator"], self.estimators,
                               **fallback).bind(self.estimator_state)

    def rule(self, episode: Episode, dim: int, *, salt: int, device: torch.device | str | None = None,
             **fallback: Any) -> Rule:
        """The estimator's points and weights for ``dim``-dimensional expectations, drawn with
        the seed of ``episode`` (:func:`zoo.seeds.draw_seed` with ``salt``); in a batched
        meta-loss each episode's own (:func:`zoo.batching.per_episode`)."""
        estimator = self.estimator(**fallback)
        return per_episode(episode, lambda e: estimator.rule(dim, seed=draw_seed(e, salt),
                                                              device=device))

    def latent(self, episode: Episode) -> tuple[Tensor, Tensor]:
        """Latent marginals of the queries given the support: mean and variance, each ``[Q, C]``
        (or ``[R, Q, C]`` for ``R`` posterior samples of a mixture)."""
        raise NotImplementedError(f"{type(self).__name__} must implement latent(episode)")

    def probabilities(self, mean: Tensor, var: Tensor, *, seed: int,
                      integrand: Integrand | FusedIntegrand | None = None, **fallback: Any
                      ) -> Tensor:
        """``E[link(f)]`` for ``f ~ N(mean, diag var)`` over the class axis, the estimator's
        draws seeded by ``seed``: a function of the episode, :func:`zoo.seeds.draw_seed` with a
        salt of the caller's (:func:`zoo.seeds.episode_own_seed` for :meth:`predict`)."""
        estimator = self.estimator(**fallback)
        g = estimator.per_point(self.link) if integrand is None else integrand
        return estimator.expect(g, mean, var, seed=seed).value

    def predict(self, episode: Episode) -> Prediction:
        mean, var = self.latent(episode)
        probs = self.probabilities(mean, var, seed=episode_own_seed(episode))
        return Prediction(probs.float(), extras={"mean": mean.float(), "var": var.float()})
