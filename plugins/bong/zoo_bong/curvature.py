"""The four estimators of ``(g, G)`` (Jones et al. 2024, Table 1).

``g = E_q[grad log p(y | x, theta)]`` and ``G = E_q[hess log p(y | x, theta)]``, the gradients of
the expected log-likelihood in the mean and (times two) in the covariance (Bonnet/Price). ``G`` is
kept as a factor, ``G = -root root^T`` with ``root [P, K]`` (``K = C`` for LIN-HESS, ``M`` for
MC-EF, 1 for LIN-EF), or as a diagonal (MC-HESS with Hutchinson's estimator), never as a dense
``P x P`` matrix. Jacobians, per-sample gradients and Hessian-vector products come from
``torch.func``.

- ``lin-hess``: linearise the network at the mean: ``g = F^T s``, ``root = F^T A`` with
  ``F = df/dtheta [C, P]``, ``s`` the likelihood's score and ``A A^T`` its Fisher matrix in ``f``
  (the generalised Gauss-Newton matrix, in the logits form of Prop. 4.2).
- ``lin-ef``: the same ``g``, ``root = g`` (rank one, one vector-Jacobian product).
- ``mc-ef``: ``M`` draws ``theta_m ~ q``; ``g`` the mean gradient, ``root = [g_1 .. g_M] / sqrt M``.
- ``mc-hess``: the same ``g``; ``diag G`` by Hutchinson, ``mean_m z_m * (hess_m z_m)`` with one
  Rademacher probe ``z_m`` per draw (unbiased for the diagonal of ``E_q[hess]``).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.func import grad, jacrev, jvp, vjp, vmap

from zoo_bong.likelihoods import Likelihood

CURVATURES = ("mc-hess", "mc-ef", "lin-hess", "lin-ef")
#: The estimators :func:`compiled` compiles (MC-HESS draws its probes from a generator).
COMPILABLE = ("mc-ef", "lin-hess", "lin-ef")

#: ``model(theta [P], x) -> f [C]``, the network as a function of its flat parameters.
Model = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class Curvature:
    """``g [P]`` and ``G`` as ``-root root^T`` (``root [P, K]``) or as its diagonal ``diag [P]``."""

    g: Tensor
    root: Tensor | None = None
    diag: Tensor | None = None

    def diagonal(self) -> Tensor:
        """``diag G``."""
        return self.diag if self.diag is not None else -self.root.square().sum(1)

    def dense(self) -> Tensor:
        """``G [P, P]`` (full-covariance families only)."""
        if self.root is None:
            raise ValueError("this curvature has only a diagonal; use a diagonal family")
        return -self.root @ self.root.T


def linearised(model: Model, likelihood: Likelihood, mean: Tensor, x: Tensor, y: Tensor,
               hessian: bool, batched: bool = False) -> Curvature:
    """LIN-HESS (``hessian=True``) or LIN-EF, linearising the network at ``mean``.

    LIN-HESS needs ``g = F^T s`` and ``root = F^T A`` (``F [C, P]`` the Jacobian), LIN-EF ``g``
    alone: ``C + 1`` pullbacks (one for LIN-EF) of one forward pass. Where no caller
    differentiates through the curvature (neither ``mean`` nor ``x`` requires a gradient, or
    gradients are off), they are plain autograd pullbacks: for LIN-HESS, where the model also
    maps a batch of parameter vectors (``batched``: ``model(thetas [K, P], x) -> [K, C]``), one
    backward pass of one batched forward at ``C + 1`` copies of the mean, each copy pulled back
    by its own cotangent, else one backward call batched over the cotangents; otherwise
    ``torch.func`` (``jacrev``, ``vjp``), whose results stay differentiable (a meta-learned head).
    All routes give the same numbers (to rounding).
    """
    if not (torch.is_grad_enabled() and (mean.requires_grad or x.requires_grad)):
        return _pullbacks(model, likelihood, mean, x, y, hessian, batched)
    if hessian:
        f = model(mean, x)
        jac = jacrev(model)(mean, x)  # [C, P]
        return Curvature(jac.T @ likelihood.score(f, y), root=jac.T @ likelihood.fisher_root(f))
    f, pullback = vjp(lambda theta: model(theta, x), mean)
    (g,) = pullback(likelihood.score(f.detach(), y))
    return Curvature(g, root=g[:, None])


def _pullbacks(model: Model, likelihood: Likelihood, mean: Tensor, x: Tensor, y: Tensor,
               hessian: bool, batched: bool) -> Curvature:
    """:func:`linearised` by autograd, for constant ``mean`` and ``x``; the LIN-HESS root is the
    transpose of the row-major ``[C, P]`` pullbacks (BLAS reads its columns contiguously)."""
    mean = mean.detach()
    if hessian and batched:
        with torch.no_grad():
            out = model(mean, x)
        cotangents = torch.cat([likelihood.score(out, y)[None], likelihood.fisher_root(out).mT])
        with torch.enable_grad():
            thetas = mean.expand(len(cotangents), -1).requires_grad_()  # [1 + C, P], no copy
            (rows,) = torch.autograd.grad(model(thetas, x), thetas, cotangents)
        return Curvature(rows[0], root=rows[1:].mT)
    with torch.enable_grad():
        theta = mean.requires_grad_()
        f = model(theta, x)
    out = f.detach()
    score = likelihood.score(out, y)
    if not hessian:
        (g,) = torch.autograd.grad(f, theta, score)
        return Curvature(g, root=g[:, None])
    cotangents = torch.cat([score[None], likelihood.fisher_root(out).mT])  # [1 + C, C]
    (rows,) = torch.autograd.grad(f, theta, cotangents, is_grads_batched=True)
    return Curvature(rows[0], root=rows[1:].mT)


def monte_carlo(model: Model, likelihood: Likelihood, draws: Tensor, x: Tensor, y: Tensor,
                hessian: bool, generator: torch.Generator, batched: bool = False) -> Curvature:
    """MC-HESS (``hessian=True``, Hutchinson diagonal) or MC-EF from ``draws [M, P]`` of ``q``.

    The per-draw gradients are one backward pass of the summed log-likelihoods (each draw's term
    depends on its own row only), by autograd where no caller differentiates through the
    curvature (the draws' forward one call of a ``batched`` model, see :func:`linearised`, else
    ``vmap`` of it), else by ``torch.func`` (``vmap`` of ``grad``, differentiable)."""

    def log_lik(theta: Tensor) -> Tensor:
        return likelihood.log_prob(model(theta, x), y)

    if torch.is_grad_enabled() and (draws.requires_grad or x.requires_grad):
        grads = vmap(grad(log_lik))(draws)  # [M, P], differentiable
    else:  # one batched forward, one backward: the same gradients, faster
        with torch.enable_grad():
            thetas = draws.detach().requires_grad_()
            log_liks = (likelihood.log_prob(model(thetas, x), y) if batched
                        else vmap(log_lik)(thetas))
            (grads,) = torch.autograd.grad(log_liks.sum(), thetas)
    g = grads.mean(0)
    if not hessian:
        return Curvature(g, root=grads.T / draws.shape[0] ** 0.5)
    probes = torch.randint(0, 2, draws.shape, generator=generator).to(draws) * 2 - 1
    hvp = vmap(lambda theta, z: jvp(grad(log_lik), (theta,), (z,))[1])(draws, probes)
    return Curvature(g, diag=(probes * hvp).mean(0))


def traceable(model: Model, likelihood: Likelihood, kind: str
              ) -> Callable[[Tensor, Tensor, Tensor], Curvature]:
    """The estimator ``kind`` (one of :data:`COMPILABLE`) as a function of ``(mean or draws
    [M, P], x, y)`` that ``torch.compile`` traces into one graph: the ``torch.func`` form of
    :func:`linearised` / :func:`monte_carlo` (``vjp`` and its pullbacks ``vmap``-ed over the
    cotangents; ``vmap`` of ``grad`` over the draws), no autograd call and no host read. Its
    numbers are the eager estimators' to rounding."""
    if kind not in COMPILABLE:
        raise ValueError(f"curvature {kind!r} cannot be compiled; compilable: "
                         f"{', '.join(COMPILABLE)}")
    if kind == "mc-ef":
        def log_lik(theta: Tensor, x: Tensor, y: Tensor) -> Tensor:
            return likelihood.log_prob(model(theta, x), y)

        def estimate(draws: Tensor, x: Tensor, y: Tensor) -> Curvature:
            grads = vmap(grad(log_lik), in_dims=(0, None, None))(draws, x, y)
            return Curvature(grads.mean(0), root=grads.mT / draws.shape[0] ** 0.5)
        return estimate
    hessian = kind == "lin-hess"

    def linear(mean: Tensor, x: Tensor, y: Tensor) -> Curvature:
        f, pullback = vjp(lambda theta: model(theta, x), mean)
        score = likelihood.score(f, y)
        if not hessian:
            (g,) = pullback(score)
            return Curvature(g, root=g[:, None])
        cotangents = torch.cat([score[None], likelihood.fisher_root(f).mT])
        (rows,) = vmap(pullback)(cotangents)
        return Curvature(rows[0], root=rows[1:].mT)
    return linear


