"""Error of the expected softmax gradients (g_m, g_v) vs number of draws vs time: the
antithetic scrambled-Sobol estimator used by MD-BFSC against plain Monte Carlo, measured in one run.
Times are for the per-draw work in float32 (MD-BFSC's default); ``sobol f64 ms`` is the same
estimator in float64, for the saving.

    .venv/bin/python benchmarks/md_bfsc/estimator.py

Marginals are 5-way, 80 points (a 5-way 1-shot episode with 15 queries), means and variances of
the size the inner loop meets. Reference values: Sobol with 2^20 draws. RMSE over 16 seeds.
"""

from __future__ import annotations

import time

import torch

from zoo.expectations import standard_normal_draws
from zoo.gp import DTYPE
from zoo.variational import SoftmaxLikelihood

torch.set_num_threads(1)
N, C = 80, 5
g = torch.Generator().manual_seed(0)
mean = 2 * torch.randn(N, C, generator=g, dtype=DTYPE)
var = 0.1 + 2 * torch.rand(N, C, generator=g, dtype=DTYPE)
onehot = torch.nn.functional.one_hot(torch.arange(N) % C, C).to(DTYPE)
ref = SoftmaxLikelihood(onehot, standard_normal_draws(2**20, C, seed=99)).expectations(mean, var)


def measure(method: str, samples: int, dtype: torch.dtype = torch.float32) -> tuple[float, float]:
    errs, times = [], []
    for seed in range(16):
        draws = standard_normal_draws(samples, C, method=method, seed=seed)
        t = time.perf_counter()
        e = SoftmaxLikelihood(onehot, draws, dtype).expectations(mean, var)
        times.append(time.perf_counter() - t)
        errs.append(torch.cat([(e.g_m - ref.g_m).flatten(), (e.g_v - ref.g_v).flatten()]))
    rmse = torch.stack(errs).pow(2).mean().sqrt().item()
    return rmse, sorted(times)[len(times) // 2]


print(f"{'draws':>7} {'sobol rmse':>11} {'sobol ms':>9} {'sobol f64 ms':>13} {'mc rmse':>10} "
      f"{'mc ms':>7} {'mc/sobol err':>12}")
rows = {}
for s in (16, 32, 64, 128, 256, 512, 1024, 4096, 10000):
    (es, ts), (em, tm) = measure("sobol", s), measure("mc", s)
    t64 = measure("sobol", s, DTYPE)[1]
    rows[s] = (es, ts, em, tm)
    print(f"{s:>7} {es:>11.2e} {ts * 1e3:>9.2f} {t64 * 1e3:>13.2f} {em:>10.2e} {tm * 1e3:>7.2f} "
          f"{em / es:>12.1f}")
# equal time: the MC draw count whose time matches Sobol's at each training/test default
for s in (64, 256):
    es, ts = rows[s][0], rows[s][1]
    cheaper = [k for k, r in rows.items() if r[3] <= ts]
    k = max(cheaper) if cheaper else min(rows)
    print(f"at equal time ({ts * 1e3:.2f} ms): sobol {s} draws err {es:.2e} vs mc {k} draws err "
          f"{rows[k][2]:.2e}: ratio {rows[k][2] / es:.1f}x")
print(f"plain MC with 10000 draws (the authors' count) err {rows[10000][2]:.2e} in "
      f"{rows[10000][3] * 1e3:.2f} ms; sobol 256: err {rows[256][0]:.2e} in {rows[256][1] * 1e3:.2f} ms")
