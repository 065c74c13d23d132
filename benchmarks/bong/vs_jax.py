"""Per-update wall time of every BONG rule x family x curvature cell, the zoo against the authors'
jitted JAX code (petergchang/bong), one thread, side by side.

The problem: the zoo's ``mlp`` network (one hidden layer of 64 ReLU units) on 5-d inputs with 3
classes, P = 6 x 64 + 65 x 3 = 579 parameters, float64 on both sides, the same initial weights and
examples; prior variance 0.01, rank L = 10 (dlr), M = 10 draws (mc-ef, mc-hess; the authors'
default), alpha = 1e-5 (the moment families' plain-gradient steps lose positive definiteness on
this network at 1e-3; the time does not depend on it), one iteration (blr, bbb), gamma = 1,
q = 0. Every cell of the zoo's :data:`zoo_bong.rules.TRACTABLE` (4 rules x 17 = 68) is timed;
the authors' cell is the update
class of ``bong/src/{bong,bog,blr,bbb}.py`` for that family (``fg_``, ``fg_reparam_``, ``dg_``,
``dg_reparam_``, ``dlrg_``) with ``linplugin`` / ``empirical_fisher`` set by the curvature, set up
as their classification script sets it up (logits and ``log softmax`` for the MC cells; for the
LIN cells the softmax mean with ``R = diag(p) - p p^T + 1e-5 I``), and its ``predict`` + ``update``
jitted together as their ``run_rebayes_algorithm`` jits them. BONG-LIN-HESS-DG uses the zoo's
``dg_mean = vd-ekf`` (the authors' cell is VD-EKF), every other dg cell the default ``ngd``.

Each side first takes ``--warm`` examples (so that the DLR factor has full rank) and two more
(JAX compiles on the first), then the next ``--repeats`` examples of the stream are timed, one
update each from the belief the previous update left, as a stream runs them (so nothing computed
from a belief, a Cholesky factor for sampling say, is reused from an earlier call on the same
belief). The rounds are interleaved (every cell's zoo update, then its JAX update, then the next
cell), so that a shared machine's drifts hit both alike; medians are printed with the ratio
zoo / JAX and the load average. Both sides allocate new ``P x P`` buffers every update (the
authors' code one covariance, the zoo's one or two); with glibc's defaults a freed buffer of that
size is often returned to the system and the next one faults fresh zeroed pages in, some 600
faults and about a millisecond on a loaded machine, which hits either side at random and
swamps the updates' own arithmetic. So the script first has ``malloc`` keep freed memory
(:func:`keep_freed_memory`; ``--default-malloc`` leaves it). One thread on both sides:
``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1`` and ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1`` (set before JAX is imported). ``--compile`` times the zoo's
cells with ``compile = true`` (for dg, dg-mom and dlr the whole MC-EF, LIN-HESS or LIN-EF update as
one ``torch.compile``-d program, for fc and fc-mom the curvature) and prints the first update's
seconds, which include compiling. Last, one ``P x P`` Cholesky factorisation is timed in torch and
in JAX, interleaved (:func:`cholesky_times`): the factorisation that both codes compute once per
BOG-FC-mom MC-EF update.

Setup (JAX and the authors' code stay outside the zoo's environment)::

    git clone https://github.com/petergchang/bong /tmp/bong-src       # the authors' code
    python benchmarks/bong/vs_jax.py --setup /tmp/bong-env            # a venv with jax, jaxlib, pytz
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bong/vs_jax.py --env /tmp/bong-env \\
        --reference /tmp/bong-src --repeats 20

:mod:`reference_env` puts the venv's site-packages on this process's path after the zoo's, stands
inert modules in for the experiment helpers' imports of their ``bong/util.py`` and points the
removed ``jax.tree_map`` at its current name. No algorithm of theirs is touched.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time
from collections.abc import Callable

import reference_env
import torch
from reference_env import create_env
from zoo_bong.curvature import COMPILABLE
from zoo_bong.method import Bong
from zoo_bong.rules import RULES, TRACTABLE

DIM, CLASSES, HIDDEN = 5, 3, 64
PRIOR_VAR, RANK, SAMPLES, ALPHA = 0.01, 10, 10, 1e-5
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
FAMILY_CLASS = {"fc": "fg_", "fc-mom": "fg_reparam_", "dg": "dg_", "dg-mom": "dg_reparam_",
                "dlr": "dlrg_"}


def setup(env: str) -> None:
    """Create the venv ``env`` with JAX from PyPI (CPU) and say how to fetch the authors' code."""
    create_env(env)
    print(f"{env} ready; fetch the authors' code with\n"
          "    git clone https://github.com/petergchang/bong /tmp/bong-src\n"
          f"then run --env {env} --reference /tmp/bong-src")


def import_reference(env: str, path: str):
    """JAX (one thread, float64) from ``env`` and the authors' four update modules from ``path``."""
    os.environ["XLA_FLAGS"] = XLA_ONE_THREAD
    os.environ["OMP_NUM_THREADS"] = "1"
    jax, modules, _ = reference_env.import_reference(env, path)
    return jax, modules


