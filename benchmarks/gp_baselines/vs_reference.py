"""Our GP baselines against the authors' public code, side by side on this CPU, in one process.

Pairs (ours <- theirs), 5-way 5-shot, 15 queries per class, 28x28 one-channel images through a
Conv4S-sized backbone (their ``Conv4S``, our ``conv4s``), each side at its default steps:

* ``dkt`` <- DKT (BayesWatch/deep-kernel-transfer): ``bncossim`` kernel, test episode
  ``DKT.correct(x)`` (``N = 0`` adaptation steps, their default), training step ``DKT.train_loop``
  on a one-episode loader (it builds its Adam, steps it, and evaluates support and query
  accuracy every iteration, as shipped); row ``dkt-core``: the same step without that
  evaluation (their loop's lines up to ``optimizer.step()``, called on their objects).
* ``logistic-softmax`` (mean field, ML) <- CDKT (keanson/revisit-logistic-softmax): cosine
  kernel, test ``CDKT.correct(x)`` (30 mean-field steps, 10,000 Monte Carlo draws), training step
  ``CDKT.train_loop`` (``--loss ELBO --steps 2 --tau 1``).
* ``ove`` (ML) <- OVE (jakesnell/ove-polya-gamma-gp): ``L2LinearKernel``, 20 chains, test
  ``set_forward(x)`` with 50 Gibbs steps, training step ``MetaTemplate.train_loop`` with 1 step
  (their README's commands); row ``ove-joint``: ours with ``sampler=joint``, their algorithm
  (all of ``f | w`` at once) rather than our default class-blocked sampler.
* ``logistic-softmax`` (Gibbs, ML) <- the OVE repository's ``LogisticSoftmaxGP`` (the Galy-Fajou
  sampler as Snell & Zemel ran it): same kernel, chains, steps and calls as OVE (row
  ``ls-gibbs``).

Our test episode is ``predict`` under ``torch.no_grad()``; our training step is ``zero_grad``,
``meta_loss``, ``backward`` and an Adam step on ``param_groups()``. Each repeat draws a new
episode (``zoo.testing.toy_episode``) that both sides see; the order alternates between repeats;
the first repeat is a warm-up. Medians of process CPU seconds are printed (on a shared machine
those of a one-thread run are the comparable number) with the ratio theirs / ours (> 1: ours is
faster), and the same ratio of wall-clock medians. A second table (``features given``) swaps
both backbones for the identity on fixed 64-d features, which leaves the GP part alone (their
DKT keeps its ``bn_out`` BatchNorm1d, ours its ``bncosine`` BatchNorm1d).

Their code runs unmodified; three shims make it import and run here, none touches an algorithm:
``Tensor.cuda``/``Module.cuda`` return ``self`` (their ``.cuda()`` calls, CPU machine);
``torch.cholesky`` is ``torch.linalg.cholesky`` (the old name was removed from torch 2; the
documented replacement); ``scipy.integrate.simps`` is ``simpson`` (renamed in scipy 1.14; only
``pypolyagamma.utils`` imports it, the sampler does not use it). Their classes are built with
``__new__`` where ``__init__`` hard-codes ``cuda:0`` (CDKT) or a sacred-captured config (OVE),
setting the same attributes ``__init__`` sets.

Setup (the references and their dependencies stay outside our venv)::

    git clone https://github.com/BayesWatch/deep-kernel-transfer /tmp/dktref
    git clone https://github.com/keanson/revisit-logistic-softmax /tmp/cdktref
    git clone https://github.com/jakesnell/ove-polya-gamma-gp /tmp/overef
    # gpytorch 1.9.0: DKT passes 75 inputs to its 5-model IndependentModelList, which newer
    # gpytorch (strict zip) rejects; 1.9.0 is also the version the CDKT README names
    .venv/bin/pip install --target /tmp/refdeps-gp --no-deps gpytorch==1.9.0 linear_operator==0.2.0
    # pypolyagamma (OVE) from source: its setup.py imports pkg_resources and downloads GSL by
    # FTP, so build it in a scratch venv with old setuptools and GSL's sources from a git mirror
    python3.11 -m venv /tmp/ppg-venv
    /tmp/ppg-venv/bin/pip install "setuptools<70" wheel "Cython>=3" "numpy==2.4.*"
    git clone https://github.com/slinderman/pypolyagamma /tmp/ppg-git
    git clone https://github.com/ampl/gsl /tmp/ppg-git/deps/gsl
    cd /tmp/ppg-git && CFLAGS="-I$(/tmp/ppg-venv/bin/python -c 'import numpy; print(numpy.get_include())')" \\
        /tmp/ppg-venv/bin/pip wheel --no-build-isolation --no-deps . -w /tmp/ppg-wheel && cd -
    .venv/bin/pip install --target /tmp/refdeps-ove --no-deps /tmp/ppg-wheel/pypolyagamma-*.whl \\
        "setuptools<70"                                   # pkg_resources, which sacred imports
    .venv/bin/pip install --target /tmp/refdeps-ove sacred==0.8.7
    .venv/bin/python benchmarks/gp_baselines/vs_reference.py

A reference whose checkout or dependencies are missing is skipped, and this recipe printed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from zoo.episode import Episode
from zoo.method import build_method
from zoo.plugins import registry
from zoo.testing import toy_episode

WAY, SHOT, QUERY, DIM = 5, 5, 15, 64
SETUP = __doc__[__doc__.index("Setup (") :]


@dataclass
class Reference:
    """One row: a ``BUILDERS`` key for the authors' side, our method and hyper-parameters, the
    authors' checkout and the ``pip --target`` folders it imports from."""

    name: str
    ours: str
    hparams: dict[str, Any]
    checkout: str
    deps: list[str]


