"""Few-shot classification: ``way``-way ``shot``-shot episodes of a :class:`FewShotDataset`.

Transfer protocols: ``train_shot`` trains one model at that shot for every test shot, and
``train_way`` one model at that way for every test way (Sun et al. 2021, Table 6.3: trained 5-way,
tested 5/10/20-way), run by the methods that can score another way than they were built for
(:meth:`zoo.Method.scores_any_way`).

Methods are :class:`zoo.Method` and return :class:`zoo.Prediction` (class probabilities
``[Q, way]``). A record holds accuracy, NLL, Brier and per-query confidence and correctness, from
which calibration (ECE/MCE, 15 bins) is computed across episodes; a temperature fitted on the
validation episodes of the selected model gives the calibrated confidences. The model is selected
by validation accuracy.

Uncertainty (:mod:`zoo.ranking`). Every summary gives selective prediction from the recorded
confidences: AURC and E-AURC per episode, mean +- 95% CI over episodes. With ``unknown_fraction``
above 0 every test episode also gets that fraction of its queries from classes outside its
support (:func:`zoo.episode.with_unknown_queries`: the test split's other classes, or
``unknown_dataset``'s test split), asked of the method in a call of their own after the known
queries, the global RNG restored after it, so the known queries' records are those without
the option bit for bit. Their detection is scored per episode: AUROC and AUPR of predictive
entropy, of one minus the maximum probability and, where a method declares one
(:attr:`zoo.Method.uncertainty_name`, ``Prediction.extras["uncertainty"]``), of its own
uncertainty. ``ensemble`` (M >= 2) asks the runner for the ensemble of each cell's first M
seeds (:mod:`zoo.runner.ensembles`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from zoo.errors import EpisodeError, ZooError
from zoo.metrics import ece_mce, episode_records, fit_temperature, mean_ci
from zoo.ranking import aupr, aurc, auroc, entropy, excess_aurc, risk_coverage
from zoo.tasks.base import (
    TIMES,
    GetEpisode,
    PredictionCheck,
    PredictionError,
    ReportMetric,
    Shape,
    Task,
    TaskView,
    episode_means,
    numbers,
    per_episode,
    pooled,
    probabilities_problem,
)
from zoo.tasks.figures import Coverage, Reliability

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from zoo.data.base import FewShotDataset
    from zoo.episode import Episode
    from zoo.method import Method


@dataclass
class Prediction:
    """What a classification method returns. ``probs``: ``[Q, way]``, rows sum to one.
    ``extras``: optional method-specific outputs, e.g. ``"inner_objective"`` (a list, one value
    per inner step, for convergence plots) and ``"uncertainty"`` (``[Q]``, higher: less sure;
    what :attr:`zoo.Method.uncertainty_name` says), which scores the detection of unknown-class
    queries beside the entropy."""

    probs: Tensor
    extras: dict[str, Any] = field(default_factory=dict)


DETECTORS = ("entropy", "maxprob", "uncertainty")
"""The scores of "unknown" whose AUROC and AUPR are recorded: predictive entropy, one minus the
maximum probability, and the method's own uncertainty (where it declares one)."""


