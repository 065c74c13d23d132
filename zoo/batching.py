"""The episodes of a meta-batch as one batched call: ``torch.func.vmap`` of a method's meta-loss
over a stack of same-shaped episodes, so the backbone, the kernel and the GP algebra (batched over
classes already) each run once, with a leading episode axis, instead of once per episode.

The numbers are the per-episode loop's (up to the order of floating-point sums):

* BatchNorm in training mode normalises each episode with that episode's own statistics: vmap's
  rule for batch norm takes them per vmapped element, exactly as one call per episode does (a
  plain concatenation of the episodes would pool them). The running averages are updated in a copy
  per episode and then combined into what the loop's sequence of updates gives: with ``k`` updates
  per episode at momentum ``m`` and ``a = (1 - m)^k``, ``r <- a r + (r_e - a r_0)`` for
  ``e = 1..E`` (each episode's update is affine in the running average).
* Checks that branch on values (finite features, a Cholesky factorisation that would need jitter)
  cannot run inside vmap. Inside a batched call they are collected (:func:`defer_check`) and
  returned with the losses; when one fails, or a loss is not finite, the batched result is dropped
  (no gradient, no running average touched) and the caller replays the meta-batch episode by
  episode, so errors, jitter uses and skipped steps are the loop's exactly.
* Draws seeded by the episode (:func:`zoo.seeds.draw_seed`: a host integer per episode, which
  one vmapped call cannot carry) are made through :func:`per_episode`: for every episode of the
  meta-batch with its own seed, stacked, and picked by the vmapped episode slot; they are the
  loop's draws. ``draw_seed`` itself raises inside a batched call, so a method that draws another
  way fails loudly instead of sharing one seed. (The call runs with vmap's ``randomness="same"``
  so that these explicitly seeded draws may run inside it; a meta-loss that draws from the global
  RNG cannot match the loop and must not declare the capability.)

A method opts in with ``batches_episodes = True`` (:class:`~zoo.hparams.Configurable`): its
meta-loss is a function of the episode's tensors and of draws made through :func:`per_episode`,
with no Python branch on tensor values outside the core's checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from zoo.errors import NumericalError
from zoo.seeds import refusing_episode_seeds


@dataclass
class _Batch:
    """The batched call in progress: its episodes, the vmapped slot (``0..E-1``, one per
    episode) and the checks deferred so far."""

    episodes: Sequence[Any]
    slot: Tensor
    checks: list[Tensor] = field(default_factory=list)


_BATCH: ContextVar[_Batch | None] = ContextVar("zoo_batched_call", default=None)
OWN_SEEDS = ("an episode's seed was asked for inside a batched meta-loss, whose episodes each have "
             "their own: make the draws through zoo.batching.per_episode (e.g. "
             "LatentGaussianMethod.rule), or keep the method's batches_episodes False")

T = TypeVar("T")
RUNNING = ("running_mean", "running_var", "num_batches_tracked")


def in_batched_call() -> bool:
    """Whether a batched meta-loss (:func:`batched_losses`) is being evaluated."""
    return _BATCH.get() is not None


def defer_check(ok: Tensor) -> bool:
    """Inside a batched call, record the boolean tensor ``ok`` (all true: the check passes) for
    the end of the call and return True; outside one, return False (check it now)."""
    batch = _BATCH.get()
    if batch is None:
        return False
    batch.checks.append(ok.all())
    return True


def per_episode(episode: Any, make: Callable[[Any], T]) -> T:
    """``make(episode)``: a tensor, or a dataclass of tensors, made from host values of the
    episode (the draws its seed gives, :func:`zoo.seeds.draw_seed`). Inside a batched call each
    episode gets its own: ``make`` runs on every episode of the meta-batch, outside the vmap, and
    the results are stacked and indexed by the call's vmapped slot, so the draws are those the
    loop would make."""
    batch = _BATCH.get()
    if batch is None:
        return make(episode)
    token = _BATCH.set(None)
    try:
        with refusing_episode_seeds(None):
            made = [make(e) for e in batch.episodes]
    finally:
        _BATCH.reset(token)
    first = made[0]
    if isinstance(first, Tensor):
        return torch.stack(made)[batch.slot]  # type: ignore[return-value]
    return dataclasses.replace(first, **{  # type: ignore[type-var]
        f.name: torch.stack([getattr(m, f.name) for m in made])[batch.slot]
        for f in dataclasses.fields(first) if isinstance(getattr(first, f.name), Tensor)})


@contextmanager
def _entered(batch: _Batch) -> Iterator[_Batch]:
    token = _BATCH.set(batch)
    try:
        with refusing_episode_seeds(OWN_SEEDS):
            yield batch
    finally:
        _BATCH.reset(token)


def batching_pays(device: torch.device | str) -> bool:
    """Whether the trainer should batch a meta-batch on ``device``: on an accelerator, where one
    call replaces ``E`` rounds of small kernel launches. Not on the CPU, where each episode's
    convolutions already keep the cores busy and vmap's batch-norm rule adds a copy of every
    activation, so the loop is faster (``benchmarks/scale/meta_batch.py``, card ``gp-scale``)."""
    return torch.device(device).type != "cpu"


def stack_episodes(episodes: Sequence[Any]) -> dict[str, Tensor] | None:
    """The tensor fields of same-shaped dataclass episodes stacked on a new leading axis, or
    ``None`` when their shapes, dtypes or other fields (way, shot; ``info`` aside) differ."""
    first = episodes[0]
    stacked: dict[str, Tensor] = {}
    for f in dataclasses.fields(first):
        values = [getattr(e, f.name) for e in episodes]
        if isinstance(values[0], Tensor):
            if any(not isinstance(v, Tensor) or v.shape != values[0].shape
                   or v.dtype != values[0].dtype for v in values):
                return None
            stacked[f.name] = torch.stack(values)
        elif f.name != "info" and any(v != values[0] for v in values):
            return None
    return stacked


def _batch_norms(module: nn.Module) -> dict[str, nn.modules.batchnorm._BatchNorm] | None:
    """The BatchNorm layers that update running averages in this call, by name; ``None`` when one
    uses a cumulative average (``momentum=None``), which is not combined here."""
    found = {}
    for name, m in module.named_modules():
        if (isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training
                and m.track_running_stats and m.running_mean is not None):
            if m.momentum is None:
                return None
            found[name] = m
    return found


def _combine(norm: nn.modules.batchnorm._BatchNorm, updated: dict[str, Tensor]) -> None:
    """Write into ``norm`` the running averages of the loop's updates, from each episode's
    update of its own copy (see the module docstring)."""
    m = float(norm.momentum)  # type: ignore[arg-type]
    steps = updated["num_batches_tracked"] - norm.num_batches_tracked
    for key in ("running_mean", "running_var"):
        r0 = getattr(norm, key)
        r = r0.clone()
        for k, r_e in zip(steps.tolist(), updated[key], strict=True):
            a = (1 - m) ** k
            r = a * r + (r_e - a * r0)
        r0.copy_(r)
    norm.num_batches_tracked.add_(steps.sum())


class _Call(nn.Module):
    """``loss(episode)`` as a module's forward, so ``functional_call`` can swap the buffers."""

    def __init__(self, method: nn.Module, loss: Callable[[Any], Tensor]):
        super().__init__()
        self.method, self.loss = method, loss

    def forward(self, episode: Any) -> Tensor:
        return self.loss(episode)


