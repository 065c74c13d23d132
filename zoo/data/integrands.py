"""Integrand families for integration tasks, generated, each with its integral in closed form.

A task is one integrand ``f`` and a distribution ``pi``; a method sees ``n`` samples
``x ~ pi``, the values ``f(x)`` and the score ``grad log pi(x)`` (what Stein control variates
need), and estimates ``E_pi[f]``.

- ``gaussian-cosine``: ``f(x) = cos(a . x + b)`` under ``pi = N(0, I_d)``, ``a ~ U(-1, 1)^d``,
  ``b ~ U(0, 2 pi)``; ``E[f] = cos(b) exp(-|a|^2 / 2)`` (the characteristic function of a
  Gaussian). Score ``-x``.
- ``genz-oscillatory``: ``f(x) = cos(2 pi a_1 + sum_i a_{i+1} x_i)`` under ``U[0, 1]^d``,
  ``a_1 ~ U(0.4, 0.6)``, ``a_{2..d+1} ~ U(4, 6)`` (Sun et al., meta-learning control variates,
  the oscillatory family; Genz 1984); ``E[f] = Re[exp(i 2 pi a_1) prod_j (exp(i a_{j+1}) - 1) /
  (i a_{j+1})]``. The score of the uniform is zero inside the cube: Stein control variates there
  need a boundary factor such as ``prod_j x_j (1 - x_j)`` (``support = "unit-cube"``).

The families of the vector-valued CV experiments (Sun 2023, §4.3) come with *related* integrals:
draws of other integrands, each under its own distribution with its own samples, that a
vector-valued CV may use and every other method ignores; the task's truth is the first integral's.

- ``south``: ``f2 = 1 + x + x^2 + sin(pi x) exp(-x^2)`` under ``N(0, sigma2)`` (truth
  ``1 + sigma2``), related ``f1 = 1.5 + x + 1.5 x^2 + 1.75 sin(pi x) exp(-x^2)`` under ``N(0, 1)``
  (truth 3): the odd terms integrate to zero (South et al. 2022).
- ``step``: the high-fidelity ``1[x >= 0]`` under ``N(0, 1)`` (truth 0.5), related the
  low-fidelity ``2 if x >= 0 else -1`` (truth 0.5).
- ``borehole``: the 8-dimensional Borehole water-flow function (high fidelity, ``2 pi``, ``1``),
  related its low-fidelity version (``5``, ``1.5``) under independent Gaussians (Table A.1), the
  second parameter read as a variance: truth 72.878604 (72.8904 by 5e5 Monte Carlo samples in the
  thesis, whose standard error, ~0.033, covers both readings; the standard-deviation reading gives
  72.881927), computed by adaptive quadrature in ``r_w`` and 7-point Gauss-Hermite in the others
  (``tests/control_variates/test_integrands.py``).
- ``bvp``: ``(c(s) u')' = -50 x^2`` on ``(0, 1)``, ``u(0) = u(1) = 0``, ``c(s) = 1 + a s``,
  ``a ~ U(0, 1)``, ``x ~ N(0, 1)``; ``f = int_0^1 u ds = 50 x^2 W(a)`` with
  ``W(a) = ((1 + a) / a - 1 / log(1 + a) - 1/2) / a`` (notes §B.3, checked against finite
  differences), truth ``50 W(a)``: quadratic in ``x``, so a degree-1 polynomial Stein CV is exact
  (an exactness check, not a showcase).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import ClassVar

import torch
from torch import Tensor

from zoo.errors import ZooError


@dataclass(frozen=True)
class Draw:
    """One integrand observed at ``n`` samples: ``x [n, d]``, ``fx [n]``, ``score [n, d]``, its
    integral ``truth`` and its parameters; ``related``: draws of related integrals (vv-CVs)."""

    x: Tensor
    fx: Tensor
    score: Tensor
    truth: float
    params: dict
    related: tuple[Draw, ...] = ()


@dataclass(frozen=True)
class IntegrandFamily(ABC):
    name: str
    dim: int
    device: torch.device = torch.device("cpu")
    support: ClassVar[str] = "real"

    splits = {"train": (0,), "val": (0,), "test": (0,)}

    def to(self, device: torch.device | str) -> IntegrandFamily:
        return replace(self, device=torch.device(device))

    @abstractmethod
    def draw(self, g: torch.Generator, n: int) -> Draw:
        """An integrand and ``n`` samples of its distribution (float64, on the CPU)."""


@dataclass(frozen=True)
class GaussianCosine(IntegrandFamily):
    def draw(self, g: torch.Generator, n: int) -> Draw:
        a = 2 * torch.rand(self.dim, generator=g, dtype=torch.float64) - 1
        b = float(2 * math.pi * torch.rand((), generator=g, dtype=torch.float64))
        x = torch.randn((n, self.dim), generator=g, dtype=torch.float64)
        truth = math.cos(b) * math.exp(-0.5 * float(a @ a))
        return Draw(x, torch.cos(x @ a + b), -x, truth, {"a": a.tolist(), "b": b})


@dataclass(frozen=True)
class GenzOscillatory(IntegrandFamily):
    support: ClassVar[str] = "unit-cube"

    def draw(self, g: torch.Generator, n: int) -> Draw:
        a1 = float(0.4 + 0.2 * torch.rand((), generator=g, dtype=torch.float64))
        a = 4 + 2 * torch.rand(self.dim, generator=g, dtype=torch.float64)
        x = torch.rand((n, self.dim), generator=g, dtype=torch.float64)
        value = complex(math.cos(2 * math.pi * a1), math.sin(2 * math.pi * a1))
        for aj in a.tolist():
            value *= (complex(math.cos(aj), math.sin(aj)) - 1) / complex(0, aj)
        return Draw(x, torch.cos(2 * math.pi * a1 + x @ a), torch.zeros_like(x), value.real,
                    {"a1": a1, "a": a.tolist()})


def _check_dim(name: str, dim: int) -> int:
    if int(dim) < 1:
        raise ZooError(f"{name}[dim={dim}]: dim must be a positive integer")
    return int(dim)


def load_gaussian_cosine(data_dir=None, download: bool = True, dim: int = 2) -> GaussianCosine:
    """cos(a . x + b) under N(0, I), integral cos(b) exp(-|a|^2 / 2)."""
    return GaussianCosine("gaussian-cosine", _check_dim("gaussian-cosine", dim))


def load_genz_oscillatory(data_dir=None, download: bool = True, dim: int = 2) -> GenzOscillatory:
    """Genz's oscillatory integrand on [0, 1]^d with its closed-form integral."""
    return GenzOscillatory("genz-oscillatory", _check_dim("genz-oscillatory", dim))


