"""The Omniglot family: minimal background sets, Lake's one-shot runs, and the full set."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from zoo import EpisodeSampler
from zoo.data import omniglot, omniglot_minimal
from zoo.data.download import Resource, file_digest
from zoo.data.omniglot_lake_runs import load_omniglot_lake_runs
from zoo.errors import ChecksumError, DataMissingError, ZooError


def _alphabets(ds, split):
    return {ds.class_names[c].split("/")[0] for c in ds.splits[split]}


# -- omniglot-minimal --------------------------------------------------------------------------


def test_minimal_protocol_trains_on_small1_and_holds_out_small2_only_alphabets(minimal,
                                                                               real_minimal):
    assert _alphabets(minimal, "train") == {"Balinese", "Early_Aramaic", "Greek", "Korean", "Latin"}
    assert _alphabets(minimal, "val") == {"Sanskrit"}
    assert _alphabets(minimal, "test") == {"Japanese_(katakana)", "Tagalog"}
    assert all(len(minimal.splits[s]) >= 20 for s in ("val", "test"))
    if real_minimal:  # the published archives' class counts
        assert minimal.describe()["classes"] == {"train": 136, "val": 42, "test": 64}
        assert set(minimal.class_sizes.tolist()) == {20}


def test_minimal_images_are_28px_bright_strokes_on_dark(minimal):
    ep = EpisodeSampler(minimal, "test", way=20, shot=1, query=2, seed=0)[3]
    assert ep.support_x.shape == (20, 1, 28, 28) and ep.support_x.dtype == torch.float32
    assert float(ep.support_x.min()) == 0.0 and float(ep.support_x.max()) == 1.0
    assert float(ep.support_x.mean()) < 0.3  # mostly dark ground
    assert ep.query_y.tolist() == [c for c in range(20) for _ in range(2)]


def test_minimal_mirror_protocol(minimal_data_dir, zoo_cache, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(zoo_cache))
    ds = omniglot_minimal.load_omniglot_minimal(minimal_data_dir, download=False,
                                                background="small2")
    assert _alphabets(ds, "train") == {"Greek", "Japanese_(katakana)", "Latin", "Sanskrit",
                                       "Tagalog"}
    assert _alphabets(ds, "val") == {"Korean"}
    assert _alphabets(ds, "test") == {"Balinese", "Early_Aramaic"}
    with pytest.raises(ZooError, match="small1' or 'small2"):
        omniglot_minimal.load_omniglot_minimal(minimal_data_dir, background="small3")


def test_minimal_augmentation_rotates_and_distorts_training_characters_only(
        minimal, minimal_data_dir, zoo_cache, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(zoo_cache))
    ds = omniglot_minimal.load_omniglot_minimal(minimal_data_dir, download=False,
                                                rotations=True, distortions=2)
    assert len(ds.splits["train"]) == 4 * len(minimal.splits["train"])
    for split in ("val", "test"):  # held-out characters upright, as Lake's runs are
        assert len(ds.splits[split]) == len(minimal.splits[split])
        assert all(ds.class_names[c].endswith("/rot000") for c in ds.splits[split])
        same = EpisodeSampler(ds, split, way=5, shot=1, query=2, seed=3)[0]
        plain = EpisodeSampler(minimal, split, way=5, shot=1, query=2, seed=3)[0]
        assert torch.equal(same.support_x, plain.support_x)  # the same test episodes
    first = ds.splits["train"][0]
    assert int(ds.class_sizes[first]) == 3 * int(minimal.class_sizes[0])  # 2 affine copies
    upright = ds.gather(torch.tensor([first]), torch.tensor([0]))
    quarter = ds.gather(torch.tensor([first + 1]), torch.tensor([0]))
    assert torch.equal(quarter, torch.rot90(upright, 1, dims=(-2, -1)))
    copy = ds.gather(torch.tensor([first]), torch.tensor([int(minimal.class_sizes[0])]))
    assert not torch.equal(copy, upright) and (copy - upright).abs().mean() < 0.3
    with pytest.raises(ZooError, match="distortions"):
        omniglot_minimal.load_omniglot_minimal(minimal_data_dir, distortions=-1)


def test_fresh_distortions_redraw_every_training_episode_from_its_seed(
        minimal, minimal_data_dir, zoo_cache, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(zoo_cache))
    ds = omniglot_minimal.load_omniglot_minimal(minimal_data_dir, download=False,
                                                fresh_distortions=True)
    fresh = EpisodeSampler(ds, "train", way=5, shot=1, query=2, seed=3)
    plain = EpisodeSampler(minimal, "train", way=5, shot=1, query=2, seed=3)
    a, again, upright = fresh[0], fresh[0], plain[0]
    assert a.info["classes"] == upright.info["classes"]  # the same draw of classes and examples
    assert torch.equal(a.support_x, again.support_x)  # a pure function of the episode's seed
    change = (a.support_x - upright.support_x).abs().mean(dim=(1, 2, 3))
    assert bool((change > 0).all()) and float(change.max()) < 0.3  # every image, slightly
    other = EpisodeSampler(ds, "train", way=5, shot=1, query=2, seed=4)[0]
    assert not torch.equal(other.support_x, a.support_x)
    for split in ("val", "test"):  # held-out episodes untouched
        same = EpisodeSampler(ds, split, way=5, shot=1, query=2, seed=3)[0]
        assert torch.equal(same.query_x, EpisodeSampler(minimal, split, 5, 1, 2, seed=3)[0].query_x)
    with pytest.raises(ZooError, match="fresh_distortions"):
        omniglot_minimal.load_omniglot_minimal(minimal_data_dir, fresh_distortions="yes")


CHILD = """
import hashlib, sys, torch
from zoo import EpisodeSampler
from zoo.data.download import Resource
from zoo.data import omniglot_minimal
for key, digest in {digests!r}.items():
    r = omniglot_minimal.RESOURCES[key]
    omniglot_minimal.RESOURCES[key] = Resource(r.filename, r.url, sha256=digest)
