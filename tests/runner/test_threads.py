"""Intra-op threads per unit follow the CPU affinity of the process, not the machine's core count."""

from __future__ import annotations

import os

import pytest

from zoo.runner.executors import threads_per_unit


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this OS")
def test_threads_follow_cpu_affinity(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert threads_per_unit(1) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert threads_per_unit(2) == 2 and threads_per_unit(8) == 1
