"""Polya-Gamma variables ``PG(b, c)``: exact moments and two samplers.

Polya-Gamma augmentation (Polson, Scott & Windle, JASA 2013) turns logistic terms into Gaussian
sites: ``sigmoid(psi)^a sigmoid(-psi)^(b-a) = 2^-b exp(kappa psi) E_{w ~ PG(b, 0)}[exp(-w psi^2/2)]``
with ``kappa = a - b/2``, so ``psi | w`` has site precision ``w`` and ``w | psi ~ PG(b, psi)``.
The OVE and logistic-softmax GP plugins both sample ``w``:

* :func:`sample_polyagamma_numpy`: the maintained ``polyagamma`` package on the CPU, always with
  its exact ``devroye`` method, so integer ``b`` only (all the zoo needs: ``b = 1`` for OVE,
  ``b = y + n`` for logistic-softmax). Measured with 1e6 draws, the package's default choice for
  non-integer ``b`` near ``c = 0`` (``alternate``) has a variance about 20 standard errors too
  large, and its ``gamma`` method (truncated series, no remainder) a mean too small at large ``|c|``.
  Its ``devroye`` draws are also wrong for ``|c|`` above ``2 ln(float32 max) = 177.4457`` (the
  jump lies within one float32 spacing of ``|c|/2`` from it; mean ``0.160 b`` whatever ``c``,
  against ``b tanh(c/2)/(2c) < 0.0029 b``, and about 4% of the variance; right to Monte Carlo
  error up to ``|c| = 177.445671``: ``benchmarks/polyagamma/package_large_c.py``): entries with
  ``|c| > PACKAGE_MAX_C`` are drawn by the torch sampler instead.
* :func:`sample_polyagamma_torch`: a batched torch sampler that runs wherever its inputs live
  (GPU included, no host round-trip). It uses the series representation
  ``w = 1/(2 pi^2) sum_k g_k / ((k - 1/2)^2 + c^2/(4 pi^2))``, ``g_k ~ Gamma(b, 1)``: the first
  ``terms`` summands exactly, and the remainder replaced by one Gamma variable whose mean and
  variance equal the remainder's, both known in closed form. The first two moments of the draw are
  therefore exact for any number of terms; the remainder is a small fraction of the variance
  (below 1e-5 of it for 32 terms at c = 0, less for larger ``|c|``).

:func:`sample_polyagamma` picks the package on the CPU when ``b`` is integer, the torch sampler
otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from zoo.gp import DTYPE, SitePosterior

_SMALL = 0.1  # below this |c|/2 the closed forms are replaced by their Taylor series
PACKAGE_MAX_C = 100.0  # polyagamma 2.0.2 is measured right up to |c| = 177.4456, wrong above


def _h(x: Tensor) -> Tensor:
    """``tanh(x) - x sech^2(x)`` for ``x >= 0`` without overflow (cancels near 0: see below)."""
    e = torch.exp(-2 * x)
    sech2 = 4 * e / (1 + e) ** 2
    return torch.tanh(x) - x * sech2


def _tanh_over_x(x: Tensor) -> Tensor:
    x2 = x * x
    series = 1 + x2 * (-1 / 3 + x2 * (2 / 15 - x2 * 17 / 315))
    return torch.where(x < _SMALL, series, torch.tanh(x) / x.clamp_min(_SMALL))


def polyagamma_mean(b: Tensor | float, c: Tensor | float) -> Tensor:
    """``E[w] = b tanh(c/2) / (2c)`` for ``w ~ PG(b, c)``; ``b/4`` at ``c = 0``."""
    x = torch.as_tensor(c, dtype=DTYPE).abs() / 2
    return torch.as_tensor(b, dtype=DTYPE) * _tanh_over_x(x) / 4


def _h_over_x3(x: Tensor) -> Tensor:
    """``(tanh x - x sech^2 x) / x^3``: 2/3 at 0."""
    x2 = x * x
    series = 2 / 3 + x2 * (-8 / 15 + x2 * (34 / 105 - x2 * 496 / 2835))
    return torch.where(x < _SMALL, series, _h(x) / x.clamp_min(_SMALL) ** 3)


def augmented_log_marginal(post: SitePosterior, b: Tensor | float, kappa: Tensor) -> Tensor:
    """``log p(y | w)`` of a Polya-Gamma augmented GP: ``log int N(f | 0, K) prod_n 2^-b_n
    exp(kappa_n f_n - w_n f_n^2 / 2) df = -log 2 sum b + (kappa . m - log|B|) / 2``, where ``post``
    is the :class:`~zoo.gp.SitePosterior` with sites ``(lam, nu) = (w, kappa)`` and ``m`` its mean.
    Summed over the last axis; the marginal-likelihood objective of Snell & Zemel (2021)."""
    kappa = kappa.to(DTYPE)
    b = torch.as_tensor(b, dtype=DTYPE, device=kappa.device).expand_as(kappa)
    return (-math.log(2) * b.sum(-1) + 0.5 * (kappa * post.mean).sum(-1) - 0.5 * post.logdet_B)


def device_generator(generator: torch.Generator, device: torch.device) -> torch.Generator:
    """A generator on ``device`` seeded from ``generator`` (itself when the devices match), so
    that draws on an accelerator stay a function of the episode's CPU generator."""
    if generator.device == device:
        return generator
    seed = int(torch.randint(2**62, (1,), generator=generator))
    return torch.Generator(device=device).manual_seed(seed)