def keep_freed_memory() -> bool:
    """Have glibc's ``malloc`` keep freed memory for reuse (``M_MMAP_THRESHOLD`` 32 MiB, its
    maximum, and ``M_TRIM_THRESHOLD`` 1 GiB) instead of returning each freed ``P x P`` buffer to
    the system and faulting fresh zeroed pages in for the next one. False where this is not
    glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 1 << 30))


def cells() -> list[tuple[str, str, str]]:
    return [(r, f, c) for r in RULES for f in TRACTABLE for c in TRACTABLE[f]]


def examples(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [(torch.rand(DIM, generator=gen, dtype=torch.float64), torch.tensor(i % CLASSES))
            for i in range(n)]


def zoo_cell(rule: str, family: str, curvature: str, data, warm: int, compile: bool = False
             ) -> tuple[Callable[[], None], Bong, float]:
    """The zoo's cell after ``warm`` updates, a call that makes its next update (of the stream
    ``data``) from the belief the previous one left, and the first update's seconds (with
    ``compile``, the compilation; MC-HESS is never compiled)."""
    torch.manual_seed(0)
    dg_mean = "vd-ekf" if (rule, family, curvature) == ("bong", "dg", "lin-hess") else "ngd"
    method = Bong(dim=DIM, classes=CLASSES, network="mlp", rule=rule, family=family,
                  curvature=curvature, rank=RANK, samples=SAMPLES, alpha=ALPHA,
                  prior_var=PRIOR_VAR, dg_mean=dg_mean,
                  compile=compile and curvature in COMPILABLE)
    state = method.init()
    start = time.perf_counter()
    state = method.update(state, *data[0])
    first = time.perf_counter() - start
    for x, y in data[1:warm]:
        state = method.update(state, x, y)
    stream = iter(data[warm:])

    def step() -> None:
        nonlocal state
        state = method.update(state, *next(stream))

    return step, method, first


def jax_cell(jax, modules, rule: str, family: str, curvature: str, theta0, data, warm: int
             ) -> Callable[[], None]:
    """The authors' cell after ``warm`` jitted predict + update calls, and a call that makes the
    next one (of the stream ``data``) from the state the previous one left."""
    jnp, jr = jax.numpy, jax.random
    sizes = [HIDDEN * DIM, HIDDEN, CLASSES * HIDDEN, CLASSES]
    cuts = [sum(sizes[:i]) for i in range(1, len(sizes))]

    def logits(theta, x):  # the zoo's flat layout: W1 [64, 5], b1, W2 [3, 64], b2
        w1, b1, w2, b2 = jnp.split(theta, cuts)
        hidden = jax.nn.relu(w1.reshape(HIDDEN, DIM) @ x + b1)
        return w2.reshape(CLASSES, HIDDEN) @ hidden + b2

    def probs(theta, x):
        return jax.nn.softmax(logits(theta, x))

    def emission_cov(theta, x):
        p = probs(theta, x)
        return jnp.diag(p) - jnp.outer(p, p) + 1e-5 * jnp.eye(CLASSES)

    lin = curvature.startswith("lin")
    kwargs = {"init_mean": theta0, "init_cov": PRIOR_VAR,
              "log_likelihood": lambda mean, cov, y: jnp.sum(y * jax.nn.log_softmax(mean)),
              "emission_mean_function": probs if lin else logits,
              "emission_cov_function": emission_cov, "num_samples": SAMPLES, "linplugin": lin,
              "empirical_fisher": curvature.endswith("ef")}
    if rule != "bong":
        kwargs["learning_rate"] = ALPHA
    if rule in ("blr", "bbb"):
        kwargs["num_iter"] = 1
    if family == "dlr":
        kwargs["rank"] = RANK
    alg = getattr(modules[rule], FAMILY_CLASS[family] + rule)(**kwargs)
    step = jax.jit(lambda key, state, x, y: alg.update(key, alg.predict(state), x, y))
    xs = [jnp.asarray(x.numpy()) for x, _ in data]
    ys = [jax.nn.one_hot(int(y), CLASSES, dtype=jnp.float64) for _, y in data]
    state, key, t = alg.init(), jr.PRNGKey(0), 0

    def advance() -> None:
        nonlocal state, t
        state = jax.block_until_ready(step(jr.fold_in(key, t), state, xs[t], ys[t]))
        t += 1

    for _ in range(warm):
        advance()
    return advance


def cholesky_times(jax, p: int, repeats: int) -> tuple[float, float]:
    """Median seconds of one ``p x p`` float64 Cholesky factorisation in torch
    (``linalg.cholesky_ex``, the zoo's) and in jitted JAX (``jnp.linalg.cholesky``, what the
    authors' full-covariance MC cells sample with), interleaved: the factorisation both codes
    compute once per BOG-FC-mom MC-EF update."""
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(p, p, generator=gen, dtype=torch.float64)
    a = a @ a.T / p + torch.eye(p, dtype=torch.float64)
    ja = jax.numpy.asarray(a.numpy())
    factor = jax.jit(jax.numpy.linalg.cholesky)
    factor(ja).block_until_ready()
    sides: tuple[list[float], list[float]] = ([], [])
    calls = (lambda: torch.linalg.cholesky_ex(a), lambda: factor(ja).block_until_ready())
    for _ in range(repeats):
        for side, call in zip(sides, calls):
            start = time.perf_counter()
            call()
            side.append(time.perf_counter() - start)
    return statistics.median(sides[0]), statistics.median(sides[1])


def load() -> str:
    return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", metavar="DIR", help="create the JAX venv DIR and stop")
    parser.add_argument("--env", metavar="DIR", help="the venv made by --setup")
    parser.add_argument("--reference", metavar="DIR", help="a checkout of petergchang/bong")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warm", type=int, default=12, help="updates before timing")
    parser.add_argument("--families", default=",".join(TRACTABLE),
                        help="comma-separated families to time (default: all five)")
    parser.add_argument("--compile", action="store_true",
                        help="the zoo's cells with compile = true (mc-ef, lin-hess, lin-ef)")
    parser.add_argument("--default-malloc", action="store_true",
                        help="leave glibc's malloc thresholds as they are")
    args = parser.parse_args()
    if args.setup:
        setup(args.setup)
        return
    if not (args.env and args.reference):
        parser.error("give --env DIR and --reference DIR (or --setup DIR first)")
    kept = False if args.default_malloc else keep_freed_memory()
    jax, modules = import_reference(args.env, args.reference)
    torch.set_num_threads(1)
    families = args.families.split(",")
    data = examples(args.warm + 2 + args.repeats)
    steps: dict[tuple[str, str, str], tuple[Callable[[], None], Callable[[], None]]] = {}
    compile_s: list[float] = []
    for cell in cells():
        if cell[1] not in families:
            continue
        zoo_step, method, first = zoo_cell(*cell, data, args.warm, args.compile)
        compile_s.append(first)
        theta0 = jax.numpy.asarray(method.theta0.numpy())
        steps[cell] = (zoo_step, jax_cell(jax, modules, *cell, theta0, data, args.warm))
    print(f"torch {torch.__version__}, jax {jax.__version__}, one thread, float64, P = "
          f"{len(method.theta0)}; {len(steps)} cells, {args.repeats} interleaved rounds; malloc "
          f"{'keeps freed memory' if kept else 'defaults'}; before: {load()}")
    times = {cell: ([], []) for cell in steps}
    for pair in steps.values():  # compile and warm both sides
        for step in pair:
            step()
            step()
    for _ in range(args.repeats):
        for cell, pair in steps.items():
            for side, step in enumerate(pair):
                start = time.perf_counter()
                step()
                times[cell][side].append(time.perf_counter() - start)
    print(f"after: {load()}\n")
    print("| rule | family | curvature | zoo ms | JAX ms | zoo / JAX |")
    print("|---|---|---|---:|---:|---:|")
    at_or_below = 0
    for (rule, family, curvature), (zoo, ref) in times.items():
        z, j = 1000 * statistics.median(zoo), 1000 * statistics.median(ref)
        at_or_below += z <= j
        print(f"| {rule} | {family} | {curvature} | {z:.3f} | {j:.3f} | {z / j:.2f} |")
    print(f"\nzoo at or below the authors' time in {at_or_below} of {len(times)} cells")
    # the medians leave out the updates that form a full-covariance belief's matrix (or, for
    # BOG-FC-mom MC-EF, factorise it), once every few; the means count every update
    by_mean = [cell for cell, (zoo, ref) in times.items()
               if statistics.fmean(zoo) <= statistics.fmean(ref)]
    missed = [cell for cell, (zoo, ref) in times.items() if cell not in by_mean
              and statistics.median(zoo) <= statistics.median(ref)]
    ratio = {cell: statistics.fmean(zoo) / statistics.fmean(ref)
             for cell, (zoo, ref) in times.items()}
    print(f"by the mean over every timed update: {len(by_mean)} of {len(times)} cells"
          + ("; at or below by the median only: " + ", ".join(
              f"{'-'.join(cell)} (mean ratio {ratio[cell]:.2f})" for cell in missed)
             if missed else ""))
    print(f"the zoo's first update (compile = {args.compile}): {min(compile_s):.2f}-"
          f"{max(compile_s):.2f} s, {sum(compile_s):.1f} s over the cells")
    t, j = cholesky_times(jax, len(method.theta0), args.repeats)
    print(f"one P x P Cholesky factorisation: torch {1000 * t:.3f} ms, JAX {1000 * j:.3f} ms, "
          f"torch / JAX {t / j:.2f}")


if __name__ == "__main__":
    main()
