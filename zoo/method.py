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
from zoo.hparams import Configurable, HParam, resolve_hparams
from zoo.kernels import Kernel


@dataclass
class Prediction:
    """``probs``: ``[Q, way]``, rows sum to one. ``extras``: optional method-specific outputs, e.g.
    ``"inner_objective"`` (a list, one value per inner step, for convergence plots) and
    ``"uncertainty"`` (``[Q]``, higher: less sure; what :attr:`Method.uncertainty_name` says),
    which scores the detection of unknown-class queries beside the entropy."""

    probs: Tensor
    extras: dict[str, Any] = field(default_factory=dict)


class Method(Configurable, nn.Module):
    """Base class of every few-shot method in the zoo.

    Class attributes:
        name: the registered name (lowercase, hyphens).
        task: the task kind it solves (``zoo tasks``); other kinds derive from their own base,
            :class:`zoo.tasks.methods.TaskMethod`.
        hyperparameters: name -> :class:`~zoo.hparams.HParam` (default, type, choices, range,
            doc), merged along the class hierarchy; the runner's ``--set`` may override exactly
            these, and :func:`resolve_hparams` validates them once.
        uses_kernel / default_kernel / default_backbone: what :func:`build_method` constructs.
        any_way: a model built for one way scores episodes of any other (it has no way-sized
            parameters), so way-transfer suites (``train_way``) run it; see
            :meth:`scores_any_way`. :func:`zoo.testing.check_method` holds a method to it.
        meta_loss_name / inner_objective_name / inner_objective_better: what :meth:`meta_loss`
            returns and what ``Prediction.extras["inner_objective"]`` holds per inner step, in
            words, and whether that objective is better ``"lower"`` or ``"higher"`` (``None``: a
            diagnostic trace without a direction). The report's figures draw losses of
            different names on separate axes (a subclass whose loss depends on its
            hyper-parameters makes them properties); empty: not named.
    """

    name: ClassVar[str]
    task: ClassVar[str] = "classification"
    hyperparameters: ClassVar[Mapping[str, HParam | Any]] = {
        "lr": HParam(1e-3, gt=0, doc="Adam learning rate of the meta-parameters"),
    }
    uses_kernel: ClassVar[bool] = False
    default_kernel: ClassVar[str | None] = None
    default_backbone: ClassVar[str] = "conv4s"
    any_way: ClassVar[bool] = False
    meta_loss_name: ClassVar[str] = ""
    inner_objective_name: ClassVar[str] = ""
    inner_objective_better: ClassVar[str | None] = "lower"
    uncertainty_name: ClassVar[str] = ""

    def __init__(self, backbone: Backbone, *, way: int, kernel: Kernel | None = None, **hparams: Any):
        super().__init__()
        self.backbone, self.kernel, self.way = backbone, kernel, way
        self.hparams = resolve_hparams(type(self), hparams)

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

    def param_groups(self) -> list[dict[str, Any]]:
        """Optimizer parameter groups; override to give the kernel its own learning rate."""
        return [{"params": [p for p in self.parameters() if p.requires_grad],
                 "lr": self.hparams["lr"]}]

    def counters(self) -> dict[str, int]:
        """Numerical events to report with results (the latent-Gaussian family: how often jitter
        was needed)."""
        return {}

    def features(self, x: Tensor) -> Tensor:
        return self.backbone(x)


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
    resolved = resolve_hparams(cls, hparams)  # fail early, before building anything
    backbone_name = backbone or cls.default_backbone
    factory = reg.get("backbones", backbone_name)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        net = factory(in_channels=in_channels, image_size=image_size, **(backbone_options or {}))
        k = None
        if cls.uses_kernel:
            kernel_cls = reg.get("kernels", kernel or cls.default_kernel)
            per_class = resolved.get("per_class_kernel", False)  # declared by kernel families
            k = kernel_cls(net.feature_dim, (way,) if per_class else (), **(kernel_options or {}))
        elif kernel is not None:
            raise HyperParameterError(f"method {name!r} does not use a kernel; drop --kernel")
        return cls(net, way=way, kernel=k, **hparams)
