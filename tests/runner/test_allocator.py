"""The runner's malloc setting: applied once, recorded, and opt-out by environment."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

CHILD = """
import json
from zoo.runner.allocator import malloc_setting, retain_freed_memory
from zoo.plugins import registry
from zoo.runner.storage import environment
before = malloc_setting()
first, again = retain_freed_memory(), retain_freed_memory()
env = environment("cpu", registry())
assert env["threads"] >= 1
print(json.dumps([before, first, again, env["malloc"]]))
"""


def _run(setting: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "ZOO_MALLOC"}
    if setting:
        env["ZOO_MALLOC"] = setting
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_retain_is_applied_once_and_recorded():
    expected = "retain" if platform.libc_ver()[0] == "glibc" else "unsupported"
    assert _run(None) == ["default", expected, expected, expected]


def test_opt_out_leaves_malloc_alone_and_says_so():
    assert _run("default") == ["default", "default", "default", "default"]


MEASURE = """
import json, torch
from zoo.runner.allocator import retain_freed_memory, returning_freed_memory
MB = 2**20
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
def churn():  # a 16 MiB buffer, below the retaining mmap threshold: a heap allocation
    x = torch.ones(4 * MB)
    top = rss()
    del x
    return top
assert retain_freed_memory() == "retain"
top = churn()
kept = rss()
with returning_freed_memory():
    inside = rss()
    peak = churn()
    after_free = rss()
churn()
print(json.dumps([top - kept, kept - inside, peak - after_free, rss() - after_free]))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_returning_freed_memory_hands_back_inside_the_block_and_retains_after_it():
    env = {k: v for k, v in os.environ.items() if k != "ZOO_MALLOC"}
    out = subprocess.run([sys.executable, "-c", MEASURE], env=env, check=True,
                         capture_output=True, text=True).stdout
    still_kept, handed_back, freed_inside, kept_after = json.loads(out.strip().splitlines()[-1])
    mb = 2**20
    assert still_kept < 4 * mb  # retaining: a freed buffer stays resident
    assert handed_back > 12 * mb  # entering the block hands the kept pages back
    assert freed_inside > 12 * mb  # inside, a freed buffer goes back at once
    assert kept_after > 12 * mb  # after it, retained again
