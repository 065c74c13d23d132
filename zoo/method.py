"""The interface every method implements, and how the host builds one from names.

:class:`BaseMethod` is the base of the methods of every task kind: hyper-parameters (``lr``
among them), parameter groups, counters, the kernel and backbone it is built with. A few-shot
classification method derives from :class:`Method`, an ``nn.Module`` with two entry points the
runner calls: :meth:`Method.meta_loss` (one meta-training step's loss on an episode) and
:meth:`Method.predict` (class probabilities for the queries, from the support only). Everything
else about a method is declared as class attributes, so the runner, the CLI and the conformance
suite can read it without building one.
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from zoo.backbones import Backbone
from zoo.batching import in_batched_call
from zoo.episode import Episode
from zoo.errors import HyperParameterError, ZooError
from zoo.hparams import Configurable, HParam, resolve_hparams
from zoo.kernels import Kernel
from zoo.spec import parse_spec
from zoo.tasks.classification import Prediction, train_way

if TYPE_CHECKING:
    from zoo.plugins import Registry


class BaseMethod(Configurable, nn.Module):
    """The base of every method of every task kind: what the runner, the CLI and the
    conformance suite read off a method class, and build one with.

    Each kind has its own base on this one, saying how a method is built and asked for a
    prediction: :class:`Method` (classification), and :class:`~zoo.tasks.methods.RegressionMethod`,
    :class:`~zoo.tasks.methods.StreamMethod`, :class:`~zoo.tasks.methods.IntegrationMethod`.

    Class attributes:
        name: the registered name (lowercase, hyphens).
        task: the task kind it solves (``zoo tasks``).
        hyperparameters: name -> :class:`~zoo.hparams.HParam` (default, type, choices, range,
            doc), merged along the class hierarchy; the runner's ``--set`` may override exactly
            these, and :func:`resolve_hparams` validates them once.
        uses_kernel / default_kernel / default_backbone: what is built with the method (by
            :func:`build_method` for classification).
    """

    name: ClassVar[str]
    task: ClassVar[str]
    hyperparameters: ClassVar[Mapping[str, HParam | Any]] = {
        "lr": HParam(1e-3, gt=0, doc="Adam learning rate of the meta-parameters"),
    }
    uses_kernel: ClassVar[bool] = False
    default_kernel: ClassVar[str | None] = None
    default_backbone: ClassVar[str | None] = None

    def __init__(self, **hparams: Any):
        super().__init__()
        self.hparams = resolve_hparams(type(self), hparams)

    def param_groups(self) -> list[dict[str, Any]]:
        """Optimizer parameter groups; override to give the kernel its own learning rate."""
        return [{"params": [p for p in self.parameters() if p.requires_grad],
                 "lr": self.hparams["lr"]}]

    def counters(self) -> dict[str, int]:
        """Numerical events to report with results (the latent-Gaussian family: how often jitter
        was needed)."""
        return {}

    @classmethod
    def from_cell(cls, cell: Any, dataset: Any, registry: Registry) -> BaseMethod:
        """An untrained method for ``cell`` (a :class:`zoo.runner.Cell`) on ``dataset``, built
        with what the cell's task kind reads off the data (:meth:`zoo.tasks.Task.data_shape`),
        its parameters drawn from the cell's seed (the global RNG stream is left as it was)."""
        with torch.random.fork_rng(devices=[]):
            manual_seed(cell.seed)
            return cls(**cell.task.data_shape(dataset), **cell.hparams)


class Method(BaseMethod):
    """The base of every few-shot classification method.

    Class attributes (besides :class:`BaseMethod`'s):
        any_way: a model built for one way scores episodes of any other (it has no way-sized
            parameters), so way-transfer suites (``train_way``) run it; see
            :meth:`scores_any_way`. :func:`zoo.testing.check_method` holds a method to it.
    """

    task: ClassVar[str] = "classification"
    default_backbone: ClassVar[str | None] = "conv4s"
    any_way: ClassVar[bool] = False

    def __init__(self, backbone: Backbone, *, way: int, kernel: Kernel | None = None,
                 registry: Registry | None = None, **hparams: Any):
        """``registry``: the one the method is built from (:func:`build_method` passes it), where
        a family looks up the components its hyper-parameters name (an estimator); the base
        uses none."""
        super().__init__(**hparams)
        self.backbone, self.kernel, self.way = backbone, kernel, way

    @abstractmethod
    def meta_loss(self, episode: Episode) -> Tensor:
        """A scalar loss for one meta-training step on ``episode``."""

    @abstractmethod
    def predict(self, episode: Episode) -> Prediction:
        """Class probabilities for ``episode.query_x`` given the labelled support only."""

    @classmethod
    def scores_any_way(cls, hparams: Mapping[str, Any]) -> bool:
        """Whether a model with the resolved ``hparams``, built for one way, scores episodes of
        another: :attr:`any_way` unless a hyper-parameter gives it way-sized parameters."""
        return cls.any_way

    def features(self, x: Tensor) -> Tensor:
        return self.backbone(x)

    @classmethod
    def from_cell(cls, cell: Any, dataset: Any, registry: Registry) -> Method:
        """An untrained method for ``cell`` on ``dataset`` (:func:`build_method` with the cell's
        backbone and kernel specs), its parameters drawn from the cell's seed."""
        kernel, options = parse_spec(cell.kernel, "kernel") if cell.kernel else (None, {})
        backbone, backbone_options = (parse_spec(cell.backbone, "backbone") if cell.backbone
                                      else (None, {}))  # e.g. "conv4s[width=128]"
        return build_method(cell.method, way=train_way(cell.shape), in_channels=dataset.in_channels,
                            image_size=dataset.image_size, backbone=backbone,
                            backbone_options=backbone_options, kernel=kernel,
                            kernel_options=options, seed=cell.seed, registry=registry,
                            **cell.hparams)


