"""Getting data files: find them in the data directory, else download them, always checksummed.

A download goes to ``<name>.part`` beside its destination, under a lock (in the cache directory, not
among the data) so that two processes never write the same part file; a failed download leaves no
directory it created empty behind. An interrupted download leaves only the part file; the next attempt
asks the server for the rest (an HTTP range request) and starts over when the server cannot resume.
The finished file is checked against its published digest and only then renamed into place, so a
file under its real name is always complete and verified. A server that answers with an HTML page
(a login, quota or "file moved" page) instead of the archive is refused.

Archives are extracted without trusting their member names: absolute paths, ``..`` components and
links are refused, and members land in a temporary directory that is renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from filelock import FileLock

from zoo.errors import ChecksumError, DataMissingError, ZooError

log = logging.getLogger(__name__)

CHUNK = 1 << 20
TIMEOUT_S = 60
HTML_MARKERS = (b"<!doctype html", b"<html", b"<head", b"<?xml")


@dataclass(frozen=True)
class Resource:
    """One published file: its name, where it comes from and its digest (sha256 or md5)."""

    filename: str
    url: str | None = None
    sha256: str | None = None
    md5: str | None = None

    def __post_init__(self) -> None:
        if self.url is not None and self.sha256 is None and self.md5 is None:
            raise ValueError(f"resource {self.filename!r} has a URL but no checksum; "
                             "every download must be verified")

    @property
    def digest(self) -> tuple[str, str] | None:
        """``(algorithm, expected hex digest)``, sha256 preferred."""
        if self.sha256:
            return "sha256", self.sha256.lower()
        if self.md5:
            return "md5", self.md5.lower()
        return None


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of a file, read in chunks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: Path, resource: Resource) -> None:
    """Raise :class:`ChecksumError` (both digests, and what to do) unless ``path`` is intact."""
    if resource.digest is None:
        return
    algorithm, expected = resource.digest
    actual = file_digest(path, algorithm)
    if actual != expected:
        source = f" from {resource.url}" if resource.url else ""
        raise ChecksumError(
            f"{path} has {algorithm} {actual}, but the published {algorithm} of "
            f"{resource.filename} is {expected}: the file is corrupt, truncated or a different "
            f"version. Delete it and run again to download it afresh, or replace it with an "
            f"intact copy{source}.")


def missing(what: str, where: Path, dataset: str, how: str,
            layout: str | None = None) -> DataMissingError:
    """The error for data that is not on disk: name it, and say how to get it there.

    ``layout`` is where the files go relative to a data directory (default: ``where``'s name).
    """
    return DataMissingError(
        f"data set {dataset!r} needs {what}, which is not in {where}. {how} Or point the zoo at a "
        "directory that holds it: --data-dir DIR (or the ZOO_DATA environment variable); files "
        f"go in DIR/{layout or where.name}/.")


def ensure_file(resource: Resource, directory: Path, *, dataset: str, download: bool,
                layout: str | None = None) -> Path:
    """``directory/filename``, verified; downloaded first if it is missing and ``download``."""
    path = directory / resource.filename
    if path.exists():
        verify(path, resource)
        return path
    if resource.url is None:
        raise missing(resource.filename, directory, dataset,
                      "It has no download source the zoo can verify; put it there by hand.", layout)
    if not download:
        raise missing(resource.filename, directory, dataset,
                      f"Download it from {resource.url} into that directory, or allow downloads "
                      "(download=True, the default).", layout)
    return fetch(resource, path)


def _looks_like_html(head: bytes) -> bool:
    return head.lstrip().lower().startswith(HTML_MARKERS)


def fetch(resource: Resource, path: Path) -> Path:
    """Download ``resource`` to ``path`` (resuming a ``.part`` file), verify, rename into place."""
    if resource.url is None:
        raise ValueError(f"{resource.filename} has no URL")
    created = [d for d in [path.parent, *path.parent.parents] if not d.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _fetch_locked(resource, path)
    except BaseException:
        for d in created:  # innermost first; only what is still empty
            with contextlib.suppress(OSError):
                d.rmdir()
        raise


def _lock(path: Path) -> FileLock:
    from zoo.paths import cache_root

    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    locks = cache_root() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    return FileLock(str(locks / f"{path.name}-{key}.lock"))


def _fetch_locked(resource: Resource, path: Path) -> Path:
    part = path.with_name(path.name + ".part")
    with _lock(path):
        if path.exists():  # another process finished it while we waited for the lock
            verify(path, resource)
            return path
        log.info("downloading %s to %s", resource.url, path)
        _download(resource.url, part)
        with open(part, "rb") as f:
            head = f.read(512)
        if _looks_like_html(head):
            part.unlink()
            raise ZooError(
                f"{resource.url} served an HTML page instead of {resource.filename} (a login, "
                f"quota or moved-file page). Download the file by hand in a browser and put it at "
                f"{path}.")
        try:
            verify(part, resource)
        except ChecksumError:
            part.unlink()
            raise
        os.replace(part, path)
    return path


def _download(url: str, part: Path) -> None:
    """Write ``url`` into ``part``, continuing from its current size when the server allows it."""
    offset = part.stat().st_size if part.exists() else 0
    target = part.with_name(part.name.removesuffix(".part"))
    request = urllib.request.Request(url, headers={"User-Agent": "zoo-data/1"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # range past the end: the part file is not trustworthy
            part.unlink()
            return _download(url, part)
        raise ZooError(f"downloading {url} failed: HTTP {exc.code} {exc.reason}. Check the "
                       f"address and your network, or download the file by hand to {target}."
                       ) from exc
    except urllib.error.URLError as exc:
        raise ZooError(f"cannot reach {url}: {exc.reason}. Without a network, download the file "
                       f"elsewhere and put it at {target}.") from exc
    with response:
        resumed = offset and response.status == 206
        content_type = response.headers.get("Content-Type", "")
        if content_type.startswith("text/html"):
            raise ZooError(f"{url} served an HTML page ({content_type}) instead of the file. "
                           f"Download it by hand in a browser and put it at {target}.")
        expected = response.headers.get("Content-Length")
        with open(part, "ab" if resumed else "wb") as out:
            start = out.tell()
            try:
                shutil.copyfileobj(response, out, CHUNK)
                broken = expected is not None and out.tell() - start < int(expected)
                reason = f"{out.tell() - start} of {expected} bytes arrived"
            except (OSError, http.client.HTTPException) as exc:
                broken, reason = True, repr(exc)
            out.flush()
            os.fsync(out.fileno())
            if broken:
                raise ZooError(f"the download of {url} broke off after {out.tell()} bytes "
                               f"({reason}); run the same command again to resume it")


def _safe_member(name: str, dest: Path) -> Path:
    """Where an archive member may go: inside ``dest``, or a :class:`ZooError`."""
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts or (pure.parts and ":" in pure.parts[0]):
        raise ZooError(f"archive member {name!r} would be written outside {dest}; refusing to "
                       "extract this archive (it is corrupt or malicious)")
    return dest.joinpath(*pure.parts)


def extract(archive: Path, dest: Path) -> Path:
    """Extract a zip or tar archive into ``dest`` safely; return ``dest``.

    Members are checked first, extracted into a temporary sibling directory and then moved into
    ``dest`` one top-level entry at a time, so an interrupted extraction leaves no half entry.
    """
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest))
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    _safe_member(info.filename, tmp)
                    if (info.external_attr >> 16) & 0o170000 == 0o120000:
                        raise ZooError(f"archive {archive} holds a symbolic link "
                                       f"{info.filename!r}; refusing to extract it")
                zf.extractall(tmp)
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive) as tf:
                for member in tf.getmembers():
                    _safe_member(member.name, tmp)
                    if not (member.isfile() or member.isdir()):
                        raise ZooError(f"archive {archive} holds {member.name!r}, which is not a "
                                       "plain file or directory; refusing to extract it")
                tf.extractall(tmp, filter="data")
        else:
            raise ZooError(f"{archive} is neither a zip nor a tar archive; delete it and download "
                           "it again")
        for entry in sorted(tmp.iterdir()):
            target = dest / entry.name
            if target.exists():
                log.info("keeping existing %s", target)
                continue
            os.replace(entry, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
