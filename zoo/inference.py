"""The algebra of latent Gaussian models that the GP and last-layer families share, as one entry
point (its homes are internal modules):

- site posteriors ``q(f)`` proportional to ``N(f | 0, K)`` times Gaussian sites, in float64
  (:data:`DTYPE`), that never invert ``K`` (:class:`SitePosterior`, on a feature factor
  :class:`FeatureSitePosterior`), prior draws and the exact Gaussian log marginal likelihood;
- kernel matrices dense or by a finite feature factor ``K = L R^T`` (:data:`Gram`,
  :class:`FeatureGram`), the choice of route and the packed symmetric storage;
- the explicit, counted jitter policy of Cholesky factorisations (:class:`JitterPolicy`);
- Polya-Gamma augmentation: the augmented log marginal, the exact mean and a sampler;
- variational expectations of factorised likelihoods under per-point Gaussian marginals, the
  softmax likelihood, free-form posteriors and the ELBO;
- standard-normal draws of the expectation rules;
- Adam steps written out so that an inner loop of them stays differentiable (:class:`UnrolledAdam`).
"""

from zoo.expectations import standard_normal_draws
from zoo.gp import DTYPE, FeatureSitePosterior, SitePosterior, gaussian_log_marginal, prior_draws, shared
from zoo.gram import FeatureGram, Gram, choose_route, dense, pack_symmetric, packed_outer, unpack_symmetric
from zoo.jitter import DEFAULT_JITTER, JitterPolicy
from zoo.polyagamma import augmented_log_marginal, polyagamma_mean, sample_polyagamma
from zoo.unrolled import UnrolledAdam
from zoo.variational import (
    Expectations,
    FullGaussianPosterior,
    Likelihood,
    Posterior,
    SoftmaxLikelihood,
    SoftmaxMean,
    WhitenedPosterior,
    covariance_factor,
    elbo,
    mean_parameter_gradient,
)

__all__ = [
    # site posteriors
    "DTYPE", "FeatureSitePosterior", "SitePosterior", "gaussian_log_marginal", "prior_draws",
    "shared",
    # kernel matrices
    "FeatureGram", "Gram", "choose_route", "dense", "pack_symmetric", "packed_outer",
    "unpack_symmetric",
    # jitter
    "DEFAULT_JITTER", "JitterPolicy",
    # Polya-Gamma augmentation
    "augmented_log_marginal", "polyagamma_mean", "sample_polyagamma",
    # variational
    "Expectations", "FullGaussianPosterior", "Likelihood", "Posterior", "SoftmaxLikelihood",
    "SoftmaxMean", "WhitenedPosterior", "covariance_factor", "elbo", "mean_parameter_gradient",
    # expectation rules
    "standard_normal_draws",
    # unrolled inner loops
    "UnrolledAdam",
]
