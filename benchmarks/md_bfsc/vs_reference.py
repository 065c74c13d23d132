"""Our MD-BFSC against the authors' public implementation (github keanson/MD-BSFC), side by side
on this CPU, same episode sizes and the same features: 5-way 1-shot and 5-shot, 15 queries per
class, 3 training inner steps, 50 test inner steps, RBF kernel per class on L2-normalised features.

    git -C <mirror> archive HEAD | tar -x -C /tmp/mdref     # the authors' code, unmodified
    pip install --target /tmp/refdeps --no-deps gpytorch==1.15.2 linear_operator==0.6.1 \
        jaxtyping wadler_lindig                             # its imports, outside our venv
    .venv/bin/python benchmarks/md_bfsc/vs_reference.py --reference /tmp/mdref --deps /tmp/refdeps

Their ``MD`` hard-codes ``cuda:0`` in ``__init__``; we build the object without calling it, set
``device = "cpu"`` and call their own methods unchanged: ``predict_mirror`` + ``Kernel.predict`` +
``montecarlo`` (a test episode) and ``MirrorDescentELBO`` + backward (a training step's GP part).
The backbone is left out of both (identical cost). Estimator error: RMSE of the expected
gradients (g_m, g_v) at the prior against 2^20 Sobol draws, theirs (10,000 joint MC samples, as
in their code) vs ours (Sobol, our defaults).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
import warnings

import torch
import torch.nn.functional as F
from zoo_md_bfsc.inference import mirror_descent
from zoo_md_bfsc.method import MDBFSC

from zoo.expectations import Rule, standard_normal_draws
from zoo.families.latent_gaussian import softmax
from zoo.gp import DTYPE
from zoo.kernels import RBFKernel
from zoo.variational import SoftmaxLikelihood

torch.set_num_threads(1)
warnings.filterwarnings("ignore")
TRAIN, TEST = MDBFSC.all_defaults()["samples_train"], MDBFSC.all_defaults()["samples_test"]


def load_reference(path: str, deps: str):
    sys.path[:0] = [path, deps]
    from methods import mirror

    def build(way: int, shot: int, query: int):
        md = mirror.MD.__new__(mirror.MD)
        torch.nn.Module.__init__(md)
        md.n_way, md.n_support, md.n_query, md.device = way, shot, query, "cpu"
        md.TEMPERATURE, md.kernel_type, md.change_way = 1.0, "rbf", False
        md.model = mirror.CombinedKernels([mirror.Kernel("cpu", "rbf") for _ in range(way)])
        return md
    return mirror, build


def median_seconds(fn, repeat: int) -> float:
    """Median wall time of ``fn`` over ``repeat`` calls after one warm-up call."""
    return statistics.median(timeit.repeat(fn, number=1, repeat=repeat + 1)[1:])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reference", default="/tmp/mdref")
    p.add_argument("--deps", default="/tmp/refdeps")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    mirror, build = load_reference(args.reference, args.deps)
    way, query, d = 5, 15, 64
    print(f"{'setting':<14}{'ref test ms':>12}{'our test ms':>12}{'speed-up':>9}"
          f"{'ref train ms':>13}{'our train ms':>13}{'speed-up':>9}")
    for shot in (1, 5):
        compare(build, way, query, d, shot, args.repeat)


def compare(build, way: int, query: int, d: int, shot: int, repeat: int) -> None:
    """Time both implementations on one episode size and compare estimator errors."""
    g = torch.Generator().manual_seed(shot)
    centres = torch.randn(way, d, generator=g)
    zs = F.normalize(centres.repeat_interleave(shot, 0)
                     + 0.7 * torch.randn(way * shot, d, generator=g), dim=-1)
    zq = F.normalize(centres.repeat_interleave(query, 0)
                     + 0.7 * torch.randn(way * query, d, generator=g), dim=-1)
    ys = torch.arange(way).repeat_interleave(shot)
    ref = build(way, shot, query)
    kernel = RBFKernel(d, (way,), lengthscale=0.6931)  # gpytorch's initial lengthscale

    def ref_test():
        with torch.no_grad():
            K = ref.model(zs)
            mu, sigma = ref.predict_mirror(ys, K, steps=50, rho=0.5)
            post = [ref.model.kernels[c].predict(zq, zs, mu[c], sigma[c]) for c in range(way)]
            return ref.montecarlo(post, times=10000)

    def our_test():
        with torch.no_grad():
            K = kernel(zs).to(DTYPE)
            onehot = F.one_hot(ys, way).to(DTYPE)
            lik = SoftmaxLikelihood(onehot, standard_normal_draws(TEST, way, seed=1))
            post = mirror_descent(K, lik, 50, 0.5, trace=True).posterior
            Ksq = kernel(zs, zq).to(DTYPE)
            mean, var = post.predict(Ksq, kernel.diag(zq).to(DTYPE))
            return Rule(standard_normal_draws(TEST, way, seed=2)).expect(softmax, mean.T, var.T)

    za = torch.cat([zs, zq])
    ya = torch.cat([ys, torch.arange(way).repeat_interleave(query)])

    def ref_train():
        z = za.clone().requires_grad_()
        # REQUIRES_GRAD=True only marks their zero initial state as a leaf, which on the CPU
        # (where .to(device) returns that same leaf) makes their in-place `vi_cov +=` fail;
        # gradients still flow through K either way.
        loss, _ = ref.MirrorDescentELBO(ya, ref.model(z), steps=3, REQUIRES_GRAD=False,
                                        rho=1.0, times=10000)
        loss.backward()

    def our_train():
        z = za.clone().requires_grad_()
        K = kernel(z).to(DTYPE)
        lik = SoftmaxLikelihood(F.one_hot(ya, way).to(DTYPE),
                                standard_normal_draws(TRAIN, way, seed=1))
        res = mirror_descent(K, lik, 3, 1.0, final_elbo=True)
        (-res.final_elbo).backward()

    rt, ot = median_seconds(ref_test, repeat), median_seconds(our_test, repeat)
    rr, orr = median_seconds(ref_train, repeat), median_seconds(our_train, repeat)
    print(f"5-way {shot}-shot  {rt * 1e3:>12.1f}{ot * 1e3:>12.1f}{rt / ot:>8.1f}x"
          f"{rr * 1e3:>13.1f}{orr * 1e3:>13.1f}{rr / orr:>8.1f}x")

    # estimator error of the expected gradients at the prior of the training problem
    with torch.no_grad():
        K = kernel(za).to(DTYPE)
        onehot = F.one_hot(ya, way).to(DTYPE)
        post = mirror_descent(K, SoftmaxLikelihood(onehot, standard_normal_draws(4096, way)),
                              2, 0.5).posterior  # a posterior away from the prior
        m0, v0, cov = post.mean.T, post.var.T, post.cov
        exact = SoftmaxLikelihood(onehot, standard_normal_draws(2**20, way, seed=9)
                                  ).expectations(m0, v0)
        errs = {"ref": [], TRAIN: [], TEST: []}
        for seed in range(8):
            torch.manual_seed(seed)
            gm, gv2 = ref.GetGradientMeanParam(onehot.float(), m0.T.float(), cov.float(), 10000,
                                                1.0)
            # their grad_mu is g_m - 2 g_m g_v; recover g_m, g_v to compare estimators only
            gv = gv2.double()
            gmm = gm.double() / (1 - 2 * gv.double())
            errs["ref"].append(torch.cat([gmm - exact.g_m, gv - exact.g_v]).pow(2).mean())
            for s in (TRAIN, TEST):
                e = SoftmaxLikelihood(onehot, standard_normal_draws(s, way, seed=seed)
                                      ).expectations(m0, v0)
                errs[s].append(torch.cat([e.g_m - exact.g_m, e.g_v - exact.g_v]).pow(2).mean())
        rm = {k: torch.stack(v).mean().sqrt().item() for k, v in errs.items()}
        print(f"   gradient RMSE: theirs (10000 MC) {rm['ref']:.2e}; ours Sobol {TRAIN} (train) "
              f"{rm[TRAIN]:.2e}, {TEST} (test) {rm[TEST]:.2e}")


if __name__ == "__main__":
    main()
