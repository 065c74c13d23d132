"""The networks of a neural process: per-point MLP encoders, optional self-attention over the
context, the deterministic path (mean aggregation, or cross-attention from the targets to the
context as in ANP, Kim et al. 2019, eq. 3) and the decoder's Gaussian head.

All work on batches ``[B, n, .]`` of sets; an empty context (``n = 0``) encodes to zeros.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo_neural_processes.aggregation import mean_aggregate


def mlp(inputs: int, hidden: int, outputs: int, layers: int = 2) -> nn.Sequential:
    """``layers`` hidden ReLU layers of width ``hidden``, then a linear output."""
    blocks: list[nn.Module] = []
    width = inputs
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*blocks, nn.Linear(width, outputs))


class SetEncoder(nn.Module):
    """``(x, y) [B, n, dx + dy]`` -> per-point ``s [B, n, h]``: an MLP, then (optionally) one
    residual multi-head self-attention layer over the set (ANP's latent and deterministic
    encoders)."""

    def __init__(self, inputs: int, hidden: int, self_attention: bool, heads: int):
        super().__init__()
        self.net = mlp(inputs, hidden, hidden)
        self.attention = nn.MultiheadAttention(hidden, heads, batch_first=True) \
            if self_attention else None

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        s = self.net(torch.cat([x, y], -1))
        if self.attention is not None and s.shape[-2] > 0:
            s = s + self.attention(s, s, s, need_weights=False)[0]
        return s


class DeterministicPath(nn.Module):
    """``r*(x_t) [B, N, h]`` from the context: its mean encoding at every target, or
    cross-attention with queries and keys ``embed(x)`` and values the context's encodings."""

    def __init__(self, x_dim: int, y_dim: int, hidden: int, attention: bool,
                 self_attention: bool, heads: int):
        super().__init__()
        self.hidden = hidden
        self.encoder = SetEncoder(x_dim + y_dim, hidden, self_attention, heads)
        self.embed = mlp(x_dim, hidden, hidden, layers=1) if attention else None
        self.cross = nn.MultiheadAttention(hidden, heads, batch_first=True) if attention else None

    def forward(self, xc: Tensor, yc: Tensor, xt: Tensor) -> Tensor:
        batch, targets = max(xc.shape[0], xt.shape[0]), xt.shape[-2]
        if xc.shape[-2] == 0:
            return xt.new_zeros(batch, targets, self.hidden)
        values = self.encoder(xc, yc)
        if self.cross is None:
            return mean_aggregate(values)[:, None].expand(-1, targets, -1)
        queries = self.embed(xt).expand(batch, -1, -1)
        keys = self.embed(xc).expand(batch, -1, -1)
        return self.cross(queries, keys, values.expand(batch, -1, -1), need_weights=False)[0]


class GaussianDecoder(nn.Module):
    """``[x, r*(x), z, ...] -> (mean, var)`` per target with ``std = min_std + softplus(raw)``
    (GMM-NP A.3.1: every model's observation std is bounded below by a softplus)."""

    def __init__(self, inputs: int, hidden: int, y_dim: int, min_std: float):
        super().__init__()
        self.net = mlp(inputs, hidden, 2 * y_dim, layers=3)
        self.min_std = min_std

    def forward(self, *parts: Tensor) -> tuple[Tensor, Tensor]:
        batch = max(p.shape[0] for p in parts)
        h = torch.cat([p.expand(batch, *p.shape[1:]) for p in parts], -1)
        mean, raw = self.net(h).chunk(2, -1)
        return mean, (self.min_std + F.softplus(raw)).square()
