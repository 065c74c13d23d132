"""Checksummed, atomic, resumable downloads and safe extraction, against a loopback HTTP server."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from zoo.data.download import Resource, ensure_file, extract, fetch
from zoo.errors import ChecksumError, DataMissingError, ZooError

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB, not HTML
HTML = b"<!DOCTYPE html><html><body>Please sign in</body></html>"


class Handler(BaseHTTPRequestHandler):
    """Routes: /file.bin (honours Range), /norange.bin (ignores it), /cut.bin (breaks off on the
    first request), /page.bin (HTML as text/html), /disguised.bin (HTML as octet-stream)."""

    ranges: list[str | None] = []
    cut_done = False

    def log_message(self, *args) -> None:
        pass

    def _send(self, body: bytes, status: int = 200, ctype: str = "application/octet-stream",
              length: int | None = None, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        rng = self.headers.get("Range")
        Handler.ranges.append(rng)
        if self.path == "/file.bin":
            if rng:
                start = int(rng.split("=")[1].rstrip("-"))
                self._send(PAYLOAD[start:], 206, extra={
                    "Content-Range": f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}"})
            else:
                self._send(PAYLOAD)
        elif self.path == "/norange.bin":
            self._send(PAYLOAD)
        elif self.path == "/cut.bin":
            if not Handler.cut_done:
                Handler.cut_done = True
                self._send(PAYLOAD[: len(PAYLOAD) // 3], length=len(PAYLOAD))
                self.close_connection = True
            elif rng:
                start = int(rng.split("=")[1].rstrip("-"))
                self._send(PAYLOAD[start:], 206)
            else:
                self._send(PAYLOAD)
        elif self.path == "/page.bin":
            self._send(HTML, ctype="text/html; charset=utf-8")
        elif self.path == "/disguised.bin":
            self._send(HTML)
        else:
            self._send(b"not found", 404, ctype="text/plain")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


SHA256 = hashlib.sha256(PAYLOAD).hexdigest()
MD5 = hashlib.md5(PAYLOAD).hexdigest()


@pytest.mark.parametrize("digest", [{"sha256": SHA256}, {"md5": MD5}])
def test_download_is_verified_and_renamed_into_place(server, tmp_path, digest):
    r = Resource("file.bin", f"{server}/file.bin", **digest)
    path = ensure_file(r, tmp_path, dataset="toy", download=True)
    assert path == tmp_path / "file.bin" and path.read_bytes() == PAYLOAD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.bin"]  # no lock file here
    assert ensure_file(r, tmp_path, dataset="toy", download=False) == path  # found, not fetched


def test_a_part_file_is_resumed_with_a_range_request(server, tmp_path):
    (tmp_path / "file.bin.part").write_bytes(PAYLOAD[:1000])
    Handler.ranges.clear()
    fetch(Resource("file.bin", f"{server}/file.bin", sha256=SHA256), tmp_path / "file.bin")
    assert Handler.ranges == ["bytes=1000-"]
    assert (tmp_path / "file.bin").read_bytes() == PAYLOAD
    assert not (tmp_path / "file.bin.part").exists()


def test_a_server_that_cannot_resume_restarts_cleanly(server, tmp_path):
    (tmp_path / "norange.bin.part").write_bytes(b"stale bytes of another version")
    fetch(Resource("norange.bin", f"{server}/norange.bin", sha256=SHA256), tmp_path / "norange.bin")
    assert (tmp_path / "norange.bin").read_bytes() == PAYLOAD


def test_a_broken_download_leaves_only_a_part_file_and_resumes(server, tmp_path):
    r = Resource("cut.bin", f"{server}/cut.bin", sha256=SHA256)
    with pytest.raises(ZooError, match="run the same command again to resume"):
        fetch(r, tmp_path / "cut.bin")
    assert not (tmp_path / "cut.bin").exists()
    assert 0 < (tmp_path / "cut.bin.part").stat().st_size < len(PAYLOAD)
    fetch(r, tmp_path / "cut.bin")
    assert (tmp_path / "cut.bin").read_bytes() == PAYLOAD


@pytest.mark.parametrize("route", ["page.bin", "disguised.bin"])
def test_an_html_page_instead_of_the_archive_is_refused(server, tmp_path, route):
    r = Resource("data.zip", f"{server}/{route}", sha256=SHA256)
    with pytest.raises(ZooError, match="HTML page"):
        fetch(r, tmp_path / "data.zip")
    assert not (tmp_path / "data.zip").exists() and not (tmp_path / "data.zip.part").exists()


def test_checksum_mismatch_names_both_digests_and_keeps_nothing(server, tmp_path):
    wrong = "0" * 64
    with pytest.raises(ChecksumError) as err:
        fetch(Resource("file.bin", f"{server}/file.bin", sha256=wrong), tmp_path / "file.bin")
    assert SHA256 in str(err.value) and wrong in str(err.value)
    assert "download it afresh" in str(err.value)
    assert not (tmp_path / "file.bin").exists() and not (tmp_path / "file.bin.part").exists()


def test_a_corrupt_file_in_the_data_dir_is_reported(tmp_path):
    (tmp_path / "file.bin").write_bytes(PAYLOAD[:-1])
    with pytest.raises(ChecksumError, match="md5") as err:
        ensure_file(Resource("file.bin", "http://127.0.0.1:9/file.bin", md5=MD5), tmp_path,
                    dataset="toy", download=True)
    assert MD5 in str(err.value) and hashlib.md5(PAYLOAD[:-1]).hexdigest() in str(err.value)


def test_missing_file_without_download_names_file_url_and_data_dir(tmp_path):
    r = Resource("file.bin", "http://127.0.0.1:9/file.bin", sha256=SHA256)
    with pytest.raises(DataMissingError) as err:
        ensure_file(r, tmp_path / "toy", dataset="toy", download=False)
    msg = str(err.value)
    assert "file.bin" in msg and r.url in msg and "--data-dir" in msg and "ZOO_DATA" in msg


def test_a_url_without_a_checksum_is_rejected():
    with pytest.raises(ValueError, match="no checksum"):
        Resource("file.bin", "http://127.0.0.1:9/file.bin")


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_extract_zip_and_tar(tmp_path):
    (tmp_path / "a.zip").write_bytes(_zip({"top/x/1.txt": b"one", "top/2.txt": b"two"}))
    extract(tmp_path / "a.zip", tmp_path / "out")
    assert (tmp_path / "out/top/x/1.txt").read_bytes() == b"one"
    with tarfile.open(tmp_path / "b.tgz", "w:gz") as tf:
        tf.add(tmp_path / "out/top", arcname="tartop")
    extract(tmp_path / "b.tgz", tmp_path / "out2")
    assert (tmp_path / "out2/tartop/2.txt").read_bytes() == b"two"
    assert [p.name for p in (tmp_path / "out2").iterdir()] == ["tartop"]  # no temp dir left


@pytest.mark.parametrize("evil", ["../escape.txt", "/abs/escape.txt", "ok/../../escape.txt"])
def test_extract_refuses_path_traversal(tmp_path, evil):
    (tmp_path / "bad.zip").write_bytes(_zip({"fine.txt": b"x", evil: b"boom"}))
    with pytest.raises(ZooError, match="outside"):
        extract(tmp_path / "bad.zip", tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()
    assert list((tmp_path / "out").iterdir()) == []


def test_extract_refuses_links_in_tar(tmp_path):
    with tarfile.open(tmp_path / "link.tar", "w") as tf:
        info = tarfile.TarInfo("top/link")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(info)
    with pytest.raises(ZooError, match="not a plain file"):
        extract(tmp_path / "link.tar", tmp_path / "out")


def test_extract_refuses_what_is_not_an_archive(tmp_path):
    (tmp_path / "x.zip").write_bytes(HTML)
    with pytest.raises(ZooError, match="neither a zip nor a tar"):
        extract(tmp_path / "x.zip", tmp_path / "out")


def test_module_has_no_network_default(tmp_path):
    """A resource without a URL is never downloaded; the error says to put it there by hand."""
    with pytest.raises(DataMissingError, match="by hand"):
        ensure_file(Resource("runs.zip"), Path(tmp_path), dataset="toy", download=True)


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/file.bin", "{server}/missing.bin"])
def test_a_failed_download_names_the_target_and_leaves_nothing_behind(server, tmp_path,
                                                                        monkeypatch, url):
    """A failed download leaves no --data-dir it created and no stray .lock behind, and its
    message says where the file should go."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    data_dir = tmp_path / "data" / "omniglot"
    r = Resource("file.bin", url.format(server=server), sha256=SHA256)
    with pytest.raises(ZooError) as info:
        ensure_file(r, data_dir, dataset="toy", download=True)
    assert str(data_dir / "file.bin") in str(info.value)
    assert not (tmp_path / "data").exists()