ds = omniglot_minimal.load_omniglot_minimal({root!r}, download=False)
h = hashlib.sha256()
for split, index in (("train", 0), ("test", 7)):
    ep = EpisodeSampler(ds, split, way=5, shot=1, query=3, seed=11)[index]
    for t in (ep.support_x, ep.support_y, ep.query_x, ep.query_y):
        h.update(t.contiguous().numpy().tobytes())
print(h.hexdigest())
"""


def test_minimal_episodes_are_bit_identical_in_another_process(minimal, minimal_data_dir,
                                                               zoo_cache):
    import hashlib

    h = hashlib.sha256()
    for split, index in (("train", 0), ("test", 7)):
        ep = EpisodeSampler(minimal, split, way=5, shot=1, query=3, seed=11)[index]
        for t in (ep.support_x, ep.support_y, ep.query_x, ep.query_y):
            h.update(t.contiguous().numpy().tobytes())
    digests = {k: r.sha256 for k, r in omniglot_minimal.RESOURCES.items()}
    code = CHILD.format(digests=digests, root=str(minimal_data_dir))
    env = {**os.environ, "ZOO_CACHE": str(zoo_cache), "PYTHONHASHSEED": "123"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == h.hexdigest()


def test_minimal_checksum_mismatch_and_missing_archive(minimal_data_dir, tmp_path):
    (tmp_path / "omniglot").mkdir()
    src = minimal_data_dir / "omniglot" / "images_background_small1.zip"
    bad = bytearray(src.read_bytes())
    bad[len(bad) // 2] ^= 0xFF
    (tmp_path / "omniglot" / src.name).write_bytes(bytes(bad))
    with pytest.raises(ChecksumError) as err:
        omniglot_minimal.load_omniglot_minimal(tmp_path, download=False)
    assert omniglot_minimal.RESOURCES["small1"].sha256 in str(err.value)
    (tmp_path / "omniglot" / src.name).unlink()
    with pytest.raises(DataMissingError) as err:
        omniglot_minimal.load_omniglot_minimal(tmp_path, download=False)
    msg = str(err.value)
    assert "images_background_small1.zip" in msg and omniglot_minimal.URL in msg
    assert "--data-dir" in msg


def test_an_unreadable_image_in_an_archive_is_named(tmp_path, monkeypatch, draw):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "broken.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("top/Greek/character01/0001_01.png", draw.png_bytes(draw.scan(1)))
        zf.writestr("top/Greek/character01/0001_02.png", b"\x89PNG not really")
    with pytest.raises(ZooError, match=r"cannot read image .*broken\.zip:top/Greek/character01/"
                                       r"0001_02\.png"):
        omniglot.cached_zip(path, None)


# -- omniglot-lake-runs ------------------------------------------------------------------------

WAY, RUNS = 4, 2


def _write_runs(write, draw) -> dict[int, list[int]]:
    """Lake's layout for RUNS runs of WAY classes; test items in a shuffled class order."""
    truth = {}
    rng = np.random.default_rng(0)
    for run in range(1, RUNS + 1):
        order = rng.permutation(WAY) + 1  # item m shows class order[m-1]
        truth[run] = order.tolist()
        lines = []
        for k in range(1, WAY + 1):
            write(f"run{run:02d}/training/class{k:02d}.png", draw.png_bytes(draw.scan(1000 * run + k)))
        for m, k in enumerate(order, start=1):
            write(f"run{run:02d}/test/item{m:02d}.png", draw.png_bytes(draw.scan(1000 * run + int(k))))
            lines.append(f"run{run:02d}/test/item{m:02d}.png run{run:02d}/training/class{k:02d}.png")
        write(f"run{run:02d}/class_labels.txt", ("\n".join(lines) + "\n").encode())
    return truth


