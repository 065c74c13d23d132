"""Learning-rate schedules of meta-training: the factor each parameter group's learning rate is
multiplied by at a training episode.

The factor is a pure function of the episode, the training's length and the schedule's name, so a
resumed training sets the same learning rates as one that never stopped (no scheduler state in
the checkpoint).

- ``"constant"``: 1 throughout (the trainer's behaviour before schedules; the default).
- ``"cosine"``: half a cosine from 1 at episode 0 to 0 at the last episode, without restarts
  (Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts", ICLR 2017,
  eq. 5 with eta_min = 0 and one period of ``train_episodes``):
  ``factor(t) = (1 + cos(pi * t / T)) / 2``.
"""

from __future__ import annotations

import math

LR_SCHEDULES = ("constant", "cosine")
"""The schedules a suite's ``lr_schedule`` setting may name."""


def lr_factor(schedule: str, episode: int, total: int) -> float:
    """The learning-rate factor of ``schedule`` at ``episode`` (episodes done before the step) of
    a training of ``total`` episodes."""
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        progress = min(max(episode / total, 0.0), 1.0) if total > 0 else 1.0
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown lr_schedule {schedule!r}; choose one of {', '.join(LR_SCHEDULES)}")
