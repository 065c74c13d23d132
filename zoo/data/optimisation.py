"""Closed-form optimisation benchmarks and their randomly shifted and scaled families, GMM-NP's
Bayesian-optimisation tasks (Volpp et al. 2023, App. A.4; formulas as in the Virtual Library of
Simulation Experiments, sfu.ca/~ssurjano):

- Forrester et al. (2008): ``f(x) = (6x - 2)^2 sin(12x - 4)`` on ``[0, 1]``, minimum -6.02074 at
  ``x = 0.757249``.
- Branin: ``(x2 - b x1^2 + c x1 - r)^2 + s (1 - t) cos(x1) + s`` with ``b = 5.1/(4 pi^2)``,
  ``c = 5/pi``, ``r = 6``, ``s = 10``, ``t = 1/(8 pi)`` on ``[-5, 10] x [0, 15]``, minimum
  0.397887 at ``(-pi, 12.275)``, ``(pi, 2.275)`` and ``(9.42478, 2.475)``.
- Hartmann-3: ``-sum_i alpha_i exp(-sum_j A_ij (x_j - P_ij)^2)`` on ``[0, 1]^3``, minimum
  -3.86278 at ``(0.114614, 0.555649, 0.852547)``.

A family's task is ``y = s f(u - tau) + noise`` on the unit cube ``u in [0, 1]^d`` (Branin's box
mapped onto it), ``tau ~ U(-0.25, 0.25)^d``, ``s ~ U(0.75, 1.25)``: the paper gives these ranges
for Branin and Hartmann-3 but not the domain they apply to, nor Forrester's ranges; ours apply
them in unit-cube coordinates to all three (so a shift is at most a quarter of the domain).
Noise std 0.25 (Forrester, Branin) and 0.1 (Hartmann-3), as the paper's table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from zoo.data.functions import FunctionFamily, uniform

BRANIN_BOX = ((-5.0, 10.0), (0.0, 15.0))
HARTMANN3_ALPHA = (1.0, 1.2, 3.0, 3.2)
HARTMANN3_A = ((3.0, 10.0, 30.0), (0.1, 10.0, 35.0), (3.0, 10.0, 30.0), (0.1, 10.0, 35.0))
HARTMANN3_P = ((3689, 1170, 2673), (4699, 4387, 7470), (1091, 8732, 5547), (381, 5743, 8828))
MINIMA = {"forrester": -6.020740, "branin": 0.397887, "hartmann3": -3.86278}


def forrester(x: Tensor) -> Tensor:
    """``x [..., 1]`` in ``[0, 1]`` -> ``[...]``."""
    u = x[..., 0]
    return (6 * u - 2).square() * torch.sin(12 * u - 4)


def branin(x: Tensor) -> Tensor:
    """``x [..., 2]`` in Branin's own box -> ``[...]``."""
    x1, x2 = x[..., 0], x[..., 1]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1.square() + c * x1 - 6).square() + 10 * (1 - t) * torch.cos(x1) + 10


def branin_unit(u: Tensor) -> Tensor:
    """Branin on the unit square."""
    low = u.new_tensor([b[0] for b in BRANIN_BOX])
    width = u.new_tensor([b[1] - b[0] for b in BRANIN_BOX])
    return branin(low + width * u)


def hartmann3(x: Tensor) -> Tensor:
    """``x [..., 3]`` in ``[0, 1]^3`` -> ``[...]``."""
    alpha = x.new_tensor(HARTMANN3_ALPHA)
    a = x.new_tensor(HARTMANN3_A)
    p = 1e-4 * x.new_tensor(HARTMANN3_P)
    return -(alpha * torch.exp(-(a * (x[..., None, :] - p).square()).sum(-1))).sum(-1)


@dataclass(frozen=True)
class ShiftedScaled(FunctionFamily):
    """``y = s f(u - tau) + noise``, ``u ~ U[0, 1]^d``, ``tau ~ U(-shift, shift)^d``,
    ``s ~ U(scale)``; :meth:`function` gives a task's noise-free function for regret."""

    base: Callable[[Tensor], Tensor] = field(default=forrester, compare=False, repr=False)
    shift: float = 0.25
    scale: tuple[float, float] = (0.75, 1.25)

    def parameters(self, g: torch.Generator) -> dict[str, float]:
        tau = [uniform(g, -self.shift, self.shift) for _ in range(self.x_dim)]
        return {"scale": uniform(g, *self.scale)} | {f"shift{i}": t for i, t in enumerate(tau)}

    def function(self, params: dict[str, float]) -> Callable[[Tensor], Tensor]:
        """The noise-free task function ``u [..., d] -> [...]`` of ``params`` (from a draw)."""
        tau = torch.tensor([params[f"shift{i}"] for i in range(self.x_dim)], dtype=torch.float64)
        return lambda u: params["scale"] * self.base(u.double() - tau)

    def draw(self, g: torch.Generator, n: int, split: str = "train"
             ) -> tuple[Tensor, Tensor, dict[str, float]]:
        params = self.parameters(g)
        x = torch.rand((n, self.x_dim), generator=g, dtype=torch.float64)
        y = self.function(params)(x)[:, None]
        y = y + self.noise * torch.randn((n, 1), generator=g, dtype=torch.float64)
        return x.float(), y.float(), params


def load_forrester(data_dir=None, download: bool = True, noise: float = 0.25) -> ShiftedScaled:
    """Shifted and scaled Forrester functions on [0, 1], noise 0.25."""
    return ShiftedScaled("forrester", 1, 1, float(noise), base=forrester)


def load_branin(data_dir=None, download: bool = True, noise: float = 0.25) -> ShiftedScaled:
    """Shifted and scaled Branin functions on the unit square, noise 0.25."""
    return ShiftedScaled("branin", 2, 1, float(noise), base=branin_unit)


def load_hartmann3(data_dir=None, download: bool = True, noise: float = 0.1) -> ShiftedScaled:
    """Shifted and scaled Hartmann-3 functions on the unit cube, noise 0.1."""
    return ShiftedScaled("hartmann3", 3, 1, float(noise), base=hartmann3)
