"""How much variance the thesis's neural CV field ``u 1_d`` can remove, integral by integral.

Under ``N(0, I)`` (whitened coordinates, score ``-z``) ``L'[u 1_d] = sqrt(d) (d/dw - w) u`` with
``w = z . 1_d / sqrt(d)``: the 1-d Stein operator along the all-ones direction, whose mean given the
orthogonal part ``y = z - w 1_d / sqrt(d)`` is zero. So the best CV of that class (any ``u``, any
amount of data, fitted intercept) leaves ``Var E[f | y]`` and its variance-reduction factor is at
most ``Var f / Var E[f | y]`` (half that for the split estimator at the same budget). Both terms
come from one set of draws of ``y`` with ``--nodes``-point Gauss-Hermite along the line ``y + t
1_d / sqrt(d)``: ``Var f = Var_y E[f | y] + E_y Var[f | y]``. The general field ``div u + u . s``
(``field="vector"``) has no such bound.

Integrals: Borehole in standardised coordinates (the integration methods standardise the inputs),
Genz oscillatory integrands on the cube (see :func:`genz_case`) and the predictive class
probabilities of untrained latent-Gaussian classifiers on digits episodes (recorded as in
``gp_predictive.py``; their CV path, so bayes-last-layer integrates over its class latents; OVE's
pair integrals are 1-d, where ``1_d`` spans everything). Printed: the summed variances and the
bound, per family.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

from zoo.data.integrands import BOREHOLE_MEAN, BOREHOLE_VAR, borehole
from zoo.plugins import registry


def line_moments(g, dim: int, draws: int, nodes: int, seed: int) -> tuple[float, float]:
    """``sum Var_y E[f | y]`` and ``sum Var f`` over the outputs of ``g: z [S, d] -> [S, K]``."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(draws, dim, generator=gen, dtype=torch.float64)
    e = torch.ones(dim, dtype=torch.float64) / dim**0.5
    y = z - (z @ e)[:, None] * e
    t, w = np.polynomial.hermite_e.hermegauss(nodes)
    t, w = torch.tensor(t), torch.tensor(w / w.sum())
    points = (y[:, None, :] + t[None, :, None] * e).reshape(-1, dim)
    values = g(points).reshape(draws, nodes, -1)
    mean = (w[None, :, None] * values).sum(1)  # E[f | y] [S, K]
    second = (w[None, :, None] * values**2).sum(1)
    between = float(mean.var(0).sum())
    total = between + float((second - mean**2).mean(0).sum())
    return between, total


def borehole_case(args) -> dict[str, float]:
    mu = torch.tensor(BOREHOLE_MEAN, dtype=torch.float64)
    sd = torch.tensor(BOREHOLE_VAR, dtype=torch.float64).sqrt()
    between, total = line_moments(lambda z: borehole(mu + sd * z)[:, None], 8, args.draws,
                                  args.nodes, 0)
    return {"var_f": total, "var_cond": between, "bound_vrf": total / between}


def genz_case(dim: int, args) -> dict[str, float]:
    """Genz oscillatory on the cube: ``L'[u delta 1_d]`` integrates to zero along every segment of
    a line parallel to ``1_d`` (``delta`` vanishes at both ends), so the bound is the same with
    ``E[f | y]`` the mean over that segment (``--nodes``-point Gauss-Legendre), averaged over
    ``--tasks`` integrands of the family."""
    gen = torch.Generator().manual_seed(0)
    e = torch.ones(dim, dtype=torch.float64) / dim**0.5
    t, w = np.polynomial.legendre.leggauss(args.nodes)
    t, w = torch.tensor((t + 1) / 2), torch.tensor(w / 2)
    between = total = 0.0
    for _ in range(args.tasks):
        a1 = 0.4 + 0.2 * torch.rand((), generator=gen, dtype=torch.float64)
        a = 4 + 2 * torch.rand(dim, generator=gen, dtype=torch.float64)
        x = torch.rand(args.draws, dim, generator=gen, dtype=torch.float64)
        y = x - (x @ e)[:, None] * e  # the segment {y + s e} inside the cube: s in [lo, hi]
        lo, hi = (-y).max(-1).values * dim**0.5, (1 - y).min(-1).values * dim**0.5
        s = lo[:, None] + (hi - lo)[:, None] * t  # [S, nodes]
        points = y[:, None, :] + s[..., None] * e
        values = torch.cos(2 * math.pi * a1 + points @ a)
        mean, second = (values * w).sum(-1), (values**2 * w).sum(-1)  # given y: uniform on s
        between += float(mean.var())  # y drawn as the projection of uniform x: its own law
        total += float(mean.var() + (second - mean**2).mean())
    return {"var_f": total, "var_cond": between, "bound_vrf": total / between}


def classifier_case(name: str, args) -> dict[str, float]:
    from gp_predictive import TRAINING, captured  # this folder's script

    from zoo.episode import EpisodeSampler
    from zoo.method import build_method
    from zoo.plugins import load_dataset

    data = load_dataset("digits")
    method = build_method(name, way=5, in_channels=data.in_channels, image_size=data.image_size,
                          seed=0, estimator="neural-cv[samples=8,epochs=1]", **TRAINING[name],
                          registry=registry())
    method.eval()
    sampler = EpisodeSampler(data, "test", 5, 5, args.query, seed=1)
    between = total = 0.0
    spreads = []
    for i in range(args.episodes):
        case = captured(method, sampler[i])
        mean = case["mean"].reshape(-1, case["mean"].shape[-1]).double()
        sd = case["var"].reshape(mean.shape).double().clamp_min(0).sqrt()
        spreads.append(float((sd.std(-1) / sd.mean(-1)).mean()))
        for q in range(len(mean)):
            b, t = line_moments(
                lambda z, g=case["g"], m=mean[q], s=sd[q]: g(m + s * z).reshape(len(z), -1).double(),
                mean.shape[-1], args.draws, args.nodes, i * 1000 + q)
            between, total = between + b, total + t
    return {"var_f": total, "var_cond": between, "bound_vrf": total / between,
            "sd_spread": float(np.mean(spreads))}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", nargs="*", default=["md-bfsc", "logistic-softmax",
                                                    "bayes-last-layer"])
    p.add_argument("--episodes", type=int, default=2)
    p.add_argument("--query", type=int, default=3, help="queries per class and episode")
    p.add_argument("--genz-dims", type=int, nargs="*", default=[2, 3, 4, 5, 6])
    p.add_argument("--tasks", type=int, default=20, help="Genz integrands per dimension")
    p.add_argument("--draws", type=int, default=4000)
    p.add_argument("--nodes", type=int, default=20,
                   help="Gauss-Hermite nodes (|t| < 7.6 at 20; Borehole's r_w turns negative "
                        "beyond ~6 prior standard deviations)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    results = {"borehole": borehole_case(args)}
    for dim in args.genz_dims:
        results[f"genz-oscillatory[dim={dim}]"] = genz_case(dim, args)
    for name in args.methods:
        results[name] = classifier_case(name, args)
    for name, r in results.items():
        spread = f", class sd spread {r['sd_spread']:.3f}" if "sd_spread" in r else ""
        print(f"{name:18s} Var f {r['var_f']:.4g}, Var E[f|y] {r['var_cond']:.4g}: best VRF of "
              f"u 1_d {r['bound_vrf']:.4g} (split: {r['bound_vrf'] / 2:.3g}){spread}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