def _south_f(x: Tensor, c0: float, c2: float, cs: float) -> Tensor:
    return c0 + x + c2 * x**2 + cs * torch.sin(math.pi * x) * torch.exp(-x**2)


@dataclass(frozen=True)
class South(IntegrandFamily):
    sigma2: float = 1.2

    def draw(self, g: torch.Generator, n: int) -> Draw:
        x2 = math.sqrt(self.sigma2) * torch.randn((n, 1), generator=g, dtype=torch.float64)
        x1 = torch.randn((n, 1), generator=g, dtype=torch.float64)
        f1 = Draw(x1, _south_f(x1, 1.5, 1.5, 1.75)[:, 0], -x1, 3.0, {"integrand": "f1"})
        return Draw(x2, _south_f(x2, 1.0, 1.0, 1.0)[:, 0], -x2 / self.sigma2, 1 + self.sigma2,
                    {"integrand": "f2", "sigma2": self.sigma2}, (f1,))


@dataclass(frozen=True)
class Step(IntegrandFamily):
    def draw(self, g: torch.Generator, n: int) -> Draw:
        xh = torch.randn((n, 1), generator=g, dtype=torch.float64)
        xl = torch.randn((n, 1), generator=g, dtype=torch.float64)
        low = Draw(xl, torch.where(xl[:, 0] >= 0, 2.0, -1.0).double(), -xl, 0.5,
                   {"fidelity": "low"})
        return Draw(xh, (xh[:, 0] >= 0).double(), -xh, 0.5, {"fidelity": "high"}, (low,))


