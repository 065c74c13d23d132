"""The digits are read from scikit-learn's file without importing scikit-learn (its import
takes seconds, in every suite that tests on them); the images are the same."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from zoo.data.digits import load_digits


def test_the_digits_are_scikit_learns():
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    bunch = sklearn_datasets.load_digits()
    ours = load_digits()
    x = torch.as_tensor(bunch.images, dtype=torch.float32)[:, None] / 16.0
    x = F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False).clamp_(0, 1)
    order = torch.as_tensor(bunch.target).argsort(stable=True)  # the data set groups by class
    assert torch.equal(ours.images, x[order])
    assert ours.class_sizes.tolist() == torch.bincount(torch.as_tensor(bunch.target)).tolist()
