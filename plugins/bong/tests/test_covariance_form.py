"""The full-covariance steps in covariance form (Woodbury, ``O(P^2 K)``) against the dense
information-form formulas, and the DLR family's closed-form KL gradient against autograd."""

import pytest
import torch
from torch.func import grad
from zoo_bong import beliefs
from zoo_bong.beliefs import BeliefError, DiagLowRank, FullMoment, FullNatural, dlr_kl_gradient
from zoo_bong.curvature import Curvature

from zoo.gaussians import FullGaussian, LowRankPrecisionGaussian, kl_divergence

P = 7
DT = torch.float64


def _problem(k: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(P, P, generator=gen, dtype=DT)
    cov = a @ a.T / P + 0.5 * torch.eye(P, dtype=DT)
    mu = torch.randn(P, generator=gen, dtype=DT)
    curv = Curvature(torch.randn(P, generator=gen, dtype=DT),
                     root=0.5 * torch.randn(P, k, generator=gen, dtype=DT))
    return mu, cov, curv


def _dense(family: str, step: str, mu, cov, curv, alpha):
    """The step as the paper writes it, with dense inverses (notes §2.4)."""
    lam, g, big_g = torch.linalg.inv(cov), curv.g, -curv.root @ curv.root.T
    if family == "fc" and step == "natural":
        new_lam = lam - alpha * big_g
        return mu + alpha * torch.linalg.solve(new_lam, g), torch.linalg.inv(new_lam)
    if family == "fc":
        s = cov @ g
        new_lam = lam - 2 * alpha * (torch.outer(s, mu) + torch.outer(mu, s) + cov @ big_g @ cov)
        return torch.linalg.solve(new_lam, lam @ mu + alpha * s), torch.linalg.inv(new_lam)
    if step == "natural":
        return mu + alpha * cov @ g, cov + alpha * cov @ big_g @ cov
    return mu + alpha * g, cov + 0.5 * alpha * big_g


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("family", ["fc", "fc-mom"])
@pytest.mark.parametrize("step", ["natural", "gradient"])
def test_covariance_form_equals_the_dense_update_to_rounding(family, step, k):
    mu, cov, curv = _problem(k)
    cls = FullNatural if family == "fc" else FullMoment
    q = cls.make(mu, torch.linalg.inv(cov)) if family == "fc" else cls.make(mu, cov)
    alpha = 0.3 if (family, step) == ("fc", "natural") else 0.05  # the others stay positive
    want_mu, want_cov = _dense(family, step, mu, cov, curv, alpha)
    method = q.natural_step if step == "natural" else q.gradient_step
    # from the prior itself (BONG, BOG; BLR and BBB's first iterate): the O(P^2 K) route; from a
    # distinct but equal prior: the dense route of later BLR / BBB iterates
    twin = cls(q.gaussian)
    for new in (method(curv, alpha), method(curv, alpha, q), method(curv, alpha, twin)):
        torch.testing.assert_close(new.mu, want_mu, rtol=0, atol=1e-10)
        torch.testing.assert_close(new.gaussian.covariance(), want_cov, rtol=0, atol=1e-10)
        torch.testing.assert_close(new.gaussian.precision() @ want_cov,
                                   torch.eye(P, dtype=DT), rtol=0, atol=1e-10)


@pytest.mark.parametrize("family, step", [("fc", "gradient"), ("fc-mom", "natural"),
                                          ("fc-mom", "gradient")])
def test_covariance_form_refuses_exactly_the_steps_that_lose_positive_definiteness(family, step):
    mu, cov, curv = _problem(3, seed=1)
    curv = Curvature(curv.g, root=3 * curv.root)
    cls = FullNatural if family == "fc" else FullMoment
    q = cls.make(mu, torch.linalg.inv(cov)) if family == "fc" else cls.make(mu, cov)
    sampled = cls(FullGaussian.from_moments(mu, cov))  # no precision, its Cholesky factor made
    sampled.sample(2, torch.Generator().manual_seed(0))
    outcomes = set()
    for alpha in (1e-3, 1e-2, 0.03, 0.1, 0.3, 1.0, 3.0):
        _, dense = _dense(family, step, mu, cov, curv, alpha)
        positive = bool((torch.linalg.eigvalsh(dense) > 0).all())
        outcomes.add(positive)
        for belief in (q, sampled):  # fc-mom's plain-gradient step checks by Lambda or by L
            method = belief.natural_step if step == "natural" else belief.gradient_step
            if positive:
                new = method(curv, alpha)
                torch.testing.assert_close(new.cov, dense, rtol=0, atol=1e-10)
            else:
                with pytest.raises(BeliefError, match="positive definiteness"):
                    method(curv, alpha)
    assert outcomes == {True, False}  # the sweep crosses the boundary


def test_the_precision_carried_by_moment_gradient_steps_stays_the_inverse_covariance():
    # fc-mom's plain-gradient step updates Lambda by Woodbury (its check needs Lambda root); along
    # several steps, from a belief that first has to factorise for it, Lambda Sigma stays I
    mu, cov, curv = _problem(3, seed=2)
    q = FullMoment(FullGaussian.from_moments(mu, cov))  # no precision held
    for t in range(4):
        q = q.gradient_step(Curvature(curv.g, root=curv.root * (1 + t) / 4), 0.05)
        assert q.gaussian.precision() is q.prec  # held, not refactorised
        torch.testing.assert_close(q.prec @ q.cov, torch.eye(P, dtype=DT), rtol=0, atol=1e-10)


def test_dlr_kl_gradient_is_autograds():
    gen = torch.Generator().manual_seed(3)
    rnd = lambda *shape: torch.randn(*shape, generator=gen, dtype=DT)  # noqa: E731
    q = DiagLowRank.make(rnd(P), rnd(P).exp(), 0.5 * rnd(P, 3))
    p = DiagLowRank.make(rnd(P), rnd(P).exp(), 0.5 * rnd(P, 2))

    def kl(mu, ups, w):
        return kl_divergence(LowRankPrecisionGaussian(mu, ups, w), p.gaussian)

    want = grad(kl, argnums=(0, 1, 2))(q.mu, q.ups, q.w)
    for got, ref in zip(dlr_kl_gradient(q.gaussian, p.gaussian), want):
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-10)
    assert all(float(t.abs().max()) < 1e-12 for t in dlr_kl_gradient(q.gaussian, q.gaussian))


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("family, step", [("fc", "natural"), ("fc", "gradient"),
                                          ("fc-mom", "natural"), ("fc-mom", "gradient")])
