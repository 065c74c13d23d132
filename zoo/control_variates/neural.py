"""Neural and meta-learned Stein control variates, batched over tasks (Sun 2023, Ch. 5).

The CV is ``g(x) = beta + L'[u_theta 1_d](x)`` (Eq. 5.2's base CV): a sigmoid MLP's output
``u_theta``, times the boundary factor ``prod_j x_j (1 - x_j)`` when ``pi`` is uniform on the
cube, broadcast to every component of a vector field; the Stein operator uses each task's own
score, so one ``theta`` gives a zero-mean CV for every task. ``L'[u 1_d] = sum_j d_j u + u sum_j
s_j`` needs only the derivative of ``u`` along the all-ones direction, propagated forward layer by
layer (:func:`potential_and_slope`; equal to the autograd operator of :mod:`zoo.stein`, tested), so
the Stein values are ordinary differentiable expressions in ``theta`` and MAML's second order is
one double backward. With ``K`` outputs the network gives ``K`` CVs, one per integrand of a task
(the class probabilities of one query); ``centre`` subtracts their mean so that the CVs sum to
zero and estimates of integrands that sum to a constant keep that sum. The intercept is profiled
out of every loss, ``beta = mean_S(f - L'[u])`` (the optimal intercept for the current ``theta``),
so the estimator never adds an un-adapted meta intercept (the stored code's erratum, notes §E).

**The field.** ``field="ones"`` is the thesis's CV. Because ``u 1_d`` only moves along the
all-ones direction ``w = 1 . x / sqrt(d)``, ``L'[u 1_d] = sqrt(d) (d/dw + s_w) u`` is the 1-d
Stein operator along ``w``: under a Gaussian (or along each line parallel to ``1_d`` in the cube,
where ``delta`` vanishes at both ends) its mean given the orthogonal components ``y`` is zero, so
the best such CV leaves ``Var E[f | y]``: only the variation of ``f`` along ``1_d`` can be removed
(Borehole, whose variance is ~88% along ``r_w`` alone, and softmax integrands, constant along
``1_d`` when every class has the same variance; measured in the card). ``field="vector"`` is the
general first-order CV ``L'[u] = div u + u . s`` with ``d`` potentials per integrand (a ``K d``
-output network, the divergence by ``d`` forward tangents: ``d`` times the cost).

Parameters live in plain tensors with an optional leading task axis, so ``T`` tasks are one batched
forward pass: ``x [T, N, d] -> [T, N, K]``.

* :func:`neural_cv_params` / :func:`fit_neural_cv`: an independent CV per task, Adam on
  mini-batches of the fitting half.
* :class:`MetaCV`: MAML over tasks (Algorithm 6): ``L`` inner steps on ``S_t`` from the
  meta-parameters (Adam, the thesis's update rule, or plain gradient steps), the loss on ``Q_t``
  after them; second order by default (``create_graph``),
  first order as an option. Adaptation (Algorithm 7) is the same inner loop without the graph.
  The inner loop is this functional one, batched over tasks, not learn2learn's ``MAML``: its
  per-task ``clone``/``adapt`` loops in Python, measured side by side (same results to 1e-8) in
  ``benchmarks/control_variates/l2l_inner_loop.py``, see the card for the ratio at 1,000 tasks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from zoo.control_variates.fitting import CVEstimate, fit_size, from_intercept, from_residuals
from zoo.stein_kernels import boundary_factor, boundary_gradient
from zoo.unrolled import UnrolledAdam

Params = list[Tensor]


def init_params(dim: int, hidden: Sequence[int], *, outputs: int = 1,
                generator: torch.Generator | None = None, scale: float | None = None,
                dtype: torch.dtype = torch.float64) -> Params:
    """Weights ``[in, out]`` and biases ``[out]`` of an MLP ``dim -> hidden -> outputs``: uniform
    ``+-1/sqrt(in)`` (PyTorch's default), or normal with standard deviation ``scale``."""
    sizes = [dim, *hidden, outputs]
    params: Params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        for shape in ((a, b), (b,)):
            if scale is None:
                p = (2 * torch.rand(shape, generator=generator, dtype=dtype) - 1) / math.sqrt(a)
            else:
                p = scale * torch.randn(shape, generator=generator, dtype=dtype)
            params.append(p)
    return params


FIELDS = ("ones", "vector")


def field_outputs(outputs: int, dim: int, field: str) -> int:
    """Network outputs for ``outputs`` integrands: one potential each (``ones``) or ``dim``."""
    if field not in FIELDS:
        raise ValueError(f"field {field!r}: use one of {FIELDS}")
    return outputs * (dim if field == "vector" else 1)


def potential_and_slope(params: Params, x: Tensor, boundary: bool, centre: bool = False,
                        field: str = "ones") -> tuple[Tensor, Tensor]:
    """The potentials and their divergence, by forward-mode differentiation written out layer by
    layer, so the Stein values need no backward pass and stay differentiable in ``theta`` to any
    order (``x [..., N, d]``; parameters with a leading task axis ``[T, ...]`` act on ``x [T, N,
    d]``). ``field="ones"``: ``u_theta(x) [..., N, K]`` and its derivative along the all-ones
    direction ``sum_j d_j u``; ``"vector"``: ``u [..., N, K, d]`` and ``div u = sum_j d_j u_j``
    ``[..., N, K]``. ``centre``: subtract the mean over the ``K`` integrands (the potentials then
    sum to zero). With ``boundary`` every potential is multiplied by ``delta(x)``."""
    vector = field == "vector"
    d = x.shape[-1]
    h = x
    if vector:  # one tangent e_j per input, on a new axis before the units: [..., N, d, units]
        dh = torch.eye(d, dtype=x.dtype, device=x.device).expand(*x.shape[:-1], d, d)
    else:
        dh = torch.ones_like(x)
    layers = len(params) // 2
    for i in range(layers):
        W, b = params[2 * i], params[2 * i + 1]
        h = h @ W + b.unsqueeze(-2)
        dh = dh @ W.unsqueeze(-3) if vector else dh @ W
        if i < layers - 1:
            h = torch.sigmoid(h)
            dh = (h * (1 - h)).unsqueeze(-2) * dh if vector else h * (1 - h) * dh
    if vector:  # u [..., N, K, d]; tangents [..., N, d_j, K, d_i]: divergence = trace over j = i
        h = h.unflatten(-1, (-1, d))
        dh = dh.unflatten(-1, (-1, d)).diagonal(dim1=-3, dim2=-1).sum(-1)
    if centre:
        k_axis = -2 if vector else -1
        h, dh = h - h.mean(k_axis, keepdim=True), dh - dh.mean(-1, keepdim=True)
    if not boundary:
        return h, dh
    delta, grad = boundary_factor(x)[..., None], boundary_gradient(x)
    if vector:
        return h * delta[..., None], dh * delta + (h * grad[..., None, :]).sum(-1)
    return h * delta, dh * delta + h * grad.sum(-1)[..., None]


def potential(params: Params, x: Tensor, boundary: bool, centre: bool = False,
              field: str = "ones") -> Tensor:
    """The potentials ``u_theta(x)`` (see :func:`potential_and_slope`)."""
    return potential_and_slope(params, x, boundary, centre, field)[0]


def stein_values(params: Params, x: Tensor, score: Tensor, boundary: bool,
                 centre: bool = False, field: str = "ones") -> Tensor:
    """``[..., N, K]`` under each task's score: ``L'[u_k 1_d] = sum_j d_j u_k + u_k sum_j s_j``
    (Eq. 5.2's base CV, ``field="ones"``) or ``L'[u_k] = div u_k + u_k . s`` (``"vector"``)."""
    u, slope = potential_and_slope(params, x, boundary, centre, field)
    if field == "vector":
        return slope + (u * score.unsqueeze(-2)).sum(-1)
    return slope + u * score.sum(-1, keepdim=True)


def _columns(fx: Tensor, x: Tensor) -> Tensor:
    """``fx [..., N]`` or ``[..., N, K]`` as ``[..., N, K]``."""
    return fx[..., None] if fx.ndim == x.ndim - 1 else fx


def task_loss(params: Params, x: Tensor, score: Tensor, fx: Tensor, boundary: bool,
              penalty: float, centre: bool = False, field: str = "ones") -> Tensor:
    """``[T]``: ``mean (f - beta - g)^2 + penalty mean g^2`` summed over the ``K`` integrands,
    with the intercepts profiled out (Sun 2023, §5.2 with the appendix's output penalty)."""
    g = stein_values(params, x, score, boundary, centre, field)
    r = _columns(fx, x) - g
    return ((r - r.mean(-2, keepdim=True)).pow(2).mean(-2) + penalty * g.pow(2).mean(-2)).sum(-1)


def per_task(params: Params, tasks: int) -> Params:
    """Meta-parameters broadcast to ``tasks`` copies (views; gradients flow back to the shared
    tensors)."""
    return [(p if p.requires_grad else p.detach().requires_grad_(True)).expand(tasks, *p.shape)
            for p in params]


INNER_RULES = ("adam", "sgd")
"""The inner loop's update rules: ``adam``, the thesis's (App. B.3: "we use Adam as the UPDATE
rule"), a fresh Adam per task and adaptation (:class:`zoo.unrolled.UnrolledAdam`); ``sgd``, plain
gradient steps (the original MAML)."""


class InnerSGD:
    """Plain gradient steps ``p - lr g``."""

    def __init__(self, lr: float):
        self.lr = lr

    def __call__(self, params: Params, grads: Sequence[Tensor]) -> Params:
        return [p - self.lr * g for p, g in zip(params, grads)]


def inner_rule(name: str, lr: float) -> UnrolledAdam | InnerSGD:
    """A fresh update rule of the inner loop (see :data:`INNER_RULES`)."""
    if name not in INNER_RULES:
        raise ValueError(f"inner rule {name!r}: use one of {INNER_RULES}")
    return UnrolledAdam(lr) if name == "adam" else InnerSGD(lr)


def adapt(params: Params, x: Tensor, score: Tensor, fx: Tensor, *, steps: int, lr: float,
          boundary: bool, penalty: float = 0.0, centre: bool = False, field: str = "ones",
          create_graph: bool = False, rule: str = "adam") -> Params:
    """``steps`` inner steps (``rule``, :data:`INNER_RULES`; step size ``lr``) of every task's loss
    on ``(x, score, fx) [T, m, ...]`` from the shared ``params``: per-task parameters ``[T, ...]``.
    Adam's moments are per task (every task's loss depends on its own parameters only).
    ``create_graph`` keeps the steps differentiable in ``params`` (second-order MAML)."""
    update = inner_rule(rule, lr)
    with torch.enable_grad():
        theta = per_task(params, x.shape[0])
        for _ in range(steps):
            loss = task_loss(theta, x, score, fx, boundary, penalty, centre, field).sum()
            grads = torch.autograd.grad(loss, theta, create_graph=create_graph)
            theta = update(theta, grads)
    return theta


def estimate_with(theta: Params, x: Tensor, score: Tensor, fx: Tensor, boundary: bool,
                  mode: str, centre: bool = False, field: str = "ones") -> CVEstimate:
    """The estimates ``[T, K]`` of each task's ``E[f]`` with fitted per-task parameters: the
    held-out mean of ``f - g`` (``split``) or the profiled intercept on all samples
    (``intercept``)."""
    m = fit_size(x.shape[-2], mode)
    g = stein_values([p.detach() for p in theta], x, score, boundary, centre, field)
    r = _columns(fx, x) - g
    if mode == "split":
        return from_residuals(r[:, m:])
    beta = r.mean(-2)
    return from_intercept(beta, r - beta[..., None, :], 0)


def neural_cv_params(x: Tensor, score: Tensor, fx: Tensor, *, hidden: Sequence[int] = (80, 80),
                     epochs: int = 20, batch: int = 5, lr: float = 2e-3, penalty: float = 5e-6,
                     mode: str = "split", boundary: bool = False, centre: bool = False,
                     field: str = "ones", seed: int | Sequence[int] = 0) -> Params:
    """Independent neural CVs for ``T`` tasks at once (``x [T, N, d]``, ``fx [T, N(, K)]``, one
    output per integrand): Adam on mini-batches of each task's fitting samples (the thesis's
    Neural-CV baseline: 20 epochs, batches of 5); the fitted per-task parameters. ``seed``: one
    seed for every task (one initialisation and one mini-batch order, shared), or one per task
    (each task draws both from its own generator, so a task's fit is the same alone or batched
    with others)."""
    T, m = x.shape[0], fit_size(x.shape[-2], mode)
    outputs = field_outputs(_columns(fx, x).shape[-1], x.shape[-1], field)
    shared = isinstance(seed, int)
    gens = [torch.Generator().manual_seed(s) for s in ([seed] if shared else seed)]
    if len(gens) != (1 if shared else T):
        raise ValueError(f"neural_cv_params: {len(gens)} seeds for {T} tasks; give one seed or "
                         "one per task")
    inits = [init_params(x.shape[-1], hidden, outputs=outputs, generator=g, dtype=x.dtype)
             for g in gens]
    theta = [torch.stack(ps).expand(T, *ps[0].shape).clone().requires_grad_(True)
             for ps in zip(*inits)]
    opt = torch.optim.Adam(theta, lr=lr)
    rows = torch.arange(T)[:, None]
    with torch.enable_grad():  # also when called for a prediction under no_grad
        for _ in range(epochs):
            order = torch.stack([torch.randperm(m, generator=g) for g in gens]).expand(T, m)
            for start in range(0, m, batch):
                idx = order[:, start:start + batch]
                if idx.shape[1] < 2:
                    continue
                opt.zero_grad()
                task_loss(theta, x[rows, idx], score[rows, idx], fx[rows, idx], boundary,
                          penalty, centre, field).sum().backward()
                opt.step()
    return [p.detach() for p in theta]


def fit_neural_cv(x: Tensor, score: Tensor, fx: Tensor, *, mode: str = "split",
                  boundary: bool = False, centre: bool = False, field: str = "ones",
                  **options) -> CVEstimate:
    """The estimates of :func:`neural_cv_params`' fitted CVs (``options``: its keywords)."""
    theta = neural_cv_params(x, score, fx, mode=mode, boundary=boundary, centre=centre,
                             field=field, **options)
    return estimate_with(theta, x, score, fx, boundary, mode, centre, field)


class MetaCV(nn.Module):
    """A meta-learned neural CV (Sun 2023, Algorithms 6-7): meta-parameters ``theta`` of an MLP
    with ``outputs`` potentials (one per integrand of a task, each a ``field``; ``centre`` makes
    them sum to zero), ``steps`` inner steps of the rule ``inner_rule`` (Adam, the thesis's, or
    plain gradient steps) of size ``inner_lr`` on each task's fitting half, the split estimate."""

    def __init__(self, dim: int, *, hidden: Sequence[int] = (80, 80), outputs: int = 1,
                 steps: int = 1, inner_lr: float = 0.01, penalty: float = 5e-6,
                 first_order: bool = False, boundary: bool = False, centre: bool = False,
                 field: str = "ones", inner_rule: str = "adam", seed: int = 0):
        super().__init__()
        if inner_rule not in INNER_RULES:
            raise ValueError(f"inner rule {inner_rule!r}: use one of {INNER_RULES}")
        g = torch.Generator().manual_seed(seed)
        self.params = nn.ParameterList(init_params(
            dim, hidden, outputs=field_outputs(outputs, dim, field), generator=g))
        self.steps, self.inner_lr, self.penalty = steps, inner_lr, penalty
        self.first_order, self.boundary, self.centre = first_order, boundary, centre
        self.field, self.inner_rule = field, inner_rule

    def adapt(self, x: Tensor, score: Tensor, fx: Tensor, *, training: bool = False) -> Params:
        """Per-task parameters after the inner steps on ``(x, score, fx) [T, m, ...]``."""
        return adapt(list(self.params), x, score, fx, steps=self.steps, lr=self.inner_lr,
                     boundary=self.boundary, penalty=self.penalty, centre=self.centre,
                     field=self.field, create_graph=training and not self.first_order,
                     rule=self.inner_rule)

    def meta_loss(self, x: Tensor, score: Tensor, fx: Tensor) -> Tensor:
        """Eq. 5.3: the mean over tasks of the held-out loss after adapting on the first half;
        the held-out residuals are centred by the fitting half's intercept."""
        m = fit_size(x.shape[-2], "split")
        fx = _columns(fx, x)
        theta = self.adapt(x[:, :m], score[:, :m], fx[:, :m], training=True)
        g_fit = stein_values(theta, x[:, :m], score[:, :m], self.boundary, self.centre, self.field)
        g_held = stein_values(theta, x[:, m:], score[:, m:], self.boundary, self.centre,
                              self.field)
        beta = (fx[:, :m] - g_fit).mean(-2, keepdim=True)
        return (fx[:, m:] - beta - g_held).pow(2).mean(-2).sum(-1).mean()

    def estimate(self, x: Tensor, score: Tensor, fx: Tensor, mode: str = "split") -> CVEstimate:
        """Algorithm 7 for ``T`` tasks at once: adapt on the fitting half, estimate (Eq. 5.2)."""
        m = fit_size(x.shape[-2], mode)
        theta = self.adapt(x[:, :m], score[:, :m], fx[:, :m])
        return estimate_with(theta, x, score, fx, self.boundary, mode, self.centre, self.field)
