"""Meta-training one model, resumably: Adam over the method's parameter groups (their learning
rates scaled by the cell's ``lr_schedule``, :mod:`zoo.runner.schedule`), ``meta_batch``
episodes per step (one batched call on an accelerator where the method allows it,
:mod:`zoo.batching`), non-finite steps skipped and counted, periodic validation that keeps the
best checkpoint (by the task kind's selection score), and the kind's calibration
(classification: a temperature) fitted on the validation episodes of the selected model. A
method without trainable parameters (a Monte Carlo baseline) is saved as built.

Training episodes are a pure function of the cell's seed and the episode index, and a checkpoint
holds model, optimizer, every RNG and the step, so a killed training resumes where it stopped
and ends with the same weights as one that never stopped. A checkpoint is taken every
``checkpoint_every`` episodes but at most once per ``CHECKPOINT_SECONDS`` of training: a kill
loses at most the longer of the two, and a training of milliseconds (a suite of many small
cells) writes no checkpoint, which would cost more than its work. The best model so far
(``best.pt``) is written with each checkpoint, the one state a resume needs it in.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from zoo.batching import batched_losses, batching_pays
from zoo.errors import NumericalError, ZooError
from zoo.io import (
    atomic_save,
    atomic_write_json,
    load_checkpoint,
    sync_to_disk,
    write_marker,
)
from zoo.runner.cells import Cell
from zoo.runner.schedule import lr_factor
from zoo.seeds import rng_state, seed_everything, set_rng_state

if TYPE_CHECKING:
    from zoo.plugins import Registry

log = logging.getLogger(__name__)

CHECKPOINT_SECONDS = 1.0  # least training time between two checkpoints


LOSS_POINTS = 50
"""Points of the meta-loss curve over a training (each the mean loss of the steps since the one
before), however seldom it validates: a training no longer than ``val_every`` still shows how its
loss went. The validation schedule, and so the model selected, does not depend on it."""


@dataclass
class TrainState:
    """Everything about a training run that is not a tensor of the model or optimizer."""

    episode: int = 0
    best_val: float = -math.inf
    best_episode: int = -1
    seconds: float = 0.0  # training and validation
    val_seconds: float = 0.0
    steps: int = 0
    skipped_steps: int = 0
    bad_run: int = 0
    curve: list[dict[str, Any]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # since the last point of the curve


@dataclass
class TrainedModel:
    """The selected model, ready to predict, with what the report needs about its training."""

    method: nn.Module
    temperature: float
    info: dict[str, Any]


def build_for_cell(cell: Cell, dataset: Any, device: str, registry: Registry) -> nn.Module:
    """The cell's method, untrained (its method base builds it, :meth:`zoo.Method.from_cell`)."""
    cls = registry.get("methods", cell.method)
    return cls.from_cell(cell, dataset, registry).to(device)


def has_split(dataset: Any, split: str) -> bool:
    splits = getattr(dataset, "splits", {})
    return split in splits and len(splits[split]) > 0


def validate(method: nn.Module, cell: Cell, dataset: Any) -> tuple[float, dict[str, Any]]:
    """The selection score on the fixed validation episodes, and what calibration needs."""
    get = cell.task.episodes(dataset, "val", cell.shape, cell.seed, training=False)
    was_training = method.training
    method.eval()
    with torch.no_grad():
        score, payload = cell.task.validate(method, get, cell.val_episodes, cell.method)
    method.train(was_training)
    return score, payload


