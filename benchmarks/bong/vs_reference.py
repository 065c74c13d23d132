"""The zoo's BONG family against the authors' JAX code (petergchang/bong), cell by cell, in float64.

Every tractable ``rule x family x curvature`` cell of :mod:`zoo_bong` (4 rules x 17 = 68 cells)
runs the same small problem from the same prior through both implementations: the zoo's
:func:`zoo_bong.rules.update` and the reference's ``update_*`` function for that cell (their
``bong/src/{bong,bog,blr,bbb}.py``), called the way their ``RebayesAlgorithm`` drivers call them
(BLR/BBB: ``num_iter`` calls with ``jr.fold_in(key, t)``, each from the predicted belief and the
current iterate). The script prints, per cell, the largest absolute difference of the mean and of
the covariance after the last observation, and each relative to the largest entry.

Problems (no predict step: ``gamma = 1, q = 0``, the reference's defaults):

- ``gaussian``: a 2-3-2 tanh MLP (P = 17), ``y ~ N(f, R)`` with a full 2x2 ``R``; all cells but
  MC-HESS. Both sides evaluate the same function, so a difference is one of the two codes.
- ``separable``: ``f_i = tanh(theta_i) x_i`` with diagonal ``R`` (P = 6), so the Hessian of
  ``log p`` is diagonal and Hutchinson's estimator is exact whatever the probes (the reference
  takes 100 probes shared by all draws, the zoo one per draw): the MC-HESS cells (dg, dg-mom).
- ``categorical``: the same MLP with 3 softmax outputs. The reference's LIN cells use the mean
  form with ``R = diag(p) - p p^T + 1e-5 I`` (its classification scripts' jitter); the zoo the
  logits form (no inverse of the singular ``R``), so LIN differences here are the jitter.

MC draws: both sides use the reference's own samplers (``sample_{fg,dg,dlrg}_bong`` with the key
of that step and iteration), the zoo's applied to the zoo's current iterate; what is compared is
the curvature estimate and the update, not the random numbers.

The dg family's mean rule follows the reference cell: VD-EKF's gain for BONG-LIN-HESS
(``update_ldg_bong``), the plain natural-gradient mean everywhere else (``update_ldg_blr`` and
the MC and EF cells); the zoo offers both (``dg_mean``).

A second table checks the reference against itself: BLR with ``alpha = 1`` and one iteration must
be BONG (the KL's gradient vanishes at the prior), cell by cell.

Setup (the reference and JAX stay outside the zoo's environment)::

    git clone https://github.com/petergchang/bong /tmp/bong-src     # the authors' code, unmodified
    .venv/bin/python benchmarks/bong/vs_reference.py --reference /tmp/bong-src --env /tmp/bong-env

``--env DIR`` is a virtual environment holding ``jax jaxlib pytz`` (created with ``pip`` if it
does not exist); :mod:`reference_env` puts it on the path after the zoo's and stands inert modules
in for the experiment helpers' imports (no algorithm is touched).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import reference_env
import torch
from reference_env import create_env
from zoo_bong.beliefs import DiagLowRank, prior_belief
from zoo_bong.curvature import linearised, monte_carlo
from zoo_bong.likelihoods import Categorical, Gaussian
from zoo_bong.rules import RULES, TRACTABLE, update

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)

STEPS, SAMPLES, RANK, PRIOR_VAR = 4, 5, 2, 0.05
ALPHA = {"bong": 1.0, "bog": 0.005, "blr": 0.5, "bbb": 0.002}
ITERATIONS = {"bong": 1, "bog": 1, "blr": 3, "bbb": 3}
D_IN, HIDDEN = 2, 3


#: ``--patched``: the smallest edits that make each differing reference cell agree, one per bug
#: (file, pattern, replacement, what it fixes), applied to a copy of the checkout.
PATCHES = [
    ("bog.py", r"- 4 \* learning_rate \* jnp\.outer\(([^,]+), mean\)",
     r"- 2 * learning_rate * (jnp.outer(\1, mean) + jnp.outer(mean, \1))",
     "BOG-FC: the natural-parameter gradient's outer term symmetrised"),
    ("bbb.py", r"new_prec = prec - 2 \* learning_rate \* cov @ prec_update",
     "new_prec = prec - learning_rate * (cov @ prec_update + (cov @ prec_update).T)",
     "BBB-FC: the same term symmetrised"),
    ("bog.py", r"cov \* mean @ update_term", "cov * mean * update_term",
     "BOG-DG-LIN-HESS: elementwise product, not a dot product"),
    ("blr.py", r"cov @ \(H\.T @ R_inv @ H \+ prec - prec0\) @ cov",
     "cov @ (-H.T @ R_inv @ H + prec - prec0) @ cov",
     "BLR-FC-mom-LIN-HESS: G = -H^T R^-1 H"),
    ("blr.py", r"\(\(HTRinv \* H\.T\)\.sum\(-1\) - prec0 \+ prec\)",
     "(-(HTRinv * H.T).sum(-1) - prec0 + prec)", "BLR-DG-mom-LIN-HESS: the same sign"),
    ("bbb.py", r"prec_lr @ \(\s*prec_lr0\.T @ \(mean0 - mean\)",
     "prec_lr0 @ (prec_lr0.T @ (mean0 - mean)", "BBB-DLR: Lambda_0 = Ups_0 + W_0 W_0^T"),
    ("bbb.py", r"lr_term = lr_term1 \+ lr_term2 \+ lr_term3 \+ lr_term4 \+ lr_term5",
     "lr_term = lr_term1 + lr_term2 + lr_term3 + lr_term4 - lr_term5",
     "BBB-DLR: the W gradient's Sigma (-W W^T) Sigma W term with its sign"),
]


def patched_copy(path: str) -> str:
    """A copy of the checkout with :data:`PATCHES` applied; each must match."""
    import re
    import shutil
    import tempfile

    out = os.path.join(tempfile.mkdtemp(prefix="bong-patched-"), "bong-src")
    shutil.copytree(path, out, ignore=shutil.ignore_patterns(".git", "results"))
    for name, pattern, replacement, what in PATCHES:
        file = os.path.join(out, "bong", "src", name)
        with open(file) as f:
            text = f.read()
        new, count = re.subn(pattern, replacement, text)
        if count == 0:
            sys.exit(f"patch for {what!r} matches nothing in {name}: not the reference's HEAD?")
        with open(file, "w") as f:
            f.write(new)
        print(f"patched {name} ({count} x): {what}")
    return out


def import_reference(env: str, path: str):
    """JAX from ``env`` (created if missing) and the reference's update modules from ``path``."""
    if not os.path.isdir(env):
        create_env(env)
    jax, modules, states = reference_env.import_reference(env, path)
    return jax, modules, states.AgentState, states.DLRAgentState