def test_a_stream_of_low_rank_steps_equals_the_dense_updates_and_leaves_held_beliefs_alone(
        family, step, k, monkeypatch):
    # the steps add rank-K terms to Sigma (and Lambda) without forming it; with the fold at rank
    # 4 a stream of 8 steps forms it every second step or so. Read only after the stream (reading
    # Sigma forms it), every belief, the earlier ones still held, equals the dense recursion
    monkeypatch.setattr(beliefs, "FOLD_RANK", 4)
    mu, cov, _ = _problem(k, seed=4)
    cls = FullNatural if family == "fc" else FullMoment
    q = cls.make(mu, torch.linalg.inv(cov)) if family == "fc" else cls.make(mu, cov)
    alpha = {("fc", "natural"): 0.3, ("fc", "gradient"): 0.002}.get((family, step), 0.02)
    gen = torch.Generator().manual_seed(5)
    stream, want = [q], [(mu, cov)]
    for _ in range(8):
        curv = Curvature(torch.randn(P, generator=gen, dtype=DT),
                         root=0.3 * torch.randn(P, k, generator=gen, dtype=DT))
        q = (q.natural_step if step == "natural" else q.gradient_step)(curv, alpha)
        stream.append(q)
        want.append(_dense(family, step, *want[-1], curv, alpha))
    assert family == "fc" and step == "gradient" or q._sigma.rank > 0  # the last step unformed
    for belief, (want_mu, want_cov) in zip(stream, want):
        torch.testing.assert_close(belief.mu, want_mu, rtol=0, atol=1e-10)
        torch.testing.assert_close(belief.cov, want_cov, rtol=0, atol=1e-10)
    torch.testing.assert_close(q.gaussian.precision() @ want[-1][1], torch.eye(P, dtype=DT),
                               rtol=0, atol=1e-10)


