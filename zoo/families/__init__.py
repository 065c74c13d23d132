"""Families of methods: the shared base of each family, in the core so that plugins of one family
do not depend on each other.

- :mod:`zoo.families.inner_loop`: methods that adapt to the support with an inner loop of gradient
  steps (MAML and its variants, ABML, Bayesian MAML), with the published inner-loop settings.
- :mod:`zoo.families.latent_gaussian`: features -> Gaussian latent marginals per query and class ->
  probabilities through an expectation estimator; its members:

  - :mod:`zoo.families.gp`: function-space GP classifiers (``GPMethod``);
  - :mod:`zoo.families.last_layer`: Gaussian distributions over a linear head's weights (beliefs
    from :mod:`zoo.gaussians`).
- :mod:`zoo.families.pretrained`: pre-training a backbone from episodes as a classifier over the
  training classes (the class table of Feature Transfer, Baseline++ and the Bayesian last layer's
  pre-trained variant).

Plugins import the bases from here (the modules above are their homes).
"""

from zoo.families.gp import GPMethod
from zoo.families.inner_loop import (
    DIVERGED,
    LEARN2LEARN_INSTALL,
    InnerLoopMethod,
    learn2learn_algorithms,
    published_with_steps,
    require_learn2learn,
)
from zoo.families.last_layer import LastLayerMethod, linear_gaussian_marginals, weight_samples
from zoo.families.latent_gaussian import LatentGaussianMethod
from zoo.families.pretrained import ClassTable

__all__ = ["DIVERGED", "LEARN2LEARN_INSTALL", "ClassTable", "GPMethod", "InnerLoopMethod",
           "LastLayerMethod", "LatentGaussianMethod", "learn2learn_algorithms",
           "linear_gaussian_marginals", "published_with_steps", "require_learn2learn",
           "weight_samples"]
