"""The zoo's Meta-CV (``zoo.control_variates.neural``) against the thesis authors' own code.

    git clone https://github.com/jz-fun/Meta_Control_Variates METACV_SRC
    pip install --target METACV_SITE --no-deps higher==0.2.1
    python benchmarks/control_variates/vs_authors.py --reference METACV_SRC \\
        --site METACV_SITE [--train-steps 4000] [--tasks 1000] [--save F | --load F]

The reference (Sun 2023, "Meta Control Variates", the Genz oscillatory and Sarcos experiments) is
imported from ``--reference`` unmodified: its network and Stein operator (``MetaNeuralCVModel``:
a sigmoid MLP whose output is multiplied by ``prod_j x_j (1 - x_j)``, then ``c + sum_j d_j u + u
sum_j s_j``), its inner loop (``higher``'s differentiable Adam on its task loss) and its
meta-training and test loops (``MetaNeuralCV``). ``higher`` is the only extra package it needs
(``--site``: a folder it is installed in). Sections, each printing its largest differences:

1. **Stein operator** at identical weights (the reference's PyTorch-default initialisation, copied
   into the zoo's layout) and inputs, uniform score (zero) and a Gaussian score, d = 1, 2, 3,
   float64: the reference's ``forward - c`` against ``stein_values(..., boundary=True)``.
2. **Inner loop**: 1 and 3 Adam steps (lr 0.01) on one task's support, the reference by
   ``higher`` on its own loss ``mean (c + g - f)^2 / K + lambda mean (c + g)^2`` (a learnable
   intercept ``c``), the zoo's Stein values with its ``UnrolledAdam`` and with Adam in the
   efficient order ``higher`` uses on the same loss (the update rule compared), and the zoo's own
   ``adapt`` (intercept profiled out, penalty on ``g``, ``UnrolledAdam``: the objective compared).
3. **Sarcos**: the reference's ``MetaNeuralCVModel_Sarcos`` (2 inputs, 5 x 20 sigmoid, its
   N(0, 1e-3^2) initialisation) with a Gaussian score: its output minus its intercept, the Stein
   term it divides by 1e20, and what one inner Adam step does to the weights and to ``c``.
4. **Estimates** on ``--tasks`` Genz oscillatory test tasks (d = 2, a ~ U(4, 6), u ~ U(0.4, 0.6),
   ``K = 5`` support and 5 query points: the thesis's N = 10) drawn by the reference's own task
   generator, at the reference's meta-weights after ``--train-steps`` of its own meta-training
   (float32, its settings: 80 x 80, meta lr 2e-3, 5 tasks per step, lambda 5e-6; 0: at its
   initialisation). Per task: the reference's stored estimator ``mean_Q(f - c' - g') + c`` (the
   un-adapted intercept ``c``; checked equal to its ``MetaNeuralCV.test``), the same with the
   adapted ``c'`` (Eq. 5.2, ``mean_Q(f - g')``), the zoo's ``stein_values`` at the reference's
   adapted weights, and the zoo's Meta-CV adapting the same meta-weights by its own objective.
5. **Stored results**: the reference's own Fig. 5.1 data for the same N, averaged.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from zoo.control_variates.neural import adapt, stein_values
from zoo.metrics import mean_ci, paired_difference
from zoo.unrolled import UnrolledAdam

K, INNER_LR, PENALTY, WIDTH = 5, 0.01, 5e-6, 80


def reference_modules(reference: Path, site: Path | None):
    for path in (site, reference):
        if path is not None:
            sys.path.insert(0, str(path))
    import higher  # noqa: F401  (the reference's dependency)
    from Oscillatory_C.MCV_oscillatory_c import MetaNeuralCV, MetaNeuralCVModel
    from Oscillatory_C.Oscillatory_Tasks import Oscillatory_Task_Distribution
    from Sarcos.MCV_sarcos import MetaNeuralCVModel_Sarcos
    from src.score_funcs import multivariate_Uniform_score
    return {"MetaNeuralCV": MetaNeuralCV, "Model": MetaNeuralCVModel,
            "Tasks": Oscillatory_Task_Distribution, "Sarcos": MetaNeuralCVModel_Sarcos,
            "uniform_score": multivariate_Uniform_score}


def zoo_params(net) -> list[torch.Tensor]:
    """The reference network's layers in the zoo's layout (weights ``[in, out]``)."""
    out = []
    for layer in net.layers:
        out += [layer.weight.detach().T.clone(), layer.bias.detach().clone()]
    return out


def reference_g(net, X, S) -> torch.Tensor:
    """The reference's CV minus its intercept, point by point as it computes it."""
    return torch.stack([net.forward(x.clone(), s.clone()) for x, s in zip(X, S)]).reshape(-1) \
        - net.c.detach().reshape(())


