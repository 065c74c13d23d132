"""Intra-op threads per unit follow the CPU affinity of the process, not the machine's core count,
and never exceed ``OMP_NUM_THREADS``."""

from __future__ import annotations

import os

import pytest

from zoo.runner.executors import threads_per_unit


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this OS")
def test_threads_follow_cpu_affinity(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert threads_per_unit(1) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert threads_per_unit(2) == 2 and threads_per_unit(8) == 1


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this OS")
@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("3", 3), ("16", 4), ("", 4), ("x", 4),
                                                 ("0", 4)])
def test_threads_at_most_omp_num_threads(monkeypatch, value, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert threads_per_unit(1) == expected


def test_the_thread_default_is_one_whatever_the_workers(monkeypatch):
    from zoo.errors import ZooError
    from zoo.plugins import registry
    from zoo.runner.executors import DEFAULT_THREADS, LocalExecutor, resolve_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert DEFAULT_THREADS == 1
    assert LocalExecutor("x", None, "cpu", workers=1, registry=registry()).threads == 1
    assert LocalExecutor("x", None, "cpu", workers=2, registry=registry()).threads == 1
    assert resolve_threads("auto", 1) == threads_per_unit(1) and resolve_threads(3, 1) == 3
    for bad in (0, -1, "two", True):
        with pytest.raises(ZooError, match="--threads"):
            resolve_threads(bad, 1)


def test_results_record_their_threads_and_the_report_says_when_they_are_mixed(tmp_path):
    from zoo.runner.bench import run_suite
    from zoo.runner.collect import load_report
    from zoo.runner.report import markdown

    from .conftest import tiny_suite

    out = tmp_path / "out"
    (one,) = run_suite(tiny_suite(test_datasets=["glyphs"]), out=out, device="cpu",
                       progress=False).finished
    assert one.result["threads"] == 1
    assert "mixed threads" not in markdown(load_report(out))
    (two,) = run_suite(tiny_suite(test_datasets=["glyphs"], seeds=[0, 1]), out=out, device="cpu",
                       progress=False, threads=2).finished
    assert two.result["threads"] == 2 and two.result["seed"] == 1
    text = markdown(load_report(out))
    assert "[mixed threads: 1, 2]" in text
