"""Networks of the online experiments, as functions of one flat parameter vector.

``cnn`` is the CNN of Jones et al. (2024)'s MNIST experiments: Conv(16, 5x5,
same padding) -> ReLU -> AvgPool 2 -> Conv(16, 5x5) -> ReLU -> AvgPool 2 -> Dense 64 -> ReLU ->
Dense C, on square images (57,722 parameters at 28 x 28, 11,642 at 8 x 8). ``mlp`` has one hidden
layer; ``linear`` is multinomial logistic regression. Weights are drawn as flax draws them (the
reference code's framework): LeCun normal, variance ``1 / fan_in``, zero biases; PyTorch's default
(a third of that variance) leaves the CNN near chance for hundreds of one-example steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call

NETWORKS = ("cnn", "mlp", "linear")


class PaperCNN(nn.Module):
    """The paper's CNN on ``side x side`` single-channel images given flat ``[n, side^2]``."""

    def __init__(self, side: int, classes: int):
        super().__init__()
        self.side = side
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.AvgPool2d(2),
            nn.Conv2d(16, 16, 5, padding=2), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten())
        pooled = side // 4
        self.head = nn.Sequential(nn.Linear(16 * pooled * pooled, 64), nn.ReLU(),
                                  nn.Linear(64, classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x.reshape(-1, 1, self.side, self.side)))


def lecun_normal_(module: nn.Module) -> nn.Module:
    """Weights ``N(0, 1 / fan_in)``, biases zero, in every linear and convolutional layer."""
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.normal_(layer.weight, std=layer.weight[0].numel() ** -0.5)
            nn.init.zeros_(layer.bias)
    return module


def build_network(name: str, dim: int, classes: int, hidden: int = 64) -> nn.Module:
    """The network ``name`` (one of :data:`NETWORKS`) for ``dim``-d inputs, LeCun-initialised."""
    return lecun_normal_(_architecture(name, dim, classes, hidden))


def _architecture(name: str, dim: int, classes: int, hidden: int) -> nn.Module:
    if name == "cnn":
        side = math.isqrt(dim)
        if side * side != dim or side < 4:
            raise ValueError(f"network 'cnn' needs square images (dim = side^2, side >= 4), not "
                             f"dim = {dim}; use network=mlp")
        return PaperCNN(side, classes)
    if name == "mlp":
        return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, classes))
    if name == "linear":
        return nn.Linear(dim, classes)
    raise ValueError(f"unknown network {name!r}; choose one of {', '.join(NETWORKS)}")


def flat_function(module: nn.Module, dtype: torch.dtype = torch.float64
                  ) -> tuple[Tensor, Callable[[Tensor, Tensor], Tensor]]:
    """The module's initial parameters as one vector ``theta [P]`` and ``f(theta, x [n, dim]) ->
    [n, C]`` (``x`` cast to ``dtype``). A linear layer or a stack of linear and ReLU layers (the
    ``linear`` and ``mlp`` networks, :func:`is_linear_stack`) is evaluated by the layers'
    functions on slices of ``theta`` directly, and its ``f`` also maps a batch ``thetas [K, P]``
    to ``[K, n, C]`` by batched matrix products; any other module by ``functional_call``, which
    swaps the slices into the module first (several times the cost of the MLP's arithmetic at one
    example)."""
    names = [n for n, _ in module.named_parameters()]
    shapes = [p.shape for _, p in module.named_parameters()]
    sizes = [p.numel() for _, p in module.named_parameters()]
    theta = torch.cat([p.detach().reshape(-1) for p in module.parameters()]).to(dtype)
    if is_linear_stack(module):
        return theta, _linear_stack(_layers(module), shapes, sizes)

    def f(flat: Tensor, x: Tensor) -> Tensor:
        params = {n: chunk.reshape(s) for n, chunk, s in zip(names, flat.split(sizes), shapes)}
        return functional_call(module, params, (x.to(flat.dtype),))

    return theta, f


def _layers(module: nn.Module) -> list[nn.Module]:
    return list(module) if isinstance(module, nn.Sequential) else [module]


def is_linear_stack(module: nn.Module) -> bool:
    """Whether ``module`` is a linear layer or a sequence of linear (with bias) and ReLU layers,
    whose :func:`flat_function` takes a batch of parameter vectors."""
    return all(isinstance(layer, nn.ReLU) or (isinstance(layer, nn.Linear) and layer.bias is not None)
               for layer in _layers(module))


def _linear_stack(layers: list[nn.Module], shapes: list[torch.Size], sizes: list[int]
                  ) -> Callable[[Tensor, Tensor], Tensor]:
    """``f(theta, x)`` of linear (weight, bias: the order of ``named_parameters``) and ReLU
    layers; for ``theta [K, P]`` each layer is one ``baddbmm`` on the ``[K, out, in]`` weight
    views of the rows (no copy of ``theta``)."""
    def f(flat: Tensor, x: Tensor) -> Tensor:
        if flat.dim() == 2:
            return _batched(flat, x)
        chunks = flat.split(sizes)
        h, i = x.to(flat.dtype), 0
        for layer in layers:
            if isinstance(layer, nn.ReLU):
                h = torch.relu(h)
            else:
                h = nn.functional.linear(h, chunks[i].view(shapes[i]), chunks[i + 1])
                i += 2
        return h

    def _batched(flat: Tensor, x: Tensor) -> Tensor:
        chunks = flat.split(sizes, -1)
        h, i = x.to(flat.dtype).expand(len(flat), *x.shape), 0
        for layer in layers:
            if isinstance(layer, nn.ReLU):
                h = torch.relu(h)
            else:
                weight = chunks[i].unflatten(-1, shapes[i])
                h = torch.baddbmm(chunks[i + 1].unsqueeze(-2), h, weight.mT)
                i += 2
        return h

    return f
