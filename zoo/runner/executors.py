"""Where units of work run: in this process (or a pool of local processes), or as Ray tasks.

Both give identical results for the same suite: a unit seeds everything from its cell and runs
with the same number of intra-op threads either way (:data:`DEFAULT_THREADS` unless chosen). With
Ray the results folder must be on a file system that every node sees (cells write their own folders; only the
driver writes ``results.jsonl``): the driver leaves a marker file there and every task checks that
it sees it before it starts. A task whose node dies is retried on another (``RAY_RETRIES``): its
units resume from their folders (finished ones are skipped), so a retried unit gives the same
result as an uninterrupted one.

Both executors hand out groups of consecutive units that take about ``GROUP_SECONDS`` each
(:class:`Pace`, from the units' measured times): one flush to the disk per group
(:func:`zoo.runner.cell.run_units`) instead of one per unit, which cost more than a unit of
milliseconds, and with Ray one task per group instead of one per unit. A group of long units is
one unit. The local executor keeps one group per worker process running; the Ray executor one
per unit the live nodes can hold at once (:func:`cluster_slots`, recounted as nodes come and go).
Worker processes and Ray tasks start with the runner's malloc thresholds (:mod:`zoo.runner.malloc`).
A run's units are all of one kind of work (:data:`Work`): trainings with the cells they score, or
ensembles of trained seeds.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.errors import ZooError
from zoo.io import set_write_check
from zoo.runner.cell import DatasetCache, Outcome, run_units
from zoo.runner.cells import Cell
from zoo.runner.malloc import VARIABLE, for_workers, worker_tunables
from zoo.runner.reaper import reap_with_parent
from zoo.runner.storage.layout import SHARED_PREFIX

if TYPE_CHECKING:
    from zoo.plugins import Registry

log = logging.getLogger(__name__)

OnDone = Callable[[list[Outcome]], None]
Work = Callable[..., list[Outcome]]
"""What a unit of work is run by: :func:`zoo.runner.cell.run_units` (trainings and the cells they
score) or :func:`zoo.runner.ensembles.run_ensemble_units` (ensembles of trained seeds); a
module-level function (a worker process is given it by name) with ``run_units``' parameters."""
RAY_RETRIES = 3  # re-runs of a unit whose node (or worker process) died
GROUP_SECONDS = 2.0  # a group of units' time: its flush (~10 ms) is then under 1% of it
MAX_GROUP = 256


def shared_folder_marker(root: Path) -> Path:
    """Leave a uniquely named file in the results folder, for :func:`run_unit_on_node` (only the
    folder's writer does; one left by a killed driver is removed by the next writer)."""
    root.mkdir(parents=True, exist_ok=True)
    marker = root / f"{SHARED_PREFIX}{uuid.uuid4().hex}"
    marker.write_text(socket.gethostname())
    return marker


def run_units_on_node(marker: Path, units: Sequence[Sequence[Cell]], root: Path, *args,
                      work: Work = run_units) -> list[Outcome]:
    """``work`` (:func:`run_units`: a group of units) on a cluster node, after checking that this
    node sees the results folder the driver wrote ``marker`` into (cells write their own folders
    there)."""
    if not marker.exists():
        raise ZooError(f"the results folder {root} is not visible from Ray node {socket.gethostname()} "
                       f"(the driver on {marker.read_text() if marker.exists() else 'another host'} "
                       "wrote it): put --out on a file system every node mounts at the same path "
                       "(NFS, a shared volume), or run with --executor local")
    return run_units_in_worker(units, root, *args, work=work)


def run_units_in_worker(units: Sequence[Sequence[Cell]], root: Path, *args: Any,
                        work: Work = run_units) -> list[Outcome]:
    """``work`` (:func:`run_units`) in a worker process (a pool's or a Ray node's): the entry of a
    bench there, which loads that process's plugin registry (:func:`zoo.plugins.registry`)."""
    from zoo.plugins import registry

    return work(units, root, *args, registry=registry())


DEFAULT_THREADS = 1
"""Intra-op threads per unit unless ``--threads`` says otherwise: the thread count changes the
order of floating-point sums and so the numbers, and one thread gives the same numbers for a cell
on every machine and for every ``--workers`` (``make bench`` runs 2 workers of one thread)."""


def resolve_threads(threads: int | str, workers: int) -> int:
    """``threads`` as given (an int >= 1), or ``"auto"``: :func:`threads_per_unit`."""
    if threads == "auto":
        return threads_per_unit(workers)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ZooError(f"--threads {threads!r}: give a number of threads >= 1 or auto")
    return threads


