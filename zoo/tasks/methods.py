"""The bases of the methods of the task kinds other than classification, one per kind on the
base of every method, :class:`zoo.method.BaseMethod` (classification's is :class:`zoo.Method`):
:class:`RegressionMethod`, :class:`StreamMethod` and :class:`IntegrationMethod`.

They live apart from their kinds' modules (:mod:`zoo.tasks.regression`, ...), which say what an
episode is and how a prediction is scored and summarised, so that reading results (``zoo
report``) needs no torch.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from torch import Tensor

from zoo.errors import ZooError
from zoo.method import BaseMethod
from zoo.tasks.integration import IntegralEstimate, IntegrationEpisode, IntegrationProblem
from zoo.tasks.regression import RegressionEpisode, RegressionPrediction
from zoo.tasks.sequential import Stream


class RegressionMethod(BaseMethod):
    """Base of a regression method, built as ``cls(x_dim=..., y_dim=..., **hparams)``."""

    task = "regression"

    def __init__(self, *, x_dim: int, y_dim: int, **hparams: Any):
        super().__init__(**hparams)
        self.x_dim, self.y_dim = x_dim, y_dim

    @abstractmethod
    def meta_loss(self, episode: RegressionEpisode) -> Tensor:
        """A scalar loss for one meta-training step on ``episode``."""

    @abstractmethod
    def predict(self, episode: RegressionEpisode) -> RegressionPrediction:
        """The predictive distribution of ``episode.target_y`` given the context only."""

    def prepare(self, episodes: Sequence[RegressionEpisode]) -> None:
        """Called with the test episodes of a cell before they are predicted one by one: a
        method whose inference is iterative may fit them together here (GMM-NP's batched
        test-time fits); :meth:`predict` and :meth:`bounds` must give the same with or without
        it. The default does nothing."""

    def bounds(self, episode: RegressionEpisode, samples: int
                        ) -> tuple[float, float] | None:
        """``(ELBO, importance-weighted bound)`` of the method's ``log p(target_y | target_x,
        context)`` from ``samples`` draws of its posterior given all targets, both computed on the
        same draws (so ``ELBO <= IW`` exactly), drawn from the episode's seed; ``None``: the method
        has no such bound (the default). A method with several posteriors given all targets may
        return named pairs, ``{"": main, "NAME": (ELBO, IW)}``: the report then has
        ``looseness_NAME`` beside ``looseness``."""
        return None


class StreamMethod(BaseMethod):
    """Base of a sequential method, built as ``cls(dim=..., classes=..., **hparams)``; a state is
    whatever the method likes (tensors, a tuple), passed back to it. ``classes = 0``: a
    regression stream (real-valued targets), which only a method that sets ``regression`` takes.

    Class attributes:
        regression: the method also predicts real-valued targets (a Gaussian per example).
        classification: the method predicts class probabilities.
    """

    task = "sequential"
    regression: ClassVar[bool] = False
    classification: ClassVar[bool] = True

    def __init__(self, *, dim: int, classes: int, **hparams: Any):
        super().__init__(**hparams)
        if classes == 0 and not self.regression:
            raise ZooError(f"method {self.name!r} predicts classes, and this stream's targets are "
                           "real-valued (a regression stream, classes = 0); run a method for "
                           "regression streams on it (online-blr, bong)")
        if classes > 0 and not self.classification:
            raise ZooError(f"method {self.name!r} predicts real-valued targets, and this stream "
                           f"has {classes} classes; run it on a regression stream "
                           "(e.g. diabetes-stream)")
        self.dim, self.classes = dim, classes

    @abstractmethod
    def init(self) -> Any:
        """The state before any example (the prior)."""

    def begin(self, stream: Stream) -> Any:
        """The state at the start of ``stream``: :meth:`init`, unless the method draws random
        numbers, which it then seeds from the stream (:func:`zoo.seeds.draw_seed`)."""
        return self.init()

    @abstractmethod
    def update(self, state: Any, x: Tensor, y: Tensor) -> Any:
        """The state after seeing one example ``x [dim]`` with label ``y`` (a 0-d tensor)."""

    @abstractmethod
    def predict(self, state: Any, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        """Class probabilities ``[n, classes]`` for ``x [n, dim]``; on a regression stream the
        Gaussian predictive ``(mean [n], variance [n])``."""


class IntegrationMethod(BaseMethod):
    """Base of an integration method, built as ``cls(dim=..., **hparams)``. A method whose fit
    batches over tasks sets ``batched`` and implements :meth:`estimate_batch`; the runner then
    estimates a cell's test problems together before asking for them one by one."""

    task = "integration"
    batched: ClassVar[bool] = False

    def __init__(self, *, dim: int, **hparams: Any):
        super().__init__(**hparams)
        self.dim = dim
        self._prepared: dict[bytes, IntegralEstimate] = {}

    @abstractmethod
    def estimate(self, problem: IntegrationProblem) -> IntegralEstimate:
        """The estimate of ``E_pi[f]`` from the problem's samples."""

    def estimate_batch(self, problems: Sequence[IntegrationProblem]) -> list[IntegralEstimate]:
        """The estimates of several problems (one family, one budget), equal to :meth:`estimate`
        on each; a ``batched`` method fits them at once here."""
        return [self.estimate(p) for p in problems]

    def prepare(self, problems: Sequence[IntegrationProblem]) -> None:
        """Estimate ``problems`` together (``batched`` methods) and keep the estimates until
        :meth:`prepared` hands each out once; replaces what an earlier call kept."""
        self._prepared = {}
        if self.batched and problems:
            self._prepared = dict(zip(map(problem_key, problems), self.estimate_batch(problems)))

    def prepared(self, problem: IntegrationProblem) -> IntegralEstimate | None:
        """The estimate :meth:`prepare` made of ``problem`` (the same samples), or ``None``."""
        return self._prepared.pop(problem_key(problem), None)

    def meta_loss(self, episode: IntegrationEpisode) -> Tensor:
        raise ZooError(f"method {self.name!r} is not meta-trained; set train_episodes = 0")


def problem_key(problem: IntegrationProblem) -> bytes:
    """A problem's identity: the bytes of its samples and integrand values."""
    return b"".join(t.detach().cpu().numpy().tobytes() for t in (problem.x, problem.fx))
