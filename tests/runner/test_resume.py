"""Resume: a suite killed midway (SIGKILL, in a subprocess) and re-run ends with the same results
as one that never stopped; evaluation resumes after the last recorded episode; Ray == local."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zoo.runner.bench import run_suite

from .conftest import TINY, tiny_suite

LONGER = {"train_episodes": 120, "checkpoint_every": 5, "val_every": 40}
# a checkpoint every 5 episodes, however short they are: the run is killed after the first
RUN = ("import json, sys; from pathlib import Path; from zoo.runner.bench import run_suite; "
       "from zoo.plugins import registry; from zoo.runner.suite import suite_from_dict; "
       "import zoo.runner.train as train; "
       "train.CHECKPOINT_SECONDS = 0; "
       "run_suite(suite_from_dict('tiny', json.loads(sys.argv[1]), registry=registry()), "
       "out=Path(sys.argv[2]), "
       "device='cpu', progress=False)")


def results(out: Path) -> dict[str, dict]:
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    return {r["config_hash"]: r for r in lines}


def episodes(out: Path, cell_hash: str) -> list[dict]:
    lines = (out / "cells" / cell_hash / "episodes.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k != "seconds"} for x in lines]


def assert_same(a: Path, b: Path) -> None:
    ra, rb = results(a), results(b)
    assert set(ra) == set(rb)
    for h in ra:
        for key in ("accuracy", "ci95", "ece", "mce", "nll", "brier", "temperature",
                    "ece_calibrated", "val_accuracy", "skipped_steps"):
            assert ra[h][key] == rb[h][key], key
        assert episodes(a, h) == episodes(b, h)
        curve = [json.loads((d / "cells" / h / "training.json").read_text())["curve"]
                 for d in (a, b)]
        assert curve[0] == curve[1]


@pytest.mark.slow
def test_killed_suite_resumes_and_loses_nothing(tmp_path, monkeypatch):
    # one intra-op thread in all three runs (the killed one runs in a subprocess under it): float
    # reductions split over other thread counts round differently
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    reference = tmp_path / "reference"
    run_suite(tiny_suite(**LONGER), out=reference, device="cpu", progress=False)

    out = tmp_path / "killed"
    raw = json.dumps({"suite": {**TINY["suite"], **LONGER}})
    proc = subprocess.Popen([sys.executable, "-c", RUN, raw, str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        while not list(out.glob("train/*/checkpoint.pt")):
            assert proc.poll() is None, "the suite ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    checkpoint = next(out.glob("train/*/checkpoint.pt"))
    assert not list(out.glob("cells/*/done")), "killed too late to test anything"
    import torch

    stopped_at = torch.load(checkpoint, weights_only=True)["state"]["episode"]
    assert 0 < stopped_at < LONGER["train_episodes"]

    outcome = run_suite(tiny_suite(**LONGER), out=out, device="cpu", progress=False)
    assert len(outcome.finished) == 2
    assert_same(reference, out)


def test_evaluation_resumes_after_the_last_recorded_episode(tmp_path):
    reference = tmp_path / "reference"
    run_suite(tiny_suite(), out=reference, device="cpu", progress=False)
    out = tmp_path / "partial"
    shutil.copytree(reference, out)
    for cell in (out / "cells").iterdir():  # as if killed after two test episodes
        lines = (cell / "episodes.jsonl").read_text().splitlines(keepends=True)
        (cell / "episodes.jsonl").write_text("".join(lines[:2]))
        for name in ("done", "result.json"):
            (cell / name).unlink()
    (out / "results.jsonl").unlink()
    outcome = run_suite(tiny_suite(), out=out, device="cpu", progress=False)
    assert len(outcome.finished) == 2
    for h in results(out):  # the first two records were kept, not recomputed
        kept = (reference / "cells" / h / "episodes.jsonl").read_text().splitlines()[:2]
        assert (out / "cells" / h / "episodes.jsonl").read_text().splitlines()[:2] == kept
    assert_same(reference, out)


@pytest.mark.slow
def test_ray_executor_gives_the_same_results_as_local(tmp_path, ray_alone):
    local, ray_out = tmp_path / "local", tmp_path / "ray"
    suite = tiny_suite(shots=[1, 2])
    run_suite(suite, out=local, device="cpu", executor="local", workers=2, progress=False)
    outcome = run_suite(suite, out=ray_out, device="cpu", executor="ray", workers=2,
                        progress=False)
    assert len(outcome.finished) == 4 and not outcome.failed
    assert_same(local, ray_out)


def test_a_training_shorter_than_checkpoint_seconds_writes_only_its_model(tmp_path, monkeypatch):
    # a checkpoint (and best.pt, written with it) would cost more than a training of milliseconds
    import zoo.runner.train as train

    monkeypatch.setattr(train, "CHECKPOINT_SECONDS", 1e9)
    outcome = run_suite(tiny_suite(checkpoint_every=1), out=tmp_path / "out", device="cpu",
                        progress=False)
    assert len(outcome.finished) == 2
    (run,) = (tmp_path / "out" / "train").iterdir()
    assert {p.name for p in run.iterdir()} == {"config.json", "model.pt", "training.json", "done"}
