"""What a task kind is: the contract between the runner and one kind of problem.

A :class:`Task` says how the episodes of a cell are drawn (a pure function of their coordinates),
what a method of the kind is built with and how it is asked for a prediction, which predictions
are admissible, how one episode is scored (a JSON record), how records are summarised (one
function, used by the runner for a cell and by the report for seeds pooled), which validation
number selects a model (higher is better); its :class:`TaskView` says how results are shown (the
report's cells and notes, the paired columns, the figures as data). The runner holds no ``if
kind ==``: it calls these. Kinds register through the ``zoo_register_tasks`` hook,
so a plugin can add one.

A kind's module imports no torch (the runner's calls import it when they run), so that reading
results (``zoo report``) does not: it names its method and data classes as ``"module:Name"``. The
bases of the methods of the kinds other than classification are in :mod:`zoo.tasks.methods`.
"""

from __future__ import annotations

import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, NoReturn

import numpy as np

from zoo.errors import EpisodeError, ZooError
from zoo.tasks.figures import Figure

if TYPE_CHECKING:
    from torch import nn

Shape = Mapping[str, Any]
GetEpisode = Callable[[int], Any]


def numbers(records: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    """``key``'s number in each record, in order, as float64: the array ``np.asarray([r[key] for
    r in records], dtype=np.float64)`` without the list between (a report pools ~10^5-10^6
    records per setting)."""
    return np.fromiter(map(itemgetter(key), records), dtype=np.float64, count=len(records))


def pooled(records: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    """``key``'s lists of numbers (one per query, say) of every record joined in order, as
    float64."""
    return np.fromiter(chain.from_iterable(map(itemgetter(key), records)), dtype=np.float64)


def episode_means(records: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    """``key``'s number per distinct episode: the mean over the records of one episode, which
    several seeds' models share when the episodes are fixed and published (Lake's runs); the
    numbers themselves when every record is its own episode (sampled episodes: the episode's seed
    depends on the cell's). An episode is its ``seed`` (the episode's own, a hash of all its
    coordinates); records without one count as distinct. Order: by episode seed."""
    return per_episode(records, numbers(records, key))


def per_episode(records: Sequence[Mapping[str, Any]], values: np.ndarray) -> np.ndarray:
    """``values`` (one per record, in order) per distinct episode, as :func:`episode_means`."""
    ids = [r.get("seed") for r in records]
    if None in ids:
        return values
    ids = np.fromiter(ids, dtype=np.int64, count=len(ids))
    unique, inverse = np.unique(ids, return_inverse=True)
    if unique.size == ids.size:
        return values
    return np.bincount(inverse, weights=values) / np.bincount(inverse)


def named_class(ref: type | str) -> type:
    """``ref`` itself, or the class a ``"module:Name"`` names (imported now)."""
    return ref if isinstance(ref, type) else pkgutil.resolve_name(ref)


class PredictionError(ZooError):
    """A method returned a prediction the task cannot score (wrong shape, non-finite, ...)."""


class PredictionCheck:
    """The checks of one method's prediction on one episode: each failure raises a
    :class:`PredictionError` ``"method M in WHERE: PROBLEM; REMEDY"``, where the remedy says what
    the kind's ``predict`` must return."""

    def __init__(self, method: str, where: str, remedy: str):
        self.method, self.where, self.remedy = method, where, remedy

    def fail(self, problem: str) -> NoReturn:
        raise PredictionError(f"method {self.method!r} in {self.where}: {problem}; {self.remedy}")

    def of_type(self, prediction: Any, cls: type, name: str) -> None:
        """Fail unless ``prediction`` is a ``cls`` (called ``name`` in the message)."""
        if not isinstance(prediction, cls):
            self.fail(f"returned a {type(prediction).__name__}, not a {name}")


SIMPLEX_TOLERANCE = 1e-4
"""How far class probabilities may lie outside the simplex: a row's sum from 1 (float32 softmax
rows are within ~1e-6), an entry below 0 (round-off of an estimate such as ``1 - sum`` of the
others, e.g. -1e-17; the scores clamp it: the log-likelihood at 1e-12)."""


def probabilities_problem(p: np.ndarray) -> str | None:
    """What is wrong with class probabilities ``p [..., classes]`` (float64), or None: every entry
    finite and at least ``-SIMPLEX_TOLERANCE``, every row summing to 1 within
    ``SIMPLEX_TOLERANCE``. In NumPy: a few microseconds, against tens for torch's per-call
    dispatch."""
    if not np.isfinite(p).all():
        return "non-finite probabilities"
    if p.size and p.min() < -SIMPLEX_TOLERANCE:
        return (f"negative probabilities (smallest {float(p.min()):.3g}, tolerance "
                f"-{SIMPLEX_TOLERANCE})")
    error = float(np.abs(p.sum(-1) - 1).max()) if p.size else 0.0
    if error > SIMPLEX_TOLERANCE:
        return f"a row of probabilities sums to 1 +- {error:.3g} (tolerance {SIMPLEX_TOLERANCE})"
    return None


class ReportMetric(NamedTuple):
    """A number of a kind's summary that the HTML report can show in its table.

    key: the summary key; label: the column's name; better: ``"higher"`` or ``"lower"`` (the
    best of a column is marked), ``None`` for a number that is not a score (times, coverage);
    scale: the factor shown (100 for fractions shown in percent); digits: decimals shown;
    ci: the summary key of its 95% CI half-width, if any; help: what it is, in a sentence."""

    key: str
    label: str
    better: str | None
    scale: float = 1.0
    digits: int = 3
    ci: str | None = None
    help: str = ""


TIMES = (ReportMetric("train_seconds", "training (s)", None, digits=0,
                      help="wall-clock seconds of meta-training, mean over seeds"),
         ReportMetric("eval_seconds_per_episode", "ms per test episode", None, 1000, 0,
                      help="wall-clock milliseconds to adapt and predict one test episode"))
"""The runner's two times of a cell, which every kind's summary holds, as report metrics."""


class TaskView(ABC):
    """How the results of one task kind are shown: the report's cells, notes and paired
    columns, the bench's line per finished cell, and the figures (as data the runner draws).

    Attributes:
        paired_key: the per-episode record key the report compares methods on, pairwise (shown
            in percent with ``paired_percent``, with ``digits`` decimals).
        table_note: the line under the kind's report table saying what its cells hold.
        report_metrics: the summary numbers the HTML report's table can show, the first by
            default (none declared: the headline, unmarked).
        figures: what the report draws for this kind, as data (:mod:`zoo.tasks.figures`).
    """

    paired_key: ClassVar[str] = ""
    paired_percent: ClassVar[bool] = False
    digits: ClassVar[int] = 3
    table_note: ClassVar[str] = ""
    report_metrics: ClassVar[tuple[ReportMetric, ...]] = ()
    figures: ClassVar[tuple[Figure, ...]] = ()

    @abstractmethod
    def cell_text(self, row: Mapping[str, Any], error: bool = False, latex: bool = False) -> str:
        """A report table cell for a summary row that has numbers."""

    def notes(self, rows: Sequence[Mapping[str, Any]]) -> str:
        """Sentences after :attr:`table_note` that depend on what the table's ``rows`` hold."""
        return ""

    def done_line(self, result: Mapping[str, Any]) -> str:
        """What ``zoo bench`` prints when a cell finishes: :meth:`done_numbers`, the training
        time and the time per test episode."""
        return (f"{self.done_numbers(result)}, train {result['train_seconds']:.0f}s, "
                f"{1000 * result['eval_seconds_per_episode']:.0f} ms/episode")

    def done_numbers(self, result: Mapping[str, Any]) -> str:
        """The scores :meth:`done_line` shows: the report's cell (:meth:`cell_text`) unless a
        kind says more."""
        return self.cell_text(result)


class Task(ABC):
    """One task kind. Subclasses set the class attributes and implement the abstract methods.

    Attributes:
        name: the registered name (``suite.task``, ``Method.task``).
        method_base: the class a method of this kind derives from (named in errors), or its
            ``"module:Name"`` (imported when a method is checked).
        data_base, data_what, data_example: the class of this kind's data sets (or its
            ``"module:Name"``), what it is in words and a registered example, for the error when
            a suite names other data.
        settings: the suite settings this kind adds, with their defaults (``--set`` works on them).
        train_keys: the shape keys that identify a cell's training (others only its scoring).
        column_keys: the shape keys of a report column (seeds pooled).
        selection_key: the validation number that selects the checkpoint, higher is better; also
            its name in ``training.json`` and in the results line.
        headline: the record key shown while scoring.
        score_batch: test episodes the runner checks and scores together
            (:meth:`check_many`, :meth:`score_many`; it holds them until then): more than 1 for a
            kind that scores a group in one batched call.
        view: how its results are shown (:class:`TaskView`).
        seed_keys: summary keys the report also gives as mean +- 95% CI over seeds
            (``KEY_seed_mean``, ``KEY_seed_ci95``) where a row has several; the headline's are
            ``seed_mean`` and ``seed_ci95``.
    """

    name: ClassVar[str]
    method_base: ClassVar[type | str]
    data_base: ClassVar[type | str] = object
    data_what: ClassVar[str] = "data of this kind"
    data_example: ClassVar[str] = ""
    settings: ClassVar[dict[str, Any]] = {}
    train_keys: ClassVar[tuple[str, ...]] = ()
    column_keys: ClassVar[tuple[str, ...]] = ()
    selection_key: ClassVar[str] = "val_score"
    headline: ClassVar[str] = ""
    score_batch: ClassVar[int] = 1
    view: ClassVar[TaskView]
    seed_keys: ClassVar[tuple[str, ...]] = ()

    # -- cells -----------------------------------------------------------------------------------

    @abstractmethod
    def shapes(self, settings: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The shapes of the cells a suite part asks for (one cell per shape, data set, seed)."""

    def train_shape(self, shape: Shape) -> dict[str, Any]:
        """What of ``shape`` identifies the cell's training (cells equal in it share a model). A
        kind may leave a train key out of a shape at its default (regression's ``train_tasks``), so
        the names of cells trained before the key existed do not change."""
        return {k: shape[k] for k in self.train_keys if k in shape}

    def supports(self, cls: type, hparams: Mapping[str, Any], shape: Shape) -> bool:
        """Whether a method of class ``cls`` with ``hparams`` can run a cell of ``shape``; the
        cells it cannot run are left out of a suite (a way-transfer shape for a method whose
        parameters depend on the way)."""
        return True

    def train_episodes(self, value: int | Mapping[str, int], shape: Shape) -> int:
        """``train_episodes`` of a shape; a mapping is keyed by what :meth:`episodes_key` gives."""
        if isinstance(value, Mapping):
            key = self.episodes_key(shape)
            if str(key) not in value:
                raise ZooError(f"train_episodes gives counts for {sorted(value)}, not for {key}")
            return int(value[str(key)])
        return int(value)

    def episodes_key(self, shape: Shape) -> Any:
        return None

    @abstractmethod
    def label(self, shape: Shape) -> str:
        """A short text for a shape (``5w1s``, ``ctx 4``), used in cell labels and the report."""

    def setting(self, line: Mapping[str, Any]) -> tuple:
        """What identifies a report column, from a results line or a cell config (sortable)."""
        return tuple(line[k] for k in self.column_keys)

    def setting_label(self, setting: tuple) -> str:
        return self.label(dict(zip(self.column_keys, setting)))

    # -- data, methods, predictions ----------------------------------------------------------

    def check_data(self, dataset: Any, name: str) -> None:
        """Raise a clear error if ``dataset`` is not data of this kind."""
        if not isinstance(dataset, named_class(self.data_base)):
            raise EpisodeError(f"data set {name!r} is not {self.data_what}; a {self.name} suite "
                               f"needs one such as {self.data_example} (zoo datasets)")

    def check_compatible(self, train_data: Any, test_data: Any, method: str) -> None:
        """Raise if a model trained on ``train_data`` cannot be scored on ``test_data``: by
        default, when the two data sets' :meth:`data_shape` (what a model is built with) differ."""
        built, scored = self.data_shape(train_data), self.data_shape(test_data)
        if built != scored:
            def text(shape: dict[str, Any]) -> str:
                return ", ".join(f"{k} = {v}" for k, v in shape.items())
            raise EpisodeError(f"{method} was built for {train_data.name!r} ({text(built)}) and "
                               f"cannot be scored on {test_data.name!r} ({text(scored)}); choose "
                               "a test data set of the same shape")

    def check_method(self, cls: type) -> None:
        """Raise if ``cls`` does not implement this kind's interface."""
        base = named_class(self.method_base)
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ZooError(f"method {getattr(cls, 'name', cls)!r} declares task {self.name!r} but "
                           f"is not a {base.__module__}.{base.__name__}; derive from that class")

    def data_shape(self, dataset: Any) -> dict[str, Any]:
        """What a method of this kind is built with besides its hyper-parameters (dimensions;
        the method base's ``from_cell`` asks)."""
        return {}

    @abstractmethod
    def episodes(self, dataset: Any, split: str, shape: Shape, seed: int,
                 training: bool) -> GetEpisode:
        """``get(i)``: the i-th episode of ``split`` (a pure function of the coordinates)."""

    def auxiliary_datasets(self, shape: Shape) -> list[str]:
        """Data sets a cell's test episodes draw on besides its test set (the runner loads them
        and passes them to :meth:`test_episodes` by name); default: none."""
        return []

    def test_episodes(self, dataset: Any, shape: Shape, seed: int, count: int,
                      auxiliary: Mapping[str, Any] | None = None) -> tuple[int, GetEpisode]:
        """How many test episodes a cell scores and how to get the i-th; ``auxiliary``: the data
        sets :meth:`auxiliary_datasets` names, by name."""
        return count, self.episodes(dataset, "test", shape, seed, training=False)

    def prepare(self, method: nn.Module, get: GetEpisode, indices: Sequence[int]) -> None:
        """Before episodes ``indices`` of ``get`` are predicted one by one, let ``method`` infer
        them together if it can (the runner adds the time to theirs); default: nothing."""
        return None

    @abstractmethod
    def predict(self, method: nn.Module, episode: Any) -> Any:
        """Ask ``method`` for its prediction on ``episode`` (the call the runner times)."""

    @abstractmethod
    def check(self, prediction: Any, episode: Any, method: str) -> None:
        """Raise :class:`PredictionError` naming the method, the episode and what to fix."""

    @abstractmethod
    def score(self, prediction: Any, episode: Any, temperature: float = 1.0) -> dict[str, Any]:
        """The per-episode record (JSON-serialisable)."""

    def check_many(self, predictions: Sequence[Any], episodes: Sequence[Any], method: str) -> None:
        """:meth:`check` of each, in order (a kind may test them at once, raising what
        :meth:`check` raises for the first bad one)."""
        for prediction, episode in zip(predictions, episodes, strict=True):
            self.check(prediction, episode, method)

    def score_many(self, predictions: Sequence[Any], episodes: Sequence[Any],
                   temperature: float = 1.0) -> list[dict[str, Any]]:
        """:meth:`score` of each checked prediction (a kind may score them in one batched call;
        the runner scores a cell's test episodes in groups)."""
        return [self.score(p, e, temperature) for p, e in zip(predictions, episodes, strict=True)]

    @abstractmethod
    def summarise(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Numbers over the records of a cell, or of several seeds pooled (the report)."""

    # -- model selection ---------------------------------------------------------------------

    def meta_loss(self, method: nn.Module, episode: Any):
        """One meta-training step's loss (the runner's training loop calls this)."""
        return method.meta_loss(episode)

    def validate(self, method: nn.Module, get: GetEpisode, count: int,
                 method_name: str) -> tuple[float, dict[str, Any]]:
        """The selection score on ``count`` validation episodes and what :meth:`calibrate` needs."""
        records = []
        for i in range(count):
            episode = get(i)
            prediction = self.predict(method, episode)
            self.check(prediction, episode, method_name)
            records.append(self.score(prediction, episode))
        return float(self.selection_value(records)), {}

    def selection_value(self, records: Sequence[Mapping[str, Any]]) -> float:
        return float(np.mean([r[self.headline] for r in records]))

    def calibrate(self, payload: Mapping[str, Any]) -> float:
        """A temperature fitted on validation output (``payload``: what :meth:`validate`
        returned for the selected model, and ``what``, the cell's label for messages); kinds
        without one return 1."""
        return 1.0
