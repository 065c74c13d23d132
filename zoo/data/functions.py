"""Function families for regression tasks, generated (no download): a task is one function drawn
from the family, observed at random inputs with Gaussian noise.

- ``sinusoid``: ``y = A sin(x - phi) + eps``, ``A ~ U(0.1, 5)``, ``phi ~ U(0, pi)``,
  ``x ~ U(-5, 5)``, noise std 0.25 (Volpp et al. 2023, GMM-NP, App. A.4, Table "Sinusoid"; the
  authors' code uses ``sin(x + phi)``: ``sign=1`` gives that variant).
- ``affine-sinusoid``: with probability 1/2 a line ``a x + b``, ``a, b ~ U(-3, 3)``, otherwise a
  ``sinusoid`` as above; ``x ~ U(-5, 5)``, noise std 0.25 (GMM-NP, App. A.4, "Affine+Sinusoid").
- ``gp-rbf``: samples of a zero-mean GP with an RBF kernel, lengthscale ``~ U(0.5, 1)``, signal
  variance ``~ U(0.5, 1)``, ``x ~ U(-2, 2)``, noise std 0.1 (GMM-NP's RBF-GP family).

The shifted and scaled optimisation benchmarks (Forrester, Branin, Hartmann-3) are in
:mod:`zoo.data.optimisation`, image completion in :mod:`zoo.data.completion`.

A family draws a whole task from a ``torch.Generator`` the sampler seeds, so a task is a pure
function of its coordinates (see :mod:`zoo.tasks.regression`); ``split`` matters only to families
whose functions are a finite set split into disjoint parts (images).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from zoo.errors import ZooError


@dataclass(frozen=True)
class FunctionFamily(ABC):
    """Functions ``R^x_dim -> R^y_dim`` drawn at random; each split is an independent stream of
    draws (the sampler salts its seed with the split name)."""

    name: str
    x_dim: int
    y_dim: int
    noise: float
    device: torch.device = torch.device("cpu")

    splits = {"train": (0,), "val": (0,), "test": (0,)}

    def to(self, device: torch.device | str) -> FunctionFamily:
        return replace(self, device=torch.device(device))

    def fixed_episodes(self, split: str) -> None:
        return None

    @abstractmethod
    def draw(self, g: torch.Generator, n: int, split: str = "train"
             ) -> tuple[Tensor, Tensor, dict[str, float]]:
        """One function observed at ``n`` inputs: ``x [n, x_dim]``, noisy ``y [n, y_dim]``
        (float32, on the CPU) and the function's parameters."""


def uniform(g: torch.Generator, low: float, high: float) -> float:
    return float(low + (high - low) * torch.rand((), generator=g, dtype=torch.float64))


@dataclass(frozen=True)
class Sinusoid(FunctionFamily):
    sign: int = -1

    def draw(self, g: torch.Generator, n: int, split: str = "train"
             ) -> tuple[Tensor, Tensor, dict[str, float]]:
        amplitude = float(0.1 + 4.9 * torch.rand((), generator=g, dtype=torch.float64))
        phase = float(math.pi * torch.rand((), generator=g, dtype=torch.float64))
        x = -5 + 10 * torch.rand((n, 1), generator=g, dtype=torch.float64)
        y = amplitude * torch.sin(x + self.sign * phase)
        y = y + self.noise * torch.randn((n, 1), generator=g, dtype=torch.float64)
        return x.float(), y.float(), {"amplitude": amplitude, "phase": phase}


@dataclass(frozen=True)
class AffineSinusoid(Sinusoid):
    """A line or a sinusoid, each with probability 1/2 (``params["affine"]`` says which)."""

    def draw(self, g: torch.Generator, n: int, split: str = "train"
             ) -> tuple[Tensor, Tensor, dict[str, float]]:
        if float(torch.rand((), generator=g, dtype=torch.float64)) >= 0.5:
            x, y, params = super().draw(g, n, split)
            return x, y, params | {"affine": 0.0}
        slope, intercept = uniform(g, -3, 3), uniform(g, -3, 3)
        x = -5 + 10 * torch.rand((n, 1), generator=g, dtype=torch.float64)
        y = slope * x + intercept + self.noise * torch.randn((n, 1), generator=g,
                                                            dtype=torch.float64)
        return x.float(), y.float(), {"affine": 1.0, "slope": slope, "intercept": intercept}


@dataclass(frozen=True)
class GPSamples(FunctionFamily):
    def draw(self, g: torch.Generator, n: int, split: str = "train"
             ) -> tuple[Tensor, Tensor, dict[str, float]]:
        lengthscale = float(0.5 + 0.5 * torch.rand((), generator=g, dtype=torch.float64))
        variance = float(0.5 + 0.5 * torch.rand((), generator=g, dtype=torch.float64))
        x = -2 + 4 * torch.rand((n, 1), generator=g, dtype=torch.float64)
        cov = variance * torch.exp(-0.5 * torch.cdist(x, x).square() / lengthscale**2)
        cov = cov + self.noise**2 * torch.eye(n, dtype=torch.float64)
        y = torch.linalg.cholesky(cov) @ torch.randn((n, 1), generator=g, dtype=torch.float64)
        return x.float(), y.float(), {"lengthscale": lengthscale, "variance": variance}


def load_sinusoid(data_dir=None, download: bool = True, sign: int = -1,
                  noise: float = 0.25) -> Sinusoid:
    """Sinusoids A sin(x - phi) on [-5, 5], noise 0.25 (GMM-NP); sign=1: the authors' code."""
    if sign not in (-1, 1):
        raise ZooError(f"sinusoid[sign={sign}]: sign must be -1 (the paper) or 1 (the code)")
    return Sinusoid("sinusoid", 1, 1, float(noise), sign=int(sign))


def load_affine_sinusoid(data_dir=None, download: bool = True, sign: int = -1,
                         noise: float = 0.25) -> AffineSinusoid:
    """Lines a x + b (a, b ~ U(-3, 3)) or sinusoids, 1/2 each, on [-5, 5], noise 0.25 (GMM-NP)."""
    if sign not in (-1, 1):
        raise ZooError(f"affine-sinusoid[sign={sign}]: sign must be -1 (the paper) or 1 (the code)")
    return AffineSinusoid("affine-sinusoid", 1, 1, float(noise), sign=int(sign))


def load_gp_rbf(data_dir=None, download: bool = True, noise: float = 0.1) -> GPSamples:
    """GP samples, RBF kernel, lengthscale ~ U(0.5, 1), variance ~ U(0.5, 1) on [-2, 2] (GMM-NP)."""
    return GPSamples("gp-rbf", 1, 1, float(noise))
