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