@pytest.mark.parametrize("layout", ["zip", "folders"])
def test_lake_runs_are_fixed_one_shot_episodes(tmp_path, layout, draw):
    root = tmp_path / "omniglot"
    root.mkdir()
    if layout == "zip":
        with zipfile.ZipFile(root / "all_runs.zip", "w") as zf:
            truth = _write_runs(zf.writestr, draw)
    else:
        def write(name, data):
            (root / "all_runs" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "all_runs" / name).write_bytes(data)
        truth = _write_runs(write, draw)
    ds = load_omniglot_lake_runs(tmp_path)
    assert ds.fixed_episodes("train") is None
    episodes = ds.fixed_episodes("test")
    assert len(episodes) == RUNS and sum(e.query_y.numel() for e in episodes) == RUNS * WAY
    for run, ep in enumerate(episodes, start=1):
        assert ep.way == WAY and ep.shot == 1 and ep.info["run"] == f"run{run:02d}"
        assert ep.support_y.tolist() == list(range(WAY)) == ep.query_y.tolist()
        # the query of class k is the test item whose line names classKK
        for k in range(WAY):
            item = ep.info["query_files"][k]
            m = int(item[-6:-4])
            assert truth[run][m - 1] == k + 1
        assert torch.equal(ep.query_x, ep.support_x)  # the fixture draws item = class image
        assert ep.support_x.shape == (WAY, 1, 28, 28) and float(ep.support_x.max()) == 1.0
    assert ds.describe()["classes"] == {"test": RUNS * WAY}


def test_lake_runs_missing_names_the_archive_and_where_to_get_it(tmp_path):
    with pytest.raises(DataMissingError) as err:
        load_omniglot_lake_runs(tmp_path)
    assert "all_runs.zip" in str(err.value) and "brendenlake/omniglot" in str(err.value)


# -- omniglot (full, torchvision's archives) ---------------------------------------------------

BACKGROUND = {"Armenian": 2, "Bengali": 1, "Latin": 2, "Tifinagh": 3}  # ids 1..8
EVALUATION = {"Gurmukhi": 3, "ULOG": 2}  # ids 1199..1203


