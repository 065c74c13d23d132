"""Metric formulas on hand-computed cases."""

import math

import numpy as np
import pytest
import torch

from zoo import metrics


def test_mean_ci_is_196_sample_sd_over_root_n():
    v = [0.2, 0.4, 0.6, 0.8]
    mean, half = metrics.mean_ci(v)
    assert mean == pytest.approx(0.5)
    assert half == pytest.approx(1.959963984540054 * np.std(v, ddof=1) / 2)


def test_paired_difference_uses_per_episode_differences():
    a, b = [0.5, 0.6, 0.7], [0.4, 0.6, 0.5]
    mean, half = metrics.paired_difference(a, b)
    assert mean == pytest.approx(0.1)
    assert half == pytest.approx(metrics.Z95 * np.std([0.1, 0.0, 0.2], ddof=1) / math.sqrt(3))
    with pytest.raises(ValueError, match="same episodes"):
        metrics.paired_difference([1.0], [1.0, 2.0])


def test_ece_and_mce_by_hand():
    # two bins used: (0.2, 0.2667] holds conf .25 (correct 0/2); (0.9333, 1] holds .95 (2/2 correct)
    conf, correct = [0.25, 0.25, 0.95, 0.95], [0, 0, 1, 1]
    ece, mce = metrics.ece_mce(conf, correct)
    assert ece == pytest.approx(0.5 * 0.25 + 0.5 * 0.05)
    assert mce == pytest.approx(0.25)
    bins = metrics.reliability_bins(conf, correct)
    assert bins.count.sum() == 4 and len(bins.count) == 15


def test_bin_edges_are_right_closed():
    bins = metrics.reliability_bins([1 / 15, 1.0, 0.0], [1, 1, 0])
    assert bins.count[0] == 2 and bins.count[-1] == 1


def test_perfect_calibration_has_zero_ece():
    rng = np.random.default_rng(0)
    conf = rng.uniform(0, 1, 200_000)
    correct = rng.uniform(0, 1, conf.size) < conf
    assert metrics.ece_mce(conf, correct)[0] < 0.01


def test_nll_and_brier():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    y = torch.tensor([0, 1])
    assert metrics.nll(probs, y) == pytest.approx(-(math.log(0.7) + math.log(0.1)) / 2)
    assert metrics.brier(probs, y) == pytest.approx(((0.09 + 0.04 + 0.01) + (0.01 + 0.81 + 0.64)) / 2)


def test_temperature_fit_recovers_the_generating_temperature():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(20_000, 5, generator=g) * 3
    y = torch.multinomial(torch.softmax(logits / 2.5, -1), 1, generator=g)[:, 0]
    t = metrics.fit_temperature(torch.log_softmax(logits, -1), y)
    assert t == pytest.approx(2.5, rel=0.05)
    p = metrics.apply_temperature(torch.softmax(logits, -1), t)
    assert torch.allclose(p.sum(-1), torch.ones(len(p), dtype=p.dtype), atol=1e-6)


