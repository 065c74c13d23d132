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

    OMP_NUM_THREADS=1 python benchmarks/neural_processes/library_comparison.py [--steps 1000]

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
from zoo.plugins import registry
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--test", type=int, default=32, help="test functions")
    p.add_argument("--samples", type=int, default=256, help="draws of q(z | C) for LMLHD")
    p.add_argument("--seed", type=int, default=0)
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

    def pool(i: int) -> RegressionEpisode:
        """np-quick's training episode ``i``: 64 functions x 16 points, context 0..15."""
        return sample_pooled_task(family, "train", a.seed, 16, i, 64, 15)

    tests = {c: [sample_task(family, "test", a.seed, 64, i, c) for i in range(a.test)]
             for c in CONTEXTS}
    log.info("torch %s, neuralprocesses %s, %d steps, %d test functions, %d draws",
             torch.__version__, version("neuralprocesses"), a.steps, a.test, a.samples)
    rows = []
    methods = registry()
    for name in ("anp", "ma-np"):
        torch.manual_seed(a.seed)
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
        torch.manual_seed(a.seed)
        state = B.create_random_state(torch.float32, seed=a.seed)

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
    header = " | ".join(f"LMLHD/MSE c={c}" for c in CONTEXTS)
    print(f"| model | params | s/step | {header} |")
    print("|" + "---|" * (3 + len(CONTEXTS)))
    for name, seconds, scores, n in rows:
        cells = " | ".join(f"{np.median([s[0] for s in scores[c]]):.1f} / "
                           f"{np.median([s[1] for s in scores[c]]):.2f}" for c in CONTEXTS)
        print(f"| {name} | {n} | {seconds * 1e3:.1f} ms | {cells} |")
    assert all(math.isfinite(s[0]) for _, _, sc, _ in rows for c in CONTEXTS for s in sc[c])


if __name__ == "__main__":
    main()
