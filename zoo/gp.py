"""Shared Gaussian-process algebra, in float64, that never inverts the kernel matrix.

The central object is :class:`SitePosterior`: the Gaussian ``q(f)`` proportional to a zero-mean
prior ``N(f | 0, K)`` times Gaussian sites ``exp(nu_n f_n - lam_n f_n^2 / 2)`` with ``lam >= 0``.
Every GP method in the zoo (mirror descent, gradient descent in natural form, Polya-Gamma Gibbs and
mean field, exact Gaussian regression) reduces its inner loop to such sites. Following Rasmussen &
Williams (Alg. 3.2), with ``S = diag(sqrt(lam))`` and ``B = I + S K S`` (eigenvalues >= 1),

    Sigma = (K^-1 + diag(lam))^-1 = K - K S B^-1 S K,     m = Sigma nu = K a,
    a = nu - S B^-1 S K nu,

which stays stable when ``K`` is singular (cosine kernels on few features) and when some sites are
empty (``lam = 0``). All functions batch over leading axes (one GP per class).
"""

from __future__ import annotations

import math
from functools import cached_property

import torch
from torch import Tensor

from zoo.errors import NumericalError
from zoo.jitter import DEFAULT_JITTER, JitterPolicy

DTYPE = torch.float64


class SitePosterior:
    """``q(f) ∝ N(f | 0, K) prod_n exp(nu_n f_n - lam_n f_n^2 / 2)``, batched over leading axes.

    ``K``: ``[..., n, n]``; ``lam``, ``nu``: ``[..., n]`` with ``lam >= 0``.
    """

    def __init__(self, K: Tensor, lam: Tensor, nu: Tensor, jitter: JitterPolicy | None = None,
                 episode: str | None = None):
        self.K = K.to(DTYPE)
        lam, nu = lam.to(DTYPE), nu.to(DTYPE)
        if (lam < 0).any():
            raise NumericalError("site precisions must be non-negative")
        self.n = self.K.shape[-1]
        self.s = lam.sqrt()
        SKS = self.s[..., :, None] * self.K * self.s[..., None, :]
        eye = torch.eye(self.n, dtype=DTYPE, device=self.K.device)
        self.L = (jitter or DEFAULT_JITTER).cholesky(eye + SKS, "B = I + S K S", episode)
        Knu = (self.K @ nu[..., None])[..., 0]
        corr = torch.cholesky_solve((self.s * Knu)[..., None], self.L)[..., 0]
        self.alpha = nu - self.s * corr

    @cached_property
    def mean(self) -> Tensor:
        return (self.K @ self.alpha[..., None])[..., 0]

    def _V(self, Kxs: Tensor) -> Tensor:
        """``L^-1 S Kxs`` so that ``Kxs^T S B^-1 S Kxs = V^T V``."""
        return torch.linalg.solve_triangular(self.L, self.s[..., :, None] * Kxs, upper=False)

    def whiten(self, Kxs: Tensor) -> Tensor:
        """``V = L^-1 S Kxs`` for prior cross-covariances ``Kxs`` ``[..., n, m]`` of ``m`` linear
        functionals: their posterior covariance is ``prior - V^T V`` (for joint predictives)."""
        return self._V(Kxs.to(DTYPE))

    def sample(self, prior: Tensor, noise: Tensor) -> Tensor:
        """Joint posterior draws by Matheron's rule, ``f = m + f0 - K S B^-1 (S f0 + e)``, from
        draws ``f0 ~ N(0, K)`` and ``e ~ N(0, I)`` (``[..., n]``, broadcast with the sites);
        no square root of the posterior covariance is formed."""
        u = self.s * prior.to(DTYPE) + noise.to(DTYPE)
        v = torch.cholesky_solve(u[..., None], self.L)
        return self.mean + prior - (self.K @ (self.s[..., None] * v))[..., 0]

    @property
    def cov(self) -> Tensor:
        V = self._V(self.K)
        return self.K - V.transpose(-1, -2) @ V

    @cached_property
    def var(self) -> Tensor:
        V = self._V(self.K)
        return torch.diagonal(self.K, dim1=-2, dim2=-1) - V.pow(2).sum(-2)

    def predict(self, Kxs: Tensor, kss: Tensor) -> tuple[Tensor, Tensor]:
        """Predictive marginals at test points: ``Kxs`` = k(train, test) ``[..., n, m]``, ``kss``
        = prior variances ``[..., m]``. Returns mean and variance, each ``[..., m]``."""
        Kxs, kss = Kxs.to(DTYPE), kss.to(DTYPE)
        mean = (Kxs.transpose(-1, -2) @ self.alpha[..., None])[..., 0]
        var = kss - self._V(Kxs).pow(2).sum(-2)
        return mean, var.clamp_min(1e-12)

    @property
    def logdet_B(self) -> Tensor:
        return 2 * torch.log(torch.diagonal(self.L, dim1=-2, dim2=-1)).sum(-1)

    def kl_to_prior(self) -> Tensor:
        """KL(q || N(0, K)) = (tr B^-1 + a.m - n + log|B|) / 2, with no inverse of K.

        ``B^-1 = I - S Sigma S`` (expand ``(I + S K S)^-1`` with ``Sigma = K - K S B^-1 S K``), so
        ``tr B^-1 - n = -sum_n lam_n var_n``: the trace comes from the marginal variances, which
        every inner loop has already computed, instead of from a second triangular solve.
        """
        quad = (self.alpha * self.mean).sum(-1)
        return 0.5 * (quad - (self.s.square() * self.var).sum(-1) + self.logdet_B)


def prior_draws(K: Tensor, count: int, generator: torch.Generator) -> Tensor:
    """``count`` draws of ``N(0, K)`` for a PSD (possibly singular) ``K`` ``[..., n, n]``, as
    ``[count, ..., n]``, through its eigendecomposition (negative round-off eigenvalues set to 0;
    no jitter). Standard normals come from ``generator`` on its own device (pass one on ``K``'s
    device to avoid a host transfer)."""
    K = K.detach().to(DTYPE)
    evals, evecs = torch.linalg.eigh(K)
    z = torch.randn((count, *K.shape[:-1]), generator=generator, dtype=DTYPE,
                    device=generator.device).to(K.device)
    return ((evecs * evals.clamp_min(0).sqrt()[..., None, :]) @ z[..., None])[..., 0]


def gaussian_log_marginal(K: Tensor, y: Tensor, noise: Tensor | float,
                          jitter: JitterPolicy | None = None, episode: str | None = None) -> Tensor:
    """``log N(y | 0, K + noise I)`` (R&W Alg. 2.1), batched over leading axes."""
    K, y = K.to(DTYPE), y.to(DTYPE)
    n = K.shape[-1]
    eye = torch.eye(n, dtype=DTYPE, device=K.device)
    noise = torch.as_tensor(noise, dtype=DTYPE, device=K.device)
    L = (jitter or DEFAULT_JITTER).cholesky(K + noise[..., None, None] * eye, "K + noise I", episode)
    alpha = torch.cholesky_solve(y[..., None], L)[..., 0]
    return (-0.5 * (y * alpha).sum(-1) - torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
            - 0.5 * n * math.log(2 * math.pi))
