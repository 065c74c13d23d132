"""The conformance suite every registered classification method must pass, importable by plugins.

``check_method("my-method")`` builds the method on the CPU and checks: probabilities of shape
``[Q, way]`` that sum to one; the same probabilities for the same episode whatever the global RNG
state; a finite ``meta_loss`` whose gradient reaches the backbone; all of it for 2-way 1-shot and
20-way 5-shot episodes.
"""

from __future__ import annotations

from typing import Any

import torch

from zoo.episode import Episode, episode_seed
from zoo.method import Method, build_method

SETTINGS = ((2, 1), (20, 5))


def toy_episode(way: int, shot: int, query: int = 2, image_size: int = 28, channels: int = 1,
                seed: int = 0) -> Episode:
    """Class-dependent random images, so that methods have something to fit."""
    g = torch.Generator().manual_seed(seed)
    means = torch.rand(way, channels, image_size, image_size, generator=g)

    def draw(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(way).repeat_interleave(k)
        x = means[y] + 0.3 * torch.randn(len(y), channels, image_size, image_size, generator=g)
        return x, y

    (sx, sy), (qx, qy) = draw(shot), draw(query)
    return Episode(sx, sy, qx, qy, way=way, shot=shot,
                   info={"dataset": "toy", "split": "test", "index": 0,
                         "seed": episode_seed(seed, "toy", "test", way, shot, query, 0),
                         "classes": [f"toy-{c}" for c in range(way)]})


def build_for_tests(name: str, way: int, **hparams: Any) -> Method:
    return build_method(name, way=way, in_channels=1, image_size=28, backbone="conv4s", seed=0,
                        **hparams)


def check_method(name: str, settings=SETTINGS, **hparams: Any) -> None:
    for way, shot in settings:
        method = build_for_tests(name, way, **hparams)
        episode = toy_episode(way, shot)

        method.train()
        method.zero_grad()
        loss = method.meta_loss(episode)
        assert loss.ndim == 0 and torch.isfinite(loss), f"{name}: meta_loss {loss} is not finite"
        loss.backward()
        grads = [p.grad for p in method.backbone.parameters() if p.requires_grad]
        assert any(g is not None and g.abs().sum() > 0 for g in grads), \
            f"{name}: meta_loss does not back-propagate into the backbone"

        method.eval()
        with torch.no_grad():
            torch.manual_seed(1)
            first = method.predict(episode).probs
            torch.manual_seed(2)
            again = method.predict(episode).probs
        q = episode.query_y.numel()
        assert first.shape == (q, way), f"{name}: probs shape {tuple(first.shape)} != {(q, way)}"
        assert torch.isfinite(first).all() and (first >= 0).all()
        assert torch.allclose(first.sum(-1).double(), torch.ones(q, dtype=torch.float64), atol=1e-5)
        assert torch.equal(first, again), f"{name}: predict depends on the global RNG state"
