"""Feature extractors: a batch of images ``[n, C, H, W]`` to features ``[n, feature_dim]``.

``conv4`` and ``conv4s`` are the four-block ConvNets of the few-shot literature (64 filters, 3x3,
BatchNorm, ReLU, 2x2 max-pool): 1600-d on 84x84 images, 64-d on 28x28. ``resnet10`` and
``resnet18`` are torchvision's ResNet with its classifier removed (512-d).

On the CPU, a ConvNet evaluating without gradients (a test episode, a validation prediction) takes
the batch a few images at a time, so that the largest feature maps held at once
(``EVAL_CHUNK_BYTES``) stay in the last-level cache; the whole episode's maps at once are several
times larger than the cache and make the pass slower (card ``gp-scale.md``). Each
image's features are the same either way (BatchNorm uses its running statistics in eval mode), up
to float rounding where a pass holds a single image (the convolution then takes another kernel).
In training mode, with gradients, or on a GPU, the batch is one pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from zoo.errors import HyperParameterError

__all__ = ["BUILTIN", "MLP", "Backbone", "ConvNet", "MaxPool2x2", "ResNet", "conv4", "conv4s", "mlp",
           "resnet10", "resnet18", "use_batch_statistics"]

EVAL_CHUNK_BYTES = 16 * 2**20  # the best of the budgets measured for conv4 and conv4s (the card)


def _sizes(backbone: str, name: str, values: Sequence[object]) -> None:
    """Refuse a size option (a width, a depth, a hidden layer) that is not a whole number >= 1."""
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise HyperParameterError(f"backbone {backbone!r}: option {name}={value!r} must be a "
                                      "whole number >= 1")


class Backbone(nn.Module):
    """An ``nn.Module`` with a declared ``feature_dim``."""

    feature_dim: int


class MaxPool2x2(nn.MaxPool2d):
    """``nn.MaxPool2d(2)``. On the CPU without gradients recorded (``torch.no_grad``) it is taken
    as the larger of two strided halves of the rows, then of the columns: the same numbers (a
    maximum is exact, NaN propagates in both) without torch's pooling kernel, which is several
    times slower on an NCHW tensor (card ``gp-scale.md``). With gradients enabled it
    is torch's, whose backward sends each window's gradient to its first maximum (not to every
    tied one); ``requires_grad`` is not asked, since under ``torch.func.vmap`` it reads False
    while gradients flow."""

    def __init__(self) -> None:
        super().__init__(2)

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type != "cpu" or torch.is_grad_enabled():
            return super().forward(x)
        x = x[..., : x.shape[-2] // 2 * 2, : x.shape[-1] // 2 * 2]  # floor, as the module's
        rows = torch.maximum(x[..., ::2, :], x[..., 1::2, :])
        return torch.maximum(rows[..., ::2], rows[..., 1::2])


class ConvNet(Backbone):
    """``depth`` blocks of conv 3x3 (padding 1), BatchNorm, ReLU, 2x2 max-pool; flattened.

    ``feature_shape`` is the ``(channels, height, width)`` of the last block's maps that the
    flattened features come from, for methods that compare feature maps (Relation Networks).
    """

    def __init__(self, in_channels: int, image_size: int, depth: int = 4, width: int = 64):
        _sizes("conv", "depth", [depth])
        _sizes("conv", "width", [width])
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(depth):
            layers += [nn.Conv2d(in_channels if i == 0 else width, width, 3, padding=1),
                       nn.BatchNorm2d(width), nn.ReLU(inplace=True), MaxPool2x2()]
        self.body = nn.Sequential(*layers, nn.Flatten())
        self.in_channels, self.image_size, self.width = in_channels, image_size, width
        self._probe()

    def _probe(self) -> None:
        maps = nn.Sequential(*self.body[:-1])
        was_training = maps.training
        maps.eval()
        with torch.no_grad():
            shape = maps(torch.zeros(1, self.in_channels, self.image_size, self.image_size)).shape
        maps.train(was_training)
        self.feature_shape: tuple[int, int, int] = tuple(shape[1:])
        self.feature_dim = shape[1] * shape[2] * shape[3]

    def unpool_last(self, blocks: int) -> ConvNet:
        """Drop the max-pool of the last ``blocks`` blocks, in place, so the features keep the
        spatial maps (Sung et al. 2018's embedding: no pooling in the last two blocks); the
        weights are untouched. Returns ``self``."""
        pools = [i for i, m in enumerate(self.body) if isinstance(m, nn.MaxPool2d)]
        if not 0 <= blocks <= len(pools):
            raise ValueError(f"blocks must be in 0..{len(pools)}, got {blocks}")
        for i in pools[len(pools) - blocks:]:
            self.body[i] = nn.Identity()
        self._probe()
        return self

    def forward(self, x: Tensor) -> Tensor:
        if self.training or torch.is_grad_enabled() or x.device.type != "cpu":
            return self.body(x)  # BatchNorm's batch statistics, autograd, a GPU: one pass
        first_maps = self.width * x.shape[-2] * x.shape[-1] * x.element_size()  # per image
        passes = -(-len(x) * first_maps // EVAL_CHUNK_BYTES)  # ceil
        if passes <= 1:
            return self.body(x)
        # parts of equal size (within one): no small remainder pass, and never a lone image
        # when there are two or more (one image takes another convolution kernel)
        return torch.cat([self.body(part) for part in x.tensor_split(passes)])


class ResNet(Backbone):
    def __init__(self, in_channels: int, image_size: int, layers: Sequence[int]):
        super().__init__()
        from torchvision.models.resnet import BasicBlock
        from torchvision.models.resnet import ResNet as TVResNet

        net = TVResNet(BasicBlock, list(layers))
        if in_channels != 3:
            net.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        net.fc = nn.Identity()
        self.body = net
        self.feature_dim = 512

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)


class MLP(Backbone):
    def __init__(self, in_channels: int, image_size: int, hidden: Sequence[int] = (256, 128)):
        _sizes("mlp", "hidden", [hidden] if isinstance(hidden, int) else list(hidden))
        super().__init__()
        dims = [in_channels * image_size * image_size, *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        self.body = nn.Sequential(*layers)
        self.feature_dim = dims[-1]

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)


def conv4(in_channels: int = 3, image_size: int = 84, **options) -> Backbone:
    return ConvNet(in_channels, image_size, **options)


def conv4s(in_channels: int = 1, image_size: int = 28, **options) -> Backbone:
    return ConvNet(in_channels, image_size, **options)


def resnet10(in_channels: int = 3, image_size: int = 224) -> Backbone:
    return ResNet(in_channels, image_size, (1, 1, 1, 1))


def resnet18(in_channels: int = 3, image_size: int = 224) -> Backbone:
    return ResNet(in_channels, image_size, (2, 2, 2, 2))


def mlp(in_channels: int = 1, image_size: int = 28, **options) -> Backbone:
    return MLP(in_channels, image_size, **options)


BUILTIN = {"conv4": conv4, "conv4s": conv4s, "resnet10": resnet10, "resnet18": resnet18, "mlp": mlp}


def use_batch_statistics(module: nn.Module) -> nn.Module:
    """Make every BatchNorm layer in ``module`` normalise with the statistics of the batch it is
    given, in training and in evaluation alike, and keep no running averages.

    This is how the MAML family handles batch norm (Finn et al. 2017): the support set and the query
    set are each normalised by their own statistics (transductively), so an adapted learner is a
    pure function of its parameters and a batch. Returns ``module``, changed in place.
    """
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.track_running_stats = False
            m.running_mean = m.running_var = m.num_batches_tracked = None
    return module