class Identity(nn.Module):
    """A backbone that passes given features through (the ``features given`` table)."""

    feature_dim = DIM

    def forward(self, x: Tensor) -> Tensor:
        return x


def apply_shims() -> None:
    """The three compatibility shims named in the module docstring."""
    import scipy.integrate

    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    nn.Module.cuda = lambda self, *args, **kwargs: self
    torch.cholesky = lambda A, upper=False, out=None: torch.linalg.cholesky(A, upper=upper, out=out)
    if not hasattr(scipy.integrate, "simps"):
        scipy.integrate.simps = scipy.integrate.simpson


@contextlib.contextmanager
def on_path(ref: Reference) -> Iterator[None]:
    """Import from ``ref.checkout`` (first) and its dependency folders (last, so our venv's
    packages win); afterwards forget the checkout's modules, whose names (``methods``,
    ``backbone``, ``configs``) the three repositories share."""
    sys.path.insert(0, ref.checkout)
    sys.path.extend(d for d in ref.deps if d not in sys.path)
    try:
        yield
    finally:
        sys.path.remove(ref.checkout)
        root = os.path.abspath(ref.checkout)
        for name, mod in list(sys.modules.items()):
            if os.path.abspath(getattr(mod, "__file__", None) or "/").startswith(root + os.sep):
                del sys.modules[name]


def their_input(ep: Episode) -> Tensor:
    """``[way, shot + query, C, H, W]`` class-major, the layout their data loaders produce;
    features ``[n, d]`` become ``d x 1 x 1`` images (their code indexes five axes)."""
    s = ep.support_x.reshape(WAY, SHOT, *ep.support_x.shape[1:])
    q = ep.query_x.reshape(WAY, QUERY, *ep.query_x.shape[1:])
    x = torch.cat([s, q], 1)
    return x[..., None, None] if x.ndim == 3 else x


def feature_episode(seed: int) -> Episode:
    """Class-dependent 64-d features in place of images (same labels and seed as the images)."""
    ep = toy_episode(WAY, SHOT, QUERY, seed=seed)
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(WAY, DIM, generator=g)
    return Episode(centres[ep.support_y] + torch.randn(WAY * SHOT, DIM, generator=g),
                   ep.support_y, centres[ep.query_y] + torch.randn(WAY * QUERY, DIM, generator=g),
                   ep.query_y, way=WAY, shot=SHOT, info=ep.info)


# -- the authors' objects ---------------------------------------------------------------------------

Calls = tuple[Callable[[Any], object], Callable[[Any], object]]


def build_dkt(features: bool, core: bool = False) -> Calls:
    """``core``: the training step without the accuracy evaluation their ``train_loop`` runs
    after every step (their lines up to ``optimizer.step()``, on their objects)."""
    import backbone
    from methods.DKT import DKT

    m = DKT(backbone.Conv4S, WAY, SHOT)
    if features:
        m.feature = m.feature_extractor = nn.Sequential(nn.Flatten(), nn.BatchNorm1d(DIM))
    m.n_query = QUERY
    opt = torch.optim.Adam([{"params": m.model.parameters(), "lr": 1e-4},
                            {"params": m.feature_extractor.parameters(), "lr": 1e-3}])
    targets = [2.0 * (torch.arange(WAY).repeat_interleave(SHOT + QUERY) == c) - 1.0
               for c in range(WAY)]

    def test(x: Tensor) -> object:
        m.n_query = QUERY
        return m.correct(x)

    def train(x: Tensor) -> object:
        if not core:
            return m.train_loop(0, [(x, None)], None)
        for part in (m.model, m.likelihood, m.feature_extractor):
            part.train()
        z = nn.functional.normalize(m.feature_extractor(x.reshape(-1, *x.shape[2:])), p=2, dim=1)
        for model, t in zip(m.model.models, targets, strict=True):
            model.set_train_data(inputs=z, targets=t, strict=False)
        opt.zero_grad()
        loss = -m.mll(m.model(*m.model.train_inputs), m.model.train_targets)
        loss.backward()
        opt.step()
        return loss
    return test, train


