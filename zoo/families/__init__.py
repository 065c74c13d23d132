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
"""