@pytest.fixture
def full_omniglot(tmp_path, monkeypatch, draw):
    """torchvision's layout (``omniglot-py/``) with stand-in archives and their md5 digests."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    sub = tmp_path / "omniglot" / "omniglot-py"
    sub.mkdir(parents=True)
    a = draw.write_alphabet_zip(sub / "images_background.zip", "images_background", BACKGROUND,
                           drawers=3, first_id=1)
    b = draw.write_alphabet_zip(sub / "images_evaluation.zip", "images_evaluation", EVALUATION,
                           drawers=3, first_id=1199)
    fake = {p.stem: Resource(p.name, f"http://127.0.0.1:9/{p.name}", md5=file_digest(p, "md5"))
            for p in (a, b)}
    monkeypatch.setattr(omniglot, "resources", lambda: fake)
    return tmp_path


def test_full_omniglot_vinyals_split_by_character_number(full_omniglot):
    ds = omniglot.load_omniglot(full_omniglot, download=False)
    names = {s: sorted({ds.class_names[c].rsplit("/", 1)[0] for c in cs})
             for s, cs in ds.splits.items()}
    assert names["val"] == ["Armenian/character01", "Armenian/character02", "Bengali/character01"]
    assert names["test"] == ["Gurmukhi/character03", "ULOG/character01", "ULOG/character02"]
    assert "Gurmukhi/character02" in names["train"] and "Latin/character01" in names["train"]
    assert all(len(cs) % 4 == 0 for cs in ds.splits.values())  # four rotations per character
    assert len(ds.class_names) == 4 * 13 and ds.image_size == 28


def test_rotated_classes_match_pil_rotation(full_omniglot):
    ds = omniglot.load_omniglot(full_omniglot, download=False)
    plain = omniglot.load_omniglot(full_omniglot, download=False, rotations=False)
    c = 5
    base = plain.gather(torch.tensor([c]), torch.tensor([[1]]))[0, 0, 0]
    img = Image.fromarray((base.numpy() * 255).round().astype(np.uint8))
    for r in range(4):
        assert ds.class_names[4 * c + r].endswith(f"/rot{90 * r:03d}")
        x = ds.gather(torch.tensor([4 * c + r]), torch.tensor([[1]]))[0, 0, 0]
        expected = np.asarray(img.rotate(90 * r), dtype=np.float32) / 255  # counter-clockwise
        assert np.allclose(x.numpy(), expected, atol=1 / 255)


def test_full_omniglot_no_latin_protocol(full_omniglot):
    ds = omniglot.load_omniglot(full_omniglot, download=False, protocol="no-latin")
    train = {ds.class_names[c].split("/")[0] for c in ds.splits["train"]}
    assert train == {"Armenian", "Bengali", "Tifinagh", "Gurmukhi", "ULOG"}
    assert set(ds.splits) == {"train"} and len(ds.class_names) == 13  # no rotations
    with pytest.raises(ZooError, match="protocol"):
        omniglot.load_omniglot(full_omniglot, protocol="lake")


def test_full_omniglot_cache_is_reused(full_omniglot, monkeypatch):
    omniglot.load_omniglot(full_omniglot, download=False)
    monkeypatch.setattr(omniglot, "read_zip", lambda *a, **k: pytest.fail("decoded twice"))
    omniglot.load_omniglot(full_omniglot, download=False)


def test_published_resources_are_torchvisions(monkeypatch):
    from torchvision.datasets import Omniglot

    r = omniglot.resources()["images_background"]
    assert r.md5 == Omniglot.zips_md5["images_background"]
    assert r.url == f"{Omniglot.download_url_prefix}/images_background.zip"


# Omniglot's character numbering: alphabets in the order of their numbers, with their sizes
NUMBERING = [
    ("Arcadian", 26), ("Armenian", 41), ("Asomtavruli_(Georgian)", 40), ("Balinese", 24),
    ("Bengali", 46), ("Blackfoot_(Canadian_Aboriginal_Syllabics)", 14), ("Braille", 26),
    ("Cyrillic", 33), ("Early_Aramaic", 22), ("Syriac_(Estrangelo)", 23),
    ("Anglo-Saxon_Futhorc", 29), ("Futurama", 26), ("Grantha", 43), ("Greek", 24),
    ("Gujarati", 48), ("Hebrew", 22), ("Japanese_(hiragana)", 52),
    ("Inuktitut_(Canadian_Aboriginal_Syllabics)", 16), ("Malay_(Jawi_-_Arabic)", 40),
    ("Japanese_(katakana)", 47), ("Korean", 40), ("Latin", 26), ("Alphabet_of_the_Magi", 20),
    ("Mkhedruli_(Georgian)", 41), ("Burmese_(Myanmar)", 34), ("N_Ko", 33),
    ("Ojibwe_(Canadian_Aboriginal_Syllabics)", 14), ("Sanskrit", 42), ("Tagalog", 17),
    ("Tifinagh", 55),  # background: 964 characters
    ("Angelic", 20), ("Atemayar_Qelisayer", 26), ("Atlantean", 26), ("Aurek-Besh", 26),
    ("Avesta", 26), ("Ge_ez", 26), ("Glagolitic", 45), ("Gurmukhi", 45), ("Kannada", 41),
    ("Keble", 26), ("Malayalam", 47), ("Manipuri", 40), ("Mongolian", 30),
    ("Old_Church_Slavonic_(Cyrillic)", 45), ("Oriya", 46), ("Syriac_(Serto)", 23),
    ("Sylheti", 28), ("Tengwar", 25), ("Tibetan", 42), ("ULOG", 26),  # evaluation: 659
]


def test_vinyals_split_sizes_of_the_real_numbering():
    """With Omniglot's real numbering (964 background characters, then 659 evaluation ones) the
    rule gives the published 1200 / 423 split; the validation alphabets hold 172 characters."""
    ids, alphabets, n = [], [], 0
    for alphabet, count in NUMBERING:
        ids += list(range(n + 1, n + count + 1))
        alphabets += [alphabet] * count
        n += count
    decoded = omniglot.DecodedZip(torch.zeros(0), torch.zeros(0), alphabets, alphabets, ids)
    splits = omniglot.vinyals_splits(decoded)
    assert n == 1623
    assert {k: len(v) for k, v in splits.items()} == {"train": 1028, "val": 172, "test": 423}
