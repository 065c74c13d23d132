"""The bootstrap of BNP and BANP (Lee et al., NeurIPS 2020, "Bootstrapping Neural Processes",
Sec. 3): stochasticity from resampling the context instead of a latent variable.

For each of ``K`` bootstrap draws:

1. paired bootstrap: resample the context ``(x_i, y_i)`` with replacement;
2. predict the context's own points from that resample with the base model (the decoder given
   the resample's encoding twice: as context and as bootstrap context): ``mu_i, sigma_i``;
3. residual bootstrap: standardised residuals ``e_i = (y_i - mu_i) / sigma_i``, centred, resampled
   with replacement, ``y^_i = mu_i + sigma_i e^_i``: a new context at the original inputs;
4. the decoder takes the original context's encoding and the new context's encoding.

The indices come from a caller's generator, so a prediction seeded by its episode is
reproducible; the resampled targets are data (no gradient flows through them).
"""

from __future__ import annotations

import torch
from torch import Tensor


def resample_indices(points: int, draws: int, generator: torch.Generator | None = None,
                     device: torch.device | str = "cpu") -> Tensor:
    """``[draws, points]`` indices drawn uniformly with replacement."""
    return torch.randint(0, points, (draws, points), generator=generator).to(device)


def residual_bootstrap(y: Tensor, mean: Tensor, var: Tensor, index: Tensor) -> Tensor:
    """``y^ = mean + std * e[index]`` with ``e`` the centred standardised residuals of ``y
    [K, n, d]`` under ``N(mean, var)``; ``index [K, n]`` picks the residual of every point."""
    std = var.sqrt()
    e = (y - mean) / std
    e = e - e.mean(-2, keepdim=True)
    picked = torch.gather(e, -2, index[..., None].expand(-1, -1, e.shape[-1]))
    return (mean + std * picked).detach()
