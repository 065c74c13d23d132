"""Guards for every test module (core and plugins): global torch state must not leak."""

import pytest
import torch


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