def compiled(model: Model, likelihood: Likelihood, kind: str, backend: str = "inductor"
             ) -> Callable[[Tensor, Tensor, Tensor], Curvature]:
    """:func:`traceable` as one ``torch.compile``-d program (``fullgraph``, static shapes: a
    stream's updates reuse it, BLR's and BBB's iterates too), fused by ``backend``; the first call
    compiles (seconds). For constant inputs only (no caller differentiates through it)."""
    estimate = traceable(model, likelihood, kind)

    def parts(at: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        curv = estimate(at, x, y)
        return curv.g, curv.root

    program = compile_own(parts, backend)

    def run(at: Tensor, x: Tensor, y: Tensor) -> Curvature:
        g, root = program(at.detach(), x.detach(), y)
        return Curvature(g, root=root)

    return run


#: The ``torch.compile`` options of :func:`compile_own` (``cpp_wrapper`` with inductor only).
LEAN = {"guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe, "cpp_wrapper": True}


def compile_own(fn: Callable, backend: str = "inductor", options: dict | None = None) -> Callable:
    """``torch.compile(fn)`` (``fullgraph``, static shapes) over a copy of ``fn`` with a code object
    of its own, guarded on its tensors' shapes, dtypes and strides only, with inductor's wrapper
    in C++.

    - Dynamo keeps compiled graphs, and counts them against its recompile limit (8), per code
      object, so every method built from one closure would share one cache: a process that runs
      a few configurations (a suite's cells, the speed benchmark's 68) would pass the limit,
      which with ``fullgraph`` is an error. With its own code object each program caches only
      its own graphs.
    - What ``fn`` closes over (the network, the likelihood, the rule's settings) is fixed for the
      program's life, so its guards on them (hundreds, walking the network's modules) can never
      fail; ``torch.compiler.keep_tensor_guards_unsafe`` keeps only the tensors' guards, and
      ``cpp_wrapper`` calls the kernels from C++ instead of a Python wrapper. Both take per-call
      overhead away (50-90 microseconds of an update's few hundred on the BONG cells that
      ``benchmarks/bong/compile_options.py`` times; ``bong.md``). ``options`` replaces
      :data:`LEAN` (that script's comparison)."""
    own = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__,
                             fn.__closure__)
    chosen = dict(LEAN if options is None else options)
    if backend != "inductor":
        chosen.pop("cpp_wrapper", None)
    return torch.compile(own, backend=backend, dynamic=False, fullgraph=True, options=chosen)
