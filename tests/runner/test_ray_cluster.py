"""A real multi-node Ray cluster on this machine: a head and a second node started by ``ray start``
as separate processes (loopback addresses only), a suite run by a separate driver process through
``zoo bench --executor ray --address``, and the second node killed while it runs a unit. The suite
must complete on the survivor with every cell once in results.jsonl and the same numbers as a
local run. Slow (two Ray nodes and two runs of the suite; ~2 minutes on a loaded 2-core machine).

Each node is a ``ray start --block``; killing it and every process it started (found through
/proc: a raylet's workers run in process groups of their own) is losing the node, and the
fixture's teardown also kills any process left with this test's token in its environment, so no
Ray process outlives the test, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from zoo.errors import ZooError
from zoo.runner.bench import run_suite
from zoo.runner.executors import (
    check_feasible,
    cluster_slots,
    connect,
    run_units_on_node,
    threads_per_unit,
    unit_resources,
)

from .test_resume import assert_same

# the `ray` command of this interpreter's environment (a venv's bin), else the one on the PATH
RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray") or "ray"
# the quick suite cut down to ProtoNet: 2 trainings (one per node) x 2 test data sets = 4 cells
SETS = ["ways=[3]", "shots=[1, 2]", "seeds=[0]", "query=3", "train_query=2",
        "train_episodes=60", "val_episodes=2", "val_every=30", "test_episodes=4",
        "checkpoint_every=5"]
WORKERS = 2
TASK_TITLE = b"ray::run_units_on_node"  # a Ray worker's process title while it runs units


@dataclass
class LoopbackCluster:
    address: str
    env: dict[str, str]
    head: subprocess.Popen
    node: subprocess.Popen


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports that are free now (all held open until each is known)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """``ray start ... --block`` in a new session; returns once the node says it is up."""
    with log.open("w") as f:
        proc = subprocess.Popen([RAY, "start", "--block", *args], env=env, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while "Ray runtime started" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"`ray start {' '.join(args)}` did not come up:\n{log.read_text()}")
        time.sleep(0.2)
    return proc


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(stat.parent.name))
    return tree


def _descendants(pid: int) -> list[int]:
    """``pid``'s processes: its children, theirs (a raylet's workers run in groups of their own),
    and so on."""
    tree, found, todo = _children(), [], [pid]
    while todo:
        children = tree.get(todo.pop(), [])
        found.extend(children)
        todo.extend(children)
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _stop(proc: subprocess.Popen) -> None:
    """Kill a ``ray start --block`` and every process it started (gcs, raylet, agents, workers),
    at once, as when a machine is lost."""
    _kill([proc.pid, *_descendants(proc.pid)])
    proc.wait()


def _runs_a_unit(node: subprocess.Popen) -> bool:
    """Whether a Ray worker of ``node`` is running a unit."""
    for pid in _descendants(node.pid):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(TASK_TITLE):
                return True
        except OSError:
            continue
    return False


def _sweep(marker: str) -> None:
    """Kill whatever process is left with ``marker`` in its environment (only this test's Ray
    processes have it): a worker a raylet started just before it was killed outlives it."""
    _kill([int(e.parent.name) for e in Path("/proc").glob("[0-9]*/environ")
           if int(e.parent.name) != os.getpid() and _has(e, marker.encode())])


def _has(environ: Path, marker: bytes) -> bool:
    try:
        return marker in environ.read_bytes()
    except OSError:
        return False


@pytest.fixture
def loopback_cluster(ray_alone) -> Iterator[LoopbackCluster]:
    pytest.importorskip("ray")
    # a short folder: Ray's Unix sockets live under it and a socket path is limited to 107 bytes
    folder = Path(tempfile.mkdtemp(prefix="zoo-ray-"))
    token = folder / "token"
    token.write_text("zoo-loopback-test-" + os.urandom(16).hex())
    # Ray >= 2.5x authenticates every RPC with a token once one exists (~/.ray/auth_token): a
    # driver that does not send the cluster's token is refused until ray.init times out (what
    # stopped this test here before). Every process here uses its own token, never the user's.
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
           "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    # Every port a node would otherwise take at a fixed default (the client server's 10001, the
    # dashboard agent's 52365) is chosen free here too: a random GCS port can land on a default.
    port, client, head_agent, node_agent = _free_ports(4)
    # each node offers one unit's CPUs, so that both nodes run a unit at once
    common = ["--node-ip-address=127.0.0.1", f"--num-cpus={threads_per_unit(WORKERS)}",
              "--object-store-memory=80000000", "--disable-usage-stats"]
    head = _start(["--head", f"--port={port}", f"--ray-client-server-port={client}",
                   f"--dashboard-agent-listen-port={head_agent}", "--include-dashboard=false",
                   f"--temp-dir={folder}", *common], env, folder / "head.log")
    try:
        node = _start([f"--address=127.0.0.1:{port}", f"--dashboard-agent-listen-port={node_agent}",
                       *common], env, folder / "node.log")
        try:
            yield LoopbackCluster(f"127.0.0.1:{port}", env, head, node)
        finally:
            _stop(node)
    finally:
        _stop(head)
        _sweep(f"RAY_AUTH_TOKEN_PATH={token}")
        shutil.rmtree(folder, ignore_errors=True)


def _lines(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_suite_survives_a_lost_node_and_matches_a_local_run(loopback_cluster, tmp_path):
    cluster, out = loopback_cluster, tmp_path / "ray"
    driver = subprocess.Popen(
        [sys.executable, "-c", "import sys; from zoo.cli import main; sys.exit(main())",
         "bench", "quick", "--methods", "protonet", *(a for s in SETS for a in ("--set", s)),
         "--executor", "ray", "--address", cluster.address, "--workers", str(WORKERS),
         "--device", "cpu", "--out", str(out), "--no-progress"],
        env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _runs_a_unit(cluster.node):  # the second node has a unit in hand
            if driver.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the second node never ran a unit:\n" + driver.communicate()[0])
            time.sleep(0.1)
        time.sleep(1.0)  # into its training, past a checkpoint or two
        killed_after = len(_lines(out))
        _stop(cluster.node)  # a lost node: the unit it was running is retried on the head
        log, _ = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            _stop(driver)
    assert driver.returncode == 0, log
    assert killed_after < 4, "the suite had finished before the node was killed"
    hashes = [r["config_hash"] for r in _lines(out)]
    assert len(hashes) == len(set(hashes)) == 4, log  # every cell once
    assert log.count("\ndone   protonet") == 4, log  # progress from both nodes, in the driver
    local = tmp_path / "local"
    run_suite("quick", out=local, device="cpu", workers=WORKERS, methods=["protonet"], sets=SETS,
              progress=False)
    assert_same(local, out)


def test_a_node_that_cannot_see_the_results_folder_says_so(tmp_path):
    with pytest.raises(ZooError, match="not visible from Ray node .* file system every node"):
        run_units_on_node(tmp_path / "elsewhere" / ".zoo-shared-x", [], tmp_path)


def test_a_unit_asks_for_one_gpu_on_cuda_and_its_threads_as_cpus():
    assert unit_resources("cuda", 4) == {"num_cpus": 4, "num_gpus": 1}
    assert unit_resources("cpu", 2) == {"num_cpus": 2, "num_gpus": 0}


def test_a_unit_no_node_can_hold_is_an_error_not_a_wait():
    gpu_node, cpu_node = {"CPU": 8, "GPU": 1}, {"CPU": 2}
    check_feasible(unit_resources("cuda", 4), [cpu_node, gpu_node])
    check_feasible(unit_resources("cpu", 2), [cpu_node])
    with pytest.raises(ZooError, match=r"1 GPU\(s\).*2 CPU\(s\), 0 GPU\(s\).*--device cpu"):
        check_feasible(unit_resources("cuda", 1), [cpu_node])
    with pytest.raises(ZooError, match="8 CPU.*more --workers"):
        check_feasible(unit_resources("cpu", 8), [cpu_node, {"CPU": 4, "GPU": 2}])


def test_a_cluster_that_refuses_the_driver_says_what_to_check():
    class RefusingRay:
        @staticmethod
        def init(**kwargs):
            raise ConnectionError("Failed to connect to Ray cluster") from PermissionError(
                "InvalidAuthToken")

    with pytest.raises(ZooError, match="InvalidAuthToken.*ray status --address 10.0.0.1:6379"
                       ".*RAY_AUTH_MODE=token"):
        connect(RefusingRay, "10.0.0.1:6379")


def test_a_driver_without_a_gpu_may_send_cuda_cells_to_a_cluster(monkeypatch):
    import torch

    from zoo.runner.bench import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("cuda", remote=True) == "cuda"  # the cluster's GPUs are checked instead
    with pytest.raises(ZooError, match="no CUDA device is available here"):
        resolve_device("cuda")


def test_the_cluster_runs_as_many_units_at_once_as_its_nodes_hold():
    cpu = unit_resources("cpu", 2)
    assert cluster_slots(cpu, [{"CPU": 8}, {"CPU": 3, "GPU": 1}]) == 4 + 1
    gpu = unit_resources("cuda", 4)
    assert cluster_slots(gpu, [{"CPU": 16, "GPU": 2}, {"CPU": 8, "GPU": 4}, {"CPU": 64}]) == 2 + 2
    assert cluster_slots(cpu, []) == 1  # every node lost: its units wait for one