def sample_polyagamma_torch(b: Tensor, c: Tensor, generator: torch.Generator,
                            terms: int = 32) -> Tensor:
    """Batched ``PG(b, c)`` draws on ``c``'s device, float64, shape ``broadcast(b, c)``.

    ``b >= 0`` (``PG(0, c)`` is the point mass at 0). See the module docstring for the method."""
    c = torch.as_tensor(c, dtype=DTYPE)
    b = torch.as_tensor(b, dtype=DTYPE, device=c.device)
    b, c = torch.broadcast_tensors(b, c)
    gen = device_generator(generator, c.device)
    x = c.abs() / 2
    k = torch.arange(1, terms + 1, dtype=DTYPE, device=c.device) - 0.5
    d = k**2 + (x / math.pi)[..., None] ** 2  # [..., terms]
    g = torch._standard_gamma(b[..., None].expand(d.shape).contiguous(), generator=gen)
    head = (g / d).sum(-1)
    # Exact sums over all k of 1/d_k and 1/d_k^2 (in units of pi^2 and pi^4), minus the head.
    total1 = math.pi**2 * _tanh_over_x(x) / 2
    total2 = math.pi**4 * _h_over_x3(x) / 4
    tail1 = (total1 - d.reciprocal().sum(-1)).clamp_min(1e-300)
    tail2 = (total2 - d.pow(-2).sum(-1)).clamp_min(1e-300)
    shape = b * tail1**2 / tail2
    tail = torch._standard_gamma(shape, generator=gen) * tail2 / tail1
    w = (head + tail) / (2 * math.pi**2)
    return torch.where(b > 0, w, torch.zeros_like(w))


def sample_polyagamma_numpy(b: Tensor, c: Tensor, generator: torch.Generator) -> Tensor:
    """``PG(b, c)`` draws from the ``polyagamma`` package's exact Devroye-type sampler (CPU),
    seeded from ``generator``; ``b`` must be a non-negative integer. Entries with
    ``|c| > PACKAGE_MAX_C`` come from :func:`sample_polyagamma_torch` (see the module docstring)."""
    from polyagamma import random_polyagamma

    c = torch.as_tensor(c, dtype=DTYPE)
    b = torch.as_tensor(b, dtype=DTYPE, device=c.device)
    b, c = torch.broadcast_tensors(b, c)
    device = c.device
    if not _integral(b):
        raise ValueError("the polyagamma package's exact sampler needs integer b >= 0; use "
                         "method='torch' for other b")
    rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
    b, c = b.cpu(), c.cpu()
    package = (b > 0) & (c.abs() <= PACKAGE_MAX_C)
    out = torch.zeros(b.shape, dtype=DTYPE)
    if package.any():
        draws = random_polyagamma(b[package].numpy(), c[package].numpy(), random_state=rng,
                                  method="devroye")
        out[package] = torch.from_numpy(np.asarray(draws, dtype=np.float64))
    large = c.abs() > PACKAGE_MAX_C
    if large.any():
        out[large] = sample_polyagamma_torch(b[large], c[large], generator)
    return out.to(device)


def _integral(b: Tensor) -> bool:
    return bool(((b >= 0) & (b == b.round())).all())


def sample_polyagamma(b: Tensor | float, c: Tensor, generator: torch.Generator,
                      method: str = "auto") -> Tensor:
    """``PG(b, c)`` draws: ``"numpy"`` (the ``polyagamma`` package), ``"torch"`` (batched series
    sampler), or ``"auto"``: the package for CPU tensors with integer ``b``, else the torch sampler
    (on an accelerator: no host round-trip)."""
    c = c.detach()
    b = torch.as_tensor(b, dtype=DTYPE, device=c.device)
    if method == "auto":
        method = "numpy" if c.device.type == "cpu" and _integral(b) else "torch"
    if method == "numpy":
        return sample_polyagamma_numpy(b, c, generator)
    if method == "torch":
        return sample_polyagamma_torch(b, c, generator)
    raise ValueError(f"unknown Polya-Gamma sampler {method!r}; use 'auto', 'numpy' or 'torch'")