def test_temperature_fit_sharpens_a_nearly_uniform_but_accurate_predictive():
    """A GP predictive can sit near 1/C and still rank well: its calibrating T is far below 1
    (here 0.02, outside the old (0.05, 20) bounds, which capped it silently)."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(20_000, 5, generator=g) * 3
    y = torch.multinomial(torch.softmax(logits, -1), 1, generator=g)[:, 0]
    flat = torch.log_softmax(0.02 * logits, -1)   # probabilities within a few % of 1/5
    assert metrics.fit_temperature(flat, y) == pytest.approx(0.02, rel=0.05)


@pytest.mark.parametrize("n,classes,scale,true_t", [(750, 5, 3.0, 2.5), (20, 2, 1.0, 1.0),
                                                     (750, 5, 3.0, 0.3), (400, 5, 3.0, 20.0),
                                                     (75, 5, 10.0, 1.0), (40, 20, 0.5, 0.25)])
def test_temperature_fit_is_the_minimiser_of_the_nll(n, classes, scale, true_t, monkeypatch):
    """Newton's root of ``L'(1/T)`` is the NLL's minimiser: the first-order condition holds to
    rounding, the NLL there is below its value on a fine grid of T and at T (1 +- 1e-6), and a
    golden-section search of the NLL (the previous method; its resolution is ~1e-8 where the
    NLL is flat to rounding) finds the same T to 1e-6."""
    g = torch.Generator().manual_seed(n + classes)
    logits = torch.randn(n, classes, generator=g, dtype=torch.float64) * scale
    y = torch.multinomial(torch.softmax(logits / true_t, -1), 1, generator=g)[:, 0]
    log_p = torch.log_softmax(logits, -1)
    found = []
    root = metrics.log_newton_root
    monkeypatch.setattr(metrics, "log_newton_root", lambda *a: found.append(root(*a)) or found[-1])
    t = metrics.fit_temperature(log_p, y)
    assert 1e-3 < t < 1e3  # an interior minimum (the bounds: the next test)
    assert found[0][1] <= 16  # evaluations of L' (13 at T = 20; ~50 before the stopping fix)

    def nll(temperature: float) -> float:
        return float(torch.nn.functional.cross_entropy(log_p / temperature, y))

    w = torch.softmax(log_p / t, -1)
    slope = float(((w * log_p).sum(-1) - log_p.gather(1, y[:, None])[:, 0]).mean())
    assert abs(slope) < 1e-12
    grid = torch.logspace(-3, 3, 601, dtype=torch.float64)
    assert nll(t) <= min(nll(float(s)) for s in grid) + 1e-12
    assert nll(t) <= min(nll(t * (1 + 1e-6)), nll(t * (1 - 1e-6))) + 1e-15
    lo, hi = math.log(1e-4), math.log(1e4)
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(200):  # golden section on log T
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        lo, hi = (lo, b) if nll(math.exp(a)) < nll(math.exp(b)) else (a, hi)
    assert t == pytest.approx(math.exp((lo + hi) / 2), rel=1e-6)


def test_log_newton_root_stops_where_it_converged():
    """The search ends at an exact zero of ``g`` and at a Newton step under the tolerance, also
    where the bracket it narrowed ends at that point (it once went on bisecting from the far end
    of the bracket for ~50 evaluations there); a bracket without a sign change gives its end."""
    calls = []

    def exact_zero(b: float) -> tuple[float, float]:  # g = b - 0.3, exactly 0 near its root
        calls.append(b)
        return (0.0 if abs(b - 0.3) < 1e-9 else b - 0.3), 1.0

    b, evaluations = metrics.log_newton_root(exact_zero, 1e-4, 1e4)
    assert b == pytest.approx(0.3, abs=1e-9) and evaluations == len(calls) <= 10
    for r in (1e-3, 0.5, 2.0, 7e3):  # g = log(b / r): one Newton step in log b is exact
        b, evaluations = metrics.log_newton_root(lambda b, r=r: (math.log(b / r), 1 / b), 1e-4, 1e4)
        assert b == pytest.approx(r, rel=1e-12) and evaluations <= 5
    assert metrics.log_newton_root(lambda b: (b + 1.0, 1.0), 1e-4, 1e4) == (1e-4, 1)
    assert metrics.log_newton_root(lambda b: (b - 1e5, 1.0), 1e-4, 1e4) == (1e4, 2)


def test_temperature_fit_at_its_bounds(caplog):
    """Where the NLL has no interior minimum the fit stops at a bound and says so: every query
    right (the NLL falls as T -> 0), every query wrong or a uniform predictive (it falls, or is
    flat, as T grows)."""
    right = torch.log_softmax(torch.tensor([[10.0, 0.0], [0.0, 10.0]]), -1)
    assert metrics.fit_temperature(right, torch.tensor([0, 1])) == pytest.approx(1e-4)
    assert metrics.fit_temperature(right, torch.tensor([1, 0])) == pytest.approx(1e4)
    uniform = torch.full((6, 3), -math.log(3))
    assert metrics.fit_temperature(uniform, torch.tensor([0, 1, 2, 0, 1, 2])) == pytest.approx(1e4)
    assert metrics.fit_temperature(right, torch.tensor([0, 1]), bounds=(0.5, 2)) == 0.5
    assert caplog.text.count("stopped at its bound") == 3
    assert caplog.text.count("the predictions are uniform") == 1  # said as such, not as a bound
    # the runner's calibration names the cell (one line per training in a suite of thousands)
    from zoo.tasks.classification import Classification

    payload = {"val_logp": right, "val_y": torch.tensor([0, 1]), "what": "protonet glyphs 5w1s"}
    assert Classification().calibrate(payload) == pytest.approx(1e-4)
    assert "protonet glyphs 5w1s: temperature fit stopped at its bound" in caplog.text


def test_brier_and_calibrated_confidence_equal_their_definitions():
    """The expanded Brier score and the softmax-free calibrated confidence against the plain
    formulas (one-hot difference; max of the tempered softmax), with zeros and ties."""
    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(7, 9, 5, generator=g, dtype=torch.float64) * 4, -1)
    probs[0, 0] = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    probs[0, 1] = torch.full((5,), 0.2, dtype=torch.float64)
    y = torch.randint(0, 5, (7, 9), generator=g)
    onehot = torch.nn.functional.one_hot(y, 5).double()
    assert torch.allclose(metrics.query_brier(probs, y), (probs - onehot).pow(2).sum(-1),
                          atol=1e-15, rtol=0)
    for t in (1e-3, 0.3, 1.0, 7.0):
        expected = metrics.apply_temperature(probs, t).max(-1).values
        assert torch.allclose(metrics.calibrated_confidence(probs, t), expected, atol=1e-14,
                              rtol=0)


def test_episode_record():
    (r,) = metrics.episode_records(torch.tensor([[[0.9, 0.1], [0.3, 0.7]]]), torch.tensor([[0, 0]]))
    assert r["accuracy"] == 0.5 and r["correct"] == [1, 0]
    assert r["confidence"] == pytest.approx([0.9, 0.7])
    assert r["nll"] == pytest.approx(-(math.log(0.9) + math.log(0.3)) / 2)
    assert r["brier"] == pytest.approx(((0.01 + 0.01) + (0.49 + 0.49)) / 2)
    assert r["confidence_calibrated"] == pytest.approx([0.9, 0.7])  # T = 1 changes nothing


def test_episode_records_of_a_batch_equal_each_episode_by_the_formulas():
    """Batched over episodes, every number equals the definitions written out per episode
    (float64, 1e-12), the calibrated confidence included (max_c p_c^(1/T) / sum_c p_c^(1/T))."""
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(7, 6, 4, generator=g, dtype=torch.float64) * 2, -1)
    y = torch.randint(0, 4, (7, 6), generator=g)
    t = 0.37
    records = metrics.episode_records(probs.float(), y, t)  # float32 in, as methods return
    assert len(records) == 7
    for p, labels, r in zip(probs.float().double(), y, records, strict=True):
        p_y = p[torch.arange(6), labels]
        assert r["accuracy"] == pytest.approx(float((p.argmax(1) == labels).double().mean()),
                                              abs=1e-12)
        assert r["nll"] == pytest.approx(float(-p_y.log().mean()), rel=1e-12)
        onehot = torch.nn.functional.one_hot(labels, 4).double()
        assert r["brier"] == pytest.approx(float(((p - onehot) ** 2).sum(1).mean()), rel=1e-12)
        assert r["confidence"] == pytest.approx(p.max(1).values.tolist(), rel=1e-12)
        sharpened = p ** (1 / t)
        calibrated = (sharpened.max(1).values / sharpened.sum(1)).tolist()
        assert r["confidence_calibrated"] == pytest.approx(calibrated, rel=1e-10)
        assert r["correct"] == (p.argmax(1) == labels).int().tolist()


def test_seed_mean_ci_is_student_t_over_seeds():
    from scipy.stats import t

    from zoo.metrics import seed_mean_ci

    v = [0.8, 0.7, 0.9, 0.75, 0.85]
    mean, ci = seed_mean_ci(v)
    assert mean == pytest.approx(0.8)
    assert ci == pytest.approx(2.7764451 * np.std(v, ddof=1) / np.sqrt(5), rel=1e-6)
    assert t.ppf(0.975, 4) == pytest.approx(2.7764451, rel=1e-6)
    assert np.isnan(seed_mean_ci([0.5])[1])


def test_seed_mean_ci_quantile_is_exactly_scipy_stats_t():
    """The report avoids importing scipy.stats; its quantile must be the same number, bit for bit."""
    from scipy.stats import t

    from zoo.metrics import seed_mean_ci

    for n in (2, 3, 5, 10, 31, 1000):
        v = np.linspace(0.1, 0.9, n) ** 2
        expected = float(t.ppf(0.975, n - 1) * v.std(ddof=1) / np.sqrt(n))
        assert seed_mean_ci(v)[1] == expected


def test_seed_paired_difference_takes_each_seeds_mean_first():
    from zoo.metrics import seed_mean_ci, seed_paired_difference

    a = {0: [1.0, 1.0, 0.0], 1: [1.0, 0.0]}
    b = {0: [0.0, 1.0, 0.0], 1: [1.0, 1.0]}
    diff, ci = seed_paired_difference(a, b)
    assert (diff, ci) == seed_mean_ci([1 / 3, -0.5])
