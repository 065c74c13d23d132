"""The Meta-CV study of Sun (2023, §5.4.1) on Genz oscillatory integrands, batched over tasks.

For each dimension ``d`` and per-task budget ``N_t``: meta-train a neural CV on ``--train-tasks``
integrands (``--iterations`` outer Adam steps on ``--batch`` tasks, ``--steps`` inner steps of
size ``--inner-lr``), then estimate ``--test-tasks`` unseen integrands with every method on the
same samples: Monte Carlo, the degree-2 polynomial CV and the control functional (split, as the
thesis), independent Neural-CVs (all tasks in one batched fit) and the adapted Meta-CV (one
batched adaptation; its wall time is the "online" time). Prints mean absolute error with its 95%
CI, the sum of squared errors, the variance-reduction factor against Monte Carlo and the times,
and writes ``results.json`` and plots of error against ``N_t`` and ``d`` to ``--out``.

The thesis's scale: ``--train-tasks 20000 --test-tasks 1000 --iterations 4000 --batch 5
--sizes 4 8 12 16 20 --dims 1 2 3 4 5 6``; ``--steps-study 1 3 5 7 10`` (inner step
``0.01 / (50 L)``, the thesis's L study).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path

import numpy as np
import torch

from zoo.control_variates import linear, neural
from zoo.data.integrands import load_genz_oscillatory
from zoo.tasks.integration import task_seed

log = logging.getLogger("meta_cv_study")


def tasks(dim: int, split: str, n: int, count: int, seed: int = 0):
    """``count`` integrands of the family, stacked: ``x [T, n, d]``, ``score``, ``f``, truths."""
    family = load_genz_oscillatory(dim=dim)
    draws = [family.draw(torch.Generator().manual_seed(task_seed(seed, family.name, split, n, i)),
                         n) for i in range(count)]
    x = torch.stack([d.x for d in draws])
    return x, torch.zeros_like(x), torch.stack([d.fx for d in draws]), np.array(
        [d.truth for d in draws])


def summary(est: np.ndarray, truth: np.ndarray, mc: np.ndarray) -> dict[str, float]:
    err = est - truth
    sse = float(np.sum(err**2))
    return {"mae": float(np.mean(np.abs(err))),
            "ci95": float(1.96 * np.std(np.abs(err), ddof=1) / math.sqrt(len(err))),
            "sse": sse, "vrf": float(np.sum((mc - truth) ** 2)) / sse if sse > 0 else math.inf}


def meta_train(dim: int, n: int, args, steps: int, inner_lr: float) -> tuple[neural.MetaCV, float]:
    x, s, f, _ = tasks(dim, "train", n, args.train_tasks)
    torch.manual_seed(0)
    meta = neural.MetaCV(dim, hidden=(args.width, args.width), steps=steps, inner_lr=inner_lr,
                         penalty=5e-6, first_order=args.first_order, boundary=True)
    opt = torch.optim.Adam(meta.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(1)
    start = time.perf_counter()
    for _ in range(args.iterations):
        idx = torch.randint(0, args.train_tasks, (args.batch,), generator=g)
        opt.zero_grad()
        meta.meta_loss(x[idx], s[idx], f[idx]).backward()
        opt.step()
    return meta, time.perf_counter() - start


def evaluate(dim: int, n: int, args, meta: neural.MetaCV, offline: float,
             baselines: bool = True) -> dict[str, dict[str, float]]:
    x, s, f, truth = tasks(dim, "test", n, args.test_tasks)
    mc = f.mean(-1).numpy()
    rows = {"mc": summary(mc, truth, mc)}
    start = time.perf_counter()
    est = meta.estimate(x, s, f).value[:, 0].numpy()
    rows["meta-cv"] = summary(est, truth, mc) | {"offline_s": offline,
                                                 "online_s": time.perf_counter() - start}
    if not baselines:
        return rows
    start = time.perf_counter()
    est = neural.fit_neural_cv(x, s, f, hidden=(args.width, args.width), epochs=20, batch=5,
                               lr=2e-3, boundary=True).value[:, 0].numpy()
    rows["neural-cv"] = summary(est, truth, mc) | {"online_s": time.perf_counter() - start}
    start = time.perf_counter()
    est = np.array([float(linear.control_functional(x[t], s[t], f[t, :, None], mode="split",
                                                    boundary=True).value[0])
                    for t in range(len(x))])
    rows["control-functional"] = summary(est, truth, mc) | {"online_s": time.perf_counter() - start}
    return rows


def plot(results: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for key, xlabel in (("n", "samples per task N_t"), ("dim", "dimension d")):
        other = "dim" if key == "n" else "n"
        fixed = sorted({r[other] for r in results})
        for value in fixed:
            rows = sorted([r for r in results if r[other] == value and r["study"] == "main"],
                          key=lambda r: r[key])
            if len(rows) < 2:
                continue
            fig, ax = plt.subplots(figsize=(5, 3.5))
            for method in rows[0]["methods"]:
                ax.errorbar([r[key] for r in rows], [r["methods"][method]["mae"] for r in rows],
                            [r["methods"][method]["ci95"] for r in rows], label=method,
                            marker="o", capsize=3)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("mean |error|")
            ax.set_yscale("log")
            ax.set_title(f"Genz oscillatory, {other} = {value}")
            ax.legend()
            fig.tight_layout()
            fig.savefig(out / f"error_vs_{key}_{other}{value}.png", dpi=120)
            plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dims", type=int, nargs="+", default=[2])
    p.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 12, 16, 20])
    p.add_argument("--train-tasks", type=int, default=20000)
    p.add_argument("--test-tasks", type=int, default=1000)
    p.add_argument("--iterations", type=int, default=4000)
    p.add_argument("--batch", type=int, default=5)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--inner-lr", type=float, default=0.01)
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--width", type=int, default=80)
    p.add_argument("--first-order", action="store_true")
    p.add_argument("--steps-study", type=int, nargs="*", default=[])
    p.add_argument("--no-main", action="store_true", help="only the L study")
    p.add_argument("--out", type=Path, default=Path("results/meta-cv-study"))
    p.add_argument("--merge", type=Path, nargs="*", default=[],
                   help="only plot: the cells of these results.json files together, into --out")
    args = p.parse_args()
    torch.set_default_dtype(torch.float64)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        plot([r for f in args.merge for r in json.loads(f.read_text())["results"]], args.out)
        return
    results = []

    def save() -> None:  # after every cell, so that a stopped run keeps what it computed
        (args.out / "results.json").write_text(json.dumps(
            {"args": vars(args) | {"out": str(args.out)}, "results": results}, indent=1))
        plot(results, args.out)

    for dim in args.dims if not args.no_main else []:
        for n in args.sizes:
            meta, offline = meta_train(dim, n, args, args.steps, args.inner_lr)
            rows = evaluate(dim, n, args, meta, offline)
            results.append({"study": "main", "dim": dim, "n": n, "methods": rows})
            print(f"d={dim} N_t={n}: " + ", ".join(
                f"{m} {r['mae']:.4f}+-{r['ci95']:.4f} (VRF {r['vrf']:.2f})"
                for m, r in rows.items()), flush=True)
            print(f"    meta-cv offline {rows['meta-cv']['offline_s']:.1f} s, online "
                  f"{rows['meta-cv']['online_s']:.2f} s for {args.test_tasks} tasks; neural-cv "
                  f"{rows['neural-cv']['online_s']:.1f} s; CF {rows['control-functional']['online_s']:.1f} s",
                  flush=True)
            save()
    for L in args.steps_study:
        dim, n = args.dims[0], args.sizes[len(args.sizes) // 2]
        meta, offline = meta_train(dim, n, args, L, 0.01 / (50 * L))
        rows = evaluate(dim, n, args, meta, offline, baselines=False)
        results.append({"study": "L", "dim": dim, "n": n, "L": L, "methods": rows})
        print(f"L={L} (d={dim}, N_t={n}): meta-cv {rows['meta-cv']['mae']:.4f} +- "
              f"{rows['meta-cv']['ci95']:.4f}, mc {rows['mc']['mae']:.4f}", flush=True)
        save()


if __name__ == "__main__":
    main()