BOREHOLE_MEAN = (0.1, 100.0, 89335.0, 89.55, 1050.0, 760.0, 1400.0, 10950.0)
BOREHOLE_VAR = (0.0161812**2, 0.01, 20.0, 1.0, 1.0, 1.0, 10.0, 30.0)
BOREHOLE_TRUTH = 72.878604042329
BOREHOLE_LOW_TRUTH = 57.994852909848


def borehole(x: Tensor, *, high: bool = True) -> Tensor:
    """The Borehole function of ``x = (r_w, r, T_u, T_l, H_u, H_l, L, K_w) [..., 8]``."""
    rw, r, tu, tl, hu, hl, length, kw = x.unbind(-1)
    lg = torch.log(r / rw)
    c, a = (2 * math.pi, 1.0) if high else (5.0, 1.5)
    return c * tu * (hu - hl) / (lg * (a + 2 * length * tu / (lg * rw**2 * kw) + tu / tl))


@dataclass(frozen=True)
class Borehole(IntegrandFamily):
    def draw(self, g: torch.Generator, n: int) -> Draw:
        mean = torch.tensor(BOREHOLE_MEAN, dtype=torch.float64)
        var = torch.tensor(BOREHOLE_VAR, dtype=torch.float64)

        def sample(high: bool, truth: float) -> Draw:
            x = mean + var.sqrt() * torch.randn((n, 8), generator=g, dtype=torch.float64)
            return Draw(x, borehole(x, high=high), -(x - mean) / var, truth,
                        {"fidelity": "high" if high else "low"})

        high = sample(True, BOREHOLE_TRUTH)
        return replace(high, related=(sample(False, BOREHOLE_LOW_TRUTH),))


def bvp_weight(a: float) -> float:
    """``W(a) = int_0^1 u ds`` for ``(c u')' = -1``, ``c = 1 + a s``, ``u(0) = u(1) = 0``."""
    if a < 1e-4:
        return 1 / 12 - a / 24
    return ((1 + a) / a - 1 / math.log1p(a) - 0.5) / a


@dataclass(frozen=True)
class BoundaryValue(IntegrandFamily):
    def draw(self, g: torch.Generator, n: int) -> Draw:
        a = float(torch.rand((), generator=g, dtype=torch.float64))
        x = torch.randn((n, 1), generator=g, dtype=torch.float64)
        w = bvp_weight(a)
        return Draw(x, 50 * w * x[:, 0] ** 2, -x, 50 * w, {"a": a})


def load_south(data_dir=None, download: bool = True, sigma2: float = 1.2) -> South:
    """South et al.'s pair: f2 under N(0, sigma2) (truth 1 + sigma2) with f1 under N(0, 1)."""
    if not sigma2 > 0:
        raise ZooError(f"south[sigma2={sigma2}]: sigma2 must be positive")
    return South("south", 1, sigma2=float(sigma2))


def load_step(data_dir=None, download: bool = True) -> Step:
    """The multi-fidelity step function under N(0, 1) (truth 0.5)."""
    return Step("step", 1)


def load_borehole(data_dir=None, download: bool = True) -> Borehole:
    """The Borehole function, high fidelity with the low fidelity related (truth 72.8786)."""
    return Borehole("borehole", 8)


def load_bvp(data_dir=None, download: bool = True) -> BoundaryValue:
    """The boundary-value ODE family, 50 x^2 W(a) under N(0, 1) (truth 50 W(a))."""
    return BoundaryValue("bvp", 1)