def build_cdkt(features: bool) -> Calls:
    import backbone
    from methods.CDKT import CDKT
    from methods.meta_template import MetaTemplate

    m = CDKT.__new__(CDKT)  # its __init__ puts tensors on cuda:0; set what it sets, on the CPU
    MetaTemplate.__init__(m, backbone.Conv4S, WAY, SHOT)
    m.device, m.iteration, m.writer = "cpu", 0, None
    m.leghtscale_list = m.noise_list = m.outputscale_list = None
    m.feature_extractor = m.feature
    m.kernel_type = "bncossim"  # their default; CDKT normalises and adds no BatchNorm: cosine
    m.get_model_likelihood_mll()
    m.normalize, m.mu_q, m.sigma_q = True, [], []
    m.get_steps(2)  # their train.py defaults: --steps 2 --tau 1 --loss ELBO --mean 0
    m.get_temperature(1.0)
    m.get_loss("ELBO")
    m.get_negmean(0.0)
    if features:
        m.feature = m.feature_extractor = nn.Flatten()
    m.n_query = QUERY
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)

    def test(x: Tensor) -> object:
        m.n_query = QUERY
        return m.correct(x)

    def train(x: Tensor) -> object:
        return m.train_loop(0, [(x, None)], opt, print_freq=10)
    return test, train


def build_ove(features: bool, model: str = "ove") -> Calls:
    """Their ``OVEPolyaGammaGP`` or (``model="ls"``) their ``LogisticSoftmaxGP``, the Gibbs
    logistic-softmax baseline of the same repository."""
    import backbone
    import pypolyagamma
    from gpytorch.utils.quadrature import GaussHermiteQuadrature1D
    from methods import logistic_softmax_gp, ove_polya_gamma_gp
    from methods.meta_template import MetaTemplate

    cls = ove_polya_gamma_gp.OVEPolyaGammaGP if model == "ove" else logistic_softmax_gp.LogisticSoftmaxGP
    m = cls.__new__(cls)  # __init__ reads a sacred config; set what it sets
    MetaTemplate.__init__(m, backbone.Conv4S, WAY, SHOT)
    m.kernel = ove_polya_gamma_gp.L2LinearKernel(num_classes=WAY, learn_params=True)  # README's
    m.noise, m.ppg, m.num_draws, m.fast_inference = 0.0, pypolyagamma.PyPolyaGamma(), 20, False
    m.quad, m.loss_fn, m.eps = GaussHermiteQuadrature1D(), nn.CrossEntropyLoss(), 1e-6
    if features:
        m.feature = nn.Flatten()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)

    def test(x: Tensor) -> object:
        m.eval()
        m.n_query, m.num_steps = QUERY, 50
        with torch.no_grad():
            return m.set_forward(x)

    def train(x: Tensor) -> object:
        m.train()
        m.num_steps = 1
        return m.train_loop(0, [(x, None)], opt)
    return test, train


BUILDERS = {"dkt": build_dkt, "dkt-core": lambda features: build_dkt(features, core=True),
            "logistic-softmax": build_cdkt, "ove": build_ove, "ove-joint": build_ove,
            "ls-gibbs": lambda features: build_ove(features, model="ls")}


# -- ours -----------------------------------------------------------------------------------------

def build_ours(ref: Reference, features: bool) -> Calls:
    m = build_method(ref.ours, way=WAY, in_channels=1, image_size=28, backbone="conv4s", seed=0,
                     **ref.hparams, registry=registry())
    if features:
        m.backbone = Identity()
    opt = torch.optim.Adam(m.param_groups())

    def test(ep: Episode) -> object:
        m.eval()
        with torch.no_grad():
            return m.predict(ep)

    def train(ep: Episode) -> object:
        m.train()
        opt.zero_grad()
        loss = m.meta_loss(ep)
        loss.backward()
        opt.step()
        return loss
    return test, train


# -- timing -----------------------------------------------------------------------------------------