def test_the_low_rank_sum_forms_the_matrix_it_stands_for():
    gen = torch.Generator().manual_seed(6)
    base = torch.randn(P, P, generator=gen, dtype=DT)
    base = base + base.T
    rows, scale = torch.randn(3, P, generator=gen, dtype=DT), torch.tensor([1.0, -2.0, 0.5], dtype=DT)
    x = torch.randn(2, P, generator=gen, dtype=DT)
    want = base + rows.T @ torch.diag(scale) @ rows
    for m in (beliefs._PlusLowRank(base).plus(rows, scale),
              beliefs._PlusLowRank(base).plus(rows[:1], scale[:1]).plus(rows[1:], scale[1:])):
        torch.testing.assert_close(m.times(x), x @ want, rtol=0, atol=1e-12)
        torch.testing.assert_close(m.dense(), want, rtol=0, atol=1e-12)
        torch.testing.assert_close(m.times(x), x @ want, rtol=0, atol=1e-12)  # from the dense one
    one = beliefs._PlusLowRank(base).plus(rows[:1], scale[:1])  # rank one: formed by addr
    torch.testing.assert_close(one.dense(), base + scale[0] * torch.outer(rows[0], rows[0]),
                               rtol=0, atol=1e-12)


def test_downdating_steps_after_sampling_carry_a_square_root_of_the_covariance(monkeypatch):
    # fc-mom's plain-gradient step from a sampled belief (MC-EF) multiplies the held square root
    # S by (I - c V V^T)^{1/2}, V = S^-1 root, instead of factorising the new covariance; with
    # the fold at rank 4 a stream of rank-2 steps factorises every third step. Along the stream
    # S S^T is the dense recursion's covariance, draws are mu + S z, and every belief still held
    # keeps its own root
    monkeypatch.setattr(beliefs, "FOLD_RANK", 4)
    mu, cov, _ = _problem(2, seed=7)
    q = FullMoment(FullGaussian.from_moments(mu, cov))
    gen = torch.Generator().manual_seed(8)
    q.sample(1, gen)  # factorised, as an MC curvature's sampling leaves it
    stream, want, roots = [q], [(mu, cov)], []
    for _ in range(6):
        curv = Curvature(torch.randn(P, generator=gen, dtype=DT),
                         root=0.3 * torch.randn(P, 2, generator=gen, dtype=DT))
        q = q.gradient_step(curv, 0.05)
        roots.append(q.__dict__.get("_root"))
        stream.append(q)
        want.append(_dense("fc-mom", "gradient", *want[-1], curv, 0.05))
        q.sample(1, gen)
    assert [r is not None for r in roots] == [True, True, False, True, True, False]
    for belief, (want_mu, want_cov) in zip(stream, want):
        torch.testing.assert_close(belief.mu, want_mu, rtol=0, atol=1e-10)
        torch.testing.assert_close(belief.cov, want_cov, rtol=0, atol=1e-10)
        root = belief.__dict__.get("_root")
        if root is not None:
            square = root.draws(torch.zeros(P, dtype=DT), torch.eye(P, dtype=DT)).T
            torch.testing.assert_close(square @ square.T, want_cov, rtol=0, atol=1e-10)
            torch.testing.assert_close(root.solve(square), torch.eye(P, dtype=DT),
                                       rtol=0, atol=1e-10)
            z = torch.randn(3, P, generator=torch.Generator().manual_seed(9), dtype=DT)
            draws = belief.sample(3, torch.Generator().manual_seed(9))
            torch.testing.assert_close(draws, want_mu + z @ square.T, rtol=0, atol=1e-12)
