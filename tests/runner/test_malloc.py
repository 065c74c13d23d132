"""The runner's malloc thresholds: set through ``GLIBC_TUNABLES`` for the worker processes it
starts, recorded as each process started, and with the effect the thresholds are for."""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from zoo.runner.malloc import RETAIN, RETURN, VARIABLE, for_workers, malloc_setting

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")


def _child(code: str, tunables: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if tunables is not None:
        env[VARIABLE] = tunables
    return subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                          text=True).stdout.strip().splitlines()[-1]


def test_the_setting_recorded_is_the_one_the_process_started_with():
    code = ("import os; import zoo.runner.malloc; "
            f"os.environ[{VARIABLE!r}] = 'changed later'; "
            "from zoo.plugins import registry; from zoo.runner.provenance import environment; "
            "print(environment('cpu', registry())['malloc'])")
    assert _child(code, RETAIN) == RETAIN
    assert _child(code, None) == "default"


def test_worker_processes_start_with_the_thresholds_and_this_one_is_left_alone(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    context = multiprocessing.get_context("spawn")
    with for_workers(), ProcessPoolExecutor(1, mp_context=context) as pool:
        assert pool.submit(os.getenv, VARIABLE).result() == RETAIN
        assert pool.submit(malloc_setting).result() == RETAIN
    assert VARIABLE not in os.environ
    monkeypatch.setenv(VARIABLE, "glibc.malloc.trim_threshold=1048576")  # the user's own: kept
    with for_workers(), ProcessPoolExecutor(1, mp_context=context) as pool:
        assert pool.submit(malloc_setting).result() == "glibc.malloc.trim_threshold=1048576"
    assert os.environ[VARIABLE] == "glibc.malloc.trim_threshold=1048576"


def test_a_pool_of_cells_records_the_thresholds_in_env_json(tmp_path, monkeypatch):
    from zoo.runner.bench import run_suite

    from .conftest import tiny_suite

    monkeypatch.delenv(VARIABLE, raising=False)
    run_suite(tiny_suite(seeds=[0, 1]), out=tmp_path, device="cpu", workers=2, progress=False)
    envs = [json.loads(p.read_text()) for p in tmp_path.glob("cells/*/env.json")]
    assert envs and {e["malloc"] for e in envs} == {RETAIN}


RSS = """
import json, torch
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
x = torch.ones(4 * 2**20)  # 16 MiB: above glibc's initial mmap threshold, below RETAIN's
top = rss()
del x
print(top - rss())
"""


@glibc
def test_the_thresholds_keep_a_freed_buffer_in_the_process_and_glibcs_hand_it_back():
    mb = 2**20
    assert int(_child(RSS, RETAIN)) < 4 * mb  # kept resident for the next step
    assert int(_child(RSS, RETURN)) > 12 * mb  # handed back to the kernel at once
    assert int(_child(RSS, None)) > 12 * mb  # glibc's defaults: likewise, the first time