def train_model(cell: Cell, folder: Path, dataset: Any, device: str, registry: Registry,
                progress: bool = False, val_data: Any = None,
                markers: list[Path] | None = None) -> TrainedModel:
    """Train (or resume, or just load) the model of ``cell`` in ``folder``; ``val_data`` (the
    cell's ``val_dataset``; default ``dataset``) gives the validation episodes. ``markers``: the
    training's ``done`` file is appended there for the caller to write after its own flush to
    the disk (:func:`zoo.runner.cell.run_units`); by default it is flushed and written here."""
    val_data = dataset if val_data is None else val_data
    check_same_config(folder, cell.train_config())
    method = build_for_cell(cell, dataset, device, registry)
    if (folder / "done").exists():
        blob = load_checkpoint(folder / "model.pt", device)
        load_weights(method, blob["state_dict"], folder / "model.pt",
                     f"the {cell.method} model of its config.json")
        method.eval()
        return TrainedModel(method, blob["temperature"], blob["info"])

    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "config.json", cell.train_config())
    groups = [g for g in method.param_groups() if g["params"]]
    if not groups:  # nothing to meta-train: the method is used as built
        return _finish(cell, folder, method, TrainState(), False, device, markers)
    trainer = Trainer(cell, folder, method, groups, dataset, val_data, device)
    trainer.run(progress)
    check_skipped(cell, trainer.state)
    return _finish(cell, folder, method, trainer.state, trainer.validating, device, markers,
                   trainer.best or None)


