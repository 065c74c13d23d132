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
    Errors name the file, and tell a well-formed pickle that is refused (crafted, or not the
    zoo's) from bytes that are no pickle at all (corrupt, truncated)."""
    import pickle

    import torch

    path = Path(path)
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except OSError as exc:
        raise ZooError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:
        if isinstance(exc, pickle.UnpicklingError) and _whole_pickle(path):
            raise ZooError(f"{path}: refused, it holds Python objects that no zoo file holds "
                           "(nothing in it was run); load only files the zoo wrote") from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        detail = ("its bytes are neither a pickle nor a torch archive"  # torch's text would
                  if isinstance(exc, pickle.UnpicklingError)              # advise an unsafe load
                  else f"{type(exc).__name__}: {first}")
        raise ZooError(f"{path}: cannot be read ({detail}); it is "
                       "truncated or corrupt: delete it (a checkpoint is rewritten by training "
                       "again)") from None


def _whole_pickle(path: Path) -> bool:
    """Whether ``path`` holds a well-formed pickle, plain or as torch's zip archive holds it:
    its opcodes read to the end without an error (read, never run, by :mod:`pickletools`).
    One the loader refuses is then crafted or foreign, not corrupt."""
    import pickletools
    import zipfile

    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                member = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
                data = archive.read(member)
        else:
            data = path.read_bytes()
        positions = [position for _opcode, _arg, position in pickletools.genops(data)]
        return bool(positions) and positions[-1] == len(data) - 1  # STOP is the last byte
    except Exception:
        return False
