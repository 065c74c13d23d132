"""Integration: estimate ``E_pi[f]`` from ``n`` samples of ``pi`` (an integrand family of
:mod:`zoo.data.integrands`, each task with its integral known in closed form).

A task is a pure function of (seed, family, split, sample budget, index). A method derives from
:class:`~zoo.tasks.methods.IntegrationMethod` and returns an :class:`IntegralEstimate` (value and
its standard error) from an :class:`IntegrationProblem` (samples, ``f`` at them, the score ``grad log
pi``); it never sees the truth. Records hold the error and, for the same samples, the plain Monte
Carlo error, so the variance-reduction factor against Monte Carlo at the same budget is
``sum_tasks err_MC^2 / sum_tasks err^2`` (1 for Monte Carlo itself). The ``mc`` baseline
(:mod:`zoo.baselines.integration`) is what every control variate is compared with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from zoo.errors import ZooError
from zoo.metrics import mean_ci
from zoo.seeds import Identified, coordinate_seed
from zoo.tasks.base import TIMES, GetEpisode, PredictionError, ReportMetric, Shape, Task, TaskView
from zoo.tasks.figures import MetricLines, ParameterLines

if TYPE_CHECKING:
    from torch import Tensor

    from zoo.data.integrands import IntegrandFamily
    from zoo.tasks.methods import IntegrationMethod


@dataclass(frozen=True)
class IntegrationProblem:
    """What a method sees: ``x [n, d] ~ pi``, ``fx [n]``, ``score [n, d] = grad log pi(x)``;
    ``info["support"]``: ``"real"`` or ``"unit-cube"`` (uniform ``pi``, score zero inside);
    ``related``: problems of related integrals (other fidelities or distributions, each with its
    own samples) that a vector-valued method may use; the estimate is of this problem's integral."""

    x: Tensor
    fx: Tensor
    score: Tensor
    info: dict[str, Any] = field(default_factory=dict)
    related: tuple[IntegrationProblem, ...] = ()


@dataclass(frozen=True)
class IntegrationEpisode(Identified):
    problem: IntegrationProblem
    truth: float

    @property
    def info(self) -> dict[str, Any]:
        return self.problem.info


@dataclass
class IntegralEstimate:
    """A method's estimate of a task's integral and its standard error (NaN: none)."""

    value: float
    stderr: float = math.nan
    extras: dict[str, Any] = field(default_factory=dict)


def sample_integrand(family: IntegrandFamily, split: str, seed: int, samples: int,
                     index: int) -> IntegrationEpisode:
    """The ``index``-th task of ``family``: ``samples`` draws of ``pi`` with ``f`` and the score
    at them, and the integral's true value."""
    import torch

    s = coordinate_seed("integration", int(seed), family.name, split, int(samples), int(index))
    d = family.draw(torch.Generator().manual_seed(s), samples)
    device = family.device
    info = {"dataset": family.name, "split": split, "index": int(index), "seed": s,
            "params": d.params, "support": family.support}
    related = tuple(IntegrationProblem(r.x.to(device), r.fx.to(device), r.score.to(device),
                                       {"params": r.params, "support": family.support})
                    for r in d.related)
    return IntegrationEpisode(IntegrationProblem(d.x.to(device), d.fx.to(device),
                                                 d.score.to(device), info, related), d.truth)


_ERROR_METRICS = (("rmse", "RMSE over tasks"), ("abs_error", "mean |error| (95% CI)"))


class IntegrationView(TaskView):
    """How integration results are shown."""

    paired_key = "abs_error"
    digits = 4
    table_note = ("Mean absolute error over test integrands +- 95% CI; VRF: variance-reduction "
                  "factor against plain Monte Carlo on the same samples (sum of squared MC errors "
                  "/ sum of squared errors). In table.csv: sse (sum of squared errors over the "
                  "test integrands), rmse, train_seconds (offline: meta-training) and "
                  "eval_seconds_per_episode (online: estimation per integrand).")
    report_metrics = (
        ReportMetric("abs_error", "absolute error", "lower", 1, 4, "ci95",
                     "|estimate - truth|, mean over test integrands +- its 95% CI"),
        ReportMetric("abs_error_median", "absolute error (median)", "lower", 1, 4, None,
                     "|estimate - truth|, median over test integrands"),
        ReportMetric("rmse", "RMSE", "lower", 1, 4, None, "root mean squared error"),
        ReportMetric("vrf", "VRF", "higher", 1, 2, None,
                     "variance-reduction factor against plain Monte Carlo on the same samples"),
        *TIMES,
    )
    figures = (MetricLines("samples", _ERROR_METRICS, "integration", log_x=True, log_y=True,
                           errors={"abs_error": "ci95"}),
               ParameterLines(_ERROR_METRICS, "integration", log_y=True, errors={"abs_error": "ci95"}))
    """Error against the budget per family (the Meta-CV study's N_t, Table 4.2's m) and, where a
    family is run at several values of one parameter, against it (its d, South's sigma2)."""

    def cell_text(self, row: Mapping[str, Any], error: bool = False, latex: bool = False) -> str:
        pm = r"$\pm$" if latex else "±"
        return f"{row['abs_error']:.3g} {pm} {row['ci95']:.2g} (VRF {row['vrf']:.3g})"

    def done_line(self, r: Mapping[str, Any]) -> str:
        return (f"mean |error| {r['abs_error']:.3g} +- {r['ci95']:.2g}, RMSE {r['rmse']:.3g} "
                f"(Monte Carlo {r['mc_rmse']:.3g}, VRF {r['vrf']:.3g}), "
                f"{1000 * r['eval_seconds_per_episode']:.2f} ms/task")


