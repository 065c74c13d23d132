"""Weight-space members of the latent-Gaussian family: a Gaussian over a linear head's weights.

The head's weights ``W [C, D]`` (one row per class) carry a Gaussian belief ``q`` from
:mod:`zoo.gaussians`: either one member over ``vec(W)`` (row-major, ``[C D]``, so classes may be
correlated, as under the full and Kronecker families of the Bayesian last layer) or a batch of
``C`` independent members over ``[D]`` (one per class, as Gaussian sites give). With features
``phi(x) [D]`` the logit ``f_c(x) = phi(x)^T w_c`` is Gaussian with mean ``phi^T mu_c`` and variance
``v^T Sigma v`` for ``v = e_c (x) phi`` (:meth:`~zoo.gaussians.Gaussian.projected_variance`).

Two predictives: the family's (these marginals -> the expectation step; exact when classes are
independent a posteriori) and :meth:`LastLayerMethod.weight_probabilities`, the average of
``softmax(W phi)`` over draws of the weights, which keeps the correlations between classes.

Under the prior ``w_c ~ N(0, s I)`` the first is the GP with the linear kernel
``k(x, x') = s phi(x)^T phi(x')``, and conditioning on the same Gaussian sites gives the same
predictive (``tests/test_families.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.episode import Episode
from zoo.errors import HyperParameterError
from zoo.expectations import Rule, standard_normal_draws
from zoo.families.latent_gaussian import LatentGaussianMethod
from zoo.gaussians import DiagonalGaussian, Gaussian
from zoo.gp import DTYPE
from zoo.seeds import draw_seed


def _per_class(q: Gaussian, way: int) -> bool:
    """Whether ``q`` is a batch of ``way`` members over ``[D]`` (else one member over ``[C D]``)."""
    return tuple(q.batch_shape) == (way,)


def head_rows(phi: Tensor, way: int) -> Tensor:
    """``[Q, C, C D]``: row ``(q, c)`` is ``e_c (x) phi_q``, so ``f_qc = row . vec(W)``."""
    eye = torch.eye(way, dtype=phi.dtype, device=phi.device)
    return (eye[None, :, :, None] * phi[:, None, None, :]).flatten(-2)


def linear_gaussian_marginals(phi: Tensor, q: Gaussian, way: int) -> tuple[Tensor, Tensor]:
    """Latent marginals ``[Q, C]`` of ``f_c = phi^T w_c`` for features ``phi [Q, D]`` and a belief
    ``q`` over the head's weights (per class, or over ``vec(W)``)."""
    phi = phi.to(DTYPE)
    if _per_class(q, way):
        f_var = q.projected_variance(phi.expand(way, *phi.shape)).T
        return phi @ q.mean.T, f_var.clamp_min(1e-12)
    f_mean = phi @ q.mean.view(way, -1).T
    return f_mean, q.projected_variance(head_rows(phi, way)).clamp_min(1e-12)


def weight_samples(q: Gaussian, way: int, z: Tensor) -> Tensor:
    """Head weights ``[S, C, D]`` from standard normals ``z [S, n]``, ``n`` the noise of all of
    ``q``'s members (``way * q.noise_dim`` per class, ``q.noise_dim`` over ``vec(W)``)."""
    z = z.to(q.mean).view(z.shape[0], *q.batch_shape, q.noise_dim)
    return q.transform(z).reshape(z.shape[0], way, -1)


class LastLayerMethod(LatentGaussianMethod):
    """Base of methods with a Gaussian over a linear head's weights: a subclass supplies
    :meth:`weight_posterior` for an episode; the marginals and probabilities are the family's."""

    def weight_posterior(self, episode: Episode) -> Gaussian:
        """The belief over the head's weights given the support (see the module docstring)."""
        raise NotImplementedError(f"{type(self).__name__} must implement weight_posterior(episode)")

    def latent(self, episode: Episode) -> tuple[Tensor, Tensor]:
        q = self.weight_posterior(episode)
        return linear_gaussian_marginals(self.features(episode.query_x), q, episode.way)

    def weight_rule(self, q: Gaussian, episode: Episode, *, salt: int, samples: int) -> Rule:
        """The estimator's points for draws of all of ``q``'s noise, seeded by the episode; for a
        control variate (whose size grows with the dimension) its plain draws, equally weighted."""
        n = q.noise_dim * (q.batch_shape.numel() if q.batch_shape else 1)
        estimator = self.estimator(samples=samples)
        seed = draw_seed(episode, salt)
        if estimator.fits_integrand:
            return Rule(standard_normal_draws(estimator.samples, n, method=estimator.draws,
                                              seed=seed, device=q.mean.device))
        return estimator.rule(n, seed=seed, device=q.mean.device)

    def weight_probabilities(self, phi: Tensor, q: Gaussian, episode: Episode, *, salt: int,
                             samples: int) -> Tensor:
        """``E_q[softmax(W phi)]`` ``[Q, C]``: class probabilities averaged over the estimator's
        draws of the weights, or, for a control variate, over the ``C``-dimensional class latents
        ``f = W phi`` (independent Gaussians when ``q`` is diagonal or per class)."""
        if self.estimator(samples=samples).fits_integrand:
            if not (_per_class(q, episode.way) or isinstance(q, DiagonalGaussian)):
                raise HyperParameterError(
                    f"control-variate estimator {self.hparams['estimator']!r}: it integrates the "
                    "class latents, independent only under a diagonal or per-class belief; use "
                    "the diag family or a sampling estimator (sobol, mc)")
            mean, var = linear_gaussian_marginals(phi, q, episode.way)
            return self.probabilities(mean, var, seed=draw_seed(episode, salt), samples=samples)
        rule = self.weight_rule(q, episode, salt=salt, samples=samples)
        W = weight_samples(q, episode.way, rule.points)
        return rule.average(torch.softmax(phi.to(W) @ W.mT, -1), 0)
