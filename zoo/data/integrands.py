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
  need a boundary factor such as ``prod_j x_j (1 - x_j)``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from zoo.errors import ZooError


@dataclass(frozen=True)
class Draw:
    """One integrand observed at ``n`` samples: ``x [n, d]``, ``fx [n]``, ``score [n, d]``, its
    integral ``truth`` and its parameters."""

    x: Tensor
    fx: Tensor
    score: Tensor
    truth: float
    params: dict


@dataclass(frozen=True)
class IntegrandFamily(ABC):
    name: str
    dim: int
    device: torch.device = torch.device("cpu")

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