class Integration(Task):
    """Integration with known truth: absolute error, variance reduction against Monte Carlo."""

    name = "integration"
    view = IntegrationView()
    method_base = "zoo.tasks.methods:IntegrationMethod"
    data_base = "zoo.data.integrands:IntegrandFamily"
    data_what = "an integrand family"
    data_example = "gaussian-cosine"
    settings: ClassVar[dict[str, Any]] = {"sample_sizes": [10, 100, 1000], "train_samples": 100,
                                          "train_datasets": ["gaussian-cosine"],
                                          "train_episodes": 0, "val_episodes": 0,
                                          "test_episodes": 200}
    train_keys = ("train_samples",)
    column_keys = ("samples",)
    selection_key = "val_neg_abs_error"
    headline = "abs_error"

    def shapes(self, s: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One shape per budget; ``train_samples = 0`` meta-trains at each budget (the Meta-CV
        protocol: training integrands of the test budget ``N_t``), one training per budget."""
        sizes = [int(n) for n in s["sample_sizes"]]
        if not sizes or min(sizes) < 2:
            raise ZooError(f"sample_sizes = {s['sample_sizes']}: give budgets of 2 or more "
                           "samples, e.g. sample_sizes = [10, 100, 1000]")
        train = int(s["train_samples"])
        if train < 0 or train == 1:
            raise ZooError(f"train_samples = {train}: give 2 or more samples per training "
                           "integrand, or 0 to train at each test budget")
        return [{"samples": n, "train_samples": train or n} for n in sizes]

    def label(self, shape: Shape) -> str:
        return f"n={shape['samples']}"

    def data_shape(self, dataset: IntegrandFamily) -> dict[str, Any]:
        return {"dim": dataset.dim}

    def episodes(self, dataset: IntegrandFamily, split: str, shape: Shape, seed: int,
                 training: bool) -> GetEpisode:
        n = shape["train_samples"] if split in ("train", "val") else shape["samples"]
        return lambda i: sample_integrand(dataset, split, seed, n, i)

    def prepare(self, method: IntegrationMethod, get: GetEpisode, indices: Sequence[int]) -> None:
        """A ``batched`` method estimates the cell's test problems together; :meth:`predict` then
        returns the stored estimate of each (the same numbers as one at a time, tested)."""
        method.prepare([get(i).problem for i in indices] if method.batched else [])

    def predict(self, method: IntegrationMethod, episode: IntegrationEpisode) -> IntegralEstimate:
        prepared = method.prepared(episode.problem)
        return prepared if prepared is not None else method.estimate(episode.problem)

    def check(self, prediction: Any, episode: IntegrationEpisode, method: str) -> None:
        if not isinstance(prediction, IntegralEstimate):
            raise PredictionError(f"method {method!r} in episode {episode.id}: returned a "
                                  f"{type(prediction).__name__}; estimate must return "
                                  "zoo.tasks.integration.IntegralEstimate(value, stderr)")
        if not math.isfinite(float(prediction.value)):
            raise PredictionError(f"method {method!r} in episode {episode.id}: non-finite "
                                  f"estimate {prediction.value}; check the method's estimator")

    def score(self, prediction: IntegralEstimate, episode: IntegrationEpisode,
              temperature: float = 1.0) -> dict[str, Any]:
        mc = float(episode.problem.fx.double().mean())
        error = float(prediction.value) - episode.truth
        return {"seed": episode.info.get("seed"), "estimate": float(prediction.value),
                "stderr": float(prediction.stderr), "truth": episode.truth, "error": error,
                "abs_error": abs(error), "mc_error": mc - episode.truth}

    def summarise(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        err = np.asarray([r["error"] for r in records], dtype=np.float64)
        mc = np.asarray([r["mc_error"] for r in records], dtype=np.float64)
        mae, ci = mean_ci(np.abs(err))
        sq = float(np.sum(err**2))
        return {"abs_error": mae, "ci95": ci, "abs_error_median": float(np.median(np.abs(err))),
                "sse": sq, "rmse": float(np.sqrt(np.mean(err**2))),
                "mc_rmse": float(np.sqrt(np.mean(mc**2))),
                "vrf": float(np.sum(mc**2)) / sq if sq > 0 else math.inf,
                "test_episodes": len(records),
                "eval_seconds_per_episode": float(np.mean([r["seconds"] for r in records]))}

    def selection_value(self, records: Sequence[Mapping[str, Any]]) -> float:
        return -float(np.mean([r["abs_error"] for r in records]))
