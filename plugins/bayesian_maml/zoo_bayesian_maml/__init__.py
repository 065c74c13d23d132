"""Weight-space Bayesian meta-learning: ABML and Bayesian MAML, on the zoo's backbones.

- ``abml``: Amortized Bayesian Meta-Learning (Ravi & Beatson, ICLR 2019). A meta-learned
  mean-field Gaussian prior ``p(w) = N(mu, sigma^2)`` over every weight of backbone + head (``mu``
  is the backbone's and head's own parameters, ``log sigma`` a parameter per weight). A task's
  posterior ``q(w) = N(m, s^2)`` starts at the prior and takes ``inner_steps`` gradient steps on
  the support's negative ELBO per example. The meta-objective is the negative ELBO of
  support + query under that posterior (Ravi & Beatson, eq. 7), plus a Normal-Gamma hyperprior
  on ``(mu, 1 / sigma^2)``, as a density of the parameters ``(mu, log sigma)`` (with the Jacobian),
  weighted by ``hyperprior_weight``. The ELBO is Pyro's
  ``TraceMeanField_ELBO.differentiable_loss`` (analytic Gaussian KL, reparameterised likelihood
  term), over Pyro's distributions; the prediction averages the softmax over ``test_samples``
  draws from ``q``. The KL term of both ELBOs is scaled by ``kl_weight`` (``pyro.poutine.scale``
  on the weight sites; 1 is the exact ELBO). At 1 it swamps the likelihood: a MAML-sized inner
  step (``inner_lr`` 0.4) moves the mean by many prior standard deviations (0.01) in each of
  the ~10^5 weights of Conv4S, so at initialisation (glyphs, 5-way 1-shot) KL / N is ~8,000 nats
  per example against a likelihood of ~4, and the meta-gradient only shrinks the adaptation:
  training stays at chance. The default, 1e-3, is the choice of validation episodes among 1e-5,
  1e-4 and 1e-3 (suite ``abml-sweep``, numbers in ``benchmarks/cards/baselines.md``). The
  re-implementation in cnguyen10/few_shot_meta_learning down-weights it too (``KL_weight``, 1e-6
  by default).
- ``bmaml``: Bayesian MAML (Yoon et al., NeurIPS 2018), the non-Chaser variant. ``num_particles``
  meta-learned parameter particles, each moved by ``inner_steps`` Stein variational gradient
  descent steps (Liu & Wang 2016) on the support posterior ``p(D | w) p(w)`` (Gaussian prior of
  scale ``prior_std``); the meta-objective is the query negative log of the particle-averaged
  predictive, differentiated through the SVGD steps; the prediction averages over particles.

Steps are taken on per-example objectives (the log posterior divided by the support size), so
``inner_lr`` means what it means for MAML; both are inner-loop methods of the core
(:class:`zoo.families.InnerLoopMethod`), whose defaults follow MAML's published protocol table, except
that ABML takes one inner step, in training and at test: starting from the prior the KL's
gradient is zero, so the first step is stable for any prior, whereas later
plain gradient steps on the KL need ``inner_lr * kl_weight < 2 * N * sigma^2`` (N support
examples); and three or five steps at test (MAML's Omniglot protocol) scored worse than one on
validation episodes (``abml-sweep``, 1-shot).

Pyro's own SVGD (``pyro.infer.SVGD`` with ``RBFSteinKernel``) is not used: its kernel is computed
under ``torch.no_grad`` with a per-dimension bandwidth, and BMAML must differentiate through the
update; :func:`svgd_direction` is the standard isotropic-RBF Stein direction, tested against the
closed form.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.infer import TraceMeanField_ELBO
from torch import Tensor, nn
from torch.func import functional_call

import zoo
from zoo import Episode, HParam, Prediction, check_finite, draw_seed, manual_seed
from zoo.backbones import Backbone
from zoo.families import DIVERGED, InnerLoopMethod, published_with_steps


class WeightSpaceMethod(InnerLoopMethod):
    """Backbone + ``way``-output head, evaluated with any weights through ``functional_call``."""

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        self.head = nn.Linear(backbone.feature_dim, way)

    def network(self) -> nn.Module:
        return nn.Sequential(self.backbone, self.head)

    def names(self) -> list[str]:
        return [n for n, _ in self.network().named_parameters()]

    def logits(self, weights: Sequence[Tensor], x: Tensor) -> Tensor:
        return functional_call(self.network(), dict(zip(self.names(), weights)), (x,))


class ABML(WeightSpaceMethod):
    """Amortized Bayesian Meta-Learning (see the module docstring)."""

    name = "abml"
    hyperparameters = {
        "prior_init_std": HParam(0.01, gt=0, doc="initial prior standard deviation of every weight"),
        "kl_weight": HParam(1e-3, gt=0, doc="weight of the KL term of both ELBOs (1: exact); "
                            "chosen on validation (abml-sweep)"),
        "train_samples": HParam(1, ge=1, doc="posterior draws per ELBO in meta-training"),
        "test_samples": HParam(10, ge=1, doc="posterior draws averaged in the prediction"),
        "hyperprior_a": HParam(1.0, gt=0, doc="Gamma shape of the prior precision's hyperprior"),
        "hyperprior_b": HParam(0.01, gt=0, doc="Gamma rate of the prior precision's hyperprior"),
        "hyperprior_weight": HParam(1e-3, ge=0, doc="weight of the hyperprior term"),
    }
    published = published_with_steps(1)

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        log_std = math.log(self.hparams["prior_init_std"])
        self.prior_log_std = nn.ParameterList(
            [nn.Parameter(torch.full_like(p, log_std)) for p in self.network().parameters()])

    def prior(self) -> tuple[list[Tensor], list[Tensor]]:
        return list(self.network().parameters()), [s.exp() for s in self.prior_log_std]

    def negative_elbo(self, x: Tensor, y: Tensor, q_loc: Sequence[Tensor],
                      q_scale: Sequence[Tensor], samples: int) -> Tensor:
        """``-ELBO = E_q[-log p(y | x, w)] + kl_weight * KL(q || prior)`` by Pyro, differentiable
        in both."""
        p_loc, p_scale = self.prior()
        names, kl_weight = self.names(), self.hparams["kl_weight"]

        def model() -> None:
            with pyro.poutine.scale(scale=kl_weight):
                w = [pyro.sample(n, dist.Normal(m, s).to_event(m.dim()))
                     for n, m, s in zip(names, p_loc, p_scale)]
            with pyro.plate("data", len(y)):
                pyro.sample("y", dist.Categorical(logits=self.logits(w, x)), obs=y)

        def guide() -> None:
            with pyro.poutine.scale(scale=kl_weight):
                for n, m, s in zip(names, q_loc, q_scale):
                    pyro.sample(n, dist.Normal(m, s).to_event(m.dim()))

        return TraceMeanField_ELBO(num_particles=samples).differentiable_loss(model, guide)

    def adapt(self, episode: Episode, steps: int, samples: int, create_graph: bool,
              record: list[float] | None = None) -> tuple[list[Tensor], list[Tensor]]:
        """The task posterior: ``steps`` gradient steps on the support's -ELBO per example, in
        ``(mean, log std)``, from the prior."""
        p_loc, p_scale = self.prior()
        loc, log_scale = list(p_loc), [s.log() for s in p_scale]
        n, lr = len(episode.support_y), self.hparams["inner_lr"]
        for _ in range(steps):
            loss = self.negative_elbo(episode.support_x, episode.support_y, loc,
                                      [s.exp() for s in log_scale], samples) / n
            check_finite(loss, "support -ELBO", episode, DIVERGED)
            if record is not None:
                record.append(loss.item())
            grads = torch.autograd.grad(loss, loc + log_scale, create_graph=create_graph)
            loc = [m - lr * g for m, g in zip(loc, grads[: len(loc)])]
            log_scale = [s - lr * g for s, g in zip(log_scale, grads[len(loc):])]
        return loc, [s.exp() for s in log_scale]

    def hyperprior_nll(self) -> Tensor:
        """``-log p(mu, log sigma)`` averaged over weights (:func:`log_hyperprior`)."""
        a, b = self.hparams["hyperprior_a"], self.hparams["hyperprior_b"]
        total, count = 0.0, 0
        for mu, log_std in zip(self.network().parameters(), self.prior_log_std):
            total = total - log_hyperprior(mu, log_std, a, b).sum()
            count += mu.numel()
        return total / count

    def meta_loss(self, episode: Episode) -> Tensor:
        samples = self.hparams["train_samples"]
        loc, scale = self.adapt(episode, self.inner_steps(), samples, create_graph=True)
        x = torch.cat([episode.support_x, episode.query_x])
        y = torch.cat([episode.support_y, episode.query_y])
        loss = self.negative_elbo(x, y, loc, scale, samples) / len(y)
        return loss + self.hparams["hyperprior_weight"] * self.hyperprior_nll()

    def predict(self, episode: Episode) -> Prediction:
        device = episode.query_x.device
        seed = draw_seed(episode, salt=0)
        objective: list[float] = []
        # Pyro draws from the global generator: fork it, seeded by the episode, so that the
        # prediction is a function of the episode and the caller's random state is untouched.
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            manual_seed(seed)
            with torch.enable_grad():
                loc, scale = self.adapt(episode, self.inner_steps(), 1, False, objective)
            loc, scale = [m.detach() for m in loc], [s.detach() for s in scale]
            probs = torch.stack([
                torch.softmax(self.logits([dist.Normal(m, s).sample() for m, s in zip(loc, scale)],
                                          episode.query_x), -1)
                for _ in range(self.hparams["test_samples"])]).mean(0)
        return Prediction(probs, {"inner_objective": objective})


def log_hyperprior(mu: Tensor, log_std: Tensor, a: float, b: float) -> Tensor:
    """Normal-Gamma log density of a prior's ``(mu, log sigma)``, per weight: ``lambda = 1 /
    sigma^2 ~ Gamma(a, b)``, ``mu | lambda ~ N(0, 1 / lambda)``. The parameter is ``s = log
    sigma``, so the density of ``lambda`` gets the Jacobian ``|d lambda / d s| = 2 exp(-2 s)``
    (without it the maximiser in ``s`` is another point than the prior's mode)."""
    precision = torch.exp(-2 * log_std)
    shape, rate = (torch.tensor(v, dtype=log_std.dtype, device=log_std.device) for v in (a, b))
    return (dist.Gamma(shape, rate).log_prob(precision) + math.log(2) - 2 * log_std
            + dist.Normal(0.0, log_std.exp()).log_prob(mu))


def rbf_bandwidth(particles: Tensor) -> Tensor:
    """Liu & Wang's median heuristic ``h = med^2 / log(M + 1)`` on pairwise squared distances
    (constant for differentiation, as a heuristic should be)."""
    m = particles.shape[0]
    d2 = torch.cdist(particles, particles).pow(2).detach()
    if m < 2:
        return torch.ones((), dtype=particles.dtype, device=particles.device)
    upper = d2[torch.triu_indices(m, m, 1, device=d2.device).unbind()]
    return upper.median().clamp_min(torch.finfo(d2.dtype).tiny) / math.log(m + 1)


def svgd_direction(particles: Tensor, score: Tensor, bandwidth: Tensor | float | None = None
                   ) -> Tensor:
    """The kernelised Stein direction ``phi(x_i) = 1/M sum_j [k(x_j, x_i) score(x_j) +
    grad_{x_j} k(x_j, x_i)]`` with ``k(a, b) = exp(-||a - b||^2 / h)``; ``[M, P]`` in and out."""
    h = rbf_bandwidth(particles) if bandwidth is None else bandwidth
    d2 = (particles[:, None, :] - particles[None, :, :]).pow(2).sum(-1)
    k = torch.exp(-d2 / h)  # symmetric [M, M]
    repulsion = (2.0 / h) * (particles * k.sum(1, keepdim=True) - k @ particles)
    return (k @ score + repulsion) / particles.shape[0]


class BMAML(WeightSpaceMethod):
    """Bayesian MAML with SVGD in the inner loop (see the module docstring)."""

    name = "bmaml"
    hyperparameters = {
        "num_particles": HParam(5, ge=1, doc="SVGD particles (parameter vectors)"),
        "prior_std": HParam(10.0, gt=0, doc="scale of the Gaussian prior on the weights"),
    }

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        base = nn.utils.parameters_to_vector(self.network().parameters()).detach()
        inits = []
        for _ in range(self.hparams["num_particles"]):
            fresh = copy.deepcopy(self.network())
            for module in fresh.modules():
                if module is not fresh and hasattr(module, "reset_parameters"):
                    module.reset_parameters()
            inits.append(nn.utils.parameters_to_vector(fresh.parameters()).detach() - base)
        # Particle m is the shared vector (the backbone's and head's parameters) plus offset m, so
        # that particles start as independent initialisations and the backbone is meta-learned.
        self.offsets = nn.Parameter(torch.stack(inits))

    def particles(self) -> Tensor:
        return nn.utils.parameters_to_vector(self.network().parameters())[None] + self.offsets

    def unflatten(self, flat: Tensor) -> list[Tensor]:
        out, i = [], 0
        for p in self.network().parameters():
            out.append(flat[i:i + p.numel()].view_as(p))
            i += p.numel()
        return out

    def particle_logits(self, particles: Tensor, x: Tensor) -> Tensor:
        return torch.stack([self.logits(self.unflatten(p), x) for p in particles])  # [M, n, way]

    def svgd(self, episode: Episode, steps: int, create_graph: bool,
             record: list[float] | None = None) -> Tensor:
        """``steps`` SVGD steps of size ``inner_lr / N`` on ``log p(D_support | w) + log p(w)``."""
        theta = self.particles()
        if not create_graph:
            theta = theta.detach().requires_grad_()
        n = len(episode.support_y)
        prior = dist.Normal(torch.zeros((), device=theta.device, dtype=theta.dtype),
                            self.hparams["prior_std"])
        for _ in range(steps):
            logits = self.particle_logits(theta, episode.support_x)
            nll = F.cross_entropy(logits.flatten(0, 1), episode.support_y.repeat(len(theta)),
                                  reduction="sum")
            check_finite(nll, "support negative log-likelihood", episode, DIVERGED)
            if record is not None:
                record.append(nll.item() / (n * len(theta)))
            log_post = -nll + prior.log_prob(theta).sum()
            (score,) = torch.autograd.grad(log_post, theta, create_graph=create_graph)
            theta = theta + self.hparams["inner_lr"] / n * svgd_direction(theta, score)
            if not create_graph:
                theta = theta.detach().requires_grad_()
        return theta

    def log_predictive(self, theta: Tensor, x: Tensor) -> Tensor:
        """``log (1/M) sum_m softmax(f(x; theta_m))``, ``[n, way]``."""
        log_p = torch.log_softmax(self.particle_logits(theta, x), -1)
        return torch.logsumexp(log_p, 0) - math.log(len(theta))

    def meta_loss(self, episode: Episode) -> Tensor:
        theta = self.svgd(episode, self.inner_steps(), create_graph=True)
        return F.nll_loss(self.log_predictive(theta, episode.query_x), episode.query_y)

    def predict(self, episode: Episode) -> Prediction:
        objective: list[float] = []
        with torch.enable_grad():
            theta = self.svgd(episode, self.inner_steps(), create_graph=False, record=objective)
        theta = theta.detach()
        logits = self.particle_logits(theta, episode.support_x)
        objective.append(F.cross_entropy(logits.flatten(0, 1),
                                         episode.support_y.repeat(len(theta))).item())
        return Prediction(self.log_predictive(theta, episode.query_x).exp(),
                          {"inner_objective": objective})


@zoo.hookimpl
def zoo_register_methods(register):
    for cls in (ABML, BMAML):
        register(cls)
