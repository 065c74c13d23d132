"""Which batched ``torch.linalg`` calls go wrong on the CPU with several threads (torch 2.14.1,
pytorch/pytorch#142815: the batched LU factorises matrices of more than ~14 rows on several threads
at once, where MKL's ``getrf`` is not thread-safe; fix #181570 unreleased).

Each call on a batch of ``k`` matrices ``n x n`` is compared with the same call one matrix at a
time: solves and inverses by their residuals (wrong when the batch's exceeds 100 times the loop's),
LU factors by the validity of the pivots and ``P L U = A``, the rest by their largest difference
relative to the loop's largest entry (1e-8 in float64, 1e-3 in float32). MKL's messages are
counted. Each configuration runs in a child process, each call with a time limit, because the
batched LU can also hang (both threads spinning in MKL's ``dgetrf``); a call that does not answer
counts as hung and the child is restarted after it. The matrices: ``A`` symmetric indefinite (pivoting, like
OVE's capacitance), ``S`` positive definite and well conditioned, ``W`` positive definite with
eigenvalues 0.1 to 1000, ``L`` the Cholesky factor of ``S``, right-hand sides ``[k, n, 3]``.

    python benchmarks/scale/batched_linalg.py [--sizes 32,64,...] [--batches 2,8] [--trials 1]
                                              [--threads 2] [--timeout 10]
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import torch
from torch import Tensor

Case = tuple[Callable[[], object], Callable[[], object], Callable[[object], Tensor] | None]


class Capture:
    """Collects what native code writes on file descriptors 1 and 2 (MKL's messages)."""

    def __enter__(self) -> Capture:
        sys.stdout.flush()
        sys.stderr.flush()
        ctypes.CDLL(None).fflush(None)
        self.file = tempfile.TemporaryFile()
        self.saved = [os.dup(1), os.dup(2)]
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        ctypes.CDLL(None).fflush(None)
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)
        self.file.seek(0)
        self.text = self.file.read().decode(errors="replace")
        self.file.close()


def residual(M: Tensor, X: Tensor, R: Tensor) -> Tensor:
    """Per matrix ``max |M X - R| / (max |M| max |X|)``."""
    return ((M @ X - R).flatten(-2).abs().amax(-1)
            / (M.flatten(-2).abs().amax(-1) * X.flatten(-2).abs().amax(-1)))


