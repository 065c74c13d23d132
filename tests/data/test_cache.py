"""A truncated or bit-flipped derived cache (decoded data sets, rendered glyphs) is neither used
silently nor a traceback without its path: a cache is verified against the digest stored beside
it and rebuilt, with a warning that names it, when it does not match."""

from __future__ import annotations

import logging

import torch

from zoo.data.base import cached_blob


def build_counter():
    calls = []

    def build():
        calls.append(1)
        return {"x": torch.arange(1000, dtype=torch.float32), "names": ["a", "b"]}

    return build, calls


def test_a_cache_is_built_once_then_read(tmp_path):
    build, calls = build_counter()
    first = cached_blob(tmp_path / "c.pt", build)
    second = cached_blob(tmp_path / "c.pt", build)
    assert len(calls) == 1 and torch.equal(first["x"], second["x"])


def test_flipped_bytes_or_a_truncated_cache_are_rebuilt_and_named(tmp_path, caplog):
    path = tmp_path / "c.pt"
    build, calls = build_counter()
    cached_blob(path, build)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte inside the tensor data: still loads
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        blob = cached_blob(path, build)
    assert len(calls) == 2 and torch.equal(blob["x"], torch.arange(1000, dtype=torch.float32))
    assert str(path) in caplog.text and "rebuilding" in caplog.text
    path.write_bytes(path.read_bytes()[:100])  # truncated
    cached_blob(path, build)
    assert len(calls) == 3
    (tmp_path / "c.pt.sha256").unlink()  # written by an older zoo: used, and its digest written
    cached_blob(path, build)
    assert len(calls) == 3 and (tmp_path / "c.pt.sha256").exists()
