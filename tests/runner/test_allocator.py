"""The runner's malloc setting: applied once, recorded, and opt-out by environment."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

CHILD = """
import json
from zoo.runner.allocator import malloc_setting, retain_freed_memory
from zoo.runner.storage import environment
before = malloc_setting()
first, again = retain_freed_memory(), retain_freed_memory()
env = environment("cpu")
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