def cases(A: Tensor, S: Tensor, W: Tensor, L: Tensor, B: Tensor) -> dict[str, Case]:
    """Name -> (the batched call, the loop over the batch, the residual of a result or None)."""
    n, stack = A.shape[-1], torch.stack
    eye = torch.eye(n, dtype=A.dtype).expand_as(A)
    loop_lu = [torch.linalg.lu_factor(a) for a in A]
    LU, piv = stack([f for f, _ in loop_lu]), stack([p for _, p in loop_lu])

    def lu_residual(out: tuple[Tensor, Tensor]) -> Tensor:
        factors, pivots = out
        if not ((pivots >= 1) & (pivots <= n)).all():
            return torch.full((len(A),), float("inf"))
        P, lower, upper = torch.lu_unpack(factors, pivots)
        return residual(P @ lower, upper, A)

    def each(f: Callable[..., Tensor], *batches: Tensor) -> Callable[[], Tensor]:
        return lambda: stack([f(*xs) for xs in zip(*batches)])

    linalg = torch.linalg
    single = A[0].expand_as(A)
    return {
        "lu_factor": (lambda: linalg.lu_factor(A), lambda: (LU, piv), lu_residual),
        "lu_factor_ex": (lambda: linalg.lu_factor_ex(A)[:2], lambda: (LU, piv), lu_residual),
        "solve": (lambda: linalg.solve(A, B), each(linalg.solve, A, B), lambda x: residual(A, x, B)),
        "solve_ex": (lambda: linalg.solve_ex(A, B)[0], each(lambda a, b: linalg.solve_ex(a, b)[0], A, B),
                     lambda x: residual(A, x, B)),
        "inv": (lambda: linalg.inv(A), each(linalg.inv, A), lambda x: residual(A, x, eye)),
        "inv_ex": (lambda: linalg.inv_ex(A)[0], each(lambda a: linalg.inv_ex(a)[0], A),
                   lambda x: residual(A, x, eye)),
        "inv (positive definite W)": (lambda: linalg.inv(W), each(linalg.inv, W),
                                      lambda x: residual(W, x, eye)),
        "det": (lambda: linalg.det(A), each(linalg.det, A), None),
        "slogdet": (lambda: linalg.slogdet(A).logabsdet, each(lambda a: linalg.slogdet(a).logabsdet, A),
                    None),
        "slogdet sign": (lambda: linalg.slogdet(A).sign, each(lambda a: linalg.slogdet(a).sign, A), None),
        "torch.logdet (positive definite S)": (lambda: torch.logdet(S), each(torch.logdet, S), None),
        "torch.logdet (positive definite W)": (lambda: torch.logdet(W), each(torch.logdet, W), None),
        "lu_solve (batched factors)": (lambda: linalg.lu_solve(LU, piv, B), each(linalg.lu_solve, LU, piv, B),
                                       lambda x: residual(A, x, B)),
        "cholesky": (lambda: linalg.cholesky(S), each(linalg.cholesky, S), None),
        "cholesky (W)": (lambda: linalg.cholesky(W), each(linalg.cholesky, W), None),
        "cholesky_ex": (lambda: linalg.cholesky_ex(S)[0], each(lambda s: linalg.cholesky_ex(s)[0], S), None),
        "solve_triangular": (lambda: linalg.solve_triangular(L, B, upper=False),
                             each(lambda t, b: linalg.solve_triangular(t, b, upper=False), L, B), None),
        "cholesky_solve": (lambda: torch.cholesky_solve(B, L), each(torch.cholesky_solve, B, L), None),
        "cholesky_inverse": (lambda: torch.cholesky_inverse(L), each(torch.cholesky_inverse, L), None),
        "eigh": (lambda: linalg.eigh(S)[0], each(lambda s: linalg.eigh(s)[0], S), None),
        "solve (one A, batched B)": (lambda: linalg.solve(A[0], B), each(lambda b: linalg.solve(A[0], b), B),
                                     lambda x: residual(single, x, B)),
        "lu_solve (one LU, batched B)": (lambda: linalg.lu_solve(LU[0], piv[0], B),
                                         each(lambda b: linalg.lu_solve(LU[0], piv[0], b), B),
                                         lambda x: residual(single, x, B)),
        "cholesky_solve (one L, batched B)": (lambda: torch.cholesky_solve(B, L[0]),
                                              each(lambda b: torch.cholesky_solve(b, L[0]), B), None),
    }


def child(dtype: torch.dtype, n: int, k: int, seed: int, skip: set[str]) -> None:
    """One configuration: per case, ``START name`` and then a JSON line with its verdict (a hang
    leaves ``START`` last)."""
    tol = 1e-8 if dtype == torch.float64 else 1e-3
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    A = torch.randn(k, n, n, generator=g, dtype=f64)
    A = (A + A.mT).to(dtype)
    G = torch.randn(k, n, n, generator=g, dtype=f64)
    S = G @ G.mT / n + torch.eye(n, dtype=f64)
    Q = torch.linalg.qr(torch.randn(k, n, n, generator=g, dtype=f64)).Q
    W = (Q * torch.logspace(-1, 3, n, dtype=f64)) @ Q.mT
    W = 0.5 * (W + W.mT)
    L = torch.linalg.cholesky(S).to(dtype)
    S, W = S.to(dtype), W.to(dtype)
    B = torch.randn(k, n, 3, generator=g, dtype=dtype)
    for name, (batched, loop, resid) in cases(A, S, W, L, B).items():
        if name in skip:
            continue
        print("START " + name, flush=True)
        bad, status = None, "ok"
        with Capture() as cap:
            try:
                out = batched()
            except Exception as e:  # refused
                bad, status = "raised: " + str(e).split("\n")[0][:60], "raised"
        if bad is None:
            ref = loop()
            if resid is not None:
                rb, rl = resid(out), resid(ref)
                if (rb > 100 * rl + 100 * torch.finfo(dtype).eps).any():
                    bad = f"residual {float(rb.max()):.1e} (loop {float(rl.max()):.1e})"
            elif name == "det":  # sign and log |det| (det itself over- and underflows)
                o, r = torch.stack([out.sign(), out.abs().log()]), torch.stack([ref.sign(), ref.abs().log()])
                err = float((o - r).abs().max() / r.abs().max().clamp_min(1.0))
                bad = f"differs from the loop by {err:.1e}" if err > tol else None
            else:
                err = float((out - ref).abs().max() / ref.abs().max().clamp_min(1.0))
                bad = f"differs from the loop by {err:.1e}" if err > tol else None
            status = "wrong" if bad else "ok"
        print(json.dumps({"case": name, "status": status, "msgs": cap.text.count("MKL ERROR"),
                          "detail": bad}), flush=True)


