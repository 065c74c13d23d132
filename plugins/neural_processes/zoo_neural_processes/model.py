"""One neural-process skeleton for MA-NP, BA-NP, ANP, BNP and BANP; they differ only in their
hyper-parameters (which paths exist, how the context is aggregated, whether it is bootstrapped).

Model: ``p(y | x, C) = E[ prod_n N(y_n | mu(x_n, r*(x_n), z), var(x_n, r*(x_n), z)) ]`` where

- the latent path (``latent``) gives ``q(z | C)``, a factorised Gaussian by mean or Bayesian
  aggregation (:mod:`zoo_neural_processes.aggregation`), the expectation over ``z ~ q(z | C)``;
- the deterministic path (``deterministic``) gives ``r*(x)``: the mean encoding of the context
  or cross-attention to it (:mod:`zoo_neural_processes.paths`);
- the bootstrap (``bootstrap``, no latent path) replaces ``z`` by the encoding of a resampled
  context, the expectation over the bootstrap (:mod:`zoo_neural_processes.bootstrap`).

Training. Latent models maximise the conditional ELBO (GMM-NP, Volpp et al. 2023, eq. 5) of the
targets ``D`` (which include the context ``C``)::

    E_{q(z|D)}[ sum_n log p(y_n | x_n, r*(x_n), z) ] - KL( q(z|D) || q(z|C) )

with reparameterised draws (``train_samples``); the KL is closed form. Bootstrap models maximise
``log (1/K) sum_k prod_n p(y_n | x_n, r*, r^_k)`` plus the base model's ``sum_n log p(y_n | x_n,
r*, r*)`` (Lee et al. 2020, Sec. 3), ``K = train_samples``. Losses are per target point.

Prediction: ``samples`` draws of ``z ~ q(z | C)`` (or bootstrap contexts), from a generator seeded
by the episode, each giving per-target Gaussians: a :class:`RegressionPrediction`. Latent models
also give :meth:`bounds`: with proposal ``q(z | D)`` and prior ``q(z | C)``, the ELBO and
the importance-weighted bound (Burda et al. 2016) of ``log p(y_D | x_D, C)`` on the same draws.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pyro.distributions as dist
import torch
from torch import Tensor
from torch.distributions import kl_divergence

from zoo import HParam, HyperParameterError, episode_generator
from zoo.tasks import RegressionEpisode, RegressionMethod, RegressionPrediction
from zoo_neural_processes.aggregation import BayesianAggregation, MeanAggregation
from zoo_neural_processes.bootstrap import resample_indices, residual_bootstrap
from zoo_neural_processes.paths import DeterministicPath, GaussianDecoder, SetEncoder

PREDICT_SALT, BOUND_SALT = 1, 2


class NeuralProcess(RegressionMethod):
    """The shared skeleton (not registered: its subclasses fix the paths)."""

    hyperparameters = {
        "lr": HParam(1e-3, gt=0, doc="Adam learning rate"),
        "hidden": HParam(64, ge=1, doc="width of every MLP and attention layer"),
        "latent_dim": HParam(32, ge=1, doc="dimension of z (latent path)"),
        "latent": HParam(True, doc="a latent path q(z | C) trained by the ELBO"),
        "aggregation": HParam("mean", choices=("mean", "bayes"),
                              doc="latent path: mean (Garnelo 2018b) or Bayesian (Volpp 2021)"),
        "deterministic": HParam("none", choices=("none", "mean", "attention"),
                                doc="deterministic path r*(x): none, mean encoding, or "
                                    "cross-attention (ANP)"),
        "self_attention": HParam(False, doc="self-attention over the context in the encoders"),
        "heads": HParam(4, ge=1, doc="attention heads (hidden must be a multiple)"),
        "bootstrap": HParam(False, doc="bootstrap contexts instead of a latent path (BNP)"),
        "train_samples": HParam(4, ge=1, doc="latent draws or bootstrap contexts per step"),
        "samples": HParam(64, ge=1, doc="latent draws or bootstrap contexts of a prediction"),
        "min_std": HParam(0.1, gt=0, doc="lower bound of the observation std"),
    }

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        h = self.hparams
        self._check(h)
        dx, dy, width = self.x_dim, self.y_dim, h["hidden"]
        inputs = dx
        self.latent_encoder = self.aggregate = self.deterministic_path = None
        if h["latent"]:
            self.latent_encoder = SetEncoder(dx + dy, width, h["self_attention"], h["heads"])
            kind = MeanAggregation if h["aggregation"] == "mean" else BayesianAggregation
            self.aggregate = kind(width, h["latent_dim"])
            inputs += h["latent_dim"]
        if h["deterministic"] != "none":
            self.deterministic_path = DeterministicPath(
                dx, dy, width, h["deterministic"] == "attention", h["self_attention"], h["heads"])
            inputs += width * (2 if h["bootstrap"] else 1)
        self.decoder = GaussianDecoder(inputs, width, dy, h["min_std"])

    def _check(self, h: dict[str, Any]) -> None:
        problem = None
        if h["bootstrap"] and (h["latent"] or h["deterministic"] == "none"):
            problem = "bootstrap=true needs latent=false and a deterministic path"
        elif not h["latent"] and h["deterministic"] == "none":
            problem = "latent=false needs a deterministic path"
        elif h["hidden"] % h["heads"]:
            problem = f"hidden={h['hidden']} is not a multiple of heads={h['heads']}"
        if problem:
            raise HyperParameterError(f"method {self.name!r}: {problem}; change the --set "
                                      f"{self.name}.KEY=VALUE overrides")

    # -- the paths -----------------------------------------------------------------------------

    def posterior(self, x: Tensor, y: Tensor) -> dist.Distribution:
        """``q(z | {(x, y)})`` for one set ``x [n, dx], y [n, dy]``: batch ``[1]``, event ``d``."""
        mean, std = self.aggregate(self.latent_encoder(x[None], y[None]))
        return dist.Normal(mean, std).to_event(1)

    def _deterministic(self, xc: Tensor, yc: Tensor, xt: Tensor) -> list[Tensor]:
        if self.deterministic_path is None:
            return []
        return [self.deterministic_path(xc[None], yc[None], xt[None])]

    def _decode_latent(self, episode: RegressionEpisode, z: Tensor) -> tuple[Tensor, Tensor]:
        """Per-target ``mean, var [S, N, dy]`` for draws ``z [S, d]``."""
        xt = episode.target_x
        det = self._deterministic(episode.context_x, episode.context_y, xt)
        return self.decoder(xt[None], *det, z[:, None].expand(-1, len(xt), -1))

    def _bootstrap(self, episode: RegressionEpisode, draws: int,
                   generator: torch.Generator | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Base ``mean, var [1, N, dy]`` and bootstrap ``mean, var [K, N, dy]``."""
        xc, yc, xt = episode.context_x, episode.context_y, episode.target_x
        path = self.deterministic_path
        r = path(xc[None], yc[None], xt[None])
        base = self.decoder(xt[None], r, r)
        n = len(xc)
        if n == 0:
            return *base, *self.decoder(xt[None], r, r.expand(draws, -1, -1))
        pairs = resample_indices(n, draws, generator, xc.device)
        xb, yb = xc[pairs], yc[pairs]
        at_context = path(xb, yb, xc[None])
        mean, var = self.decoder(xc[None], at_context, at_context)
        y_hat = residual_bootstrap(yc[None].expand(draws, -1, -1), mean, var,
                                   resample_indices(n, draws, generator, xc.device))
        r_hat = path(xc[None].expand(draws, -1, -1), y_hat, xt[None])
        return *base, *self.decoder(xt[None], r, r_hat)

    # -- training and prediction --------------------------------------------------------------

    @property
    def meta_loss_name(self) -> str:  # type: ignore[override]
        if self.hparams["bootstrap"]:
            return "negative bootstrap log-likelihood per target value"
        return "negative ELBO per target value"

    def meta_loss(self, episode: RegressionEpisode) -> Tensor:
        y, k = episode.target_y, int(self.hparams["train_samples"])
        if self.hparams["bootstrap"]:
            base_mean, base_var, mean, var = self._bootstrap(episode, k, None)
            joint = dist.Normal(mean, var.sqrt()).log_prob(y).sum((-2, -1))
            base = dist.Normal(base_mean, base_var.sqrt()).log_prob(y).sum()
            return -(torch.logsumexp(joint, 0) - math.log(k) + base) / y.numel()
        q_target = self.posterior(episode.target_x, y)
        q_context = self.posterior(episode.context_x, episode.context_y)
        z = q_target.rsample((k,))[:, 0]
        mean, var = self._decode_latent(episode, z)
        expected = dist.Normal(mean, var.sqrt()).log_prob(y).sum((-2, -1)).mean()
        return -(expected - kl_divergence(q_target, q_context).sum()) / y.numel()

    def predict(self, episode: RegressionEpisode) -> RegressionPrediction:
        s = int(self.hparams["samples"])
        g = episode_generator(episode, PREDICT_SALT)
        if self.hparams["bootstrap"]:
            _, _, mean, var = self._bootstrap(episode, s, g)
            return RegressionPrediction(mean, var)
        z = self._draw(self.posterior(episode.context_x, episode.context_y), s, g)
        return RegressionPrediction(*self._decode_latent(episode, z))

    @staticmethod
    def _draw(q: dist.Distribution, samples: int, generator: torch.Generator) -> Tensor:
        """``[samples, d]`` reparameterised draws of a factorised Gaussian with batch ``[1]``."""
        normal = q.base_dist
        eps = torch.randn((samples, normal.loc.shape[-1]), generator=generator)
        return normal.loc[0] + normal.scale[0] * eps.to(normal.loc.device)

    def bounds(self, episode: RegressionEpisode, samples: int
                        ) -> tuple[float, float] | None:
        """ELBO and IW bound of ``log p(y_D | x_D, C)``, proposal ``q(z|D)``, prior ``q(z|C)``;
        ``None`` for bootstrap models (no variational posterior)."""
        if not self.hparams["latent"]:
            return None
        q_target = self.posterior(episode.target_x, episode.target_y)
        q_context = self.posterior(episode.context_x, episode.context_y)
        z = self._draw(q_target, samples, episode_generator(episode, BOUND_SALT))
        mean, var = self._decode_latent(episode, z)
        w = (dist.Normal(mean, var.sqrt()).log_prob(episode.target_y).sum((-2, -1))
             + q_context.log_prob(z[:, None])[:, 0] - q_target.log_prob(z[:, None])[:, 0])
        w = w.double()
        return float(w.mean()), float(torch.logsumexp(w, 0) - math.log(samples))


