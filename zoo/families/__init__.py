"""Families of methods: bases that several plugins share.

* :mod:`zoo.families.latent_gaussian`: features -> Gaussian latent marginals per query and class ->
  probabilities through an expectation estimator; its members:
  * :mod:`zoo.families.gp`: function-space GP classifiers (``GPMethod``);
  * :mod:`zoo.families.last_layer`: Gaussian distributions over a linear head's weights.
"""
