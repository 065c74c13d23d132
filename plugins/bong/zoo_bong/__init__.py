"""The Bayesian online natural-gradient family (Jones, Chang & Murphy, NeurIPS 2024) as a zoo
plugin: method ``bong`` for the sequential task kind, and ``bong-head``, the same updates as a
few-shot classification head (each support example one observation) over a meta-learned backbone.

Modules: :mod:`~zoo_bong.likelihoods` (log p, score and Fisher root in the network output),
:mod:`~zoo_bong.curvature` (the four ``(g, G)`` estimators), :mod:`~zoo_bong.beliefs` (five
Gaussian families and their natural- and plain-gradient steps), :mod:`~zoo_bong.rules` (BONG, BOG,
BLR, BBB and the tractable combinations), :mod:`~zoo_bong.networks`, :mod:`~zoo_bong.method`,
:mod:`~zoo_bong.head`.
"""

from __future__ import annotations

import zoo
from zoo_bong.head import BongHead
from zoo_bong.method import Bong


@zoo.hookimpl
def zoo_register_methods(register):
    register(Bong)
    register(BongHead)
