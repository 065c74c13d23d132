"""The interface every method implements, and how the host builds one from names.

A method is an ``nn.Module`` with two entry points the runner calls: :meth:`Method.meta_loss`
(one meta-training step's loss on an episode) and :meth:`Method.predict` (class probabilities for
the queries, from the support only). Everything else about a method is declared as class
attributes, so the runner, the CLI and the conformance suite can read it without building one.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from zoo.backbones import Backbone
from zoo.episode import Episode
from zoo.errors import HyperParameterError
from zoo.gp import JitterPolicy
from zoo.kernels import Kernel


@dataclass
class Prediction:
    """``probs``: ``[Q, way]``, rows sum to one. ``extras``: optional method-specific outputs, e.g.
    ``"inner_objective"`` (a list, one value per inner step, for convergence plots)."""

    probs: Tensor
    extras: dict[str, Any] = field(default_factory=dict)


BASE_DEFAULTS: dict[str, Any] = {"lr": 1e-3, "per_class_kernel": False}


class Method(nn.Module):
    """Base class of every few-shot method in the zoo.

    Class attributes:
        name: the registered name (lowercase, hyphens).
        task: the task kind it solves (``zoo tasks``); other kinds derive from their own base,
            :class:`zoo.tasks.base.TaskMethod`.
        defaults: hyper-parameters and their defaults (merged along the class hierarchy); the
            runner's ``--set`` may override exactly these.
        capabilities: flags such as ``"inner-objective"`` (predict reports per-step values).
        uses_kernel / default_kernel / default_backbone: what :func:`build_method` constructs.
    """

    name: ClassVar[str]
    task: ClassVar[str] = "classification"
    defaults: ClassVar[Mapping[str, Any]] = {}
    capabilities: ClassVar[frozenset[str]] = frozenset()
    uses_kernel: ClassVar[bool] = False
    default_kernel: ClassVar[str | None] = None
    default_backbone: ClassVar[str] = "conv4s"

    def __init__(self, backbone: Backbone, *, way: int, kernel: Kernel | None = None, **hparams: Any):
        super().__init__()
        self.backbone, self.kernel, self.way = backbone, kernel, way
        self.hparams = resolve_hparams(type(self), hparams)
        self.jitter = JitterPolicy()

    @classmethod
    def all_defaults(cls) -> dict[str, Any]:
        merged = dict(BASE_DEFAULTS)
        for klass in reversed(cls.__mro__):
            merged.update(vars(klass).get("defaults", {}))
        return merged

    @abstractmethod
    def meta_loss(self, episode: Episode) -> Tensor:
        """A scalar loss for one meta-training step on ``episode``."""

    @abstractmethod
    def predict(self, episode: Episode) -> Prediction:
        """Class probabilities for ``episode.query_x`` given the labelled support only."""

    def param_groups(self) -> list[dict[str, Any]]:
        """Optimizer parameter groups; override to give the kernel its own learning rate."""
        return [{"params": [p for p in self.parameters() if p.requires_grad],
                 "lr": self.hparams["lr"]}]

    def counters(self) -> dict[str, int]:
        """Numerical events to report with results (e.g. how often jitter was needed)."""
        return {"jitter": self.jitter.uses}

    def features(self, x: Tensor) -> Tensor:
        return self.backbone(x)


def _coerce(key: str, value: Any, default: Any) -> Any:
    if default is None or value is None or not isinstance(value, str):
        return value
    try:
        if isinstance(default, bool):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        return type(default)(value)
    except ValueError:
        raise HyperParameterError(f"hyper-parameter {key}={value!r} must be of type "
                                  f"{type(default).__name__} like its default {default!r}") from None


def resolve_hparams(cls: type[Method], given: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overridden by ``given``; unknown keys are an error listing the known ones."""
    defaults = cls.all_defaults()
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise HyperParameterError(f"method {cls.name!r} has no hyper-parameter(s) {unknown}; "
                                  f"known: {sorted(defaults)}")
    return {k: _coerce(k, given[k], d) if k in given else d for k, d in defaults.items()}


def build_method(name: str, *, way: int, in_channels: int, image_size: int,
                 backbone: str | None = None, kernel: str | None = None,
                 backbone_options: Mapping[str, Any] | None = None,
                 kernel_options: Mapping[str, Any] | None = None,
                 seed: int | None = None, registry: Any = None, **hparams: Any) -> Method:
    """Build a registered method with its backbone (and kernel, if it uses one) by name.

    ``seed`` seeds the global RNG just for parameter initialisation, so a cell is reproducible.
    ``registry``: where the names are looked up (default: the process's plugin registry).
    """
    from zoo import plugins

    reg = registry or plugins.registry()
    cls = reg.get("methods", name)
    resolve_hparams(cls, hparams)  # fail early, before building anything
    backbone_name = backbone or cls.default_backbone
    factory = reg.get("backbones", backbone_name)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        net = factory(in_channels=in_channels, image_size=image_size, **(backbone_options or {}))
        k = None
        if cls.uses_kernel:
            kernel_cls = reg.get("kernels", kernel or cls.default_kernel)
            per_class = _coerce("per_class_kernel", hparams.get("per_class_kernel", False), False)
            k = kernel_cls(net.feature_dim, (way,) if per_class else (), **(kernel_options or {}))
        elif kernel is not None:
            raise HyperParameterError(f"method {name!r} does not use a kernel; drop --kernel")
        return cls(net, way=way, kernel=k, **hparams)


def episode_generator(episode: Episode, salt: int = 0) -> torch.Generator:
    """A CPU generator seeded by the episode (never the global RNG), so that predictions that
    draw random numbers are a function of the episode alone."""
    seed = int(episode.info.get("seed", 0)) ^ (salt * 0x9E3779B97F4A7C15 & (2**63 - 1))
    return torch.Generator().manual_seed(seed)
