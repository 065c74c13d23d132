"""Control variates inside the latent-Gaussian few-shot classifiers: the class probabilities of
md-bfsc (``E[softmax(f*)]``), logistic-softmax (``E[link(f*)]``), OVE (``E[log sigmoid(f_c -
f_c')]`` per pair, then a softmax) and bayes-last-layer (``E[softmax(f)]`` over the class latents
``f = W phi``) are Gaussian integrals, estimated by each estimator of :mod:`zoo.expectations` at
budgets 4..256 on the same episodes.

For each method: meta-train briefly (``--train-episodes``) with the ``meta-cv`` estimator, so that
its meta-CV is meta-trained on the integrals harvested during that training (md-bfsc,
logistic-softmax and OVE use their predictive losses then, which integrate through the
estimator); record the estimator's last integral of every test episode (integrand, marginals),
then re-estimate the probabilities with every (estimator, budget, seed). Prints, per estimator
and budget: the variance of the probabilities over seeds, their RMS error against a 65,536-point
Sobol reference, NLL / ECE (15 bins) / accuracy of the queries and the wall time of one
episode's probabilities (error against time at equal budgets); the smallest budget that
matches plain Monte Carlo's NLL at 256, and the smallest not worse than it beyond the 95% CI of
the NLL difference paired over the queries; and, for md-bfsc, the RMS error of the inner loop's
expected-gradient terms ``E[s]``, ``E[s^2]`` (softmax moments under the estimator's rule: the
fitted CVs' rule is their plain draws) against the reference.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from zoo.episode import EpisodeSampler
from zoo.expectations import build_estimator
from zoo.families.latent_gaussian import ESTIMATORS as NAMED
from zoo.method import build_method
from zoo.metrics import ece_mce
from zoo.plugins import load_dataset, registry
from zoo.variational import softmax_draw_moments

ESTIMATORS = ["mc", "sobol", "poly-cv[degree=1]", "poly-cv[degree=2]", "control-functional",
              "neural-cv", "vv-cv", "meta-cv"]
TRAINING = {"md-bfsc": {"loss": "predictive", "samples_train": 16},
            "logistic-softmax": {"loss": "pl", "prob_samples": 16},
            "ove": {"loss": "pl"},
            "bayes-last-layer": {}}
"""Hyper-parameters of the brief meta-training: predictive losses, which integrate through the
estimator, so that meta-cv harvests their integrals (16 samples each, 8 for the last layer)."""


class Recorder:
    """An estimator that records its last ``expect`` call and delegates everything."""

    def __init__(self, inner):
        self.inner, self.last = inner, None

    def expect(self, g, mean, var, *, seed=0):
        self.last = {"g": g, "mean": mean.detach(), "var": var.detach()}
        return self.inner.expect(g, mean, var, seed=seed)

    def __getattr__(self, key):
        return getattr(self.inner, key)


def captured(method, episode):
    """The (integrand, mean, var) of the method's predictive expectation for ``episode``: the
    last integral its prediction evaluates through the estimator."""
    original = method.estimator
    recorders = []

    def recording(**fallback):
        recorders.append(Recorder(original(**fallback)))
        return recorders[-1]

    method.estimator = recording
    try:
        with torch.no_grad():
            method.predict(episode)
    finally:
        del method.estimator
    return [r.last for r in recorders if r.last is not None][-1]


def chains_of(name: str, case: dict, chains: int | None) -> dict:
    """OVE's recorded integral restricted to its first ``chains`` Gibbs chains (the leading axis
    of ``[R, Q, C, C, 1]``), the same subset for every estimator and the reference: a reduced
    but exact version of its predictive (the chains' average), ``R * Q * C^2`` integrals fewer."""
    if chains is None or name != "ove":
        return case
    return case | {"mean": case["mean"][:chains], "var": case["var"][:chains]}


def probabilities(name: str, value: torch.Tensor) -> torch.Tensor:
    """The method's class probabilities ``[Q, C]`` from its predictive integral's value."""
    if name == "ove":  # E[log sigmoid(f_c - f_c')] [R, Q, C, C] -> scores -> softmax
        eye = torch.eye(value.shape[-1], dtype=torch.bool)
        return torch.softmax(value.masked_fill(eye, 0).sum(-1), -1).mean(0)
    return value.mean(0) if value.ndim == 3 else value


def metrics(probs: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    p = probs.clamp_min(1e-12)
    conf, pred = p.max(-1)
    ece, _ = ece_mce(conf.tolist(), (pred == y).double().tolist(), 15)
    return {"nll": float(-p.gather(1, y[:, None]).log().mean()), "ece": float(ece),
            "acc": float((pred == y).double().mean())}


def query_nll(probs: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Each query's negative log probability of its label (clamped at 1e-12, as :func:`metrics`)."""
    return -probs.clamp_min(1e-12).gather(1, y[:, None])[:, 0].log().numpy()


def run(name: str, args) -> dict:
    data = load_dataset(args.dataset)
    train = load_dataset(args.train_dataset)
    method = build_method(name, way=args.way, in_channels=data.in_channels,
                          image_size=data.image_size, seed=0, estimator=args.train_estimator,
                          **TRAINING[name], registry=registry())
    if args.train_episodes:
        sampler = EpisodeSampler(train, "train", args.way, args.shot, 5, seed=0)
        opt = torch.optim.Adam(method.parameters(), lr=1e-3)
        for i in range(args.train_episodes):
            opt.zero_grad()
            method.meta_loss(sampler[i]).backward()
            opt.step()
    method.eval()
    sampler = EpisodeSampler(data, "test", args.way, args.shot, args.query, seed=1)
    episodes = [sampler[i] for i in range(args.episodes)]
    cases = [(chains_of(name, captured(method, e), args.chains), e.query_y) for e in episodes]
    reference = build_estimator("sobol[samples=65536]", NAMED)

    def reference_probs(case):
        """The reference, in chunks of integrals that keep the draws under ~2e7 numbers;
        one-dimensional integrals (OVE) by 100-node Gauss-Hermite."""
        mean, var = case["mean"], case["var"]
        dim = mean.shape[-1]
        est = build_estimator("gauss-hermite[nodes=100]", NAMED) if dim == 1 else reference
        flat_m, flat_v = mean.reshape(-1, dim), var.reshape(-1, dim)
        step = max(1, 20_000_000 // (65536 * dim))
        parts = [est.expect(case["g"], flat_m[i:i + step], flat_v[i:i + step]).value
                 for i in range(0, len(flat_m), step)]
        value = torch.cat(parts)
        return probabilities(name, value.reshape(*mean.shape[:-1], *value.shape[1:]))

    def probs_of(estimator, case, seed):
        estimator = estimator.bind(method.estimator_state)
        with torch.no_grad():
            value = estimator.expect(case["g"], case["mean"], case["var"], seed=seed).value
        return probabilities(name, value)

    refs = [reference_probs(c) for c, _ in cases]
    ref_moments = [softmax_draw_moments(c["mean"], c["var"], reference.rule(
        c["mean"].shape[-1], seed=0).to(torch.float64)) for c, _ in cases] if name == "md-bfsc" else []
    rows, nll_per_query = {}, {}
    labels = torch.cat([y for _, y in cases])
    for spec in args.estimators:
        if spec.startswith("meta-cv") and method.estimator_state is None:
            continue
        for S in args.budgets:
            if args.max_fitted < S and spec.split("[")[0] in ("neural-cv", "vv-cv", "meta-cv"):
                continue
            est = build_estimator(spec, NAMED, samples=S)
            start = time.perf_counter()
            draws = [[probs_of(est, c, 1000 + r) for r in range(args.seeds)] for c, _ in cases]
            ms = 1000 * (time.perf_counter() - start) / (len(cases) * args.seeds)
            var = np.mean([float(torch.stack(d).var(0).mean()) for d in draws])
            rmse = np.sqrt(np.mean([float((torch.stack(d) - ref).pow(2).mean())
                                    for d, ref in zip(draws, refs)]))
            per_seed = [metrics(torch.cat([d[r] for d in draws]),
                                torch.cat([y for _, y in cases])) for r in range(args.seeds)]
            row = {k: float(np.mean([m[k] for m in per_seed])) for k in per_seed[0]}
            row |= {"variance": var, "rmse": rmse, "ms": ms}
            nll_per_query[f"{spec} S={S}"] = np.mean(
                [query_nll(torch.cat([d[r] for d in draws]), labels) for r in range(args.seeds)],
                axis=0)
            if name == "md-bfsc":  # the inner loop's expected-gradient terms under this rule
                errs = []
                for (c, _), (_, s_ref, s2_ref) in zip(cases, ref_moments):
                    mean, var_ = c["mean"], c["var"]
                    rule = est.rule(mean.shape[-1], seed=1000).to(torch.float64)
                    _, s, s2 = softmax_draw_moments(mean, var_, rule)
                    errs.append(float(((s - s_ref).pow(2).mean() + (s2 - s2_ref).pow(2).mean()
                                       ) / 2))
                row["grad_rmse"] = float(np.sqrt(np.mean(errs)))
            rows[f"{spec} S={S}"] = row
            print(f"{name:16s} {spec:20s} S={S:4d}: var {var:.2e} rmse {rmse:.2e} "
                  f"nll {row['nll']:.4f} ece {row['ece']:.4f} acc {row['acc']:.3f} "
                  f"{ms:8.1f} ms/episode"
                  + (f" grad-rmse {row['grad_rmse']:.2e}" if "grad_rmse" in row else ""),
                  flush=True)
    ref_metrics = metrics(torch.cat(refs), labels)
    target_key = f"mc S={max(args.budgets)}"
    target = rows[target_key]["nll"]
    for key, row in rows.items():  # paired over the queries (each averaged over the seeds)
        diff = nll_per_query[key] - nll_per_query[target_key]
        row["nll_minus_mc"] = float(diff.mean())
        row["nll_minus_mc_ci95"] = float(1.96 * diff.std(ddof=1) / np.sqrt(len(diff)))
    for spec in args.estimators:
        keys = [(S, f"{spec} S={S}") for S in args.budgets if f"{spec} S={S}" in rows]
        hit = [S for S, k in keys if rows[k]["nll"] <= target]
        tied = [S for S, k in keys
                if rows[k]["nll_minus_mc"] - rows[k]["nll_minus_mc_ci95"] <= 0]
        print(f"{name}: {spec} reaches the NLL of mc at {max(args.budgets)} ({target:.4f}) at "
              f"S = {min(hit) if hit else 'never'}, not worse beyond the paired 95% CI at S = "
              f"{min(tied) if tied else 'never'} (" + ", ".join(
                  f"{S}: {rows[k]['nll_minus_mc']:+.4f} +- {rows[k]['nll_minus_mc_ci95']:.4f}"
                  for S, k in keys) + f"); reference NLL {ref_metrics['nll']:.4f}")
    return {"rows": rows, "reference": ref_metrics}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", nargs="+", default=list(TRAINING))
    p.add_argument("--dataset", default="digits", help="test episodes' data set")
    p.add_argument("--train-dataset", default="glyphs", help="meta-training data set")
    p.add_argument("--way", type=int, default=5)
    p.add_argument("--shot", type=int, default=5)
    p.add_argument("--query", type=int, default=15)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--budgets", type=int, nargs="+", default=[4, 8, 16, 32, 64, 128, 256])
    p.add_argument("--train-episodes", type=int, default=0)
    p.add_argument("--estimators", nargs="+", default=ESTIMATORS)
    p.add_argument("--train-estimator", default="meta-cv[samples=16,width=32,meta_steps=20]",
                   help="the estimator of the brief meta-training (meta-cv harvests there)")
    p.add_argument("--max-fitted", type=int, default=256,
                   help="largest budget of neural-cv, vv-cv and meta-cv (their fits cost most)")
    p.add_argument("--chains", type=int, default=None,
                   help="OVE only: average its predictive over its first CHAINS Gibbs chains "
                        "(all by default), to make the fitted CVs affordable")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    results = {name: run(name, args) for name in args.methods}
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