# ----------------------------------------------------------------------------------------------
# The problems, once in torch and once in JAX, on the same flat parameter vector


def mlp_torch(theta: torch.Tensor, x: torch.Tensor, c: int) -> torch.Tensor:
    w1, b1, w2, b2 = _split(theta, c)
    return w2 @ torch.tanh(w1 @ x + b1) + b2


def _split(theta, c):
    sizes = [HIDDEN * D_IN, HIDDEN, c * HIDDEN, c]
    out, start = [], 0
    for s in sizes:
        out.append(theta[start:start + s])
        start += s
    w1, b1, w2, b2 = out
    return w1.reshape(HIDDEN, D_IN), b1, w2.reshape(c, HIDDEN), b2


@dataclass
class Problem:
    name: str
    p: int
    model: Callable  # torch (theta, x) -> f
    likelihood: object  # zoo likelihood
    xs: torch.Tensor
    ys: torch.Tensor
    mu0: torch.Tensor
    w0: torch.Tensor  # the DLR prior's factor
    # reference side: (log_likelihood, emission_mean for MC, emission_mean for LIN, emission_cov)
    reference: Callable


def problems(jax) -> dict[str, Problem]:
    import jax.numpy as jnp
    from jax.scipy.stats import multivariate_normal

    gen = torch.Generator().manual_seed(0)
    out = {}

    def factor(p):
        # a non-zero DLR prior factor: from w = 0 the plain-gradient rules (BOG, BBB) never move
        # w (its gradient is proportional to w), in both codes
        return torch.randn(p, RANK, generator=torch.Generator().manual_seed(p))

    def mlp_jax(c):
        def f(theta, x):
            w1, b1, w2, b2 = _split(theta, c)
            return w2 @ jnp.tanh(w1 @ x + b1) + b2
        return f

    # gaussian
    c = 2
    p = HIDDEN * D_IN + HIDDEN + c * HIDDEN + c
    noise = torch.tensor([[1.0, 0.2], [0.2, 0.8]])
    xs = torch.randn(STEPS, D_IN, generator=gen)
    mu0 = 0.5 * torch.randn(p, generator=gen)
    truth = mu0 + 0.3 * torch.randn(p, generator=gen)
    ys = torch.stack([mlp_torch(truth, x, c) for x in xs]) + 0.3 * torch.randn(STEPS, c,
                                                                               generator=gen)
    r = jnp.asarray(noise.numpy())

    def gaussian_reference(lin):
        f = mlp_jax(2)
        return (lambda mean, cov, y: multivariate_normal.logpdf(y, mean, cov), f,
                lambda w, x: r)

    out["gaussian"] = Problem("gaussian", p, lambda th, x: mlp_torch(th, x, 2), Gaussian(noise),
                              xs, ys, mu0, factor(p), gaussian_reference)

    # separable: f_i = tanh(theta_i) x_i, diagonal R
    ps = 6
    rdiag = torch.linspace(0.2, 0.7, ps)
    xs_s = torch.randn(STEPS, ps, generator=gen)
    ys_s = torch.tanh(torch.randn(ps, generator=gen)) * xs_s + 0.3 * torch.randn(STEPS, ps,
                                                                                generator=gen)
    mu0_s = 0.5 * torch.randn(ps, generator=gen)
    r_s = jnp.diag(jnp.asarray(rdiag.numpy()))

    def separable_reference(lin):
        return (lambda mean, cov, y: multivariate_normal.logpdf(y, mean, cov),
                lambda theta, x: jnp.tanh(theta) * x, lambda w, x: r_s)

    out["separable"] = Problem("separable", ps, lambda th, x: torch.tanh(th) * x,
                               Gaussian(torch.diag(rdiag)), xs_s, ys_s, mu0_s,
                               factor(ps), separable_reference)

    # categorical: 3 classes
    c = 3
    pc = HIDDEN * D_IN + HIDDEN + c * HIDDEN + c
    xs_c = torch.randn(STEPS, D_IN, generator=gen)
    ys_c = torch.randint(0, c, (STEPS,), generator=gen)
    mu0_c = 0.5 * torch.randn(pc, generator=gen)

    def categorical_reference(lin):
        logits = mlp_jax(3)

        def probs(w, x):
            return jax.nn.softmax(logits(w, x))

        def cov(w, x):
            q = probs(w, x)
            return jnp.diag(q) - jnp.outer(q, q) + 1e-5 * jnp.eye(len(q))

        return (lambda mean, cov_, y: jnp.sum(y * jax.nn.log_softmax(mean)),
                probs if lin else logits, cov)

    out["categorical"] = Problem("categorical", pc, lambda th, x: mlp_torch(th, x, 3),
                                 Categorical(), xs_c, ys_c, mu0_c, factor(pc),
                                 categorical_reference)
    return out


