"""The four update rules over one observation and the combinations that are tractable.

Jones et al. (2024, Table 2): BONG (one natural-gradient step of the expected
log-likelihood, learning rate 1, no KL), BOG (one plain-gradient step, rate ``alpha``), BLR
(``iterations`` natural-gradient steps of the online VI loss, rate ``alpha``) and BBB (the same
with plain gradients). Every BLR/BBB iteration re-estimates ``(g, G)`` under its current iterate
(re-linearising LIN curvatures at its mean); the KL is to the predicted belief.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from zoo_bong.beliefs import Belief, BeliefError
from zoo_bong.curvature import CURVATURES, Curvature

RULES = ("bong", "bog", "blr", "bbb")

#: Curvatures each family accepts: a Hutchinson diagonal has no low-rank factor, and a full
#: ``P x P`` Hessian per sample is what the paper calls intractable (notes §2.2-2.3).
TRACTABLE: dict[str, tuple[str, ...]] = {
    "fc": ("mc-ef", "lin-hess", "lin-ef"),
    "fc-mom": ("mc-ef", "lin-hess", "lin-ef"),
    "dg": CURVATURES,
    "dg-mom": CURVATURES,
    "dlr": ("mc-ef", "lin-hess", "lin-ef"),
}


def check_combination(rule: str, curvature: str, family: str, iterations: int) -> None:
    """Raise ``ValueError`` naming what is accepted if the combination is not."""
    if curvature not in TRACTABLE[family]:
        raise ValueError(
            f"curvature {curvature!r} with family {family!r} is not tractable (a full Hessian per "
            "sample is O(P^2); a Hutchinson diagonal has no low-rank factor); accepted: "
            + "; ".join(f"{f}: {', '.join(c)}" for f, c in TRACTABLE.items()))
    if rule in ("bong", "bog") and iterations != 1:
        raise ValueError(f"rule {rule!r} takes exactly one step per observation; iterations = "
                         f"{iterations} applies only to the iterated rules blr and bbb")


def update(belief: Belief, estimate: Callable[[Belief], Curvature], rule: str, alpha: float,
           iterations: int = 1) -> Belief:
    """The belief after one observation, from the predicted ``belief``; ``estimate(q)`` gives
    ``(g, G)`` under ``q``. BONG's step has learning rate 1 whatever ``alpha`` is."""
    estimate = _checked(estimate, rule)
    if rule == "bong":
        return _finite(belief.natural_step(estimate(belief), 1.0), rule)
    if rule == "bog":
        return _finite(belief.gradient_step(estimate(belief), alpha), rule)
    step = {"blr": type(belief).natural_step, "bbb": type(belief).gradient_step}[rule]
    current = belief
    for _ in range(iterations):
        current = _finite(step(current, estimate(current), alpha, belief), rule)
    return current


def _checked(estimate: Callable[[Belief], Curvature], rule: str
             ) -> Callable[[Belief], Curvature]:
    """``estimate`` that raises :class:`BeliefError` when the gradient is not finite (a mean that
    an earlier step sent far away overflows the network's logits)."""
    def checked(q: Belief) -> Curvature:
        curv = estimate(q)
        if not _all_finite(curv.g):
            raise BeliefError(f"rule {rule!r} on the {q.family} belief diverged (the gradient at "
                              "the current mean is not finite); lower prior_var or alpha")
        return curv
    return checked


def _all_finite(x: Tensor) -> bool:
    if torch.compiler.is_compiling():  # a compiled update checks its result (Belief.valid): a
        return True  # non-finite gradient or mean makes the next mean non-finite
    lo, hi = torch.aminmax(x.detach())  # one pass; NaN propagates to both
    return math.isfinite(float(lo)) and math.isfinite(float(hi))


def _finite(belief: Belief, rule: str) -> Belief:
    if not _all_finite(belief.mu):
        raise BeliefError(f"rule {rule!r} on the {belief.family} belief diverged (the mean is no "
                          "longer finite); lower alpha or the prior variance")
    return belief
