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


@pytest.mark.parametrize(("name", "channels", "size", "fits"), [
    ("conv4s", 1, 28, 83), ("conv4", 3, 84, 9)])  # 2^24 // (64 maps x size^2 x 4 bytes)
def test_a_convnet_without_gradients_takes_the_batch_in_cache_sized_passes(name, channels, size,
                                                                           fits):
    """In eval mode without gradients on the CPU the batch goes through in passes of equal size
    (within one) whose first feature maps fit ``EVAL_CHUNK_BYTES``, with each image's features
    as in one pass; in training mode (BatchNorm's batch statistics) or with gradients it is one
    pass."""
    torch.manual_seed(0)
    net = BUILTIN[name](in_channels=channels, image_size=size)
    passes = []
    net.body.register_forward_hook(lambda module, args, out: passes.append(len(args[0])))
    x = torch.randn(fits + 1, channels, size, size)  # one image too many for one pass
    net.train()
    with torch.no_grad():
        net(x)  # BatchNorm's running statistics move: the eval passes below use trained ones
    assert passes == [len(x)]
    net.eval()
    whole = net(x).detach()  # gradients recorded: one pass
    assert passes[1:] == [len(x)]
    with torch.no_grad():
        chunked = net(x)
        halves = sorted(passes[2:])  # two passes of half the images, not a full one and one
        assert halves == [len(x) // 2, len(x) - len(x) // 2]
        torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-6)
        passes.clear()
        net(x[:fits])
        assert passes == [fits]  # a batch that fits: one pass


@pytest.mark.parametrize("shape", [(3, 5, 28, 28), (2, 4, 21, 21), (4, 10, 5), (1, 2, 7, 6)])
def test_the_convnets_pooling_without_gradients_is_torchs_max_pool(shape, monkeypatch):
    """``MaxPool2x2`` without a gradient to propagate gives ``max_pool2d``'s numbers exactly: odd
    sizes floored, unbatched input, ties, zeros from a ReLU, NaN and infinities; with one, it is
    ``max_pool2d`` itself (its gradient to the first maximum of each window)."""
    from torch.nn.functional import max_pool2d

    from zoo.backbones import MaxPool2x2

    torch.manual_seed(0)
    x = torch.relu(torch.randn(shape)).round(decimals=1)  # zeros and ties
    x.view(-1)[[3, 40]] = torch.tensor([float("nan"), float("inf")])
    pool = MaxPool2x2()
    torchs = torch.nn.MaxPool2d.forward
    with monkeypatch.context() as patch, torch.no_grad():
        patch.setattr(torch.nn.MaxPool2d, "forward", None)  # the strided maxima, not torch's
        assert torch.equal(pool(x).isnan(), max_pool2d(x, 2).isnan())
        assert torch.equal(pool(x).nan_to_num(), max_pool2d(x, 2).nan_to_num())
    assert torch.nn.MaxPool2d.forward is torchs
    y = x.nan_to_num().requires_grad_()
    expected = torch.autograd.grad(max_pool2d(y, 2).sum(), y)[0]
    assert torch.equal(torch.autograd.grad(pool(y).sum(), y)[0], expected)
    # under vmap the input says requires_grad=False while the gradient flows: torch's kernel too
    vmapped = torch.func.vmap(lambda row: pool(row * y).sum())(torch.ones(2, *shape))
    assert torch.equal(torch.autograd.grad(vmapped.sum(), y)[0], 2 * expected)