def clock(fn: Callable[[object], object], arg: object) -> tuple[float, float]:
    """Wall-clock and process CPU seconds of ``fn(arg)``, their progress prints swallowed."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        wall, cpu = time.perf_counter(), time.process_time()
        fn(arg)
        return time.perf_counter() - wall, time.process_time() - cpu


def compare(ref: Reference, features: bool, repeat: int) -> list[tuple[float, float]]:
    """Median (wall, CPU) seconds of their test, our test, their train step and our train step
    over ``repeat`` episodes after one warm-up, the two sides interleaved, their order
    alternated."""
    with on_path(ref), contextlib.redirect_stdout(io.StringIO()):
        theirs = BUILDERS[ref.name](features)
    ours = build_ours(ref, features)
    times: list[list[tuple[float, float]]] = [[], [], [], []]
    for r in range(repeat + 1):
        ep = feature_episode(r) if features else toy_episode(WAY, SHOT, QUERY, seed=r)
        x = their_input(ep)
        runs = [(0, theirs[0], x), (1, ours[0], ep), (2, theirs[1], x), (3, ours[1], ep)]
        if r % 2:
            runs = [runs[1], runs[0], runs[3], runs[2]]
        for slot, fn, arg in runs:
            t = clock(fn, arg)
            if r:
                times[slot].append(t)
    return [(statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
            for t in times]


def available(ref: Reference) -> str | None:
    """``None`` when the reference imports, else why not (with the setup hint)."""
    if not os.path.isdir(os.path.join(ref.checkout, "methods")):
        return f"no checkout at {ref.checkout}"
    missing = [d for d in ref.deps if not os.path.isdir(d)]
    if missing:
        return f"dependency folder(s) {missing} missing"
    try:
        with on_path(ref), contextlib.redirect_stdout(io.StringIO()):
            BUILDERS[ref.name](True)
    except Exception as e:  # any import or build failure of third-party code: report and skip
        return f"{type(e).__name__}: {e}"
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dkt", default="/tmp/dktref", help="checkout of BayesWatch/deep-kernel-transfer")
    p.add_argument("--cdkt", default="/tmp/cdktref",
                   help="checkout of keanson/revisit-logistic-softmax")
    p.add_argument("--ove", default="/tmp/overef", help="checkout of jakesnell/ove-polya-gamma-gp")
    p.add_argument("--deps", default="/tmp/refdeps-gp", help="pip --target folder with gpytorch")
    p.add_argument("--ove-deps", default="/tmp/refdeps-ove",
                   help="pip --target folder with pypolyagamma, sacred, pkg_resources")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--methods", default="dkt,dkt-core,logistic-softmax,ove,ove-joint,ls-gibbs",
                   help="dkt-core: DKT's training step without its per-step accuracy evaluation; "
                        "ove-joint: ours with the authors' joint Gibbs sampler; ls-gibbs: "
                        "logistic-softmax with Gibbs vs the OVE repository's LogisticSoftmaxGP")
    p.add_argument("--skip-features", action="store_true", help="images only")
    args = p.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    apply_shims()
    refs = [Reference("dkt", "dkt", {}, args.dkt, [args.deps]),
            Reference("dkt-core", "dkt", {}, args.dkt, [args.deps]),
            Reference("logistic-softmax", "logistic-softmax",
                      {"inference": "mean-field", "loss": "ml"}, args.cdkt, [args.deps]),
            Reference("ove", "ove", {"loss": "ml"}, args.ove, [args.deps, args.ove_deps]),
            Reference("ove-joint", "ove", {"loss": "ml", "sampler": "joint"}, args.ove,
                      [args.deps, args.ove_deps]),
            Reference("ls-gibbs", "logistic-softmax", {"inference": "gibbs", "loss": "ml"}, args.ove,
                      [args.deps, args.ove_deps])]
    wanted = set(args.methods.split(","))
    runnable = []
    for ref in refs:
        if ref.name not in wanted:
            continue
        why = available(ref)
        if why:
            print(f"skip {ref.name}: the authors' code does not run here ({why})")
        else:
            runnable.append(ref)
    if len(runnable) < len(wanted & set(BUILDERS)):
        print(SETUP)
    if not runnable:
        return
    print(f"{WAY}-way {SHOT}-shot, {QUERY} queries/class, 1 thread, median of {args.repeat} "
          "interleaved episodes; speed-up = theirs / ours")
    for features in (False, True)[: 1 if args.skip_features else 2]:
        print("\nfeatures given (GP part only)" if features else "\nconv4s on 28x28 images")
        print(f"{'':18}{'CPU seconds (1 thread)':^62}{'wall speed-up':^18}")
        print(f"{'method':<18}{'ref test':>10}{'our test':>10}{'speed-up':>10}{'ref train':>11}"
              f"{'our train':>11}{'speed-up':>10}{'test':>9}{'train':>9}")
        for ref in runnable:
            (rtw, rt), (otw, ot), (rrw, rr), (orw, orr) = compare(ref, features, args.repeat)
            print(f"{ref.name:<18}{rt:>10.4f}{ot:>10.4f}{rt / ot:>9.2f}x{rr:>11.4f}{orr:>11.4f}"
                  f"{rr / orr:>9.2f}x{rtw / otw:>8.2f}x{rrw / orw:>8.2f}x", flush=True)


if __name__ == "__main__":
    main()