class ClassificationView(TaskView):
    """How classification results are shown."""

    paired_key = "accuracy"
    paired_percent = True
    digits = 1
    table_note = ("Accuracy in % +- 95% CI over test episodes (seeds pooled; an episode several "
                  "seeds were scored on counts once); in parentheses ECE of "
                  "the method's own probabilities / after the temperature fitted on validation "
                  "episodes. 'err' settings give the error in %. Fractions, MCE and NLL: table.csv.")
    report_metrics = (
        ReportMetric("accuracy", "accuracy (%)", "higher", 100, 1, "ci95",
                     "fraction of test queries whose most probable class is right, mean over "
                     "episodes, +- its 95% CI over episodes"),
        ReportMetric("ece", "ECE (%)", "lower", 100, 1, None,
                     "expected calibration error of the method's own probabilities: the "
                     "query-weighted mean |accuracy - confidence| over 15 confidence bins"),
        ReportMetric("ece_calibrated", "ECE, temperature-scaled (%)", "lower", 100, 1, None,
                     "ECE after one temperature fitted on validation episodes"),
        ReportMetric("mce", "MCE (%)", "lower", 100, 1, None,
                     "maximum calibration error: the largest |accuracy - confidence| of a bin"),
        ReportMetric("mce_calibrated", "MCE, temperature-scaled (%)", "lower", 100, 1, None,
                     "MCE after the temperature"),
        ReportMetric("nll", "NLL", "lower", 1, 3, None,
                     "negative log-likelihood of the true class, mean over queries (nats)"),
        ReportMetric("brier", "Brier", "lower", 1, 3, None,
                     "squared error of the probability vector against the one-hot label, summed "
                     "over classes, mean over queries"),
        ReportMetric("aurc", "AURC (%)", "lower", 100, 1, "aurc_ci95",
                     "area under the risk-coverage curve: the error rate among the k most "
                     "confident queries, mean over k, per episode; mean +- 95% CI over episodes"),
        ReportMetric("eaurc", "E-AURC (%)", "lower", 100, 1, "eaurc_ci95",
                     "AURC minus the oracle's (every right query answered first): how badly the "
                     "confidence ranks the errors, whatever the error rate"),
        ReportMetric("auroc_entropy", "AUROC unknown, entropy (%)", "higher", 100, 1,
                     "auroc_entropy_ci95", "probability that an unknown-class query has a higher "
                     "predictive entropy than a known one, per episode, mean +- 95% CI"),
        ReportMetric("auroc_maxprob", "AUROC unknown, max-prob (%)", "higher", 100, 1,
                     "auroc_maxprob_ci95", "the same for one minus the maximum probability"),
        ReportMetric("auroc_uncertainty", "AUROC unknown, own (%)", "higher", 100, 1,
                     "auroc_uncertainty_ci95", "the same for the method's own uncertainty "
                     "(a GP's latent variance, an ensemble's mutual information)"),
        *TIMES,
    )
    figures = (Reliability(), Coverage())

    def cell_text(self, row: Mapping[str, Any], error: bool = False, latex: bool = False) -> str:
        """Accuracy +- CI (ECE raw / calibrated); where unknown-class queries were scored, also
        ``[AURC, E-AURC, AUROC of entropy / max-prob / own uncertainty]`` in %."""
        pm = r"$\pm$" if latex else "±"
        pct = r"\%" if latex else "%"
        value = 100 * (1 - row["accuracy"]) if error else 100 * row["accuracy"]
        ci = "" if math.isnan(row["ci95"]) else f" {pm} {100 * row['ci95']:.1f}"
        text = f"{value:.1f}{ci}"
        ece = f" (ECE {100 * row['ece']:.1f} / {100 * row['ece_calibrated']:.1f}{pct})"
        text += ece if not error else f"{pct} err"
        if "auroc_entropy" not in row:
            return text
        own = f" / {100 * row['auroc_uncertainty']:.0f}" if "auroc_uncertainty" in row else ""
        return (text + f" [AURC {100 * row['aurc']:.1f}, E-AURC {100 * row['eaurc']:.1f}; AUROC "
                f"{100 * row['auroc_entropy']:.0f} / {100 * row['auroc_maxprob']:.0f}{own}]")

    def notes(self, rows: Sequence[Mapping[str, Any]]) -> str:
        if not any("auroc_entropy" in r for r in rows):
            return ""
        return (" In brackets, in %: AURC and E-AURC of the known queries (lower is better; mean "
                "over episodes), then the AUROC of telling unknown-class queries from known ones "
                "by predictive entropy / by one minus the maximum probability / by the method's "
                "own uncertainty where it declares one (higher is better, 50 is chance). CIs, "
                "AUPR and the means over seeds: table.csv.")

    def done_numbers(self, r: Mapping[str, Any]) -> str:
        return (f"accuracy {100 * r['accuracy']:.1f} +- {100 * r['ci95']:.1f}%, "
                f"ECE {100 * r['ece']:.1f}% (calibrated {100 * r['ece_calibrated']:.1f}%)")


