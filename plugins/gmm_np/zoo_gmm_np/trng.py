"""One trust-region natural-gradient (TRNG) step on a batch of Gaussian-mixture posteriors.

GMM-NP (Volpp et al. 2023, Sec. 4, Eqs. 8, 11-14; the update of Lin et al. 2020 with the per-
component KL trust region of Arenz et al. 2022) fits ``q(z)`` to an unnormalised target
``p~(z)``. For each task and component ``k``, with ``h_k(z) = log p~(z) + log q(z|k) - log q(z)``
and expectations under ``q(z|k)``:

- ``R_k = E[grad^2 h_k]`` and ``r_k = E[grad h_k]`` (Eq. 12a/b). Stein's lemma gives the Hessian
  from gradients, ``E[grad^2 f] = E[Lambda_k (z - mu_k) grad f^T]``, symmetrised. We estimate it
  for the reward ``g = log p~ - log q`` and add the exact ``E[grad^2 log q(z|k)] = -Lambda_k``
  (``E[grad log q(z|k)] = 0``): the same expectation as Eq. 12a with less noise;
- Eq. 8a/8b: ``Lambda' = (eta Lambda - R) / (eta + 1)``,
  ``Lambda' mu' = (eta Lambda mu + r - R mu) / (eta + 1)``; ``eta = 0`` is the full Newton /
  natural-gradient step;
- ``eta`` is the smallest value with ``KL(q'(.|k) || q(.|k)) <= eps`` (Eq. 14) and ``Lambda'``
  positive definite. Whitened by ``Lambda = L L^T`` and ``L^{-1} R L^{-T} = U diag(d) U^T``,
  ``Lambda'`` has eigenvalues ``(eta - d_i)/(eta + 1)``, ``mu' - mu = (eta Lambda - R)^{-1} r``
  and, with ``b = U^T L^{-1} r``,
  ``KL(eta) = 1/2 sum_i [(eta+1)/(eta-d_i) - 1 + log((eta-d_i)/(eta+1)) + b_i^2/(eta-d_i)^2]``,
  finite exactly where ``Lambda'`` is positive definite (``eta > max d_i``) and decreasing in
  ``eta`` there. So the bracketing search on ``eta`` (in ``log(1 + eta)``) costs ``O(d)`` per
  trial and a non-positive-definite candidate counts as infeasible, which pushes ``eta`` up. The
  returned ``eta`` is the feasible end of the bracket;
- the weights: ``log w'_k = log w_k + rho_k - logsumexp_j(log w_j + rho_j)`` with
  ``rho_k = E[log p~(z) - log q(z)]``. ERRATUM: Eq. 8c prints ``w' ∝ exp(rho)``, which drives
  the weights to uniform at the optimum (``rho_k`` is then equal for all active components); the
  natural-gradient (VIPS) step above is the correct one (the tests show both);
- the ``direct`` update (iBayes-GMM, Lin et al. 2020) replaces the trust region by a step size
  ``beta``: ``eta = 1/beta - 1``, and the weight step is scaled by ``beta``.

A component whose step fails (no feasible ``eta`` up to ``ETA_MAX``, a precision without a
Cholesky factor, a non-finite value) keeps its old parameters; the step reports how many did.
Everything is batched over tasks and components: no Python loop over either.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from zoo_gmm_np.gmm import GMM

ETA_MAX = 1e5
GRID, GRID_ROUNDS = 8, 5
"""The eta search: ``GRID`` trials per round shrink the bracket of ``log(1 + eta)`` by ``GRID``
(8^5: a relative resolution of 3.5e-4 in ``1 + eta``, finer than the paper's 1e-3)."""
MIN_EIGENVALUE = 1e-8
"""A candidate precision is positive definite if its whitened eigenvalues exceed this."""

LogTarget = Callable[[Tensor], Tensor]
"""``z [S, K, T, d] -> [S, K, T]``, differentiable in ``z``: ``log p~``, or its part other than a
Gaussian-mixture prior passed beside it (whose density and gradient are then analytic)."""


@dataclass(frozen=True)
class TRNGConfig:
    """How a step is taken: ``update`` ``"trust-region"`` (KL bound ``kl_bound`` per component)
    or ``"direct"`` (step size ``step_size``); ``diagonal`` keeps covariances diagonal; ``samples``
    per task per step, split evenly over components (at least one each); ``dtype`` of the
    per-draw work (:func:`estimate`; ``None``: the mixture's)."""

    update: str = "trust-region"
    kl_bound: float = 1e-3
    step_size: float = 0.1
    diagonal: bool = False
    samples: int = 128
    dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        if self.update not in ("trust-region", "direct"):
            raise ValueError(f"update={self.update!r}: use 'trust-region' or 'direct'")


@dataclass(frozen=True)
class StepInfo:
    """What a step did: per (task, component) ``eta``, ``failed`` and the KL of the step."""

    eta: Tensor
    failed: Tensor
    kl: Tensor


def stein_hessian(z: Tensor, mean: Tensor, prec: Tensor, grad: Tensor) -> Tensor:
    """``E[grad^2 f]`` from gradients by Stein's lemma, symmetrised: ``z, grad [S, T, K, d]``
    drawn from ``N(mean [T, K, d], prec^{-1})`` -> ``[T, K, d, d]``."""
    outer = torch.einsum("stki,stkj->tkij", z - mean, grad) / z.shape[0]
    r = prec @ outer
    return 0.5 * (r + r.transpose(-1, -2))


def natural_step(prec: Tensor, mean: Tensor, hess: Tensor, grad: Tensor, eta: Tensor
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """Eq. 8a/8b for ``eta [T, K]``: the new precision and mean, and where the precision has a
    Cholesky factor."""
    e = eta[..., None, None]
    new_prec = (e * prec - hess) / (e + 1)
    new_prec = 0.5 * (new_prec + new_prec.transpose(-1, -2))
    linear = (e[..., 0] * (prec @ mean[..., None])[..., 0] + grad
              - (hess @ mean[..., None])[..., 0]) / (e[..., 0] + 1)
    chol, info = torch.linalg.cholesky_ex(new_prec)
    ok = (info == 0) & torch.isfinite(chol).all((-1, -2))
    safe = torch.where(ok[..., None, None], chol, torch.eye(chol.shape[-1], dtype=chol.dtype,
                                                            device=chol.device))
    new_mean = torch.cholesky_solve(linear[..., None], safe)[..., 0]
    return new_prec, new_mean, ok & torch.isfinite(new_mean).all(-1)


class StepKL:
    """``KL(q'(eta) || q)`` of Eq. 8a/8b along ``eta`` in closed form (module docstring), for a
    batch of components; ``inf`` where the candidate precision is not positive definite."""

    def __init__(self, prec: Tensor, hess: Tensor, grad: Tensor):
        chol = torch.linalg.cholesky(prec)
        whitened = torch.linalg.solve_triangular(chol, hess, upper=False)
        whitened = torch.linalg.solve_triangular(chol, whitened.transpose(-1, -2), upper=False)
        d, u = torch.linalg.eigh(0.5 * (whitened + whitened.transpose(-1, -2)))
        b = torch.linalg.solve_triangular(chol, grad[..., None], upper=False)
        self.d, self.b2 = d[..., None, :], (u.transpose(-1, -2) @ b)[..., None, :, 0].square()

    def __call__(self, eta: Tensor) -> Tensor:
        """``eta [..., G]`` (``G`` trial values per component) -> ``[..., G]``."""
        e = eta[..., None]
        gap = e - self.d
        lam = gap / (e + 1)
        terms = 1 / lam - 1 + torch.log(lam.clamp_min(MIN_EIGENVALUE)) + self.b2 / gap.square()
        kl = 0.5 * terms.sum(-1)
        return torch.where((lam > MIN_EIGENVALUE).all(-1), kl, torch.full_like(kl, math.inf))


def solve_eta(kl: StepKL, bound: float) -> tuple[Tensor, Tensor]:
    """The smallest feasible ``eta`` per component, and whether any ``eta <= ETA_MAX`` is.

    Feasibility is monotone in ``eta``, so a bracket ``(lo, hi]`` of ``log(1 + eta)`` (``hi``
    feasible) shrinks by ``GRID`` per round: the first feasible of ``GRID`` equally spaced trial
    points becomes ``hi`` and the one before it ``lo``; ``eta = 0`` (the full step) is tried first.
    """
    zero = torch.zeros_like(kl.d[..., 0, 0])
    top = torch.full_like(zero, math.log1p(ETA_MAX))
    feasible = kl(torch.expm1(top)[..., None])[..., 0] <= bound
    full_step = kl(zero[..., None])[..., 0] <= bound
    lo, hi = zero, top
    fractions = torch.arange(1, GRID + 1, dtype=zero.dtype, device=zero.device) / GRID
    for _ in range(GRID_ROUNDS):
        trials = lo[..., None] + (hi - lo)[..., None] * fractions
        first = GRID - (kl(torch.expm1(trials)) <= bound).sum(-1, keepdim=True)
        hi = trials.gather(-1, first.clamp_max(GRID - 1))[..., 0]
        lo = torch.where(first[..., 0] > 0, trials.gather(-1, (first - 1).clamp_min(0))[..., 0], lo)
    return torch.where(full_step, zero, torch.expm1(hi)), feasible


def weight_step(log_w: Tensor, rho: Tensor, step: float = 1.0) -> Tensor:
    """The corrected mixture-weight update (module docstring): ``log_w, rho [T, K]``."""
    return torch.log_softmax(log_w + step * rho, dim=-1)


def estimate(gmm: GMM, log_target: LogTarget, per_component: int, noise: Tensor | None = None,
             prior: GMM | None = None, dtype: torch.dtype | None = None
             ) -> tuple[Tensor, Tensor, Tensor]:
    """Monte Carlo moments of Eq. 12 from ``per_component`` draws of every component:
    ``R [T, K, d, d]`` (h-form: Stein estimate for the reward minus ``Lambda``), ``r [T, K, d]``
    and ``rho [T, K]``, for ``log p~ = log_target + log prior``. ``noise [S, K, T, d]``:
    standard-normal draws to use instead of fresh ones from the global generator. ``dtype``: of
    the per-draw work (draws, target, mixture scores; default the mixture's); the moments are
    returned in the mixture's dtype."""
    work = dtype or gmm.mean.dtype
    if noise is None:
        t, k, d = gmm.mean.shape
        noise = torch.randn(per_component, k, t, d, dtype=work, device=gmm.mean.device)
    mean = gmm.mean.to(work)
    scale = gmm.components.scale_tril.to(work)  # the reparameterisation of MultivariateNormal
    z = (mean + (scale @ noise.to(work).movedim(1, 2)[..., None])[..., 0]).movedim(1, 2)
    z = z.detach().requires_grad_(True)
    with torch.enable_grad():
        value = log_target(z)  # [S, K, T]
        (grad,) = torch.autograd.grad(value.sum(), z)
    z = z.detach()
    log_q, score_q = gmm.log_prob_and_score(z)
    reward, grad = value.detach().to(work) - log_q, grad.to(work) - score_q
    if prior is not None:
        log_prior, score_prior = prior.log_prob_and_score(z)
        reward, grad = reward + log_prior, grad + score_prior
    z, grad = z.movedim(1, 2), grad.movedim(1, 2)  # [S, T, K, d]
    outer = stein_hessian(z, mean, gmm.prec.to(work), grad).to(gmm.prec.dtype)
    return (outer - gmm.prec, grad.mean(0).to(gmm.mean.dtype),
            reward.mean(0).T.to(gmm.mean.dtype))


def step(gmm: GMM, log_target: LogTarget, config: TRNGConfig, noise: Tensor | None = None,
         prior: GMM | None = None) -> tuple[GMM, StepInfo]:
    """One TRNG (or direct natural-gradient) step on every task's mixture at once (``noise``,
    ``prior``: as in :func:`estimate`)."""
    k = gmm.log_w.shape[-1]
    hess, grad, rho = estimate(gmm, log_target, max(1, config.samples // k), noise, prior,
                               config.dtype)
    if config.diagonal:
        hess = torch.diag_embed(torch.diagonal(hess, dim1=-2, dim2=-1))
    kl = StepKL(gmm.prec, hess, grad)
    if config.update == "trust-region":
        eta, feasible = solve_eta(kl, config.kl_bound)
        weight_rate = 1.0
    else:
        eta = torch.full_like(rho, 1 / config.step_size - 1)
        feasible = torch.isfinite(kl(eta[..., None])[..., 0])
        weight_rate = config.step_size
    prec, mean, ok = natural_step(gmm.prec, gmm.mean, hess, grad, eta)
    ok = ok & feasible
    new = GMM(weight_step(gmm.log_w, rho, weight_rate), mean, prec).where(ok, gmm)
    return new, StepInfo(eta, ~ok, torch.where(ok, kl(eta[..., None])[..., 0],
                                               torch.zeros_like(eta)))


def fit(gmm: GMM, log_target: LogTarget, config: TRNGConfig, steps: int,
        prior: GMM | None = None, generators: Sequence[torch.Generator] | None = None
        ) -> tuple[GMM, int]:
    """``steps`` TRNG steps from ``gmm``; the mixtures and the number of failed component steps.
    ``generators``: one per task, whose draws that task's steps use (default: the global
    generator), so that a task's fit does not depend on the tasks fitted beside it."""
    failures = 0
    (t, k, d), work = gmm.mean.shape, config.dtype or gmm.mean.dtype
    if generators is not None and len(generators) != t:
        raise ValueError(f"{len(generators)} generators for {t} tasks: give one per task")
    for _ in range(steps):
        noise = None if generators is None else torch.cat([
            torch.randn(max(1, config.samples // k), k, 1, d, generator=g, dtype=work,
                        device=gmm.mean.device) for g in generators], 2)
        gmm, info = step(gmm, log_target, config, noise, prior)
        failures += int(info.failed.sum())
    return gmm, failures
