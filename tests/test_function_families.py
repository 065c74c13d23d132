"""The regression function families: closed-form values of the optimisation benchmarks at their
known minima (sfu.ca's values), the protocol's parameter ranges, seeded reproducibility of every
generated family, and image completion's splits and coordinates."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.data.completion import load_digits_completion, load_mnist_completion
from zoo.data.functions import load_affine_sinusoid
from zoo.data.optimisation import (
    MINIMA,
    branin,
    forrester,
    hartmann3,
    load_branin,
    load_forrester,
    load_hartmann3,
)
from zoo.errors import DataMissingError
from zoo.plugins import load_dataset
from zoo.tasks.regression import sample_task


def test_branin_has_its_three_global_minima():
    points = torch.tensor([[-math.pi, 12.275], [math.pi, 2.275], [9.42478, 2.475]],
                          dtype=torch.float64)
    assert torch.allclose(branin(points), torch.full((3,), 0.397887, dtype=torch.float64),
                          atol=1e-5)
    grid = torch.stack(torch.meshgrid(torch.linspace(-5, 10, 301, dtype=torch.float64),
                                      torch.linspace(0, 15, 301, dtype=torch.float64),
                                      indexing="ij"), -1)
    assert float(branin(grid).min()) >= 0.397887 - 1e-6
    assert float(branin(torch.tensor([0.0, 0.0], dtype=torch.float64))) == pytest.approx(
        (-6) ** 2 + 10 * (1 - 1 / (8 * math.pi)) + 10)


def test_hartmann3_minimum_and_forrester_values():
    x = torch.tensor([0.114614, 0.555649, 0.852547], dtype=torch.float64)
    assert float(hartmann3(x)) == pytest.approx(-3.86278, abs=1e-5)
    grid = torch.rand(20000, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert float(hartmann3(grid).min()) > -3.86278
    u = torch.tensor([[0.0], [1.0], [0.757249]], dtype=torch.float64)
    expected = [4 * math.sin(-4), 16 * math.sin(8), MINIMA["forrester"]]
    assert torch.allclose(forrester(u), torch.tensor(expected, dtype=torch.float64), atol=1e-5)


@pytest.mark.parametrize("load, base, lo, hi", [(load_forrester, forrester, [0.0], [1.0]),
                                                (load_branin, branin, [-5.0, 0.0], [10.0, 15.0]),
                                                (load_hartmann3, hartmann3, [0.0] * 3, [1.0] * 3)])
def test_a_shifted_scaled_task_is_the_benchmark_moved_and_stretched(load, base, lo, hi):
    family = load()
    x, y, params = family.draw(torch.Generator().manual_seed(1), 2000)
    assert 0.75 <= params["scale"] <= 1.25
    shift = torch.tensor([params[f"shift{i}"] for i in range(family.x_dim)], dtype=torch.float64)
    assert shift.abs().max() <= 0.25 and float(x.min()) >= 0 and float(x.max()) <= 1
    lo, hi = torch.tensor(lo, dtype=torch.float64), torch.tensor(hi, dtype=torch.float64)
    clean = params["scale"] * base(lo + (hi - lo) * (x.double() - shift))
    assert torch.allclose(family.function(params)(x.double()), clean)
    noise = (y.double()[:, 0] - clean).std()
    assert float(noise) == pytest.approx(family.noise, rel=0.1)


def test_affine_sinusoid_is_a_half_half_mixture_of_lines_and_sinusoids():
    family, lines = load_affine_sinusoid(), 0
    for i in range(200):
        ep = sample_task(family, "test", 0, 32, i, 0)
        f, x, y = ep.info["function"], ep.target_x.double(), ep.target_y.double()
        if f["affine"]:
            lines += 1
            assert -3 <= f["slope"] <= 3 and -3 <= f["intercept"] <= 3
            clean = f["slope"] * x + f["intercept"]
        else:
            clean = f["amplitude"] * torch.sin(x - f["phase"])
        assert float((y - clean).abs().max()) < 5 * 0.25
    assert 70 <= lines <= 130


@pytest.mark.parametrize("name", ["sinusoid", "affine-sinusoid", "gp-rbf", "forrester", "branin",
                                  "hartmann3", "digits-completion"])
def test_every_generated_family_is_reproducible_from_its_seed(name):
    family = load_dataset(name)
    a, b = sample_task(family, "test", 3, 20, 7, 5), sample_task(family, "test", 3, 20, 7, 5)
    assert torch.equal(a.target_x, b.target_x) and torch.equal(a.target_y, b.target_y)
    c = sample_task(family, "test", 4, 20, 7, 5)
    assert not torch.equal(a.target_y, c.target_y)
    assert a.target_x.shape == (20, family.x_dim) and a.target_y.shape == (20, family.y_dim)


def test_digit_completion_splits_are_disjoint_images_and_pixels_are_distinct():
    family = load_digits_completion()
    images = family.images
    assert sum(len(v) for v in images.values()) == 1797
    train = {tuple(im.flatten()[::37].tolist()) for im in images["train"][:200]}
    assert not train & {tuple(im.flatten()[::37].tolist()) for im in images["test"]}
    x, y, _ = family.draw(torch.Generator().manual_seed(0), 784, "test")
    assert len(x.unique(dim=0)) == 784 and x.abs().max() == 1
    with pytest.raises(ValueError, match="785 pixels"):
        family.draw(torch.Generator().manual_seed(0), 785)


def test_mnist_completion_says_where_to_put_the_files(tmp_path):
    with pytest.raises(DataMissingError, match="mnist/MNIST/raw"):
        load_mnist_completion(tmp_path)
