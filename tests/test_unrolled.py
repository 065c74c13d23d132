"""Unrolled Adam: torch.optim.Adam's steps as tensor expressions that stay differentiable."""

from __future__ import annotations

import math

import torch

from zoo.unrolled import ADAM_BETAS, ADAM_EPS, UnrolledAdam

D = torch.float64


def problem(seed: int = 0) -> tuple[list[torch.Tensor], torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 3, generator=g, dtype=D), torch.randn(5, generator=g, dtype=D)], \
        torch.randn(4, 3, generator=g, dtype=D)


def loss(params: list[torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    w, b = params
    return ((w - target) ** 2).sum() + torch.cos(b).sum() + (w.sum() * b[0]) ** 2


def test_steps_are_torch_adams():
    """Five steps from the same start equal ``torch.optim.Adam``'s (its defaults) to rounding."""
    start, target = problem()
    own = [p.clone().requires_grad_(True) for p in start]
    opt = torch.optim.Adam(own, lr=0.05)
    rule, theta = UnrolledAdam(0.05), [p.clone().requires_grad_(True) for p in start]
    for _ in range(5):
        opt.zero_grad()
        loss(own, target).backward()
        opt.step()
        theta = rule(theta, torch.autograd.grad(loss(theta, target), theta))
    assert rule.t == 5
    for p, q in zip(theta, own):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-13, atol=1e-15)


def test_the_moments_follow_the_recursion_and_a_first_step_moves_by_lr():
    """``m_t = b1 m + (1 - b1) g``, ``v_t = b2 v + (1 - b2) g^2`` with ``c = 1 - b^t``; from
    fresh moments every coordinate moves by ``lr |g| / (|g| + eps)``, about ``lr``."""
    b1, b2 = ADAM_BETAS
    g1, g2 = torch.tensor([0.5, -2.0, 1e-3], dtype=D), torch.tensor([1.0, 0.25, -4.0], dtype=D)
    rule = UnrolledAdam(0.1)
    step = rule([torch.zeros(3, dtype=D)], [g1])[0]
    torch.testing.assert_close(step, -0.1 * g1 / (g1.abs() + ADAM_EPS), rtol=1e-14, atol=0)
    (m,), (v,), c1, c2 = rule.moments([g2])
    torch.testing.assert_close(m, b1 * (1 - b1) * g1 + (1 - b1) * g2, rtol=1e-15, atol=0)
    torch.testing.assert_close(v, b2 * (1 - b2) * g1**2 + (1 - b2) * g2**2, rtol=1e-15, atol=0)
    assert (c1, c2) == (1 - b1**2, 1 - b2**2)


def test_the_steps_are_differentiable_where_a_gradient_is_exactly_zero():
    """Two unrolled steps give a second-order gradient equal to finite differences of the
    unrolled result, finite where a coordinate's gradient is exactly zero (a plain square root
    of its zero second moment would make it NaN)."""
    start, target = problem(1)
    mask = torch.tensor([1.0, 0, 1, 1, 1], dtype=D)  # the gradient of b[1] is exactly 0

    def unrolled(w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        rule, theta = UnrolledAdam(0.1), [w, b]
        for _ in range(2):
            gw, gb = torch.autograd.grad(loss(theta, target), theta, create_graph=True)
            theta = rule(theta, [gw, gb * mask])
        return loss(theta, target)

    w, b = (p.clone().requires_grad_(True) for p in start)
    grads = torch.autograd.grad(unrolled(w, b), [w, b])
    assert all(bool(torch.isfinite(g).all()) for g in grads)
    eps = 1e-6
    for i, j in ((0, (0, 0)), (0, (2, 1)), (1, (0,)), (1, (1,))):
        values = []
        for sign in (1, -1):
            moved = [p.detach().clone() for p in start]
            moved[i][j] += sign * eps
            values.append(float(unrolled(*(p.requires_grad_(True) for p in moved)).detach()))
        fd = (values[0] - values[1]) / (2 * eps)
        assert math.isclose(float(grads[i][j]), fd, rel_tol=1e-5, abs_tol=1e-8), (i, j)
