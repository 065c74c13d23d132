"""The zoo's TRNG-VI (:mod:`zoo_gmm_np.trng`, GMM-NP's mixture fit) against the gmmvi library
(Arenz et al., TensorFlow), side by side on the same target from the same initial mixture.

gmmvi is configured as the same algorithm, its codename ``SEMTFUX``: Stein estimate of the natural
gradient (``S``) from each component's own draws only (no importance reweighting across
components, no reused samples), a fixed number of components (``E``), component-based sampling
(``M``, ``--samples`` fresh draws per component and step), a per-component KL trust region (``T``)
with a fixed bound (``F``, ``--kl-bound``), and the direct weight step with step size 1 (``U``,
``X``): ``log w_k + E_k[log p~ - log q]``, renormalised, the zoo's weight step. The zoo runs
:func:`zoo_gmm_np.trng.step` with ``TRNGConfig(kl_bound, samples = K x --samples)``. Both in
float32 (gmmvi's only dtype), one thread each.

Target: a fixed Gaussian mixture in ``--dim`` dimensions (``--target-components``); initial
mixture: ``--components`` components with means drawn per seed and covariance ``4 I``, uniform
weights, identical on both sides. Every ``--every`` steps both mixtures' ELBO
``E_q[log p~(z) - log q(z)]`` is estimated by one estimator (the same 4,096 draws' noise, in
float64, outside the timed loop). Printed: the ELBO curves (mean and spread over ``--seeds``), and
the seconds per step of each (the first ``--warmup`` steps, where TensorFlow traces its graphs,
left out), with the ratio gmmvi / zoo.

Setup (gmmvi and TensorFlow stay outside the zoo's environment)::

    .venv/bin/python benchmarks/gmm_np/vs_gmmvi.py --env /tmp/gmmvi-env

``--env DIR``: a virtual environment with ``tensorflow-cpu tensorflow-probability tf-keras pyyaml
mergedeep`` and ``gmmvi`` (installed ``--no-deps``: its other requirements, wandb, cw2, plotly,
tensorflow-datasets, serve its experiment runner, not the optimiser), created if missing; its
site-packages are appended to this process's path, after the zoo's.
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import statistics
import subprocess
import sys
import time

import torch
from torch.distributions import Categorical, MixtureSameFamily, MultivariateNormal
from zoo_gmm_np.gmm import GMM
from zoo_gmm_np.trng import TRNGConfig, step

torch.set_num_threads(1)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def prepare_env(env: str) -> None:
    if not os.path.isdir(env):
        pip = os.path.join(env, "bin", "pip")
        subprocess.run([sys.executable, "-m", "venv", env], check=True)
        subprocess.run([pip, "install", "-q", "tensorflow-cpu", "tensorflow-probability",
                        "tf-keras", "pyyaml", "mergedeep"], check=True)
        subprocess.run([pip, "install", "-q", "--no-deps", "gmmvi"], check=True)
    sys.path += glob.glob(os.path.join(env, "lib", "python*", "site-packages"))


def make_target(dim: int, components: int):
    gen = torch.Generator().manual_seed(1234)
    weights = torch.softmax(torch.randn(components, generator=gen), 0)
    means = 3.0 * torch.randn(components, dim, generator=gen, dtype=torch.float64)
    a = torch.randn(components, dim, dim, generator=gen, dtype=torch.float64)
    covs = a @ a.mT / dim + 0.5 * torch.eye(dim, dtype=torch.float64)
    return weights.double(), means, covs


def mixture(weights, means, covs) -> MixtureSameFamily:
    return MixtureSameFamily(Categorical(probs=weights), MultivariateNormal(means, covs))


def elbo(target: MixtureSameFamily, weights, means, covs, noise, pick) -> float:
    """``E_q[log p~ - log q]`` with fixed noise: component ``pick`` and ``N(0, I)`` draws."""
    q = mixture(weights.double(), means.double(), covs.double())
    chol = torch.linalg.cholesky(covs.double())
    comp = torch.searchsorted(torch.cumsum(weights.double(), 0), pick).clamp_max(len(weights) - 1)
    z = means.double()[comp] + (chol[comp] @ noise[..., None])[..., 0]
    return float((target.log_prob(z) - q.log_prob(z)).mean())


def run_zoo(target64, init, args, noise, pick):
    weights, means, covs = (t.float() for t in init)
    gmm = GMM(torch.log(weights)[None], means[None], torch.linalg.inv(covs)[None])
    t_w, t_m, t_c = (t.float() for t in target64)
    target = mixture(t_w, t_m, t_c)

    def log_target(z):  # [S, K, T, d] -> [S, K, T]
        return target.log_prob(z)

    config = TRNGConfig(update="trust-region", kl_bound=args.kl_bound,
                        samples=args.samples * args.components)
    curve, seconds = [], []
    target_eval = mixture(*target64)
    for i in range(args.steps + 1):
        if i % args.every == 0:
            curve.append(elbo(target_eval, gmm.log_w[0].exp(), gmm.mean[0],
                              torch.linalg.inv(gmm.prec[0].double()), noise, pick))
        if i == args.steps:
            break
        start = time.process_time()
        gmm, _ = step(gmm, log_target, config)
        seconds.append(time.process_time() - start)
    return curve, seconds


def run_gmmvi(target64, init, args, noise, pick):
    import tensorflow as tf
    from gmmvi.configs import get_default_algorithm_config, update_config
    from gmmvi.experiments.target_distributions.gmm import GMM_LNPDF
    from gmmvi.models.full_cov_gmm import FullCovGMM
    from gmmvi.models.gmm_wrapper import GmmWrapper
    from gmmvi.optimization.gmmvi import GMMVI

    config = update_config(get_default_algorithm_config("SEMTFUX"), {
        "ng_estimator_config": {"only_use_own_samples": True},
        "sample_selector_config": {"desired_samples_per_component": args.samples,
                                   "ratio_reused_samples_to_desired": 0.0},
        "component_stepsize_adapter_config": {"initial_stepsize": args.kl_bound},
        "weight_stepsize_adapter_config": {"initial_stepsize": 1.0},
    })
    config.update({"temperature": 1.0, "use_sample_database": True, "max_database_size": 10 ** 6,
                   "model_initialization": {"use_diagonal_covs": False, "prior_mean": 0.0,
                                            "initial_cov": 4.0}})
    weights, means, covs = (tf.constant(t.float().numpy()) for t in init)
    wrapper = GmmWrapper(FullCovGMM(weights, means, covs), args.kl_bound, 1e-12, 2)
    target = GMM_LNPDF(*(tf.constant(t.float().numpy()) for t in target64))
    vi = GMMVI.build_from_config(config, target, wrapper)
    curve, seconds = [], []
    target_eval = mixture(*target64)
    for i in range(args.steps + 1):
        if i % args.every == 0:
            model = vi.model
            curve.append(elbo(target_eval, torch.tensor(model.weights.numpy()),
                              torch.tensor(model.means.numpy()), torch.tensor(model.covs.numpy()),
                              noise, pick))
        if i == args.steps:
            break
        start = time.process_time()
        vi.train_iter()
        seconds.append(time.process_time() - start)
    return curve, seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", required=True)
    p.add_argument("--dim", type=int, default=5)
    p.add_argument("--target-components", type=int, default=3)
    p.add_argument("--components", type=int, default=3)
    p.add_argument("--samples", type=int, default=50, help="draws per component and step")
    p.add_argument("--kl-bound", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    prepare_env(args.env)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import gmmvi

    target64 = make_target(args.dim, args.target_components)
    gen = torch.Generator().manual_seed(99)
    noise = torch.randn(4096, args.dim, generator=gen, dtype=torch.float64)
    pick = torch.rand(4096, generator=gen, dtype=torch.float64)
    print(f"torch {torch.__version__}, tensorflow {tf.__version__}, gmmvi "
          f"{getattr(gmmvi, '__version__', '1.1')}; d = {args.dim}, target K = "
          f"{args.target_components}, fitted K = {args.components}, {args.samples} draws per "
          f"component and step, KL bound {args.kl_bound}, {args.steps} steps, {args.seeds} seeds")
    curves = {"zoo": [], "gmmvi": []}
    times = {"zoo": [], "gmmvi": []}
    for seed in range(args.seeds):
        g = torch.Generator().manual_seed(seed)
        init = (torch.full((args.components,), 1 / args.components, dtype=torch.float64),
                torch.randn(args.components, args.dim, generator=g, dtype=torch.float64) * 2,
                4.0 * torch.eye(args.dim, dtype=torch.float64).expand(args.components, -1, -1))
        for name, run in (("zoo", run_zoo), ("gmmvi", run_gmmvi)):
            torch.manual_seed(seed)
            tf.random.set_seed(seed)
            curve, seconds = run(target64, init, args, noise, pick)
            curves[name].append(curve)
            times[name].append(statistics.median(seconds[args.warmup:]))
            print(f"seed {seed} {name}: ELBO {' '.join(f'{c:.3f}' for c in curve)}; "
                  f"{1e3 * times[name][-1]:.2f} ms/step", flush=True)

    print("\n| step | zoo ELBO (mean +- sd over seeds) | gmmvi ELBO |")
    print("|---:|---:|---:|")
    for j in range(len(curves["zoo"][0])):
        cells = []
        for name in ("zoo", "gmmvi"):
            vals = [c[j] for c in curves[name]]
            sd = statistics.stdev(vals) if len(vals) > 1 else math.nan
            cells.append(f"{statistics.mean(vals):.3f} +- {sd:.3f}")
        print(f"| {j * args.every} | {cells[0]} | {cells[1]} |")
    zoo_ms = statistics.median(times["zoo"]) * 1e3
    lib_ms = statistics.median(times["gmmvi"]) * 1e3
    print(f"\nmedian CPU ms per step: zoo {zoo_ms:.2f}, gmmvi {lib_ms:.2f}, gmmvi / zoo "
          f"{lib_ms / zoo_ms:.2f}")


if __name__ == "__main__":
    main()