class Classification(Task):
    """Few-shot classification: way-way shot-shot episodes, accuracy and calibration."""

    name = "classification"
    view = ClassificationView()
    method_base = "zoo.method:Method"
    data_base = "zoo.data.base:FewShotDataset"
    data_what = "a few-shot classification data set"
    data_example = "glyphs"
    settings: ClassVar[dict[str, Any]] = {"ways": [5], "shots": [1, 5], "train_way": 0,
                                          "train_shot": 0, "query": 15, "train_query": 15,
                                          "unknown_fraction": 0.0, "unknown_dataset": "",
                                          "ensemble": 0}
    train_keys = ("way", "train_shot", "train_query")
    column_keys = ("way", "shot")
    selection_key = "val_accuracy"
    headline = "accuracy"
    score_batch = 32  # ~15 tensor calls per group instead of per episode

    seed_keys = ("aurc", "eaurc", *(f"{a}_{s}" for a in ("auroc", "aupr") for s in DETECTORS))

    def shapes(self, s: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``train_shot = 0`` trains a model per test shot; a positive value one model at that shot.
        Likewise ``train_way``: 0 trains at the test way. The unknown-class queries and the
        ensemble are in a shape only when asked for (the names of other cells stay as they were)."""
        fraction, members = float(s["unknown_fraction"]), int(s["ensemble"])
        if not 0 <= fraction < 1:
            raise ZooError(f"unknown_fraction is the fraction of a test episode's queries from "
                           f"classes outside its support, in [0, 1); got {fraction}")
        if s["unknown_dataset"] and not fraction:
            raise ZooError("unknown_dataset names where unknown-class queries come from; set "
                           "unknown_fraction above 0 to draw them")
        if members == 1 or members < 0:
            raise ZooError(f"ensemble is the number of seeds averaged (at least 2), or 0 for "
                           f"none; got {members}")
        if members > len(s.get("seeds", [])) and members:
            raise ZooError(f"ensemble = {members} needs at least {members} seeds; the suite has "
                           f"{len(s.get('seeds', []))} (set seeds, or lower ensemble)")
        extra: dict[str, Any] = {"unknown_fraction": fraction} if fraction else {}
        if s["unknown_dataset"]:
            extra["unknown_dataset"] = str(s["unknown_dataset"])
        if members:
            extra["ensemble"] = members
        out = []
        for way in s["ways"]:
            out += [{"way": int(way), "train_way": int(s["train_way"]) or int(way), "shot": int(shot),
                     "train_shot": int(s["train_shot"]) or int(shot), "query": int(s["query"]),
                     "train_query": int(s["train_query"])} | extra for shot in s["shots"]]
        return out

    def auxiliary_datasets(self, shape: Shape) -> list[str]:
        """The data set the unknown-class queries come from, when it is not the test set."""
        return [shape["unknown_dataset"]] if shape.get("unknown_dataset") else []

    def train_shape(self, shape: Shape) -> dict[str, Any]:
        """The training's way is ``train_way`` where the shape has one: a way-transfer cell shares
        its model with the cell trained and tested at that way."""
        return {"way": train_way(shape), "train_shot": shape["train_shot"],
                "train_query": shape["train_query"]}

    def supports(self, cls: type, hparams: Mapping[str, Any], shape: Shape) -> bool:
        return train_way(shape) == shape["way"] or cls.scores_any_way(hparams)

    def episodes_key(self, shape: Shape) -> Any:
        return shape["train_shot"]

    def label(self, shape: Shape) -> str:
        trained = [f"{shape['train_way']}-way"] if train_way(shape) != shape["way"] else []
        if "train_shot" in shape and shape["train_shot"] != shape["shot"]:
            trained.append(f"{shape['train_shot']}-shot")
        return f"{shape['way']}w{shape['shot']}s" + (f" (trained {' '.join(trained)})"
                                                      if trained else "")

    def check_compatible(self, train_data: Any, test_data: Any, method: str) -> None:
        if (test_data.in_channels, test_data.image_size) != (train_data.in_channels,
                                                              train_data.image_size):
            raise EpisodeError(
                f"data set {test_data.name!r} has {test_data.in_channels}-channel "
                f"{test_data.image_size}px images, but the model of {method} was trained on "
                f"{train_data.in_channels}-channel {train_data.image_size}px ones "
                f"({train_data.name}); choose a test data set of the same image shape")

    def episodes(self, dataset: FewShotDataset, split: str, shape: Shape, seed: int,
                 training: bool) -> GetEpisode:
        """Training episodes use ``train_way``, ``train_shot`` and ``train_query``; validation
        episodes are ``train_way``-way ``train_shot``-shot with the test ``query``; test episodes
        the test way, shot and query."""
        from zoo.episode import EpisodeSampler

        trained = split in ("train", "val")
        way = train_way(shape) if trained else shape["way"]
        shot = shape["train_shot"] if trained else shape["shot"]
        query = shape["train_query"] if training else shape["query"]
        return EpisodeSampler(dataset, split, way, shot, query, seed=seed).__getitem__

    def test_episodes(self, dataset: FewShotDataset, shape: Shape, seed: int, count: int,
                      auxiliary: Mapping[str, Any] | None = None) -> tuple[int, GetEpisode]:
        """The data set's fixed published test episodes take precedence (Lake's runs); with
        ``unknown_fraction``, each with its unknown-class queries (from ``auxiliary``'s
        ``unknown_dataset`` when the shape names one)."""
        count, get = self._known_test_episodes(dataset, shape, seed, count)
        fraction = float(shape.get("unknown_fraction", 0.0))
        if not fraction:
            return count, get
        from zoo.episode import with_unknown_queries

        name = shape.get("unknown_dataset")
        source = dataset if not name else (auxiliary or {}).get(name)
        if source is None:
            raise EpisodeError(f"unknown-class queries come from data set {name!r}, which was not "
                               "loaded for this evaluation; pass it in auxiliary")
        if source is not dataset:
            self.check_compatible(dataset, source, "this cell")
        return count, lambda i: with_unknown_queries(get(i), source, "test", fraction)

    def _known_test_episodes(self, dataset: FewShotDataset, shape: Shape, seed: int, count: int
                             ) -> tuple[int, GetEpisode]:
        fixed = dataset.fixed_episodes("test")
        if fixed is None:
            return count, self.episodes(dataset, "test", shape, seed, training=False)
        if not fixed:
            raise EpisodeError(f"data set {dataset.name!r} has an empty list of fixed test episodes")
        way, shot = shape["way"], shape["shot"]
        first = fixed[0]
        if (first.way, first.shot) != (way, shot):
            raise EpisodeError(
                f"data set {dataset.name!r} is scored on fixed {first.way}-way {first.shot}-shot "
                f"episodes, but the model is {way}-way {shot}-shot: use way {first.way} and shot "
                f"{first.shot} (zoo bench: --set ways={first.way} --set shots={first.shot}; zoo "
                f"train and zoo evaluate: --way {first.way} --shot {first.shot})")
        device = dataset.device
        return len(fixed), lambda i: fixed[i].to(device)

    def predict(self, method: Method, episode: Episode) -> Prediction:
        """The method's prediction from the episode without its query labels
        (:meth:`zoo.Episode.unlabelled`: reading them raises an error that says why); with
        unknown-class queries, a second call for them (the support with those as queries), its
        prediction in ``extras["unknown"]``. The second call runs with the global RNG forked, so
        what the known queries of this and later episodes get does not depend on whether there
        were unknown ones."""
        known = method.predict(episode.unlabelled())  # without the unknown-class queries
        if episode.unknown_x is None:
            return known
        import torch

        device = episode.query_x.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            unknown = method.predict(episode.unknown().unlabelled())
        return Prediction(known.probs, {**getattr(known, "extras", {}), "unknown": unknown})

    def check(self, prediction: Any, episode: Episode, method: str) -> None:
        """Shape ``[Q, way]``, and in the simplex (:func:`zoo.tasks.base.probabilities_problem`);
        likewise the prediction of the unknown-class queries where the episode has them."""
        _check_probs(prediction, episode.query_y.shape[0], episode, method)
        if episode.unknown_x is not None:
            self._check_unknown(prediction, episode, method)

    def _check_unknown(self, prediction: Any, episode: Episode, method: str) -> None:
        unknown = prediction.extras.get("unknown")
        _check_probs(unknown, episode.unknown_x.shape[0], episode, method, "unknown-class queries' ")

    def check_many(self, predictions: Sequence[Any], episodes: Sequence[Episode],
                   method: str) -> None:
        """:meth:`check` of every prediction, its numbers tested at once when the episodes share
        a shape; any failure is raised by :meth:`check` of the first bad episode."""
        stacked = _stack(predictions, episodes)
        if stacked is not None and probabilities_problem(stacked[0].numpy()) is None:
            for prediction, episode in zip(predictions, episodes, strict=True):
                if episode.unknown_x is not None:
                    self._check_unknown(prediction, episode, method)
            return
        for prediction, episode in zip(predictions, episodes, strict=True):
            self.check(prediction, episode, method)

    def score(self, prediction: Prediction, episode: Episode, temperature: float = 1.0
              ) -> dict[str, Any]:
        return self.score_many([prediction], [episode], temperature)[0]

    def score_many(self, predictions: Sequence[Prediction], episodes: Sequence[Episode],
                   temperature: float = 1.0) -> list[dict[str, Any]]:
        """Records of checked predictions: the seed and classes of the episode, then
        :func:`zoo.metrics.episode_records` (one batched call when the episodes share a shape)."""
        if not episodes:
            return []
        stacked = _stack(predictions, episodes)
        if stacked is None and len(episodes) > 1:  # episodes of several shapes: one at a time
            return [r for p, e in zip(predictions, episodes, strict=True)
                    for r in self.score_many([p], [e], temperature)]
        if stacked is None:
            raise PredictionError(f"episode {episodes[0].id}: a prediction of the wrong type or "
                                  "shape cannot be scored; check it first (Task.check says why)")
        records = episode_records(*stacked, temperature)
        return [{"seed": e.info.get("seed"), "classes": e.info.get("classes")} | r
                | (detection(p) if e.unknown_x is not None else {})
                for p, e, r in zip(predictions, episodes, records, strict=True)]

    def summarise(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Accuracy with its 95% CI over distinct episodes (:func:`~zoo.tasks.base.episode_means`:
        fixed episodes scored by several seeds' models count once each, at their mean, so seeds
        repeated on the same episodes do not narrow it); ECE/MCE/NLL/Brier over all queries
        (fractions)."""
        confidence, calibrated, correct = (pooled(records, k) for k in (  # every query, in order
            "confidence", "confidence_calibrated", "correct"))
        accuracy, ci95 = mean_ci(episode_means(records, "accuracy"))
        ece, mce = ece_mce(confidence, correct)
        ece_cal, mce_cal = ece_mce(calibrated, correct)
        queries = np.fromiter(map(len, map(itemgetter("correct"), records)), dtype=np.float64,
                              count=len(records))  # episodes' means weighted by their queries
        return selective(records) | detected(records) | {
                "accuracy": accuracy, "ci95": ci95, "ece": ece, "mce": mce,
                "nll": float(numbers(records, "nll") @ queries / queries.sum()),
                "brier": float(numbers(records, "brier") @ queries / queries.sum()),
                "ece_calibrated": ece_cal, "mce_calibrated": mce_cal,
                "test_episodes": len(records),
                "eval_seconds_per_episode": float(np.mean(numbers(records, "seconds"))),
                "error_percent": 100.0 * (1.0 - accuracy) if not math.isnan(accuracy) else math.nan}

    def validate(self, method: Method, get: GetEpisode, count: int,
                 method_name: str) -> tuple[float, dict[str, Any]]:
        """Mean accuracy over the validation queries, and their log-probabilities and labels
        (what the temperature is fitted on)."""
        import torch

        probs, labels = [], []
        for start in range(0, count, self.score_batch):  # a group's episodes held at a time
            episodes = [get(i) for i in range(start, min(count, start + self.score_batch))]
            predictions = [self.predict(method, episode) for episode in episodes]
            self.check_many(predictions, episodes, method_name)
            probs += [p.probs for p in predictions]
            labels += [e.query_y for e in episodes]
        logp, y = torch.cat(probs).double().clamp_min(1e-12).log(), torch.cat(labels)
        accuracy = float((logp.argmax(1) == y).double().mean())
        return accuracy, {"val_logp": logp.cpu(), "val_y": y.cpu()}

    def calibrate(self, payload: Mapping[str, Any]) -> float:
        return fit_temperature(payload["val_logp"], payload["val_y"], what=payload.get("what", ""))