class Trainer:
    """Meta-trains ``method`` for ``cell`` in ``folder``: Adam over ``groups``, resumed from the
    folder's checkpoint if there is one. :meth:`run` repeats :meth:`step` (one optimizer step
    on the next meta-batch), :meth:`validate` when a validation point is crossed and
    :meth:`checkpoint` when one is due."""

    def __init__(self, cell: Cell, folder: Path, method: nn.Module, groups: list[dict[str, Any]],
                 dataset: Any, val_data: Any, device: str) -> None:
        self.cell, self.method, self.val_data, self.device = cell, method, val_data, device
        self.task = cell.task
        self.optimizer = torch.optim.Adam(groups)
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]  # a checkpoint's decay
        self.params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.finite_gradients = FiniteGradients(device)
        self.state = TrainState()
        self.checkpoint_path, self.best_path = folder / "checkpoint.pt", folder / "best.pt"
        seed_everything(cell.seed)
        if self.checkpoint_path.exists():
            self.resume()
        # nothing to select among without training: the untrained model, temperature 1
        self.validating = (has_split(val_data, "val") and cell.val_episodes > 0
                           and cell.train_episodes > 0)
        self.sample = self.task.episodes(dataset, "train", cell.shape, cell.seed, training=True)
        if self.validating:  # a shape the validation split cannot give fails now, not later
            self.task.episodes(val_data, "val", cell.shape, cell.seed, training=False)
        self.val_every = cell.val_every if cell.val_every > 0 else cell.train_episodes
        self.loss_every = max(1, min(self.val_every, cell.train_episodes // LOSS_POINTS))
        self.best: dict[str, Any] = {}  # the best model since this process started (in memory)
        self.unsaved_best = False  # best.pt is behind ``best``

    def resume(self) -> None:
        blob = load_checkpoint(self.checkpoint_path, self.device)
        self.method.load_state_dict(blob["model"])
        self.optimizer.load_state_dict(blob["optimizer"])
        self.state = TrainState(**blob["state"])
        set_rng_state(blob["rng"])
        log.info("%s: resuming training at episode %d of %d", self.cell.label, self.state.episode,
                 self.cell.train_episodes)

    def run(self, progress: bool = False) -> None:
        cell, state = self.cell, self.state
        bar = tqdm(total=cell.train_episodes, initial=state.episode, desc=f"train {cell.label}",
                   leave=False, disable=not progress, unit="ep")
        self.method.train()
        last_checkpoint, last_checkpoint_seconds = state.episode, state.seconds
        while state.episode < cell.train_episodes:
            n = self.step()
            bar.update(n)
            crossed = state.episode // self.val_every != (state.episode - n) // self.val_every
            ended = state.episode == cell.train_episodes
            logged = state.episode // self.loss_every != (state.episode - n) // self.loss_every
            if crossed or ended or logged:
                self.close_curve_point()
            if (crossed or ended) and self.validating:
                self.validate()
                if progress:
                    bar.set_postfix(val=f"{state.curve[-1][self.task.selection_key]:.3f}")
            # the end of training is saved as model.pt (its `done` then skips training): a
            # checkpoint there would only be read after a kill in between, which resumes the
            # same from the one before
            if state.episode - last_checkpoint >= cell.checkpoint_every and \
                    state.seconds - last_checkpoint_seconds >= CHECKPOINT_SECONDS and \
                    state.episode < cell.train_episodes:
                self.checkpoint()
                last_checkpoint, last_checkpoint_seconds = state.episode, state.seconds
        bar.close()

    def step(self) -> int:
        """One optimizer step on the next meta-batch (skipped, and counted, if its loss or a
        gradient is not finite); the number of episodes it took."""
        cell, state, optimizer = self.cell, self.state, self.optimizer
        start = time.perf_counter()
        n = min(self.method.meta_batch, cell.train_episodes - state.episode)
        optimizer.zero_grad(set_to_none=True)
        factor = lr_factor(cell.lr_schedule, state.episode, cell.train_episodes)
        for g, lr in zip(optimizer.param_groups, self.base_lrs, strict=True):
            g["lr"] = lr * factor
        total = self.backward(n)
        if total is not None and self.finite_gradients(self.params):
            optimizer.step()
            state.bad_run = 0
            state.losses.append(total)
        else:
            optimizer.zero_grad(set_to_none=True)
            state.skipped_steps += 1
            state.bad_run += 1
            if state.bad_run >= cell.max_bad_steps:
                raise NumericalError(
                    f"{cell.label}: {state.bad_run} training steps in a row had a non-finite loss "
                    f"or gradient (last at episode {state.episode}, "
                    f"{self.sample(state.episode).id}); lower the learning rate "
                    f"(--set {cell.method}.lr=...) or check the data")
        state.steps += 1
        state.episode += n
        state.seconds += time.perf_counter() - start
        return n

    def backward(self, n: int) -> float | None:
        """The gradient of the mean meta-loss of the next ``n`` episodes, and that loss (``None``
        if it is not finite): one batched call (:mod:`zoo.batching`) where the method allows
        it and it pays on the device, else episode by episode."""
        method, task, first = self.method, self.task, self.state.episode
        batching = n > 1 and method.batches_episodes and batching_pays(self.device)
        episodes = [self.sample(first + i) for i in range(n)] if batching else []
        if batching:
            losses = batched_losses(method, episodes, partial(task.meta_loss, method))
            if losses is not None:  # else a deferred check failed: replay them one by one
                losses = losses / n
                losses.sum().backward()
                return sum(float(v) for v in losses.detach())
        total = 0.0
        for i in range(n):
            episode = episodes[i] if episodes else self.sample(first + i)
            try:
                loss = task.meta_loss(method, episode)
                if n > 1:  # the meta-batch's mean (a division by 1 would only cost a node)
                    loss = loss / n
            except NumericalError as exc:
                log.debug("%s: %s", self.cell.label, exc)
                return None
            value = loss.item()
            if not math.isfinite(value):
                return None
            loss.backward()
            total += value
        return total

    def close_curve_point(self) -> None:
        """A point of the training curve: the mean loss of the steps since the last one."""
        state = self.state
        state.curve.append({"episode": state.episode,
                            "loss": float(np.mean(state.losses)) if state.losses else math.nan})
        state.losses = []

    def validate(self) -> None:
        """Score the model on the validation episodes; keep it (in memory) if it is the best."""
        start = time.perf_counter()
        state, method = self.state, self.method
        score, payload = validate(method, self.cell, self.val_data)
        state.curve[-1][self.task.selection_key] = score
        if score > state.best_val:
            state.best_val, state.best_episode = score, state.episode
            # a copy, not references: training goes on changing the parameters in place; a
            # state dict may hold a module's extra state (a dict) beside its tensors (tensors
            # cloned: ~8x faster than deepcopy's per-tensor protocol on a small model)
            self.best = {"model": {k: v.detach().clone() if isinstance(v, torch.Tensor)
                                   else copy.deepcopy(v)
                                   for k, v in method.state_dict().items()},
                         **payload, "episode": state.episode}
            self.unsaved_best = True
        elapsed = time.perf_counter() - start
        state.seconds += elapsed
        state.val_seconds += elapsed

    def checkpoint(self) -> None:
        """Save model, optimizer, training state and every RNG (best.pt first, if behind)."""
        if self.unsaved_best:  # before the checkpoint that counts on it
            atomic_save(self.best, self.best_path)
            self.unsaved_best = False
        atomic_save({"model": self.method.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "state": vars(self.state), "rng": rng_state()}, self.checkpoint_path)


class FiniteGradients:
    """Whether every gradient of ``params`` is finite: torch's fused check (the one
    ``torch.amp.GradScaler`` runs before a step; it multiplies each gradient by 1, which leaves
    every number as it is) over all gradients in one call, and one read of its flag: one
    synchronisation with the device a step. The flag is allocated once per training, not per
    step. Gradients the fused check does not take (sparse, complex, on several devices) are
    tested one by one. The public alternatives (an infinity norm over all gradients,
    ``torch.nn.utils.get_total_norm``) cost ~0.3 ms more a step, a tenth of a small MLP's step
    (card ``cluster.md``)."""

    def __init__(self, device: str | torch.device) -> None:
        self.found = torch.zeros(1, device=device)
        self.one = torch.ones(1, device=device)

    def __call__(self, params: Sequence[torch.Tensor]) -> bool:
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return True
        self.found.zero_()
        try:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, self.found, self.one)
        except (RuntimeError, NotImplementedError):
            return all(bool(torch.isfinite(g.coalesce().values() if g.is_sparse else g).all())
                       for g in grads)
        return not self.found.item()


def check_skipped(cell: Cell, state: TrainState) -> None:
    """Fail the cell when more than ``max_skipped_fraction`` of its training steps were skipped
    as non-finite: its model was trained on a filtered stream of episodes, not the suite's."""
    if state.steps and state.skipped_steps > cell.max_skipped_fraction * state.steps:
        raise NumericalError(
            f"{cell.label}: {state.skipped_steps} of {state.steps} training steps "
            f"({100 * state.skipped_steps / state.steps:.1f}%) were skipped as non-finite, more "
            f"than max_skipped_fraction = {cell.max_skipped_fraction}; lower the learning rate "
            f"(--set {cell.method}.lr=...) or, knowingly, raise --set max_skipped_fraction=...")


def no_validation_reason(cell: Cell) -> str:
    """Why a training of ``cell`` validates nothing: the episodes asked for, or the data."""
    if cell.val_episodes == 0:
        return "val_episodes = 0 asks for no validation (set it above 0 to select and calibrate)"
    return (f"data set {cell.val_dataset or cell.train_dataset!r} has no validation split (a "
            "suite's val_dataset names another data set's)")


def _finish(cell: Cell, folder: Path, method: nn.Module, state: TrainState, validating: bool,
            device: str, markers: list[Path] | None = None, best: dict[str, Any] | None = None
            ) -> TrainedModel:
    """Load the best checkpoint (``best``: its content, saved by this process), calibrate on its
    validation output, write model.pt."""
    temperature = 1.0
    selection = "last"
    if validating:
        if best is None and not (folder / "best.pt").exists():
            raise ZooError(f"{cell.label}: no validated checkpoint in {folder}; delete that "
                           "folder (or use --force) to train again")
        if best is None:
            best = load_checkpoint(folder / "best.pt", device)
        else:  # as loading it would give it: every tensor on ``device``
            best = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in best.items()}
        method.load_state_dict(best["model"])
        temperature = cell.task.calibrate(best | {"what": cell.label})
        selection = "best " + cell.task.selection_key.replace("val_", "validation ")
    elif cell.train_episodes > 0 and any(True for _ in method.parameters()):
        log.warning("%s: %s; using the last checkpoint and no temperature scaling",
                    cell.label, no_validation_reason(cell))
    method.eval()
    info = {"train_seconds": state.seconds, "val_seconds": state.val_seconds,
            "skipped_steps": state.skipped_steps,
            "training_steps": state.steps,
            cell.task.selection_key: state.best_val if validating else None,
            "best_episode": state.best_episode if validating else state.episode,
            "selection": selection, "curve": state.curve, "counters": method.counters()}
    atomic_save({"state_dict": method.state_dict(), "temperature": temperature, "info": info,
                 "config": cell.train_config()}, folder / "model.pt")
    atomic_write_json(folder / "training.json", info | {"temperature": temperature})
    (folder / "error.txt").unlink(missing_ok=True)
    if markers is not None:
        markers.append(folder / "done")
    else:
        sync_to_disk(folder)  # what `done` declares complete is on the disk before it
        write_marker(folder / "done")
    return TrainedModel(method, temperature, info)


