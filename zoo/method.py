"""The interface every method implements, and how the host builds one from names.

:class:`BaseMethod` is the base of the methods of every task kind: hyper-parameters (``lr``
among them), parameter groups, counters, the names of its losses, the kernel and backbone it is
built with. A few-shot classification method derives from :class:`Method`, an ``nn.Module`` with
two entry points the runner calls: :meth:`Method.meta_loss` (one meta-training step's loss on an
episode) and :meth:`Method.predict` (class probabilities for the queries, from the support only).
Everything else about a method is declared as class attributes, so the runner, the CLI and the
conformance suite can read it without building one.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from zoo.backbones import Backbone
from zoo.episode import Episode
from zoo.errors import HyperParameterError
from zoo.hparams import Configurable, HParam, resolve_hparams
from zoo.kernels import Kernel
from zoo.spec import parse_spec
from zoo.tasks.classification import Prediction, train_way

if TYPE_CHECKING:
    from zoo.plugins import Registry

__all__ = ["BaseMethod", "Method", "Prediction", "build_method"]


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
            :func:`build_method` for classification). ``default_kernel`` is a registered
            kernel's name, used when neither the suite's ``kernel`` nor the method's own
            (``--set NAME.kernel=...``) names one; the kernel gets ``batch_shape=(way,)`` when the
            method's ``per_class_kernel`` hyper-parameter is true, else ``()``.
        meta_loss_name / inner_objective_name / inner_objective_better: what ``meta_loss``
            returns and what a prediction's ``extras["inner_objective"]`` holds per inner step, in
            words, and whether that objective is better ``"lower"`` or ``"higher"`` (``None``: a
            diagnostic trace without a direction). The report's figures draw losses of
            different names on separate axes (a subclass whose loss depends on its
            hyper-parameters makes them properties); empty: not named.
    """

    name: ClassVar[str]
    task: ClassVar[str]
    hyperparameters: ClassVar[Mapping[str, HParam | Any]] = {
        "lr": HParam(1e-3, gt=0, doc="Adam learning rate of the meta-parameters"),
    }
    uses_kernel: ClassVar[bool] = False
    default_kernel: ClassVar[str | None] = None
    default_backbone: ClassVar[str | None] = None
    meta_loss_name: ClassVar[str] = ""
    inner_objective_name: ClassVar[str] = ""
    inner_objective_better: ClassVar[str | None] = "lower"

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
            torch.manual_seed(cell.seed)
            return cls(**cell.task.data_shape(dataset), **cell.hparams)


class Method(BaseMethod):
    """The base of every few-shot classification method.

    Class attributes (besides :class:`BaseMethod`'s):
        any_way: a model built for one way scores episodes of any other (it has no way-sized
            parameters), so way-transfer suites (``train_way``) run it; see
            :meth:`scores_any_way`. :func:`zoo.testing.check_method` holds a method to it.
        uncertainty_name: what ``Prediction.extras["uncertainty"]`` holds, in words, for a
            method that gives its own per-query uncertainty (a GP's latent variance); empty:
            none. :func:`zoo.testing.check_method` holds a method to it.
        transductive: a query's prediction may depend on the order of the other queries. One
            that is not (the default) predicts each query from the support set and that query,
            or from the query set as a set: shuffling the queries permutes its predictions,
            which :func:`zoo.testing.check_method` checks (queries arrive sorted by class, so a
            prediction read off their positions is caught).
    """

    task: ClassVar[str] = "classification"
    default_backbone: ClassVar[str | None] = "conv4s"
    any_way: ClassVar[bool] = False
    uncertainty_name: ClassVar[str] = ""
    transductive: ClassVar[bool] = False

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
        """Class probabilities for ``episode.query_x`` given the labelled support only: the
        runner passes the episode without its query labels (:meth:`Episode.unlabelled`)."""

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
    ``registry``: where the names are looked up (:func:`zoo.registry` is the process's).
    """
    cls = registry.get("methods", name)
    resolved = resolve_hparams(cls, hparams)  # fail early, before building anything
    backbone_name = backbone or cls.default_backbone
    factory = registry.get("backbones", backbone_name)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        net = factory(in_channels=in_channels, image_size=image_size, **(backbone_options or {}))
        k = None
        if cls.uses_kernel:
            kernel_cls = registry.get("kernels", kernel or cls.default_kernel)
            per_class = resolved.get("per_class_kernel", False)  # declared by kernel families
            k = kernel_cls(net.feature_dim, (way,) if per_class else (), **(kernel_options or {}))
        elif kernel is not None:
            raise HyperParameterError(f"method {name!r} does not use a kernel; drop --kernel")
        return cls(net, way=way, kernel=k, registry=registry, **hparams)