def detection(prediction: Prediction) -> dict[str, Any]:
    """An episode's unknown-class detection: the count of unknown queries and, per score of
    :data:`DETECTORS` that both predictions give, AUROC and AUPR (unknown positive)."""
    unknown = prediction.extras["unknown"]
    known_p = prediction.probs.detach().double().cpu().numpy()
    unknown_p = unknown.probs.detach().double().cpu().numpy()
    scores = {"entropy": (entropy(known_p), entropy(unknown_p)),
              "maxprob": (1 - known_p.max(-1), 1 - unknown_p.max(-1))}
    own = prediction.extras.get("uncertainty"), unknown.extras.get("uncertainty")
    if own[0] is not None and own[1] is not None:
        scores["uncertainty"] = tuple(v.detach().double().cpu().numpy() for v in own)
    out: dict[str, Any] = {"unknown_queries": int(unknown_p.shape[0])}
    for name, (k, u) in scores.items():
        out[f"auroc_{name}"], out[f"aupr_{name}"] = auroc(k, u), aupr(k, u)
    return out


def selective(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """AURC and E-AURC of the recorded confidences of each episode (:mod:`zoo.ranking`), mean and
    95% CI over distinct episodes; episodes of equal query counts computed together."""
    values = {"aurc": np.empty(len(records)), "eaurc": np.empty(len(records))}
    by_size: dict[int, list[int]] = {}
    for i, r in enumerate(records):
        by_size.setdefault(len(r["correct"]), []).append(i)
    for size, rows in by_size.items():
        if size == 0:
            values["aurc"][rows] = values["eaurc"][rows] = math.nan
            continue
        conf = np.array([records[i]["confidence"] for i in rows], dtype=np.float64)
        right = np.array([records[i]["correct"] for i in rows], dtype=np.float64)
        values["aurc"][rows], values["eaurc"][rows] = aurc(conf, right), excess_aurc(conf, right)
    out = {}
    for key, v in values.items():
        out[key], out[f"{key}_ci95"] = mean_ci(per_episode(records, v))
    return out


def accuracy_coverage(records: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, ...] | None:
    """The accuracy-coverage curve of the recorded confidences: coverage ``k / n`` and the mean
    over episodes of the accuracy among each episode's ``k`` most confident queries, with the
    oracle's (every right query first) for reference, over the episodes of the most common query
    count ``n``; ``None`` without records."""
    if not records:
        return None
    sizes = np.fromiter(map(len, map(itemgetter("correct"), records)), dtype=np.int64)
    n = int(np.bincount(sizes).argmax())
    rows = [r for r, size in zip(records, sizes, strict=True) if size == n]
    if n == 0:
        return None
    conf = np.array([r["confidence"] for r in rows], dtype=np.float64)
    right = np.array([r["correct"] for r in rows], dtype=np.float64)
    k = np.arange(1, n + 1, dtype=np.float64)
    oracle = np.minimum(right.sum(1, keepdims=True), k) / k
    return k / n, 1 - risk_coverage(conf, right).mean(0), oracle.mean(0)


def detected(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean and 95% CI over distinct episodes of each detection score every record has."""
    keys = [f"{a}_{s}" for s in DETECTORS for a in ("auroc", "aupr")]
    out = {}
    for key in keys:
        if records and all(key in r for r in records):
            out[key], out[f"{key}_ci95"] = mean_ci(episode_means(records, key))
    return out


def _check_probs(prediction: Any, rows: int, episode: Episode, method: str, what: str = "") -> None:
    """Shape ``[rows, way]`` and in the simplex (:func:`zoo.tasks.base.probabilities_problem`);
    ``what`` names which queries in the message."""
    checks = PredictionCheck(method, f"episode {episode.id}", "its predict must return "
                             "zoo.Prediction(probs) with one row of class probabilities per "
                             "query (e.g. torch.softmax(logits, -1))")
    checks.of_type(prediction, Prediction, f"zoo.Prediction{' for ' + what if what else ''}")
    probs = prediction.probs
    expected = (rows, episode.way)
    if tuple(probs.shape) != expected:
        checks.fail(f"{what}probs have shape {tuple(probs.shape)}, expected [queries, way] = "
                    f"{list(expected)}")
    problem = probabilities_problem(probs.detach().double().cpu().numpy())
    if problem is not None:
        checks.fail(what + problem)


def train_way(shape: Shape) -> int:
    """The way a cell's model is built and trained for: ``train_way`` if set, else the test way."""
    return int(shape.get("train_way", shape["way"]))


def _stack(predictions: Sequence[Any], episodes: Sequence[Episode]
           ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The probabilities ``[E, Q, way]`` (float64, on the CPU) and labels ``[E, Q]`` of
    predictions of the right type and shape for episodes that share ``Q`` and ``way``; ``None``
    otherwise (each is then taken alone)."""
    import torch

    if not episodes or not all(isinstance(p, Prediction) for p in predictions):
        return None
    shape = (episodes[0].query_y.shape[0], episodes[0].way)
    if any(tuple(p.probs.shape) != shape for p in predictions) or \
            any((e.query_y.shape[0], e.way) != shape for e in episodes):
        return None
    probs = torch.stack([p.probs.detach() for p in predictions]).double().cpu()
    return probs, torch.stack([e.query_y for e in episodes]).cpu()