def their_loss(pred, y):
    """The reference's task loss (``MSELoss / K`` plus the penalty on its predictions)."""
    return torch.nn.functional.mse_loss(pred, y) / len(y) + PENALTY * pred.pow(2).mean()


def higher_adapt(net, X, S, y, steps):
    """The reference's inner loop; the adapted layers in the zoo's layout, then ``c``."""
    import higher
    inner = torch.optim.Adam(net.parameters(), lr=INNER_LR)
    with higher.innerloop_ctx(net, inner, track_higher_grads=False) as (fnet, diffopt):
        for _ in range(steps):
            diffopt.step(their_loss(fnet.minibatch(X, S).squeeze(), y))
        names = [n for n, _ in net.named_parameters()]
        adapted = dict(zip(names, (p.detach().clone() for p in fnet.parameters())))
        layers = []
        for i in range(len(net.layers)):
            layers += [adapted[f"layers.{i}.weight"].T, adapted[f"layers.{i}.bias"]]
        return fnet, layers + [adapted["c"]]


class EfficientAdam(UnrolledAdam):
    """Adam in Kingma & Ba's "more efficient" order (§2): ``p - lr sqrt(c2) / c1 * m / (sqrt(v)
    + eps)``, the form of ``higher``'s differentiable Adam (and of ``torch.optim.Adam`` before
    PyTorch 1.5); ``UnrolledAdam`` (today's ``torch.optim.Adam``) adds ``eps`` after dividing by
    ``sqrt(c2)``, i.e. its ``eps`` is ``sqrt(c2)`` times this one's (``eps / 0.032`` at step 1)."""

    def __call__(self, params, grads):
        m_t, v_t, c1, c2 = self.moments(grads)
        return [p - self.lr * math.sqrt(c2) / c1 * m / (v.sqrt() + self.eps)
                for p, m, v in zip(params, m_t, v_t)]


def section_operator(ref, seed):
    print("## 1. Stein operator at identical weights (float64), max |reference - zoo|")
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    for d in (1, 2, 3):
        net = ref["Model"](d, [WIDTH, WIDTH], torch.zeros(1, dtype=torch.float64)).double()
        X = torch.rand(50, d, generator=g, dtype=torch.float64)
        for name, S in (("uniform", torch.zeros(50, d, dtype=torch.float64)),
                        ("gaussian", -(X - 0.5) / 0.3**2)):
            theirs = reference_g(net, X, S)
            ours = stein_values(zoo_params(net), X, S, boundary=True)[:, 0]
            print(f"d={d} score={name:8s} max|g| {theirs.abs().max():.3e}  "
                  f"max diff {(theirs - ours).abs().max():.2e}")


def section_inner(ref, seed):
    print("## 2. Inner loop (float64, lr 0.01, d = 2, K = 5): adapted parameters")
    torch.manual_seed(seed)
    np.random.seed(seed)
    net = ref["Model"](2, [WIDTH, WIDTH], torch.zeros(1, dtype=torch.float64)).double()
    task = ref["Tasks"](2, 4, 6, 0.4, 0.6, 0, 1).sample_task()
    X, y = (t.double() for t in task.sample_data(K))
    y = y.reshape(-1)
    S = torch.zeros_like(X)
    for steps in (1, 3):
        _, theirs = higher_adapt(net, X, S, y, steps)
        diffs = {}
        for name, rule in (("UnrolledAdam", UnrolledAdam(INNER_LR)),
                           ("efficient-order Adam", EfficientAdam(INNER_LR))):
            theta = zoo_params(net) + [net.c.detach().clone()]
            for _ in range(steps):
                theta = [p.detach().requires_grad_(True) for p in theta]
                pred = theta[-1] + stein_values(theta[:-1], X, S, boundary=True)[:, 0]
                theta = rule(theta, torch.autograd.grad(their_loss(pred, y), theta))
            diffs[name] = max(float((a.detach() - b).abs().max()) for a, b in zip(theta, theirs))
            print(f"L={steps}: the reference's loss, zoo stein_values + {name} vs higher: max "
                  f"diff {diffs[name]:.2e}")
        theirs_z = theirs
        own = adapt(zoo_params(net), X[None], S[None], y[None], steps=steps, lr=INNER_LR,
                    boundary=True, penalty=PENALTY, rule="adam")
        start = zoo_params(net)
        d_ref = torch.cat([(b - a).flatten() for a, b in zip(start, theirs_z[:-1])])
        d_own = torch.cat([(b[0] - a).flatten() for a, b in zip(start, own)])
        agree = float((torch.sign(d_ref) == torch.sign(d_own)).double().mean())
        print(f"L={steps}: steps up to {float(d_ref.abs().max()):.3g}; intercept c moved "
              f"{float(theirs[-1] - net.c.detach()):+.4g}")
        print(f"L={steps}: zoo's own objective (profiled intercept) vs the reference's: steps "
              f"differ by up to {float((d_ref - d_own).abs().max()):.3g}, same sign for "
              f"{100 * agree:.1f}% of the {d_ref.numel()} weights")


