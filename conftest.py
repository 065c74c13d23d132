"""For every test module (core and plugins): torch's threads fit the test processes on this machine,
and global torch state must not leak."""

import os

import pytest
import torch

# Torch threads of one test process: at most 2, and the cores shared among the processes of a
# parallel run (`pytest -n N`, as `make test` runs): more threads than cores slow every process down.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, min(2, (os.cpu_count() or 1) // WORKERS))
torch.set_num_threads(THREADS)
if WORKERS > 1:
    # the processes tests start (commands, suites and their workers) share the cores too
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))


@pytest.fixture(autouse=True)
def _default_dtype_is_restored(request):
    """A module that sets torch's default dtype (at import or in a test) without restoring it
    changes the dtype of every later test's tensors; fail where that happens, not far away."""
    before = torch.get_default_dtype()
    assert before == torch.float32, (
        f"the default dtype is {before} before {request.node.nodeid}: a module set it at import "
        "time; use a fixture that restores it")
    yield
    after = torch.get_default_dtype()
    assert after == before, f"{request.node.nodeid} left the default dtype at {after}"
