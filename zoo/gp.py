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

Two routes, one code path each (:mod:`zoo.gram` chooses): a dense ``K`` factorises ``B`` (``N x N``,
one batched Cholesky for all classes; a kernel shared by the classes, expanded with stride 0, and
sites shared too, as in GP regression, are factorised once); a factor ``K = Phi Phi^T``
(:class:`~zoo.gram.FeatureGram`, ``D`` features) factorises ``A = I_D + Phi^T Lambda Phi`` instead,
since by Woodbury ``Phi^T S B^-1 S Phi = I - A^-1`` and by Sylvester ``|B| = |A|``: the posterior of
the weights of ``f = Phi w``, ``w ~ N(0, I)``, is ``N(A^-1 Phi^T nu, A^-1)``.
"""

from __future__ import annotations

import math
from functools import cached_property

import torch
from torch import Tensor

from zoo.gram import FeatureGram, Gram, dense, pack_symmetric, unpack_symmetric
from zoo.jitter import DEFAULT_JITTER, JitterPolicy

DTYPE = torch.float64
"""The precision of the small GP algebra and of the expectation step (features stay float32)."""


def shared(K: Tensor) -> Tensor:
    """``K`` with every leading axis that was expanded (stride 0) cut to length 1, so that a
    kernel shared by all classes is factorised once where the sites are shared too."""
    index = tuple(slice(0, 1) if K.stride(i) == 0 else slice(None) for i in range(K.ndim - 2))
    return K[index]


class SitePosterior:
    """``q(f) ∝ N(f | 0, K) prod_n exp(nu_n f_n - lam_n f_n^2 / 2)``, batched over leading axes.

    ``K``: ``[..., n, n]``, dense or a :class:`~zoo.gram.FeatureGram` (then this is a
    :class:`FeatureSitePosterior`); ``lam``, ``nu``: ``[..., n]`` with ``lam >= 0``.
    """

    def __new__(cls, K: Gram, *args, **kwargs):
        if cls is SitePosterior and isinstance(K, FeatureGram):
            cls = FeatureSitePosterior
        return super().__new__(cls)

    def __init__(self, K: Tensor, lam: Tensor, nu: Tensor, jitter: JitterPolicy | None = None,
                 episode: str | None = None):
        self.K = shared(K).to(DTYPE)
        jitter = jitter or DEFAULT_JITTER
        lam, nu = _sites(lam, nu, jitter)
        self.n = self.K.shape[-1]
        self.s = lam.sqrt()
        SKS = self.s[..., :, None] * self.K * self.s[..., None, :]
        eye = torch.eye(self.n, dtype=DTYPE, device=self.K.device)
        self.L = jitter.cholesky_pd(eye + SKS, "B = I + S K S", episode)
        self.nu = nu

    @cached_property
    def alpha(self) -> Tensor:
        """``nu - S B^-1 S K nu``, so that ``m = K alpha`` (formed on first use: a posterior
        built only for its factor, as :meth:`draw` uses it, never needs it)."""
        Knu = (self.K @ self.nu[..., None])[..., 0]
        corr = torch.cholesky_solve((self.s * Knu)[..., None], self.L)[..., 0]
        return self.nu - self.s * corr

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

    def explained_blocks(self, Kxs: Gram, group: int) -> Tensor:
        """``Kxs^T S B^-1 S Kxs`` (prior minus posterior covariance of ``m`` linear functionals
        with prior cross-covariances ``Kxs`` ``[..., n, m]``) in its diagonal blocks, the
        functionals taken ``group`` at a time: ``[..., m / group, group, group]`` (e.g. the joint
        predictive of the class functions at each query)."""
        V = self.whiten(dense(Kxs)).unflatten(-1, (-1, group))
        return torch.einsum("...ngc,...ngd->...gcd", V, V)

    def sample(self, prior: Tensor, noise: Tensor) -> Tensor:
        """Joint posterior draws by Matheron's rule, ``f = m + f0 - K S B^-1 (S f0 + e)``, from
        draws ``f0 ~ N(0, K)`` and ``e ~ N(0, I)`` (``[..., n]``, broadcast with the sites);
        no square root of the posterior covariance is formed."""
        u = self.s * prior.to(DTYPE) + noise.to(DTYPE)
        v = torch.cholesky_solve(u[..., None], self.L)
        return self.mean + prior - (self.K @ (self.s[..., None] * v))[..., 0]

    def draw(self, member: int, nu: Tensor, prior: Tensor, noise: Tensor) -> Tensor:
        """A draw from the Gaussian with member ``member`` of the last batch axis's prior and sites
        precisions but natural means ``nu`` in place of its own, by Matheron's rule as in
        :meth:`sample`: with ``g = K nu + f0``, ``f = g - K S B^-1 (S g + e)`` (``m + f0 - K S B^-1
        (S f0 + e)`` with ``m = K nu - K S B^-1 S K nu``). One factorisation of many members'
        precisions serves natural means that are known only one member at a time (a Gibbs sweep
        over classes). ``nu``, ``prior``, ``noise``: ``[..., n]``, the batch without that axis."""
        K, L, s = self._member(self.K, member), self.L[..., member, :, :], self.s[..., member, :]
        g = (K @ nu.to(DTYPE)[..., None])[..., 0] + prior.to(DTYPE)
        v = torch.cholesky_solve((s * g + noise.to(DTYPE))[..., None], L)
        return g - (K @ (s[..., None] * v))[..., 0]

    @staticmethod
    def _member(K: Tensor, member: int) -> Tensor:
        """Member ``member`` of the last batch axis of a prior (one shared by all: itself)."""
        return K[..., 0 if K.shape[-3] == 1 else member, :, :] if K.ndim > 2 else K

    @property
    def cov(self) -> Tensor:
        V = self._V(self.K)
        return self.K - V.transpose(-1, -2) @ V

    @cached_property
    def var(self) -> Tensor:
        V = self._V(self.K)
        var = torch.diagonal(self.K, dim1=-2, dim2=-1) - V.pow(2).sum(-2)
        return torch.broadcast_tensors(var, self.alpha)[0]

    def predict(self, Kxs: Tensor, kss: Tensor) -> tuple[Tensor, Tensor]:
        """Predictive marginals at test points: ``Kxs`` = k(train, test) ``[..., n, m]``, ``kss``
        = prior variances ``[..., m]``. Returns mean and variance, each ``[..., m]``."""
        Kxs, kss = shared(Kxs).to(DTYPE), kss.to(DTYPE)
        mean = (Kxs.transpose(-1, -2) @ self.alpha[..., None])[..., 0]
        var = kss - self._V(Kxs).pow(2).sum(-2)
        return mean, torch.broadcast_tensors(var.clamp_min(1e-12), mean)[0]

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


def _sites(lam: Tensor, nu: Tensor, jitter: JitterPolicy) -> tuple[Tensor, Tensor]:
    lam, nu = lam.to(DTYPE), nu.to(DTYPE)
    jitter.require((lam >= 0).all(), "site precisions must be non-negative")
    return lam, nu


class FeatureSitePosterior(SitePosterior):
    """The same posterior for ``K = Phi Phi^T`` (``Phi`` ``[..., n, D]``), in ``D x D``.

    With ``A = I + Phi^T Lambda Phi = L_A L_A^T``: ``m = Phi A^-1 Phi^T nu``, ``Sigma = Phi A^-1
    Phi^T``, ``alpha = nu - lam m`` (from ``(K^-1 + Lambda) m = nu``), ``log|B| = log|A|``; at test
    points with factor ``Phi_*`` the variance is ``k** - |phi_*|^2 + |L_A^-1 phi_*|^2`` (the exact
    ``k** - K*s S B^-1 S Ks*`` with Woodbury's ``Phi^T S B^-1 S Phi = I - A^-1``), so a Nystrom
    factor keeps the true prior variance ``k**`` at the queries.
    """

    def __init__(self, K: FeatureGram, lam: Tensor, nu: Tensor, jitter: JitterPolicy | None = None,
                 episode: str | None = None):
        self.phi = shared(K.left).to(DTYPE)
        self.gram = K
        jitter = jitter or DEFAULT_JITTER
        lam, nu = _sites(lam, nu, jitter)
        self.n, D = self.phi.shape[-2:]
        self.s = lam.sqrt()
        eye = torch.eye(D, dtype=DTYPE, device=self.phi.device)
        self.outer = K.outer if K.dtype == DTYPE else None
        if self.outer is not None:  # one factor for every class: one GEMM
            A = eye + unpack_symmetric(lam @ self.outer, D)
        else:
            A = eye + self.phi.transpose(-1, -2) @ (lam[..., :, None] * self.phi)
        self.L = jitter.cholesky_pd(A, "A = I + Phi^T Lambda Phi", episode)
        self.nu = nu

    @cached_property
    def weights(self) -> Tensor:
        """The posterior mean ``A^-1 Phi^T nu`` of the weights of ``f = Phi w``."""
        rhs = (self.phi.transpose(-1, -2) @ self.nu[..., None])
        return torch.cholesky_solve(rhs, self.L)[..., 0]

    @cached_property
    def mean(self) -> Tensor:
        return (self.phi @ self.weights[..., None])[..., 0]

    @cached_property
    def alpha(self) -> Tensor:  # type: ignore[override]
        return self.nu - self.s.square() * self.mean

    def _VA(self, phi: Tensor) -> Tensor:
        """``L_A^-1 Phi^T`` ``[..., D, m]`` for factors ``[..., m, D]``."""
        return torch.linalg.solve_triangular(self.L, phi.transpose(-1, -2), upper=False)

    def whiten(self, Kxs: Tensor) -> Tensor:
        raise ValueError("whiten() needs a dense kernel matrix; build the posterior on the dense "
                         "route (hyper-parameter algebra=dense), or use explained_blocks")

    def explained_blocks(self, Kxs: Gram, group: int) -> Tensor:
        """As :meth:`SitePosterior.explained_blocks` for ``Kxs`` a :class:`~zoo.gram.FeatureGram`
        with the functionals' factor ``Phi_*`` on the right: by Woodbury ``Phi_*^T (I - A^-1)
        Phi_*``, i.e. ``Phi_* Phi_*^T - V^T V`` with ``V = L_A^-1 Phi_*^T``."""
        if not isinstance(Kxs, FeatureGram):
            raise ValueError("a feature-route posterior needs a FeatureGram of the functionals")
        phi = shared(Kxs.right).to(DTYPE)
        V = self._VA(phi).unflatten(-1, (-1, group))
        prior = phi.unflatten(-2, (-1, group))
        return (torch.einsum("...gcx,...gdx->...gcd", prior, prior)
                - torch.einsum("...ngc,...ngd->...gcd", V, V))

    def sample(self, prior: Tensor, noise: Tensor) -> Tensor:
        """Matheron's rule as in :meth:`SitePosterior.sample`, with ``K S B^-1 u = Phi A^-1 Phi^T
        S u``."""
        u = self.s * (self.s * prior.to(DTYPE) + noise.to(DTYPE))
        v = torch.cholesky_solve(self.phi.transpose(-1, -2) @ u[..., None], self.L)
        return self.mean + prior - (self.phi @ v)[..., 0]

    def draw(self, member: int, nu: Tensor, prior: Tensor, noise: Tensor) -> Tensor:
        """:meth:`SitePosterior.draw` with ``K S B^-1 u = Phi A^-1 Phi^T S u``."""
        phi, L, s = self._member(self.phi, member), self.L[..., member, :, :], self.s[..., member, :]
        g = (phi @ (phi.transpose(-1, -2) @ nu.to(DTYPE)[..., None]))[..., 0] + prior.to(DTYPE)
        u = s * (s * g + noise.to(DTYPE))
        v = torch.cholesky_solve(phi.transpose(-1, -2) @ u[..., None], L)
        return g - (phi @ v)[..., 0]

    @property
    def cov(self) -> Tensor:
        V = self._VA(self.phi)
        return V.transpose(-1, -2) @ V

    @cached_property
    def var(self) -> Tensor:
        """``diag(Phi A^-1 Phi^T)``: ``|L_A^-1 phi_n|^2``, or with a shared factor's outer
        products ``pack(A^-1) @ outer^T`` (``A^-1`` has eigenvalues in (0, 1], so forming it loses
        nothing)."""
        if self.outer is not None:
            var = pack_symmetric(torch.cholesky_inverse(self.L)) @ self.outer.T
        else:
            var = self._VA(self.phi).pow(2).sum(-2)
        return torch.broadcast_tensors(var, self.alpha)[0]

    def predict(self, Kxs: Gram, kss: Tensor) -> tuple[Tensor, Tensor]:
        """As :meth:`SitePosterior.predict`, with ``Kxs`` a :class:`~zoo.gram.FeatureGram`
        whose right factor is the test points' ``Phi_*``."""
        if not isinstance(Kxs, FeatureGram):
            raise ValueError("a feature-route posterior predicts from a FeatureGram of the test "
                             "points (GPMethod.kernel_matrices builds one)")
        phi = shared(Kxs.right).to(DTYPE)
        mean = (phi @ self.weights[..., None])[..., 0]
        var = kss.to(DTYPE) - phi.pow(2).sum(-1) + self._VA(phi).pow(2).sum(-2)
        return mean, torch.broadcast_tensors(var.clamp_min(1e-12), mean)[0]


PRIOR_DRAW_ELEMENTS = 2**22
"""Entries of the prior's square root broadcast over the draws at once in :func:`prior_draws`."""


def prior_draws(K: Gram, count: int, generator: torch.Generator) -> Tensor:
    """``count`` draws of ``N(0, K)`` for a PSD (possibly singular) ``K`` ``[..., n, n]``, as
    ``[count, ..., n]``, through its eigendecomposition (negative round-off eigenvalues set to 0;
    no jitter), or as ``Phi w`` with ``w ~ N(0, I_D)`` for a factor ``K = Phi Phi^T``. Standard
    normals come from ``generator`` on its own device (pass one on ``K``'s device to avoid a host
    transfer)."""
    if isinstance(K, FeatureGram):
        phi = K.left.detach().to(DTYPE)
        z = torch.randn((count, *phi.shape[:-2], phi.shape[-1]), generator=generator, dtype=DTYPE,
                        device=generator.device).to(phi.device)
        return (phi @ z[..., None])[..., 0]
    K = K.detach().to(DTYPE)
    evals, evecs = torch.linalg.eigh(K)
    z = torch.randn((count, *K.shape[:-1]), generator=generator, dtype=DTYPE,
                    device=generator.device).to(K.device)
    root = evecs * evals.clamp_min(0).sqrt()[..., None, :]
    # the product broadcasts ``root`` over the draws: a few draws at a time, not a ``[count,
    # ..., n, n]`` copy of it (1 GB for 1,020 draws at 50 classes x 50 points)
    step = max(1, PRIOR_DRAW_ELEMENTS // root.numel())
    return torch.cat([(root @ z[i:i + step, ..., None])[..., 0] for i in range(0, count, step)])


def gaussian_log_marginal(K: Gram, y: Tensor, noise: Tensor | float,
                          jitter: JitterPolicy | None = None, episode: str | None = None) -> Tensor:
    """``log N(y | 0, K + noise I)`` (R&W Alg. 2.1), batched over leading axes; a kernel shared by
    the batch (expanded with stride 0) is factorised once. For a factor ``K = Phi Phi^T`` it is
    done in ``D x D`` with ``A = I + Phi^T Phi / noise``: ``|K + noise I| = noise^n |A|`` and
    ``y^T (K + noise I)^-1 y = (|y|^2 - |L_A^-1 Phi^T y|^2 / noise) / noise``."""
    y = y.to(DTYPE)
    n = K.shape[-1]
    if isinstance(K, FeatureGram):
        phi = shared(K.left).to(DTYPE)
        noise = torch.as_tensor(noise, dtype=DTYPE, device=phi.device)
        eye = torch.eye(phi.shape[-1], dtype=DTYPE, device=phi.device)
        A = eye + phi.transpose(-1, -2) @ phi / noise
        L = (jitter or DEFAULT_JITTER).cholesky(A, "A = I + Phi^T Phi / noise", episode)
        v = torch.linalg.solve_triangular(L, phi.transpose(-1, -2) @ y[..., None], upper=False)
        quad = (y.pow(2).sum(-1) - v[..., 0].pow(2).sum(-1) / noise) / noise
        logdet = n * torch.log(noise) + 2 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
        return -0.5 * (quad + logdet + n * math.log(2 * math.pi))
    K = shared(K).to(DTYPE)
    eye = torch.eye(n, dtype=DTYPE, device=K.device)
    noise = torch.as_tensor(noise, dtype=DTYPE, device=K.device)
    L = (jitter or DEFAULT_JITTER).cholesky(K + noise[..., None, None] * eye, "K + noise I", episode)
    alpha = torch.cholesky_solve(y[..., None], L)[..., 0]
    return (-0.5 * (y * alpha).sum(-1) - torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
            - 0.5 * n * math.log(2 * math.pi))
