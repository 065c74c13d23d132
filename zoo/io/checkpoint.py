"""The one way the zoo reads a tensor file back: weights only, for a file is data, never code."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from zoo.errors import ZooError


def load_checkpoint(path: str | os.PathLike, device: str = "cpu") -> Any:
    """``torch.load`` of a file the zoo wrote, with ``weights_only=True``: tensors, numbers,
    strings and containers of them. Anything else in the file is refused before it runs (a
    pickle can name any callable, so a crafted ``model.pt`` would otherwise run code on load).
    Errors name the file."""
    import pickle

    import torch

    path = Path(path)
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" in str(exc) or "Unsupported" in str(exc):
            raise ZooError(f"{path}: refused, it holds Python objects that no zoo file holds "
                           "(nothing in it was run); load only files the zoo wrote") from None
        raise ZooError(f"{path}: cannot be read ({exc}); it is truncated or corrupt: delete it "
                       "(a checkpoint is rewritten by training again)") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise ZooError(f"{path}: cannot be read ({type(exc).__name__}: {exc}); it is truncated "
                       "or corrupt: delete it (a checkpoint is rewritten by training again)"
                       ) from None