def meta_trained(ref, steps, seed, save, load):
    torch.manual_seed(seed)
    np.random.seed(seed)
    tasks = ref["Tasks"](2, 4, 6, 0.4, 0.6, 0, 1)
    mcv = ref["MetaNeuralCV"]("oscillatory", ref["Model"], D_in=2, h_dims=[WIDTH, WIDTH],
                              init_val=torch.zeros(1), weight_decay=PENALTY, tasks=tasks,
                              inner_optim=torch.optim.Adam, inner_lr=INNER_LR, meta_lr=2e-3, K=K,
                              inner_steps=1, tasks_per_meta_batch=5, SCORE=ref["uniform_score"],
                              dim=2, null_param=0)
    mcv.print_every = 10**9
    if load:
        mcv.net.load_state_dict(torch.load(load))
        return mcv, f"loaded from {Path(load).name} (saved by --save after --train-steps)"
    start = time.perf_counter()
    if steps:
        mcv.main_loop(steps)
    seconds = time.perf_counter() - start
    if save:
        torch.save(mcv.net.state_dict(), save)
    return mcv, f"{steps} meta-training steps of the reference's main_loop, {seconds:.0f} s"


def section_estimates(ref, mcv, tasks, seed, how):
    print(f"## 4. Estimates on {tasks} Genz oscillatory test tasks (d = 2, N = {2 * K}); "
          f"meta-weights: {how}")
    # the reference's own test loop (float32), then the same tasks replayed
    np.random.seed(seed + 1)
    mcv.test(tasks, inner_optim=torch.optim.Adam, inner_steps=1)
    stored32 = np.array(mcv.meta_cv_ests, dtype=np.float64)
    np.random.seed(seed + 1)
    rows = {k: [] for k in ("truth", "mc", "mc_all", "stored32", "stored", "patched", "zoo_at_theirs",
                            "zoo", "c_shift")}
    net64 = copy.deepcopy(mcv.net).double()
    for _ in range(tasks):
        task = mcv.tasks.sample_task()
        truth = float(task.true_integral_val())
        X, y = task.sample_data(K)
        Xq, yq = task.sample_data(K)
        S = torch.zeros_like(X)
        fnet, _ = higher_adapt(mcv.net, X, S, y.squeeze(), 1)  # float32, as the reference
        rows["stored32"].append(float((yq.squeeze() - fnet.minibatch(Xq, S).squeeze().detach()
                                       + mcv.net.c.detach().squeeze()).mean()))
        X, y, Xq, yq, S = (t.double() for t in (X, y, Xq, yq, S))
        y, yq = y.reshape(-1), yq.reshape(-1)
        fnet, adapted = higher_adapt(net64, X, S, y, 1)
        pred_q = fnet.minibatch(Xq, S).squeeze().detach()
        c0, c1 = float(net64.c.detach()), float(adapted[-1])
        rows["truth"].append(truth)
        rows["mc"].append(float(yq.mean()))
        rows["mc_all"].append(float(torch.cat([y, yq]).mean()))
        rows["stored"].append(float((yq - pred_q).mean()) + c0)
        rows["patched"].append(float((yq - pred_q).mean()) + c1)
        rows["zoo_at_theirs"].append(float((yq - stein_values(adapted[:-1], Xq, S, True)[:, 0])
                                           .mean()))
        own = adapt(zoo_params(net64), X[None], S[None], y[None], steps=1, lr=INNER_LR,
                    boundary=True, penalty=PENALTY, rule="adam")
        rows["zoo"].append(float((yq - stein_values([p[0] for p in own], Xq, S, True)[:, 0])
                                 .mean()))
        rows["c_shift"].append(c0 - c1)
    r = {k: np.array(v) for k, v in rows.items()}
    print(f"replayed stored estimator (float32) vs the reference's MetaNeuralCV.test: max diff "
          f"{np.abs(r['stored32'] - stored32).max():.2e}")
    print(f"zoo stein_values at the reference's adapted weights vs its patched estimate: max diff "
          f"{np.abs(r['zoo_at_theirs'] - r['patched']).max():.2e}")
    print(f"un-adapted minus adapted intercept c - c': mean {r['c_shift'].mean():+.5f}, "
          f"|c - c'| from {np.abs(r['c_shift']).min():.5f} to {np.abs(r['c_shift']).max():.5f}; "
          f"meta-learned c = {float(mcv.net.c):.4f}")
    err = {k: np.abs(r[k] - r["truth"]) for k in ("mc", "mc_all", "stored", "patched", "zoo")}
    labels = {"mc": "MC on the 5 query points", "mc_all": f"MC on all {2 * K} points",
              "stored": "reference, stored estimator (c)",
              "patched": "reference, Eq. 5.2 (c')", "zoo": "zoo's Meta-CV from these weights"}
    for k, label in labels.items():
        m, ci = mean_ci(err[k])
        print(f"  {label:34s} mean |error| {m:.4f} +- {ci:.4f}")
    for a, b in (("stored", "patched"), ("zoo", "patched")):
        d, ci = paired_difference(err[a], err[b])
        print(f"  paired |error| {a} - {b}: {d:+.4f} +- {ci:.4f}")


