"""Our ``anp`` and ``ma-np`` against the maintained ``neuralprocesses`` library (W. Bruinsma,
PyTorch backend) on np-quick's sinusoid protocol: the same pool of 64 training functions of 16
points (context sizes 0..15), the same number of Adam steps (one episode a step), learning rate and
width, the same 32 test functions of 64 points at context sizes 0, 1, 2, 4, 8, 16, scored by the
same estimators: LMLHD = log (1/S) sum_s prod_n N(y_n | mu_s, var_s) over S draws of q(z | C)
(the library's ``loglik`` is this estimator) and MSE of the mean prediction. Seconds per training
step are timed in this process, one thread.

The library is optional and not a dependency of the zoo: install it outside the repository, e.g.
``python3 -m venv /tmp/nplib && /tmp/nplib/bin/pip install neuralprocesses`` with torch on the
path, and run this script with that interpreter and the zoo on ``PYTHONPATH``::

    OMP_NUM_THREADS=1 python benchmarks/neural_processes/library_comparison.py [--steps 1000] \
        [--seeds 0 1 2]

Every draw is seeded (the zoo's by ``torch.manual_seed`` and its episode generators, the
library's by its random state), one thread: two runs with the same seeds on one machine print the
same numbers. One seed's numbers are one training run of unconverged models, so what to compare
is the spread over seeds: with several ``--seeds`` the script prints, after the per-seed medians,
each model's mean LMLHD over the test functions as a mean over seeds with its Student-t 95%
interval, and the ours-minus-library differences paired by seed and test function.

Without the library the script says so and exits (status 0).
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from collections.abc import Callable
from importlib.metadata import version

import numpy as np
import torch

from zoo.data.functions import load_sinusoid
from zoo.metrics import seed_mean_ci, seed_paired_difference
from zoo.plugins import registry
from zoo.runner.provenance import device_description
from zoo.tasks.regression import (
    RegressionEpisode,
    sample_pooled_task,
    sample_task,
)
from zoo.tasks.regression_metrics import joint_log_likelihood, mse

log = logging.getLogger("library_comparison")

CONTEXTS = (0, 1, 2, 4, 8, 16)


def channels_first(t: torch.Tensor) -> torch.Tensor:
    """``[n, d] -> [1, d, n]``: the library's batch, channel, point layout."""
    return t.T[None].contiguous()


def library_models(hidden: int, latent_dim: int) -> dict[str, torch.nn.Module]:
    """The library's attentive NP (AGNP with a latent variable) and its latent NP (GNP with a
    latent variable, mean aggregation), sized like ours: width and embedding ``hidden``, 3
    encoder and 4 decoder layers, heteroscedastic Gaussian likelihood."""
    import neuralprocesses.torch as nps

    common = dict(dim_x=1, dim_y=1, dim_embedding=hidden, width=hidden, num_enc_layers=3,
                  num_dec_layers=4, likelihood="het", dim_lv=latent_dim)
    return {"lib-anp": nps.construct_agnp(num_heads=4, **common),
            "lib-np": nps.construct_gnp(**common)}


def library_step(model: torch.nn.Module, ep: RegressionEpisode, samples: int,
                 state: object) -> tuple[torch.Tensor, object]:
    """The library's ELBO, context subsumed into the targets so that q(z | D) and the
    likelihood both see D once (our episode's targets already include its context)."""
    import neuralprocesses.torch as nps

    c = len(ep.context_x)
    state, elbo = nps.elbo(state, model, channels_first(ep.context_x),
                           channels_first(ep.context_y), channels_first(ep.target_x[c:]),
                           channels_first(ep.target_y[c:]), num_samples=samples,
                           subsume_context=True, normalise=True)
    return -elbo.mean(), state


def library_predict(model: torch.nn.Module, ep: RegressionEpisode, samples: int,
                    state: object) -> tuple[torch.Tensor, torch.Tensor, object]:
    """``mean, var [S, N, 1]`` of ``samples`` draws of q(z | C)."""
    state, pred = model(state, channels_first(ep.context_x), channels_first(ep.context_y),
                        channels_first(ep.target_x), num_samples=samples)
    mean, var = pred.mean, pred.var
    return mean[:, 0].transpose(-1, -2), var[:, 0].transpose(-1, -2), state


def train(step: Callable[[RegressionEpisode], torch.Tensor], params, episodes: int, lr: float,
          pool: Callable[[int], RegressionEpisode]) -> float:
    """Adam for ``episodes`` steps of one episode each; seconds per step (episodes drawn
    before the clock starts)."""
    optimizer = torch.optim.Adam(params, lr=lr)
    data = [pool(i) for i in range(episodes)]
    start = time.perf_counter()
    for ep in data:
        optimizer.zero_grad(set_to_none=True)
        step(ep).backward()
        optimizer.step()
    return (time.perf_counter() - start) / episodes


