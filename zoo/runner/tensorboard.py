"""Training curves to TensorBoard (``zoo bench --tensorboard DIR``): each training's curve, the mean
training loss and the validation score at every validation point, written as scalars under a run
named after the training, when the training's first cell finishes. Needs the ``tensorboard``
package (``pip install "bayes-meta-zoo[tensorboard]"``); view with ``tensorboard --logdir DIR``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from zoo.errors import ZooError


def check_available() -> None:
    """Raise :class:`ZooError` with the install command if TensorBoard's writer cannot be used."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError as exc:
        raise ZooError("--tensorboard needs the tensorboard package: pip install "
                       f"\"bayes-meta-zoo[tensorboard]\" ({exc})") from None


def write_curve(logdir: Path, run: str, curve: list[dict[str, Any]]) -> Path:
    """Write ``curve`` (points ``{"episode": e, "loss": ..., "val_...": ...}``) as scalars of run
    ``run`` under ``logdir``; non-finite values (a point without training steps) are left out.
    Returns the run's folder."""
    from torch.utils.tensorboard import SummaryWriter

    folder = Path(logdir) / run
    writer = SummaryWriter(log_dir=str(folder))
    try:
        for point in curve:
            for key, value in point.items():
                if key != "episode" and isinstance(value, int | float) and math.isfinite(value):
                    writer.add_scalar(f"train/{key}", value, global_step=int(point["episode"]))
    finally:
        writer.close()
    return folder


def write_training(logdir: Path, run: str, training_json: Path) -> Path | None:
    """The curve recorded in a cell's ``training.json``, if it has one."""
    try:
        curve = json.loads(Path(training_json).read_text()).get("curve") or []
    except (OSError, ValueError):
        return None
    return write_curve(logdir, run, curve) if curve else None