def section_sarcos(ref, seed):
    print("## 3. Sarcos model (float32 as stored): the Stein term divided by 1e20")
    torch.manual_seed(seed)
    net = ref["Sarcos"](2, [20] * 5, torch.zeros(1))
    for p in net.parameters():  # the reference's main_loop initialisation, c included
        torch.nn.init.normal_(p, mean=0, std=1e-3)
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(4, 2, generator=g)
    S = -X  # a standard Gaussian's score
    out = torch.stack([net.forward(x.clone(), s.clone()) for x, s in zip(X, S)]).reshape(-1)
    stein = []
    for x, s in zip(X, S):
        u, grads = net.net_utils(x.clone())
        stein.append(float(grads.sum() + u.squeeze() * s.sum()))
    print(f"output - c: max |.| {float((out - net.c.detach()).abs().max()):.1e}; the Stein term "
          f"before the division: max |.| {max(abs(v) for v in stein):.2e}")
    y = torch.randn(4, generator=g)
    before = zoo_params(net) + [net.c.detach().clone()]
    _, after = higher_adapt(net, X, S, y, 1)
    moves = [float((a - b).abs().max()) for a, b in zip(after, before)]
    print(f"one inner Adam step (lr 0.01): weights move at most {max(moves[:-1]):.1e}, "
          f"c moves {moves[-1]:.1e}")


def section_stored(reference: Path):
    """The thesis's stored Fig. 5.1 data (``Oscillatory_DF_C.pkl``: absolute errors of 1,000 test
    tasks per method and ``m = N / 2``), averaged, for the row this script reruns."""
    path = reference / "Oscillatory_C" / "data_oscillatory" / "Oscillatory_DF_C.pkl"
    if not path.is_file():
        print(f"## 5. (no stored results at {path.name})")
        return
    import pandas as pd
    df = pd.read_pickle(path)
    print(f"## 5. The reference's stored Fig. 5.1 data ({path.name}), m = {K} (N = {2 * K})")
    for method, err in df[df.sample_size == f"m={K}"].groupby("method").est_abserr:
        m, ci = mean_ci(err.to_numpy())
        print(f"  {method:4s} mean |error| {m:.4f} +- {ci:.4f} over {len(err)} tasks")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", type=Path, required=True, help="the authors' repository")
    p.add_argument("--site", type=Path, help="a folder with the `higher` package installed")
    p.add_argument("--train-steps", type=int, default=4000)
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", help="save the reference's meta-weights here after training")
    p.add_argument("--load", help="load the reference's meta-weights instead of training")
    args = p.parse_args(argv)
    if not (args.reference / "Oscillatory_C" / "MCV_oscillatory_c.py").is_file():
        p.error(f"{args.reference} is not a checkout of the Meta-CV authors' repository")
    torch.set_num_threads(1)
    ref = reference_modules(args.reference, args.site)
    print(f"torch {torch.__version__}, seed {args.seed}")
    section_operator(ref, args.seed)
    section_inner(ref, args.seed)
    section_sarcos(ref, args.seed)
    mcv, how = meta_trained(ref, args.train_steps, args.seed, args.save, args.load)
    section_estimates(ref, mcv, args.tasks, args.seed, how)
    section_stored(args.reference)


if __name__ == "__main__":
    main()
