"""Method families: the shared base of each family of methods, in the core so that plugins of one
family do not depend on each other.

- :mod:`zoo.families.inner_loop`: methods that adapt to the support with an inner loop of gradient
  steps (MAML and its variants, ABML, Bayesian MAML), with the published inner-loop settings.
- :mod:`zoo.families.gp`: GP classifiers (backbone -> kernel -> inference -> predictive).
"""