def check_same_config(folder: Path, config: dict[str, Any]) -> None:
    """Refuse to resume or reuse ``folder`` if it was trained with another configuration (its
    model would be reported under this one's name); the message lists every difference."""
    path = folder / "config.json"
    if not path.exists():
        return
    try:
        there = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ZooError(f"{path}: cannot be read ({exc}); delete the folder to train again") from None
    here = json.loads(json.dumps(config, default=str))
    if there == here:
        return
    lines = [f"  {key}: {a!r} there, {b!r} here" for key, a, b in _differences(there, here)]
    raise ZooError(f"{folder} holds a model trained with another configuration:\n"
                   + "\n".join(lines) + "\nchoose another --out, or add --force to train again "
                   "there (its model is deleted)")


def _differences(a: Any, b: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b))
                for d in _differences(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [(prefix.rstrip("."), a, b)]


def start_over(folder: Path) -> None:
    """``zoo train --force``: delete what a training wrote in ``folder``, and nothing else."""
    from zoo.runner.storage import TMP_RE, TRAIN_FILES

    if not folder.exists():
        return
    foreign = [p.name for p in folder.iterdir()
               if p.name not in TRAIN_FILES and not TMP_RE.match(p.name)]
    if foreign or not (folder / "config.json").exists():
        raise ZooError(f"{folder} is not a zoo training folder (it holds "
                       f"{', '.join(sorted(foreign)) or 'no config.json'}); --force deletes "
                       "only training folders: choose another --out")
    for p in folder.iterdir():
        p.unlink()


def load_weights(module: Any, state: Any, file: Path, what: str) -> None:
    """``module.load_state_dict(state)``, or a :class:`ZooError` naming ``file`` when its
    weights are not those of the model its configuration describes (``what``)."""
    try:
        module.load_state_dict(state)
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ZooError(f"{file}: its weights do not fit {what} ({first}); the file belongs to "
                       "another model, or was changed: delete it and train again, or use the "
                       "model.pt of the run it came from") from None


def load_run(path: Path, device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The train config and ``model.pt`` blob of a run: a cell or training folder, or a model file."""
    path = Path(path)
    file = path / "model.pt" if path.is_dir() else path
    if not file.exists():
        raise ZooError(f"{path} holds no trained model (model.pt); train it first "
                       "(zoo train, zoo bench) or pass the folder of a finished cell")
    blob = load_checkpoint(file, device)
    if not isinstance(blob, dict) or not {"state_dict", "config", "temperature"} <= set(blob):
        raise ZooError(f"{file} is not a zoo model file (model.pt of a cell or `zoo train`)")
    return blob["config"], blob