def build_method(name: str, *, way: int, in_channels: int, image_size: int,
                 backbone: str | None = None, kernel: str | None = None,
                 backbone_options: Mapping[str, Any] | None = None,
                 kernel_options: Mapping[str, Any] | None = None,
                 seed: int | None = None, registry: Registry, **hparams: Any) -> Method:
    """Build a registered method with its backbone (and kernel, if it uses one) by name.

    ``seed`` seeds the global RNG just for parameter initialisation, so a cell is reproducible.
    ``registry``: where the names are looked up (:func:`zoo.plugins.registry` is the process's).
    """
    reg = registry
    cls = reg.get("methods", name)
    resolved = resolve_hparams(cls, hparams)  # fail early, before building anything
    backbone_name = backbone or cls.default_backbone
    factory = reg.get("backbones", backbone_name)
    cpu_state = torch.get_rng_state()  # torch.random.fork_rng(devices=[]), ~1 ms cheaper a call
    try:
        if seed is not None:
            manual_seed(seed)
        net = factory(in_channels=in_channels, image_size=image_size, **(backbone_options or {}))
        k = None
        if cls.uses_kernel:
            kernel_cls = reg.get("kernels", kernel or cls.default_kernel)
            per_class = resolved.get("per_class_kernel", False)  # declared by kernel families
            k = kernel_cls(net.feature_dim, (way,) if per_class else (), **(kernel_options or {}))
        elif kernel is not None:
            raise HyperParameterError(f"method {name!r} does not use a kernel; drop --kernel")
        return cls(net, way=way, kernel=k, registry=reg, **hparams)
    finally:
        torch.set_rng_state(cpu_state)


def manual_seed(seed: int) -> None:
    """``torch.manual_seed``; without an accelerator only the CPU generator, which is all it
    seeds then: it also queues a lazy seeding, with a stack trace, per accelerator back-end
    (~0.2 ms a call against ~1 us; a small cell of a suite seeds several times)."""
    if _accelerated():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


@functools.cache
def _accelerated() -> bool:
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    if accelerator is not None:
        return accelerator.is_available()
    return torch.cuda.is_available() or torch.backends.mps.is_available()


def episode_generator(episode: Episode, salt: int = 0) -> torch.Generator:
    """A CPU generator seeded by the episode (never the global RNG), so that predictions that
    draw random numbers are a function of the episode alone.

    Not inside a batched meta-loss (:mod:`zoo.batching`), whose episodes each have their own seed:
    there, :func:`zoo.batching.per_episode` makes the draws of each (as with :func:`draw_seed`)."""
    _not_batched()
    seed = int(episode.info.get("seed", 0)) ^ (salt * 0x9E3779B97F4A7C15 & (2**63 - 1))
    return torch.Generator().manual_seed(seed)


def _not_batched() -> None:
    if in_batched_call():
        raise ZooError("an episode's seed was asked for inside a batched meta-loss, whose "
                       "episodes each have their own: make the draws through "
                       "zoo.batching.per_episode (e.g. LatentGaussianMethod.rule), or keep the "
                       "method's batches_episodes False")


def draw_seed(episode: Episode, salt: int | None = None) -> int:
    """The seed of an estimator's draws for ``episode``, so that a prediction is a function of
    (weights, episode) alone: a 62-bit seed drawn from :func:`episode_generator` with ``salt``
    (one salt per use, e.g. inner loop and predictive), or, with ``salt=None``, the episode's own
    seed reduced to 31 bits (the stream dkt and logistic-softmax have always used); not inside a
    batched meta-loss (see :func:`episode_generator`)."""
    _not_batched()
    if salt is None:
        return int(episode.info.get("seed", 0)) % 2**31
    return int(torch.randint(0, 2**62, (1,), generator=episode_generator(episode, salt)))