# ----------------------------------------------------------------------------------------------
# One cell through both implementations

PREFIX = {"fc": "fg", "fc-mom": "fg_reparam", "dg": "dg", "dg-mom": "dg_reparam", "dlr": "dlrg"}


def reference_fn(modules, rule, family, curvature):
    lin = curvature.startswith("lin")
    name = f"update_{'l' if lin else ''}{PREFIX[family]}_{rule}"
    return getattr(modules[rule], name)


class Cell:
    def __init__(self, ref, problem: Problem, rule: str, family: str, curvature: str,
                 alpha: float, iterations: int):
        self.ref, self.pb, self.rule, self.family, self.curvature = ref, problem, rule, family, \
            curvature
        self.alpha, self.iterations = alpha, iterations
        self.jax, self.modules, self.AgentState, self.DLRAgentState = ref

    # --- conversions
    def to_ref(self, belief):
        import jax.numpy as jnp
        mu = jnp.asarray(belief.mu.numpy())
        if self.family == "dlr":
            return self.DLRAgentState(mu, jnp.asarray(belief.ups.numpy())[:, None],
                                      jnp.asarray(canonical(belief.w).numpy()))
        if self.family.startswith("fc"):
            return self.AgentState(mu, jnp.asarray(belief.gaussian.covariance().numpy()))
        return self.AgentState(mu, jnp.asarray(belief.gaussian.var.numpy()))

    def ref_moments(self, state):
        import numpy as np
        if self.family == "dlr":
            mean, ups, w = (np.asarray(a) for a in state)
            return torch.tensor(mean), torch.linalg.inv(
                torch.diag(torch.tensor(ups).ravel()) + torch.tensor(w) @ torch.tensor(w).T)
        mean, cov = (torch.tensor(np.asarray(a)) for a in state)
        return mean, cov if cov.ndim == 2 else torch.diag(cov)

    def ref_prior(self):
        import jax.numpy as jnp
        mu = jnp.asarray(self.pb.mu0.numpy())
        p = self.pb.p
        if self.family == "dlr":
            return self.DLRAgentState(mu, jnp.ones((p, 1)) / PRIOR_VAR,
                                      jnp.asarray(self.pb.w0.numpy()))
        if self.family.startswith("fc"):
            return self.AgentState(mu, PRIOR_VAR * jnp.eye(p))
        return self.AgentState(mu, PRIOR_VAR * jnp.ones(p))

    def draws(self, key, belief):
        """The reference's draws for ``belief`` with ``key`` (as its update function takes them)."""
        import jax.random as jr
        import numpy as np
        from bong.src.bong import sample_dg_bong, sample_dlrg_bong, sample_fg_bong
        state = self.to_ref(belief)
        if self.family in ("dg", "dg-mom"):
            z = sample_dg_bong(jr.split(key)[0], state, SAMPLES)
        elif self.family == "dlr":
            z = sample_dlrg_bong(key, state, SAMPLES)
        else:
            z = sample_fg_bong(key, state, SAMPLES)
        return torch.tensor(np.asarray(z))

    def y_ref(self, y):
        import jax.numpy as jnp
        if self.pb.name == "categorical":
            return jnp.eye(3)[int(y)]
        return jnp.asarray(y.numpy())

    # --- runs
    def run_zoo(self, keys):
        dg_mean = "vd-ekf" if (self.rule, self.family, self.curvature) == (
            "bong", "dg", "lin-hess") else "ngd"
        if self.family == "dlr":
            belief = DiagLowRank.make(self.pb.mu0.clone(), torch.ones(self.pb.p) / PRIOR_VAR,
                                      self.pb.w0.clone())
        else:
            belief = prior_belief(self.family, self.pb.mu0.clone(), PRIOR_VAR, RANK, dg_mean)
        gen = torch.Generator().manual_seed(0)
        for t, (x, y) in enumerate(zip(self.pb.xs, self.pb.ys)):
            calls = [0]

            def estimate(q, x=x, y=y, t=t, calls=calls):
                i = calls[0]
                calls[0] += 1
                if self.curvature.startswith("lin"):
                    return linearised(self.pb.model, self.pb.likelihood, q.mu, x, y,
                                      self.curvature == "lin-hess")
                key = keys[t] if self.rule in ("bong", "bog") else \
                    self.jax.random.fold_in(keys[t], i)
                return monte_carlo(self.pb.model, self.pb.likelihood, self.draws(key, q), x, y,
                                   self.curvature == "mc-hess", gen)

            belief = update(belief, estimate, self.rule, self.alpha, self.iterations)
        return belief.mu, belief.gaussian.covariance()

    def run_reference(self, keys, rule=None, alpha=None, iterations=None):
        import jax.numpy as jnp
        rule = rule or self.rule
        alpha = self.alpha if alpha is None else alpha
        iterations = iterations or self.iterations
        fn = reference_fn(self.modules, rule, self.family, self.curvature)
        lin = self.curvature.startswith("lin")
        log_lik, mean_fn, cov_fn = self.pb.reference(lin)
        ef = self.curvature.endswith("ef")
        state = self.ref_prior()
        def canon(s):
            return canonical_state(s, self.DLRAgentState) if self.family == "dlr" else s

        for t, (x, y) in enumerate(zip(self.pb.xs, self.pb.ys)):
            state = canon(state)
            args = (jnp.asarray(x.numpy()), self.y_ref(y), log_lik, mean_fn, cov_fn, SAMPLES, ef)
            if rule == "bong":
                state = fn(keys[t], state, *args)
            elif rule == "bog":
                state = fn(keys[t], state, *args, alpha)
            else:
                pred, current = state, state
                for i in range(iterations):
                    current = fn(self.jax.random.fold_in(keys[t], i), pred, canon(current),
                                 *args, alpha)
                state = current
        return self.ref_moments(state)


