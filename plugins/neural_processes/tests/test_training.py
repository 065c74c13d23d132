"""Meta-training improves every neural process on sinusoids within a few hundred steps."""

import numpy as np
import pytest
import torch

from zoo.data import load_sinusoid
from zoo.tasks import Regression, sample_task
from zoo.testing import registry


def validation_lmlhd(method, family, tasks=20) -> float:
    task, scores = Regression(), []
    with torch.no_grad():
        for i in range(tasks):
            episode = sample_task(family, "val", 0, 16, i, 8)
            scores.append(task.score(method.predict(episode), episode)["lmlhd"])
    return float(np.mean(scores))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ma-np", "ba-np", "anp", "bnp", "banp"])
def test_training_raises_the_validation_lmlhd(name):
    torch.manual_seed(0)
    family = load_sinusoid()
    method = registry().get("methods", name)(x_dim=1, y_dim=1, samples=16)
    before = validation_lmlhd(method.eval(), family)
    optimizer = torch.optim.Adam(method.parameters(), lr=3e-3)
    method.train()
    for i in range(300):
        optimizer.zero_grad()
        method.meta_loss(sample_task(family, "train", 0, 16, i, None, 15)).backward()
        optimizer.step()
    after = validation_lmlhd(method.eval(), family)
    assert after > before + 5
