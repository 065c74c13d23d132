"""``bong-head``: the BONG family as a few-shot classification head over a meta-learned backbone.

Each support example of an episode is one observation of a stream (in a seeded order): starting
from the prior ``N(0, s I)`` over the linear head's weights ``vec(W)`` (``W [way, D]``, ``s``
meta-learned), the chosen rule updates the belief once per example
(:mod:`zoo_bong.rules`); the queries' class probabilities are those of the latent-Gaussian family
(the Gaussian marginals of ``W phi`` through the expectation estimator), exactly the predictive
of ``bayes-last-layer``, whose belief comes from an iterated VI on the whole support instead. The
head is linear, so LIN-HESS is the exact Hessian and BONG-FC-LIN-HESS is the Laplace/Kalman
update of a multinomial logit, one example at a time. The backbone (and ``s``) is meta-learned
through the updates (the loss is the query negative log predictive); the dlr family's SVD has no
stable derivative at repeated singular values, so meta-training uses fc, dg or dg-mom.

Features are centred by the support's mean and L2-normalised, as ``bayes-last-layer`` does (the raw
features of an untrained Conv4 are nearly parallel, which a zero-mean prior cannot separate).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo import Episode, HParam, HyperParameterError, episode_generator
from zoo.backbones import Backbone
from zoo.families import LastLayerMethod, linear_gaussian_marginals
from zoo.gaussians import Gaussian
from zoo.inference import DTYPE
from zoo_bong.beliefs import FAMILIES, Belief, prior_belief
from zoo_bong.curvature import CURVATURES, linearised, monte_carlo
from zoo_bong.likelihoods import Categorical
from zoo_bong.rules import RULES, check_combination, update

ORDER_SALT, DRAW_SALT = 5, 6


class BongHead(LastLayerMethod):
    """See the module docstring."""

    name: ClassVar[str] = "bong-head"
    hyperparameters = {
        "rule": HParam("bong", choices=RULES, doc="update rule per support example"),
        "curvature": HParam("lin-hess", choices=CURVATURES, doc="estimator of E[hess log p]"),
        "family": HParam("dg", choices=FAMILIES, doc="Gaussian family of vec(W) (fc: P^2 memory "
                         "per support example in meta-training, P = way x features)"),
        "rank": HParam(10, ge=1, doc="rank of the dlr family"),
        "alpha": HParam(0.5, gt=0, doc="learning rate of bog, blr, bbb"),
        "iterations": HParam(1, ge=1, doc="steps per example of blr and bbb"),
        "samples": HParam(16, ge=1, doc="draws of the mc curvatures"),
        "prior_var": HParam(1.0, gt=0, doc="initial prior variance per weight (meta-learned)"),
    }

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        h = self.hparams
        try:
            check_combination(h["rule"], h["curvature"], h["family"], h["iterations"])
        except ValueError as err:
            raise HyperParameterError(f"method 'bong-head': {err}") from None
        self.log_prior_var = nn.Parameter(torch.tensor(float(h["prior_var"]), dtype=DTYPE).log())
        self.likelihood = Categorical()

    def head_features(self, episode: Episode) -> tuple[Tensor, Tensor]:
        """Support and query features, centred by the support's mean and L2-normalised."""
        z = self.features(torch.cat([episode.support_x, episode.query_x])).to(DTYPE)
        n = len(episode.support_y)
        z = F.normalize(z - z[:n].mean(0), dim=-1)
        return z[:n], z[n:]

    def belief(self, phi: Tensor, y: Tensor, episode: Episode) -> Belief:
        """The belief over ``vec(W)`` after one update per support example, in a seeded order."""
        h, way = self.hparams, episode.way
        mu = torch.zeros(way * phi.shape[-1], dtype=DTYPE, device=phi.device)
        q = prior_belief(h["family"], mu, self.log_prior_var.exp(), h["rank"])
        draws = episode_generator(episode, DRAW_SALT)

        def logits(theta: Tensor, x: Tensor) -> Tensor:
            return theta.view(way, -1) @ x

        for i in torch.randperm(len(y), generator=episode_generator(episode, ORDER_SALT)):
            x, label = phi[i], y[i]

            def estimate(belief: Belief, x: Tensor = x, label: Tensor = label):
                if h["curvature"].startswith("lin"):
                    return linearised(logits, self.likelihood, belief.mu, x, label,
                                      h["curvature"] == "lin-hess")
                return monte_carlo(logits, self.likelihood, belief.sample(h["samples"], draws),
                                   x, label, h["curvature"] == "mc-hess", draws)

            q = update(q, estimate, h["rule"], h["alpha"], h["iterations"])
        return q

    def weight_posterior(self, episode: Episode) -> Gaussian:
        phi_s, _ = self.head_features(episode)
        return self.belief(phi_s, episode.support_y, episode).gaussian

    def latent(self, episode: Episode) -> tuple[Tensor, Tensor]:
        phi_s, phi_q = self.head_features(episode)
        q = self.belief(phi_s, episode.support_y, episode).gaussian
        return linear_gaussian_marginals(phi_q, q, episode.way)

    def meta_loss(self, episode: Episode) -> Tensor:
        mean, var = self.latent(episode)
        probs = self.probabilities(mean, var, episode, salt=1)
        return F.nll_loss(probs.clamp_min(1e-12).log(), episode.query_y).float()