def threads_per_unit(workers: int) -> int:
    """Intra-op threads per unit under ``--threads auto``: the cores this process may run on (its CPU
    affinity, so that ``taskset -c 0 zoo bench ...`` means one thread), shared among the
    workers, and at most ``OMP_NUM_THREADS`` where that is set (as torch itself honours it): on
    a shared machine a unit that spreads over every core while other jobs hold them waits at
    each parallel region, several times slower than one thread (``benchmarks/cards/omniglot-minimal.md``)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    share = max(1, (cores or 1) // max(1, workers))
    limit = os.environ.get("OMP_NUM_THREADS", "").strip()
    if limit.isdigit() and int(limit) > 0:
        share = min(share, int(limit))
    return share


def unit_resources(device: str, threads: int) -> dict[str, int]:
    """What a unit asks a Ray cluster for: its intra-op threads as CPUs and, when cells run on
    CUDA, one GPU (so a node runs as many units at once as it has GPUs)."""
    return {"num_cpus": threads, "num_gpus": 1 if device.startswith("cuda") else 0}


def cluster_slots(request: dict[str, int], nodes: Sequence[dict[str, float]]) -> int:
    """How many units the nodes (their resources, ``ray.nodes()[i]["Resources"]``) can run at
    once under ``request`` (at least 1: a lost node's units then wait for a slot)."""
    def fits(node: dict[str, float]) -> int:
        counts = [node.get("CPU", 0) // max(1, request["num_cpus"])]
        if request["num_gpus"]:
            counts.append(node.get("GPU", 0) // request["num_gpus"])
        return int(min(counts))

    return max(1, sum(fits(node) for node in nodes))


def check_feasible(request: dict[str, int], nodes: Sequence[dict[str, float]]) -> None:
    """Fail now rather than wait forever: Ray keeps a task that no node can hold pending without
    an error. ``nodes``: the resources of each live node (``ray.nodes()[i]["Resources"]``)."""
    need = {"CPU": request["num_cpus"], "GPU": request["num_gpus"]}
    if any(all(node.get(k, 0) >= v for k, v in need.items()) for node in nodes):
        return
    have = "; ".join(f"{node.get('CPU', 0):g} CPU(s), {node.get('GPU', 0):g} GPU(s)"
                     for node in nodes) or "no live node"
    hint = ("--device cpu (the cluster has no GPU)" if need["GPU"] and not any(
        node.get("GPU", 0) for node in nodes) else "more --workers (a unit asks for this "
        "machine's cores divided by --workers)")
    raise ZooError(f"no node of the Ray cluster can run a unit, which asks for {need['CPU']} "
                   f"CPU(s) and {need['GPU']} GPU(s); its nodes have: {have}. Use {hint}, or add "
                   "a node that has them")


def exit_with_parent(parent: int, every: float = 0.5) -> None:
    """Pool worker initialiser: end this worker within ``every`` seconds of its parent's death.

    A killed ``zoo bench`` would otherwise leave its workers training (and holding their CPU) for
    the rest of their unit. A thread that polls the parent's pid is used rather than Linux's
    ``PR_SET_PDEATHSIG``, which fires when the *thread* that started the worker ends, not the
    process, and exists on Linux only. Between two polls, every write of the worker checks the
    parent first (:func:`zoo.io.set_write_check`): the parent's lock on the results folder dies
    with it, so a write after that could meet the next writer's.
    """
    def alive() -> None:
        if os.getppid() != parent:
            os._exit(1)

    def watch() -> None:
        while True:
            alive()
            time.sleep(every)

    set_write_check(alive)  # and no write once the parent (the lock's holder) is gone
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class Pace:
    """Groups of consecutive units sized to take about ``seconds`` each, from the time per unit
    of the last group that finished; the first group is one unit. Groups also stay small enough
    to keep ``workers`` busy to the end of the queue."""

    def __init__(self, units: Sequence[Sequence[Cell]], workers: int = 1,
                 seconds: float = GROUP_SECONDS, largest: int = MAX_GROUP):
        self.queue = deque(units)
        self.workers, self.seconds, self.largest = workers, seconds, largest
        self.per_unit = math.inf

    def take(self) -> list[Sequence[Cell]]:
        """The next group (empty when the queue is)."""
        share = math.ceil(len(self.queue) / self.workers)
        size = 1 if math.isinf(self.per_unit) else int(self.seconds / max(self.per_unit, 1e-6))
        return [self.queue.popleft() for _ in range(max(1, min(size, share, self.largest)))
                if self.queue]

    def record(self, units: int, seconds: float) -> None:
        """A group of ``units`` units took ``seconds``."""
        self.per_unit = seconds / max(units, 1)


class LocalExecutor:
    """Groups of units (:class:`Pace`) one after another in this process (``workers=1``) or in
    a pool of processes, one group per worker at a time."""

    def __init__(self, root: Path, data_dir: str | None, device: str, workers: int = 1,
                 progress: bool = True, datasets: DatasetCache | None = None,
                 threads: int | str = DEFAULT_THREADS, *, registry: Registry):
        """``registry``: the plugins of this process, for units run in it (``workers=1``); a
        worker process of the pool loads its own."""
        self.root, self.data_dir, self.device = root, data_dir, device
        self.workers, self.progress, self.datasets = max(1, workers), progress, datasets
        self.threads = resolve_threads(threads, self.workers)
        self.registry = registry

    def run(self, units: Sequence[Sequence[Cell]], on_done: OnDone, work: Work = run_units
            ) -> None:
        threads = self.threads
        pace = Pace(units, self.workers)
        if self.workers == 1:
            while group := pace.take():
                start = time.perf_counter()
                outcomes = work(group, self.root, self.data_dir, self.device, threads,
                                self.progress, self.datasets, registry=self.registry)
                pace.record(len(group), time.perf_counter() - start)
                on_done(outcomes)
            return
        context = multiprocessing.get_context("spawn")
        with for_workers(), ProcessPoolExecutor(self.workers, mp_context=context,
                                                initializer=exit_with_parent,
                                                initargs=(os.getpid(),)) as pool:
            running: dict[Future, tuple[int, float]] = {}

            def submit() -> None:
                group = pace.take()
                if group:
                    future = pool.submit(run_units_in_worker, [list(u) for u in group], self.root,
                                         self.data_dir, self.device, threads, False, work=work)
                    running[future] = (len(group), time.perf_counter())

            try:
                for _ in range(self.workers):
                    submit()
                while running:
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in finished:
                        size, start = running.pop(future)
                        pace.record(size, time.perf_counter() - start)
                        submit()
                        on_done(future.result())
            except BaseException:
                for future in running:
                    future.cancel()
                raise


def connect(ray, address: str) -> None:
    """Join the Ray cluster at ``address`` as its driver, or say why not and what to check."""
    try:
        ray.init(address=address, log_to_driver=True)
    except ConnectionError as exc:
        raise ZooError(
            f"--address {address}: cannot join the Ray cluster ({exc.__cause__ or exc}). Check "
            f"that `ray status --address {address}` works from this machine; a cluster started "
            "with token authentication (Ray's default once ~/.ray/auth_token exists) needs "
            "RAY_AUTH_MODE=token and the cluster's token (RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH) "
            "here too") from exc


class RayExecutor:
    """Units as Ray tasks (one GPU each when cells run on CUDA), on a local Ray or at ``address``."""

    def __init__(self, root: Path, data_dir: str | None, device: str, workers: int = 1,
                 address: str | None = None, threads: int | str = DEFAULT_THREADS):
        self.root, self.data_dir, self.device = root, data_dir, device
        self.workers, self.address = max(1, workers), address
        self.threads = resolve_threads(threads, self.workers)

    def run(self, units: Sequence[Sequence[Cell]], on_done: OnDone, work: Work = run_units
            ) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ZooError("--executor ray needs Ray: pip install 'bayes-meta-zoo[ray]'") from exc
        if self.device.startswith("cuda:"):
            raise ZooError(f"--device {self.device}: with --executor ray give --device cuda; Ray "
                           "gives each unit a GPU of its own (CUDA_VISIBLE_DEVICES)")
        threads = self.threads
        started = not ray.is_initialized()
        reaper = None
        if started:
            if self.address:
                connect(ray, self.address)
            else:
                # "local": a new Ray of our own, never a cluster some earlier `ray start` left;
                # its processes end with this one even when it is killed (zoo.runner.reaper)
                import psutil

                before = {p.pid for p in psutil.Process().children()}
                ray.init(address="local", num_cpus=threads * self.workers,
                         include_dashboard=False, log_to_driver=True)
                reaper = reap_with_parent([p.pid for p in psutil.Process().children()
                                           if p.pid not in before])
        marker = shared_folder_marker(self.root)
        try:
            request = unit_resources(self.device, threads)
            check_feasible(request, [n["Resources"] for n in ray.nodes() if n["Alive"]])
            task = ray.remote(**request, max_retries=RAY_RETRIES, retry_exceptions=False,
                              runtime_env={"env_vars": {VARIABLE: worker_tunables()}}
                              )(run_units_on_node)
            log.info("Ray cluster: %s; each unit asks for %d CPU(s) and %d GPU(s)",
                     ray.cluster_resources(), request["num_cpus"], request["num_gpus"])

            def slots() -> int:  # nodes may join or leave while the suite runs
                return cluster_slots(request, [n["Resources"] for n in ray.nodes() if n["Alive"]])

            pace = Pace(units, slots())
            running: dict[Any, tuple[int, float]] = {}  # a group's task: (units, start)

            def submit() -> None:
                group = pace.take()
                if group:
                    ref = task.remote(marker, [list(u) for u in group], self.root, self.data_dir,
                                      self.device, threads, False, work=work)
                    running[ref] = (len(group), time.perf_counter())

            for _ in range(pace.workers):
                submit()
            while running:  # results arrive from whichever node ran them
                (ready,), _ = ray.wait(list(running), num_returns=1)
                size, start = running.pop(ready)
                try:
                    outcomes = ray.get(ready)
                except ray.exceptions.RayTaskError as exc:
                    if isinstance(exc.cause, ZooError):
                        raise exc.cause from None
                    raise
                pace.record(size, time.perf_counter() - start)
                pace.workers = slots()
                while len(running) < pace.workers and pace.queue:
                    submit()
                on_done(outcomes)
        finally:
            marker.unlink(missing_ok=True)
            if started:
                ray.shutdown()
            if reaper is not None:
                reaper.terminate()
                reaper.wait()
