"""Sequential (online) classification and regression: a stream of labelled examples seen once
each, in a seeded order; the method keeps a state (``init``, ``update(state, x, y)``,
``predict(state, x)``), as in the Bayesian online natural-gradient family (Jones et al. 2024) and
pyro's ``SMCFilter``.

An episode is one stream: a pure function of (seed, data set, split, stream length, index). It is
scored on the data set's held-out examples after each of the ``eval_steps`` updates, and by the
wall time per update. On a class stream: NLPD (mean negative log predictive probability), error
rate and ECE (15 bins). On a regression stream (a data set with ``classes = 0``: real-valued
targets) the method predicts a Gaussian ``N(mean, variance)`` per held-out example and is scored by
its exact NLPD (mean ``log(2 pi var) / 2 + (y - mean)^2 / (2 var)``) and RMSE. A record holds
the whole curve (each point also the wall time of the updates so far); the summary gives the
final numbers with 95% CIs over streams and the mean curve, plotted against examples seen and
against wall time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from zoo.errors import EpisodeError, ZooError
from zoo.metrics import ece_mce, mean_ci, nll
from zoo.seeds import Identified, coordinate_seed
from zoo.tasks.base import (
    GetEpisode,
    PredictionCheck,
    ReportMetric,
    Shape,
    Task,
    TaskView,
    probabilities_problem,
)
from zoo.tasks.figures import CurveGrid

if TYPE_CHECKING:
    from torch import Tensor

    from zoo.data.streams import StreamData
    from zoo.tasks.methods import StreamMethod

@dataclass(frozen=True)
class Stream(Identified):
    """``x [T, dim]``, ``y [T]`` in stream order; ``held_x``, ``held_y`` for scoring;
    ``eval_steps``: after how many updates the method is scored."""

    x: Tensor
    y: Tensor
    held_x: Tensor
    held_y: Tensor
    eval_steps: tuple[int, ...]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StreamPrediction:
    """The predictions on the held-out examples after each evaluation step: class probabilities
    ``[H, classes]``, or on a regression stream the Gaussian predictive ``(mean [H], variance
    [H])``; and the wall time of every update."""

    probs: list[Tensor]
    update_seconds: list[float]
    extras: dict[str, Any] = field(default_factory=dict)


class SequentialView(TaskView):
    """How sequential results are shown."""

    paired_key = "final_nlpd"
    table_note = ("Held-out NLPD and error (%; regression streams: RMSE) after the whole stream, "
                  "mean +- 95% CI over streams; ms per update. Curves along the stream: "
                  "sequential-*.png; ECE: table.csv.")
    report_metrics = (
        ReportMetric("final_nlpd", "NLPD after the stream", "lower", 1, 3, "nlpd_ci95",
                     "held-out negative log predictive density after the whole stream, mean over "
                     "streams +- its 95% CI"),
        ReportMetric("final_error", "error after the stream (%)", "lower", 100, 1, "error_ci95",
                     "held-out classification error after the whole stream"),
        ReportMetric("final_ece", "ECE after the stream (%)", "lower", 100, 1, None,
                     "held-out expected calibration error after the whole stream"),
        ReportMetric("final_rmse", "RMSE after the stream", "lower", 1, 3, "rmse_ci95",
                     "held-out root mean squared error of the predictive mean after the whole "
                     "regression stream"),
        ReportMetric("update_ms", "ms per update", None, 1, 2, None,
                     "wall-clock milliseconds of one update, mean"),
    )
    figures = (CurveGrid(rows=(("step", "examples seen"),
                               ("update_seconds", "wall time of the updates (s)")),
                         columns=(("nlpd", "held-out NLPD"), ("error", "held-out error"),
                                  ("rmse", "held-out RMSE")),
                         name="sequential", x_scale="symlog"),)

    def cell_text(self, row: Mapping[str, Any], error: bool = False, latex: bool = False) -> str:
        pm = r"$\pm$" if latex else "±"
        pct = r"\%" if latex else "%"
        if "final_rmse" in row:
            return (f"NLPD {row['final_nlpd']:.3f} {pm} {row['nlpd_ci95']:.3f}, RMSE "
                    f"{row['final_rmse']:.3f}, {row['update_ms']:.2f} ms/update")
        return (f"NLPD {row['final_nlpd']:.3f} {pm} {row['nlpd_ci95']:.3f}, error "
                f"{100 * row['final_error']:.1f}{pct}, {row['update_ms']:.2f} ms/update")

    def done_line(self, r: Mapping[str, Any]) -> str:
        if "final_rmse" in r:
            return self.cell_text(r)
        return self.cell_text(r) + f", ECE {100 * r['final_ece']:.1f}%"


class Sequential(Task):
    """Online classification (NLPD, error, ECE) or regression (Gaussian NLPD, RMSE) on a stream
    seen once, scored along the stream."""

    name = "sequential"
    view = SequentialView()
    method_base = "zoo.tasks.methods:StreamMethod"
    data_base = "zoo.data.streams:StreamData"
    data_what = "a stream data set"
    data_example = "digits-stream"
    settings: ClassVar[dict[str, Any]] = {"stream_length": 1000,
                                          "eval_steps": [10, 30, 100, 300, 1000],
                                          "train_datasets": ["digits-stream"],
                                          "train_episodes": 0, "val_episodes": 0,
                                          "test_episodes": 5}
    column_keys = ("stream_length",)
    selection_key = "val_neg_nlpd"
    headline = "final_nlpd"

    def shapes(self, s: Mapping[str, Any]) -> list[dict[str, Any]]:
        length, steps = int(s["stream_length"]), sorted({int(t) for t in s["eval_steps"]})
        if not steps or steps[0] < 0 or steps[-1] > length:
            raise ZooError(f"eval_steps = {s['eval_steps']} must be within 0..stream_length = "
                           f"{length}, e.g. eval_steps = [10, 100, {length}]")
        return [{"stream_length": length, "eval_steps": steps}]

    def label(self, shape: Shape) -> str:
        return f"T={shape['stream_length']}"

    def check_method(self, cls: type) -> None:
        super().check_method(cls)
        missing = [m for m in ("init", "update", "predict")
                   if not callable(getattr(cls, m, None))
                   or getattr(getattr(cls, m), "__isabstractmethod__", False)]
        if missing:
            raise ZooError(f"method {cls.name!r} declares task 'sequential' but does not implement "
                           f"{', '.join(missing)}; a stream method implements init(), "
                           "update(state, x, y) and predict(state, x)")

    def data_shape(self, dataset: StreamData) -> dict[str, Any]:
        return {"dim": dataset.dim, "classes": dataset.classes}

    def episodes(self, dataset: StreamData, split: str, shape: Shape, seed: int,
                 training: bool) -> GetEpisode:
        import torch

        length = shape["stream_length"]
        pool, held_out = dataset.indices(split)
        if length > len(pool):
            raise EpisodeError(f"stream_length = {length}, but {dataset.name!r} has "
                               f"{len(pool)} stream examples; lower stream_length")

        def get(i: int) -> Stream:
            s = coordinate_seed("sequential", int(seed), dataset.name, split, int(length), int(i))
            order = pool[torch.randperm(len(pool),
                                        generator=torch.Generator().manual_seed(s))[:length]]
            order = order.to(dataset.device)
            held = held_out.to(dataset.device)
            return Stream(dataset.x[order], dataset.y[order], dataset.x[held], dataset.y[held],
                          tuple(shape["eval_steps"]),
                          info={"dataset": dataset.name, "split": split, "index": int(i),
                                "seed": s})
        return get

    def predict(self, method: StreamMethod, stream: Stream) -> StreamPrediction:
        """Run the whole stream: ``update`` once per example, ``predict`` at each eval step."""
        state, probs, seconds = method.begin(stream), [], []
        steps = set(stream.eval_steps)
        if 0 in steps:
            probs.append(method.predict(state, stream.held_x))
        for t in range(len(stream.y)):
            start = time.perf_counter()
            state = method.update(state, stream.x[t], stream.y[t])
            seconds.append(time.perf_counter() - start)
            if t + 1 in steps:
                probs.append(method.predict(state, stream.held_x))
        return StreamPrediction(probs, seconds)

    def meta_loss(self, method: Any, episode: Stream) -> Tensor:
        raise ZooError("sequential methods are not meta-trained; set train_episodes = 0")

    def check(self, prediction: Any, stream: Stream, method: str) -> None:
        if stream.held_y.is_floating_point():
            self._check_gaussian(prediction, stream, method)
            return
        checks = PredictionCheck(method, f"stream {stream.id}", "predict must return class "
                                 "probabilities [examples, classes], rows summing to 1")
        if not isinstance(prediction, StreamPrediction) or \
                len(prediction.probs) != len(stream.eval_steps):
            checks.fail("did not give one prediction per evaluation step")
        classes = int(stream.held_y.max()) + 1
        for p in prediction.probs:
            if p.ndim != 2 or p.shape[0] != len(stream.held_y) or p.shape[1] < classes:
                checks.fail(f"probs have shape {tuple(p.shape)}")
            problem = probabilities_problem(p.detach().double().cpu().numpy())
            if problem is not None:
                checks.fail(problem)

    def _check_gaussian(self, prediction: Any, stream: Stream, method: str) -> None:
        import torch

        checks = PredictionCheck(method, f"regression stream {stream.id}", "predict must return "
                                 "the Gaussian predictive (mean [examples], variance [examples]), "
                                 "variances positive")
        if not isinstance(prediction, StreamPrediction) or \
                len(prediction.probs) != len(stream.eval_steps):
            checks.fail("did not give one prediction per evaluation step")
        shape = tuple(stream.held_y.shape)
        for p in prediction.probs:
            if not (isinstance(p, tuple) and len(p) == 2
                    and all(isinstance(t, torch.Tensor) for t in p)):
                checks.fail(f"gave {type(p).__name__}, not a (mean, variance) pair of tensors")
            mean, var = (t.detach().double().cpu() for t in p)
            if tuple(mean.shape) != shape or tuple(var.shape) != shape:
                checks.fail(f"mean and variance have shapes {tuple(mean.shape)} and "
                            f"{tuple(var.shape)}, not {shape}")
            if not (torch.isfinite(mean).all() and torch.isfinite(var).all()):
                checks.fail("non-finite mean or variance")
            if not (var > 0).all():
                checks.fail(f"variance {float(var.min()):.3g} is not positive")

    def score(self, prediction: StreamPrediction, stream: Stream,
              temperature: float = 1.0) -> dict[str, Any]:
        y = stream.held_y.cpu()
        elapsed = np.concatenate([[0.0], np.cumsum(prediction.update_seconds)])
        curve = []
        for step, p in zip(stream.eval_steps, prediction.probs):
            if y.is_floating_point():
                mean, var = (t.detach().double().cpu() for t in p)
                err2 = (y.double() - mean).square()
                point = {"nlpd": float((0.5 * (2 * math.pi * var).log() + err2 / (2 * var)).mean()),
                         "rmse": float(err2.mean().sqrt())}
            else:
                p = p.detach().double().cpu()
                conf, guess = p.max(1)
                correct = (guess == y).double()
                point = {"nlpd": nll(p, y), "error": float(1 - correct.mean()),
                         "ece": ece_mce(conf.numpy(), correct.numpy())[0]}
            curve.append({"step": step, **point, "update_seconds": float(elapsed[step])})
        last = curve[-1]
        finals = {f"final_{k}": v for k, v in last.items() if k in ("nlpd", "error", "ece", "rmse")}
        return {"seed": stream.info.get("seed"), **finals,
                "update_seconds": float(np.mean(prediction.update_seconds)), "curve": curve}

    def summarise(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        nlpd, nlpd_ci = mean_ci([r["final_nlpd"] for r in records])
        steps = [p["step"] for p in records[0]["curve"]]
        keys = [k for k in ("nlpd", "error", "ece", "rmse", "update_seconds")
                if k in records[0]["curve"][0]]
        curve = [{"step": s, **{k: float(np.mean([r["curve"][i][k] for r in records]))
                                for k in keys}} for i, s in enumerate(steps)]
        if "final_rmse" in records[0]:
            rmse, rmse_ci = mean_ci([r["final_rmse"] for r in records])
            scores = {"final_rmse": rmse, "rmse_ci95": rmse_ci}
        else:
            error, error_ci = mean_ci([r["final_error"] for r in records])
            scores = {"final_error": error, "error_ci95": error_ci,
                      "final_ece": float(np.mean([r["final_ece"] for r in records]))}
        return {"final_nlpd": nlpd, "nlpd_ci95": nlpd_ci, **scores,
                "update_ms": 1000 * float(np.mean([r["update_seconds"] for r in records])),
                "curve": curve, "test_episodes": len(records),
                "eval_seconds_per_episode": float(np.mean([r["seconds"] for r in records]))}

    def selection_value(self, records: Sequence[Mapping[str, Any]]) -> float:
        return -float(np.mean([r["final_nlpd"] for r in records]))
