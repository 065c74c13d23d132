"""Backbone output sizes of the few-shot literature."""

import pytest
import torch

from zoo.backbones import BUILTIN


@pytest.mark.parametrize(("name", "channels", "size", "dim"), [
    ("conv4", 3, 84, 1600), ("conv4s", 1, 28, 64), ("mlp", 1, 28, 128),
    ("resnet10", 3, 84, 512), ("resnet18", 1, 28, 512)])
def test_feature_dim(name, channels, size, dim):
    net = BUILTIN[name](in_channels=channels, image_size=size)
    assert net.feature_dim == dim
    out = net(torch.randn(2, channels, size, size))
    assert out.shape == (2, dim)