def preset(**defaults: Any) -> dict[str, HParam]:
    """The skeleton's declarations of ``defaults`` with those defaults (a registered method)."""
    return {k: replace(NeuralProcess.hyperparameters[k], default=v) for k, v in defaults.items()}


class MeanAggregationNP(NeuralProcess):
    """MA-NP: latent NP with mean aggregation (Garnelo et al. 2018b)."""

    name = "ma-np"


class BayesianAggregationNP(NeuralProcess):
    """BA-NP: latent NP with Bayesian aggregation (Volpp et al. 2021)."""

    name = "ba-np"
    hyperparameters = preset(aggregation="bayes")


class AttentiveNP(NeuralProcess):
    """ANP: self-attention in both encoders, cross-attention deterministic path (Kim et al.
    2019)."""

    name = "anp"
    hyperparameters = preset(deterministic="attention", self_attention=True)


class BootstrapNP(NeuralProcess):
    """BNP: mean-aggregated deterministic path, bootstrap contexts (Lee et al. 2020)."""

    name = "bnp"
    hyperparameters = preset(latent=False, deterministic="mean", bootstrap=True)


class BootstrapAttentiveNP(NeuralProcess):
    """BANP: ANP's attentive deterministic path, bootstrap contexts (Lee et al. 2020)."""

    name = "banp"
    hyperparameters = preset(latent=False, deterministic="attention", self_attention=True,
                             bootstrap=True)


METHODS = (MeanAggregationNP, BayesianAggregationNP, AttentiveNP, BootstrapNP,
           BootstrapAttentiveNP)