def canonical(w: torch.Tensor) -> torch.Tensor:
    """The representative ``U S`` of the DLR factor ``w`` (``w Q`` for any orthogonal ``Q`` gives
    the same precision), each column's largest entry positive. The reference's DLR sampler maps
    its noise through ``w`` itself, so both sides sample from this representative."""
    u, s, _ = torch.linalg.svd(w, full_matrices=False)
    wc = u * s
    pick = wc.abs().argmax(0)
    sign = torch.sign(wc[pick, torch.arange(wc.shape[1])])
    return wc * torch.where(sign == 0, 1.0, sign)


def canonical_state(state, DLRAgentState):
    import jax.numpy as jnp
    import numpy as np
    w = canonical(torch.tensor(np.asarray(state.prec_lr)))
    return DLRAgentState(state.mean, state.prec_diag, jnp.asarray(w.numpy()))


def cells():
    for rule in RULES:
        for family, curvatures in TRACTABLE.items():
            for curvature in curvatures:
                yield rule, family, curvature


def diff(a, b):
    d = (a - b).abs().max().item()
    return d, d / max(a.abs().max().item(), 1e-300)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reference", required=True, help="the authors' checkout (holds bong/src)")
    p.add_argument("--env", required=True, help="a virtual environment with jax (created if "
                   "missing); never the zoo's")
    p.add_argument("--problems", default="gaussian,separable,categorical")
    p.add_argument("--patched", action="store_true", help="compare with a copy of the reference "
                   "with the PATCHES applied (one per bug found)")
    args = p.parse_args()
    if not os.path.isfile(os.path.join(args.reference, "bong", "src", "bong.py")):
        sys.exit(f"--reference {args.reference!r} has no bong/src/bong.py; clone "
                 "petergchang/bong there")
    ref = import_reference(args.env,
                           patched_copy(args.reference) if args.patched else args.reference)
    jax = ref[0]
    probs = problems(jax)
    keys = [jax.random.fold_in(jax.random.PRNGKey(0), t) for t in range(STEPS)]
    chosen = args.problems.split(",")
    print(f"jax {jax.__version__}, torch {torch.__version__}, float64; {STEPS} observations, "
          f"M = {SAMPLES}, L = {RANK}, prior variance {PRIOR_VAR}, alpha {ALPHA}, "
          f"iterations {ITERATIONS}")
    print("\n| problem | rule | family | curvature | max abs d mean | rel | max abs d cov | rel |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    counted = set()
    for name in chosen:
        for rule, family, curvature in cells():
            if (curvature == "mc-hess") != (name == "separable"):
                continue
            cell = Cell(ref, probs[name], rule, family, curvature, ALPHA[rule], ITERATIONS[rule])
            try:
                zoo_mu, zoo_cov = cell.run_zoo(keys)
            except Exception as err:  # noqa: BLE001 - a refused update is a result here
                print(f"| {name} | {rule} | {family} | {curvature} | zoo: {type(err).__name__}"
                      f" | | | |")
                continue
            ref_mu, ref_cov = cell.run_reference(keys)
            dm, rm = diff(zoo_mu, ref_mu)
            dc, rc = diff(zoo_cov, ref_cov)
            counted.add((rule, family, curvature))
            print(f"| {name} | {rule} | {family} | {curvature} | {dm:.1e} | {rm:.1e} | {dc:.1e} "
                  f"| {rc:.1e} |", flush=True)
    print(f"\n{len(counted)} rule x family x curvature cells compared")

    folded = [jax.random.fold_in(k, 0) for k in keys]
    print("\nThe reference against itself: BLR (alpha = 1, one iteration) minus BONG")
    print("\n| problem | family | curvature | max abs d mean | max abs d cov |")
    print("|---|---|---|---:|---:|")
    for name in chosen:
        for family, curvatures in TRACTABLE.items():
            for curvature in curvatures:
                if (curvature == "mc-hess") != (name == "separable"):
                    continue
                cell = Cell(ref, probs[name], "bong", family, curvature, 1.0, 1)
                # BLR's first iteration draws with fold_in(key, 0): give BONG the same key
                b_mu, b_cov = cell.run_reference(folded)
                l_mu, l_cov = cell.run_reference(keys, rule="blr", alpha=1.0, iterations=1)
                print(f"| {name} | {family} | {curvature} | {diff(l_mu, b_mu)[0]:.1e} | "
                      f"{diff(l_cov, b_cov)[0]:.1e} |", flush=True)


if __name__ == "__main__":
    main()