def batched_losses(method: nn.Module, episodes: Sequence[Any],
                   loss: Callable[[Any], Tensor]) -> Tensor | None:
    """The losses ``[E]`` of ``episodes`` under ``method`` from one vmapped call of ``loss`` (the
    method's meta-loss on one episode), with the loop's BatchNorm statistics and running averages;
    ``None`` (nothing evaluated or changed: run the loop) when the method does not declare
    ``batches_episodes``, there are fewer than two episodes, their shapes differ, a BatchNorm layer
    keeps a cumulative average, or a deferred check fails or a loss is not finite."""
    if len(episodes) < 2 or not getattr(method, "batches_episodes", False):
        return None
    stacked = stack_episodes(episodes)
    norms = _batch_norms(method)
    if stacked is None or norms is None:
        return None
    E = len(episodes)
    buffers = {f"method.{name}.{key}": getattr(m, key).expand(E, *getattr(m, key).shape).clone()
               for name, m in norms.items() for key in RUNNING}
    info = dict(episodes[0].info)
    info.pop("seed", None)  # one seed per episode: not one the batched call could use
    info["index"] = "/".join(str(e.info.get("index", "?")) for e in episodes)
    template = dataclasses.replace(episodes[0], info=info)
    call = _Call(method, loss)

    def one(state: dict[str, Tensor], tensors: dict[str, Tensor],
            slot: Tensor) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        with _entered(_Batch(episodes, slot)) as batch:
            value = functional_call(call, state, (dataclasses.replace(template, **tensors),))
        checks = batch.checks
        ok = torch.stack(checks).all() if checks else value.new_ones((), dtype=torch.bool)
        return value, ok, state

    slots = torch.arange(E, device=next(iter(stacked.values())).device)
    try:
        losses, ok, updated = vmap(one, randomness="same")(buffers, stacked, slots)
    except NumericalError:
        return None
    if not bool(ok.all() & torch.isfinite(losses).all()):
        return None
    with torch.no_grad():
        for name, m in norms.items():
            _combine(m, {key: updated[f"method.{name}.{key}"] for key in RUNNING})
    return losses