def run_seed(seed: int, a: argparse.Namespace, family, B) -> list[tuple]:
    """Train and score the four models for one seed (the pool, the test functions, the
    initialisations and every draw follow it): ``(name, s/step, scores, parameters)`` rows."""

    def pool(i: int) -> RegressionEpisode:
        """np-quick's training episode ``i``: 64 functions x 16 points, context 0..15."""
        return sample_pooled_task(family, "train", seed, 16, i, 64, 15)

    tests = {c: [sample_task(family, "test", seed, 64, i, c) for i in range(a.test)]
             for c in CONTEXTS}
    rows = []
    methods = registry()
    for name in ("anp", "ma-np"):
        torch.manual_seed(seed)
        cls = methods.get("methods", name)
        model = cls(x_dim=1, y_dim=1, samples=a.samples)
        h = model.hparams
        seconds = train(model.meta_loss, model.parameters(), a.steps, h["lr"], pool)
        model.eval()
        with torch.no_grad():
            scores = {}
            for c in CONTEXTS:
                scores[c] = []
                for ep in tests[c]:
                    pr = model.predict(ep)
                    scores[c].append((joint_log_likelihood(ep.target_y, pr.mean, pr.var),
                                      mse(ep.target_y, pr.mean)))
        rows.append((name, seconds, scores, sum(p.numel() for p in model.parameters())))
    hidden, latent_dim, lr = h["hidden"], h["latent_dim"], h["lr"]
    for name, model in library_models(hidden, latent_dim).items():
        torch.manual_seed(seed)
        state = B.create_random_state(torch.float32, seed=seed)

        def step(ep: RegressionEpisode, model=model) -> torch.Tensor:
            nonlocal state
            loss, state = library_step(model, ep, h["train_samples"], state)
            return loss

        seconds = train(step, model.parameters(), a.steps, lr, pool)
        scores = {}
        with torch.no_grad():
            for c in CONTEXTS:
                scores[c] = []
                for ep in tests[c]:
                    mean, var, state = library_predict(model, ep, a.samples, state)
                    scores[c].append((joint_log_likelihood(ep.target_y, mean, var),
                                      mse(ep.target_y, mean)))
        rows.append((name, seconds, scores, sum(p.numel() for p in model.parameters())))
    assert all(math.isfinite(s[0]) for _, _, sc, _ in rows for c in CONTEXTS for s in sc[c])
    return rows


PAIRS = (("anp", "lib-anp"), ("ma-np", "lib-np"))


def spread(by_seed: dict[int, list[tuple]]) -> None:
    """Over seeds: each model's mean LMLHD over the test functions, as the mean over seeds with
    its Student-t 95% interval; and each ours-minus-library pair's difference, paired on the
    same test functions within a seed, then over seeds (:func:`seed_paired_difference`)."""
    seeds = sorted(by_seed)
    lmlhd = {(name, c): {s: [v[0] for v in sc[c]] for s in seeds
                         for n, _, sc, _ in by_seed[s] if n == name}
             for name, *_ in by_seed[seeds[0]] for c in CONTEXTS}
    header = " | ".join(f"c={c}" for c in CONTEXTS)
    print(f"\nMean LMLHD over the test functions, then over {len(seeds)} seeds "
          f"({', '.join(map(str, seeds))}): mean +- 95% t-interval")
    print(f"| model | {header} |")
    print("|" + "---|" * (1 + len(CONTEXTS)))
    for name, *_ in by_seed[seeds[0]]:
        cells = []
        for c in CONTEXTS:
            m, ci = seed_mean_ci([np.mean(v) for v in lmlhd[name, c].values()])
            cells.append(f"{m:.1f} +- {ci:.1f}")
        print(f"| {name} | {' | '.join(cells)} |")
    for ours, lib in PAIRS:
        cells = []
        for c in CONTEXTS:
            d, ci = seed_paired_difference(lmlhd[ours, c], lmlhd[lib, c])
            cells.append(f"{d:+.1f} +- {ci:.1f}")
        print(f"| {ours} - {lib} | {' | '.join(cells)} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--test", type=int, default=32, help="test functions")
    p.add_argument("--samples", type=int, default=256, help="draws of q(z | C) for LMLHD")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        import neuralprocesses.torch  # noqa: F401
        from lab import B
    except ImportError as exc:
        log.info("neuralprocesses is not importable (%s): nothing to compare; see this "
                 "script's docstring to install it outside the repository", exc)
        return
    torch.set_num_threads(1)
    family = load_sinusoid()
    log.info("torch %s, neuralprocesses %s, %d steps, %d test functions, %d draws, %s",
             torch.__version__, version("neuralprocesses"), a.steps, a.test, a.samples,
             device_description("cpu"))
    header = " | ".join(f"LMLHD/MSE c={c}" for c in CONTEXTS)
    print(f"| seed | model | params | s/step | {header} |")
    print("|" + "---|" * (4 + len(CONTEXTS)))
    by_seed = {}
    for seed in a.seeds:
        by_seed[seed] = run_seed(seed, a, family, B)
        for name, seconds, scores, n in by_seed[seed]:
            cells = " | ".join(f"{np.median([s[0] for s in scores[c]]):.1f} / "
                               f"{np.median([s[1] for s in scores[c]]):.2f}" for c in CONTEXTS)
            print(f"| {seed} | {name} | {n} | {seconds * 1e3:.1f} ms | {cells} |", flush=True)
    if len(a.seeds) > 1:
        spread(by_seed)


if __name__ == "__main__":
    main()