def run(dtype: str, n: int, k: int, seed: int, timeout: float) -> list[dict]:
    """Every case of one configuration, restarting the child after a call that does not answer
    within ``timeout`` seconds."""
    results: list[dict] = []
    while True:
        env = dict(os.environ, BATCHED_LINALG_CHILD=f"{dtype},{n},{k},{seed}",
                   BATCHED_LINALG_SKIP=";".join(r["case"] for r in results))
        proc = subprocess.Popen([sys.executable, __file__], env=env, stdout=subprocess.PIPE, text=True)
        started = None
        while True:
            if started is not None and not select.select([proc.stdout], [], [], timeout)[0]:
                proc.kill()
                proc.wait()
                results.append({"case": started, "status": "hung", "msgs": 0,
                                "detail": f"no answer in {timeout:.0f} s"})
                break
            line = proc.stdout.readline()
            if not line:
                proc.wait()
                return results
            if line.startswith("START "):
                started = line[len("START "):].strip()
            elif line.startswith("{"):
                results.append(json.loads(line))
                started = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="32,64,100,128,150,200,280,400")
    parser.add_argument("--batches", default="2,8")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if "BATCHED_LINALG_CHILD" in os.environ:
        dtype, n, k, seed = os.environ["BATCHED_LINALG_CHILD"].split(",")
        skip = set(filter(None, os.environ["BATCHED_LINALG_SKIP"].split(";")))
        child(getattr(torch, dtype), int(n), int(k), int(seed), skip)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    batches = [int(s) for s in args.batches.split(",")]
    # per (case, dtype): runs, wrong, raised, hung, MKL messages, smallest bad n, first bad
    stats: dict[tuple[str, str], list] = collections.defaultdict(lambda: [0, 0, 0, 0, 0, None, None])
    column = {"wrong": 1, "raised": 2, "hung": 3}
    start, seed = time.time(), 0
    for dtype in ("float64", "float32"):
        for n in sizes:
            print(f"{dtype} n={n} {time.time() - start:.0f} s", file=sys.stderr, flush=True)
            for k in batches:
                for _ in range(args.trials):
                    seed += 1
                    for r in run(dtype, n, k, seed, args.timeout):
                        st = stats[(r["case"], dtype)]
                        st[0] += 1
                        st[4] += r["msgs"]
                        if r["status"] != "ok":
                            st[column[r["status"]]] += 1
                            st[5] = n if st[5] is None else min(st[5], n)
                            st[6] = st[6] or f"n={n} k={k}: {r['detail']}"
    print(f"{args.threads} threads, torch {torch.__version__}, sizes {sizes}, batches {batches}, "
          f"{args.trials} trial(s), {time.time() - start:.0f} s")
    print(f"{'batched call':36s} {'dtype':7s} {'runs':>4s} {'wrong':>5s} {'raised':>6s} {'hung':>4s} "
          f"{'MKL msgs':>8s} {'min bad n':>9s}  first bad")
    for (name, dtype), (runs, wrong, raised, hung, msgs, n_bad, first) in stats.items():
        print(f"{name:36s} {dtype:7s} {runs:4d} {wrong:5d} {raised:6d} {hung:4d} {msgs:8d} "
              f"{str(n_bad):>9s}  {first or ''}")


if __name__ == "__main__":
    main()
