"""Meta-regression: tasks are functions drawn from a family (:mod:`zoo.data.functions`); an
episode has a context set and a target set, the targets including the context (as in the
neural-process literature: GMM-NP, Volpp et al. 2023, A.3.3).

A test task is a pure function of (seed, family, split, number of targets, index): the same task
at every context size, whose context is its first ``context`` points, so scores pair across
context sizes and methods. A training (or validation) episode has ``train_targets`` points and a
context size drawn uniformly from ``0..train_max_context`` by the same seeded generator. By
default every training episode is a new function; ``train_tasks = L > 0`` trains on a fixed pool
of ``L`` functions instead (GMM-NP's protocol: 64 tasks of 16 points, Volpp et al. 2023, A.3.2):
episode ``i`` is function ``i mod L`` (``info["task"]``) with its points in a fresh order
(``info["order"]``: target ``j`` is the function's point ``order[j]``) and a fresh context size, so a
method may keep state per function (GMM-NP's per-subtask posteriors) and an amortised one sees new
context sets at every visit.

A method derives from :class:`~zoo.tasks.methods.RegressionMethod`: ``meta_loss(episode)`` and
``predict(episode) -> RegressionPrediction`` (``S`` latent samples of per-target Gaussian means and
variances; a method whose predictive is one Gaussian over all targets also gives it exactly, as
``joint``, and is then scored by its exact density instead of the samples). Records hold LMLHD,
NLL, MSE, CRPS and 50%/90% coverage (:mod:`zoo.tasks.regression_metrics`); a cell is one context
size, summarised by the median over tasks with 5%/95% percentiles and the mean with its 95% CI,
and, for seeds pooled, by the median over seeds of each seed's median with the 5%/95% percentiles
over seeds (GMM-NP's protocol, A.3.3).
The model is selected by the mean LMLHD of validation episodes.

ELBO looseness (optional capability): with ``bound_samples = S > 0`` a method that implements
:meth:`~zoo.tasks.methods.RegressionMethod.bounds` is also asked, on each test episode, for the ELBO and the
importance-weighted bound of ``log p(target_y | target_x, context)`` from ``S`` samples of its
variational posterior given all targets; records then hold ``elbo``, ``iw_bound`` and
``looseness = iw_bound - elbo`` (an estimate of the KL from that posterior to the true one). A
method with more than one such posterior returns named pairs, ``{"": main, "NAME": other}``;
the other pairs become ``elbo_NAME``, ``iw_bound_NAME`` and ``looseness_NAME``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from zoo.errors import ZooError
from zoo.metrics import mean_ci
from zoo.seeds import Identified, coordinate_seed
from zoo.tasks.base import (
    TIMES,
    GetEpisode,
    PredictionCheck,
    ReportMetric,
    Shape,
    Task,
    TaskView,
)
from zoo.tasks.figures import MetricLines

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from zoo.data.functions import FunctionFamily
    from zoo.tasks.methods import RegressionMethod


@dataclass(frozen=True)
class RegressionEpisode(Identified):
    """One function: ``context_x [C, dx]``, ``context_y [C, dy]``, ``target_x [N, dx]``,
    ``target_y [N, dy]``; the context is the first ``C`` targets."""

    context_x: Tensor
    context_y: Tensor
    target_x: Tensor
    target_y: Tensor
    info: dict[str, Any] = field(default_factory=dict)

    def to(self, device: torch.device | str) -> RegressionEpisode:
        return replace(self, context_x=self.context_x.to(device),
                       context_y=self.context_y.to(device), target_x=self.target_x.to(device),
                       target_y=self.target_y.to(device))


@dataclass
class RegressionPrediction:
    """A uniform mixture of ``S`` factorised Gaussians over the targets: ``mean``, ``var``
    ``[S, N, dy]`` (``S = 1``: one Gaussian per target; :meth:`gaussian` builds that).

    ``joint``: ``(loc [N, dy], cov [dy, N, N])`` where the predictive is exactly one Gaussian over
    all targets (each output dimension's targets jointly, observation noise included), the
    mixture then being ``S`` draws of it. Scores are computed from it, exactly, instead of from
    the draws: a Monte Carlo estimate of a correlated ``N``-dimensional Gaussian's density from
    a few hundred draws is hundreds of nats too low."""

    mean: Tensor
    var: Tensor
    extras: dict[str, Any] = field(default_factory=dict)
    joint: tuple[Tensor, Tensor] | None = None

    @classmethod
    def gaussian(cls, mean: Tensor, var: Tensor) -> RegressionPrediction:
        """One Gaussian per target, ``mean, var [N, dy]``."""
        return cls(mean[None], var[None])


def task_seed(seed: int, family: str, split: str, targets: int, index: int) -> int:
    """A 63-bit seed that depends on every coordinate of the task and on nothing else."""
    return coordinate_seed("regression", int(seed), family, split, int(targets), int(index))


def sample_task(family: FunctionFamily, split: str, seed: int, targets: int, index: int,
                context: int | None, max_context: int = 0,
                bound_samples: int = 0) -> RegressionEpisode:
    """The ``index``-th task; ``context=None`` draws its size from ``0..max_context``;
    ``bound_samples``: draws the method's evidence bounds use (0: none)."""
    import torch

    s = task_seed(seed, family.name, split, targets, index)
    g = torch.Generator().manual_seed(s)
    x, y, params = family.draw(g, targets, split)
    if context is None:
        context = int(torch.randint(0, max_context + 1, (), generator=g))
    device = family.device
    x, y = x.to(device), y.to(device)
    return RegressionEpisode(x[:context], y[:context], x, y,
                             info={"dataset": family.name, "split": split, "index": int(index),
                                   "seed": s, "run_seed": int(seed), "context": context,
                                   "function": params, "bound_samples": int(bound_samples)})


def sample_pooled_task(family: FunctionFamily, split: str, seed: int, targets: int, index: int,
                       pool: int, max_context: int) -> RegressionEpisode:
    """Episode ``index`` of a fixed pool of ``pool`` functions: function ``index mod pool`` (the
    same points at every visit) in an order and with a context size drawn for this episode."""
    import torch

    task = sample_task(family, split, seed, targets, index % pool, 0)
    s = task_seed(seed, family.name, f"{split}-visit", targets, index)
    g = torch.Generator().manual_seed(s)
    order = torch.randperm(targets, generator=g)
    context = int(torch.randint(0, max_context + 1, (), generator=g))
    x, y = task.target_x[order.to(task.target_x.device)], task.target_y[order.to(
        task.target_y.device)]
    return RegressionEpisode(x[:context], y[:context], x, y,
                             info=task.info | {"index": int(index), "seed": s, "context": context,
                                               "task": index % pool, "order": order.tolist()})


def bound_pairs(bounds: Any) -> dict[str, tuple[float, float]]:
    """A method's :meth:`~zoo.tasks.methods.RegressionMethod.bounds` as named ``(ELBO, IW)``
    pairs, ``""`` the main one: ``None`` (no bounds), a pair, or a mapping of named pairs."""
    if bounds is None:
        return {}
    pairs = dict(bounds) if isinstance(bounds, Mapping) else {"": bounds}
    if "" not in pairs:
        raise ZooError(f"bounds returned the pairs {sorted(pairs)}: name the main one \"\" "
                       "(e.g. {\"\": (elbo, iw), \"other\": (elbo, iw)})")
    return {name: (float(e), float(i)) for name, (e, i) in pairs.items()}


class RegressionView(TaskView):
    """How regression results are shown."""

    paired_key = "lmlhd"
    digits = 2
    table_note = ("Median over test tasks of the joint predictive log-likelihood of all targets "
                  "(LMLHD: log-mean-exp over the method's latent samples, or the exact density "
                  "of a Gaussian predictive) [5%, 95% percentiles]; "
                  "with several seeds: median over seeds of each seed's median [5%, 95% over "
                  "seeds]. MSE of the predictive mean (median over tasks); loose: median ELBO "
                  "looseness (IW bound - ELBO) where measured. Means with 95% CI, NLL per "
                  "point, CRPS and 50%/90% coverage: table.csv.")
    report_metrics = (
        ReportMetric("lmlhd_median", "LMLHD (median)", "higher", 1, 2, None,
                     "joint predictive log-likelihood of a task's targets, median over tasks"),
        ReportMetric("lmlhd_mean", "LMLHD (mean)", "higher", 1, 2, "lmlhd_ci95",
                     "joint predictive log-likelihood, mean over tasks +- its 95% CI"),
        ReportMetric("mse_median", "MSE (median)", "lower", 1, 4, None,
                     "squared error of the predictive mean, median over tasks"),
        ReportMetric("nll", "NLL per point", "lower", 1, 3, None,
                     "negative log predictive density of a target, mean over targets and tasks"),
        ReportMetric("crps", "CRPS", "lower", 1, 4, None,
                     "continuous ranked probability score of the predictive, mean"),
        ReportMetric("coverage50", "50% coverage", None, 100, 1, None,
                     "% of targets inside the central 50% predictive interval (50 is right)"),
        ReportMetric("coverage90", "90% coverage", None, 100, 1, None,
                     "% of targets inside the central 90% predictive interval (90 is right)"),
        *TIMES,
    )
    figures = (MetricLines("context", (("lmlhd_median", "LMLHD (median over tasks)"),
                                       ("mse_median", "MSE (median)"), ("crps", "CRPS (mean)"),
                                       ("coverage90", "90% interval coverage")), "regression"),)

    def cell_text(self, row: Mapping[str, Any], error: bool = False, latex: bool = False) -> str:
        """Median LMLHD [5%, 95%] over tasks (over seeds' medians when several seeds are pooled),
        median MSE, and the median ELBO looseness where measured."""
        over = "lmlhd_seeds" if row.get("seeds_pooled", 1) > 1 else "lmlhd"
        text = (f"{row[f'{over}_median']:.1f} [{row[f'{over}_p05']:.1f}, "
                f"{row[f'{over}_p95']:.1f}], MSE {row['mse_median']:.3g}")
        if "looseness_median" in row:
            text += f", loose {row['looseness_median']:.2g}"
        return text

    def done_numbers(self, r: Mapping[str, Any]) -> str:
        return (f"LMLHD median {r['lmlhd_median']:.2f} (mean {r['lmlhd_mean']:.2f} +- "
                f"{r['lmlhd_ci95']:.2f}), MSE {r['mse_median']:.3g}, CRPS {r['crps']:.3f}, "
                f"90% coverage {100 * r['coverage90']:.0f}%")


class Regression(Task):
    """Meta-regression: context/target sets of functions from a family; LMLHD, MSE, CRPS."""

    name = "regression"
    view = RegressionView()
    method_base = "zoo.tasks.methods:RegressionMethod"
    data_base = "zoo.data.functions:FunctionFamily"
    data_what = "a function family"
    data_example = "sinusoid or gp-rbf"
    settings: ClassVar[dict[str, Any]] = {"context_sizes": [0, 1, 2, 4, 8, 16], "targets": 64,
                                          "train_targets": 16, "train_max_context": 15,
                                          "train_tasks": 0, "bound_samples": 0,
                                          "train_datasets": ["sinusoid"]}
    train_keys = ("train_targets", "train_max_context", "train_tasks")
    column_keys = ("targets", "context")
    selection_key = "val_lmlhd"
    headline = "lmlhd"

    def shapes(self, s: Mapping[str, Any]) -> list[dict[str, Any]]:
        sizes, targets = list(s["context_sizes"]), int(s["targets"])
        if not sizes:
            raise ZooError("a regression suite needs context sizes: set context_sizes, e.g. "
                           "context_sizes = [0, 4, 16]")
        too_big = [c for c in sizes if not 0 <= int(c) <= targets]
        if too_big:
            raise ZooError(f"context sizes {too_big} are not within 0..targets = {targets}: the "
                           "targets include the context; raise targets or lower context_sizes")
        if not 0 <= int(s["train_max_context"]) <= int(s["train_targets"]):
            raise ZooError(f"train_max_context = {s['train_max_context']} must be within "
                           f"0..train_targets = {s['train_targets']}")
        if int(s["train_tasks"]) < 0:
            raise ZooError(f"train_tasks = {s['train_tasks']} must be >= 0 (0: a new function "
                           "every training episode; L > 0: a fixed pool of L functions)")
        if int(s["bound_samples"]) < 0:
            raise ZooError(f"bound_samples = {s['bound_samples']} must be >= 0 (0: no ELBO "
                           "looseness; S > 0: bounds from S draws)")
        pool = {"train_tasks": int(s["train_tasks"])} if int(s["train_tasks"]) else {}
        bound = {"bound_samples": int(s["bound_samples"])} if int(s["bound_samples"]) else {}
        return [{"context": int(c), "targets": targets, "train_targets": int(s["train_targets"]),
                 "train_max_context": int(s["train_max_context"])} | pool | bound for c in sizes]

    def label(self, shape: Shape) -> str:
        return f"ctx {shape['context']}/{shape['targets']}"

    def data_shape(self, dataset: FunctionFamily) -> dict[str, Any]:
        return {"x_dim": dataset.x_dim, "y_dim": dataset.y_dim}

    def episodes(self, dataset: FunctionFamily, split: str, shape: Shape, seed: int,
                 training: bool) -> GetEpisode:
        if split in ("train", "val"):
            n, most = shape["train_targets"], shape["train_max_context"]
            pool = int(shape.get("train_tasks", 0))
            if split == "train" and pool:
                return lambda i: sample_pooled_task(dataset, split, seed, n, i, pool, most)
            return lambda i: sample_task(dataset, split, seed, n, i, None, most)
        bound = shape.get("bound_samples", 0)
        return lambda i: sample_task(dataset, split, seed, shape["targets"], i, shape["context"],
                                     bound_samples=bound)

    def prepare(self, method: RegressionMethod, get: GetEpisode, indices: Sequence[int]) -> None:
        method.prepare([get(i) for i in indices])

    def predict(self, method: RegressionMethod, episode: RegressionEpisode) -> RegressionPrediction:
        prediction = method.predict(episode)
        samples = int(episode.info.get("bound_samples", 0))
        bounds = method.bounds(episode, samples) if samples else None
        for name, (elbo, iw) in bound_pairs(bounds).items():
            suffix = f"_{name}" if name else ""
            prediction.extras[f"elbo{suffix}"] = float(elbo)
            prediction.extras[f"iw_bound{suffix}"] = float(iw)
        return prediction

    def check(self, prediction: Any, episode: RegressionEpisode, method: str) -> None:
        import torch

        checks = PredictionCheck(method, f"episode {episode.id}", "its predict must return "
                                 "RegressionPrediction(mean, var) with mean and var [samples, "
                                 "targets, y_dim], var > 0")
        checks.of_type(prediction, RegressionPrediction, "RegressionPrediction")
        n, dy = episode.target_y.shape
        for name in ("mean", "var"):
            t = getattr(prediction, name)
            if t.ndim != 3 or tuple(t.shape[1:]) != (n, dy):
                checks.fail(f"{name} has shape {tuple(t.shape)}, expected [S, {n}, {dy}]")
            if not torch.isfinite(t).all():
                checks.fail(f"non-finite {name}")
        if prediction.mean.shape != prediction.var.shape:
            checks.fail(f"mean {tuple(prediction.mean.shape)} and var "
                        f"{tuple(prediction.var.shape)} differ in shape")
        if (prediction.var <= 0).any():
            checks.fail(f"a variance is not positive (smallest {float(prediction.var.min()):.3g})")
        if prediction.joint is not None:
            loc, cov = prediction.joint
            if tuple(loc.shape) != (n, dy) or tuple(cov.shape) != (dy, n, n):
                checks.fail(f"joint has loc {tuple(loc.shape)} and cov {tuple(cov.shape)}, "
                            f"expected [{n}, {dy}] and [{dy}, {n}, {n}]")
            if not (torch.isfinite(loc).all() and torch.isfinite(cov).all()):
                checks.fail("non-finite joint")
            if torch.linalg.cholesky_ex(cov.double())[1].any():
                checks.fail("the joint covariance is not positive definite")

    def score(self, prediction: RegressionPrediction, episode: RegressionEpisode,
              temperature: float = 1.0) -> dict[str, Any]:
        from zoo.tasks.regression_metrics import (
            coverage,
            crps,
            gaussian_log_likelihood,
            joint_log_likelihood,
            mse,
            point_nll,
        )

        y, mean, var = episode.target_y, prediction.mean.detach(), prediction.var.detach()
        samples = int(mean.shape[0])
        if prediction.joint is None:
            lmlhd = joint_log_likelihood(y, mean, var)
        else:  # the exact Gaussian, and its exact marginals for the per-target scores
            loc, cov = (t.detach() for t in prediction.joint)
            lmlhd = gaussian_log_likelihood(y, loc, cov)
            mean, var = loc[None], cov.diagonal(dim1=-2, dim2=-1).T[None]
        record = {"seed": episode.info.get("seed"), "run_seed": episode.info.get("run_seed"),
                  "context": episode.info.get("context"), "samples": samples,
                  "exact": prediction.joint is not None,
                  "lmlhd": lmlhd, "nll": point_nll(y, mean, var),
                  "mse": mse(y, mean), "crps": crps(y, mean, var),
                  "coverage50": coverage(y, mean, var, 0.5),
                  "coverage90": coverage(y, mean, var, 0.9)}
        for key, elbo in prediction.extras.items():
            if key == "elbo" or key.startswith("elbo_"):
                suffix, iw = key[4:], prediction.extras[f"iw_bound{key[4:]}"]
                record |= {key: elbo, f"iw_bound{suffix}": iw, f"looseness{suffix}": iw - elbo}
        return record

    def summarise(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Per metric over tasks: LMLHD, MSE (and ELBO looseness where every record has it)
        median with 5%/95% percentiles and mean with its 95% CI; the median over seeds of the
        per-seed medians with 5%/95% percentiles over seeds (``*_seeds_*``, ``seeds_pooled``);
        NLL, CRPS and coverage means."""
        out: dict[str, Any] = {}
        keys = ["lmlhd", "mse"] + sorted(k for k in (records[0] if records else {})
                                         if k.startswith("looseness")
                                         and all(k in r for r in records))
        by_seed: dict[Any, list[Mapping[str, Any]]] = {}
        for r in records:
            by_seed.setdefault(r.get("run_seed"), []).append(r)
        for key in keys:
            v = np.asarray([r[key] for r in records], dtype=np.float64)
            mean, ci = mean_ci(v)
            p05, median, p95 = np.percentile(v, [5, 50, 95]) if v.size else (math.nan,) * 3
            per_seed = [float(np.median([r[key] for r in rs])) for rs in by_seed.values()]
            s05, s50, s95 = np.percentile(per_seed, [5, 50, 95]) if per_seed else (math.nan,) * 3
            out |= {f"{key}_median": float(median), f"{key}_p05": float(p05),
                    f"{key}_p95": float(p95), f"{key}_mean": mean, f"{key}_ci95": ci,
                    f"{key}_seeds_median": float(s50), f"{key}_seeds_p05": float(s05),
                    f"{key}_seeds_p95": float(s95)}
        out["seeds_pooled"] = len(by_seed)
        for key in ("nll", "crps", "coverage50", "coverage90"):
            out[key] = float(np.mean([r[key] for r in records]))
        return out | {"test_episodes": len(records),
                      "eval_seconds_per_episode": float(np.mean([r["seconds"] for r in records]))}

    def selection_value(self, records: Sequence[Mapping[str, Any]]) -> float:
        return float(np.mean([r["lmlhd"] for r in records]))
