"""CUB, mini-ImageNet, EMNIST and CloserLookFewShot split files, on tiny fixtures in the real
layouts; and the errors a user meets with real data."""

from __future__ import annotations

import functools
import hashlib
import json
import struct
import tarfile
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from zoo import EpisodeSampler
from zoo.data import cub
from zoo.data.download import Resource
from zoo.data.emnist import load_emnist
from zoo.data.images import IMAGENET_MEAN, IMAGENET_STD
from zoo.data.miniimagenet import load_miniimagenet
from zoo.data.splitfiles import load_split_files, read_split_file
from zoo.errors import DataMissingError, EpisodeError, ZooError
from zoo.plugins import load_dataset

N_CUB, PER_CLASS = 8, 3


def _photo(path: Path, seed: int, size: tuple[int, int] = (40, 30)) -> Path:
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def _cub_tree(root: Path) -> list[str]:
    names = [f"{i + 1:03d}.Bird_{chr(65 + i)}" for i in range(N_CUB)]
    for c, name in enumerate(names):
        for k in range(PER_CLASS):
            _photo(root / "CUB_200_2011" / "images" / name / f"{name[4:]}_{k:04d}.jpg", 10 * c + k)
    return names


@pytest.fixture
def cub_dir(tmp_path) -> Path:
    _cub_tree(tmp_path / "cub")
    return tmp_path


def test_cub_closer_look_split_and_transform(cub_dir):
    ds = load_dataset("cub", data_dir=cub_dir, download=False)
    assert ds.splits == {"train": [0, 2, 4, 6], "val": [1, 5], "test": [3, 7]}
    assert ds.class_names[3] == "004.Bird_D" and ds.image_size == 84 and ds.in_channels == 3
    ep = EpisodeSampler(ds, "test", way=2, shot=1, query=2, seed=0)[0]
    assert ep.support_x.shape == (2, 3, 84, 84) and ep.query_x.shape == (4, 3, 84, 84)
    again = EpisodeSampler(ds, "test", way=2, shot=1, query=2, seed=0)[0]
    assert torch.equal(ep.query_x, again.query_x)
    # ImageNet normalisation: a mid-grey image maps to (0.5 - mean) / std per channel
    grey = ds.transform(Image.new("RGB", (50, 60), (128, 128, 128)))
    expected = (128 / 255 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
    assert torch.allclose(grey.mean((1, 2)), expected, atol=1e-6)


def test_cub_augmentation_touches_only_train_classes(cub_dir):
    ds = cub.load_cub(cub_dir, download=False, augment=True)
    plain = cub.load_cub(cub_dir, download=False, augment=False)
    ex = torch.tensor([[0, 1]])
    state = torch.get_rng_state()
    a = ds.gather(torch.tensor([0]), ex)
    assert not torch.equal(a, plain.gather(torch.tensor([0]), ex))  # train: crops, jitter, flips
    torch.manual_seed(123)
    assert torch.equal(a, ds.gather(torch.tensor([0]), ex))  # a function of the episode alone
    assert not torch.equal(a, ds.gather(torch.tensor([0]), torch.tensor([[1, 0]])))
    assert torch.equal(ds.gather(torch.tensor([3]), ex), plain.gather(torch.tensor([3]), ex))
    torch.set_rng_state(state)


@pytest.fixture
def file_server(tmp_path) -> Iterator[tuple[str, Path]]:
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a: None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    httpd.shutdown()
    httpd.server_close()


def test_cub_is_downloaded_verified_and_extracted(tmp_path, file_server, monkeypatch):
    url, served = file_server
    _cub_tree(tmp_path / "build")
    archive = served / "CUB_200_2011.tgz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(tmp_path / "build" / "CUB_200_2011", arcname="CUB_200_2011")
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    monkeypatch.setattr(cub, "RESOURCE", Resource(archive.name, f"{url}/{archive.name}", md5=md5))
    ds = cub.load_cub(tmp_path / "data", download=True)
    assert len(ds.class_names) == N_CUB and int(ds.class_sizes.sum()) == N_CUB * PER_CLASS
    assert (tmp_path / "data" / "cub" / "CUB_200_2011.tgz").exists()


def test_cub_missing_without_download(tmp_path):
    with pytest.raises(DataMissingError) as err:
        cub.load_cub(tmp_path, download=False)
    assert "CUB_200_2011" in str(err.value) and cub.RESOURCE.url in str(err.value)


def _split_json(path: Path, label_names: list[str], images: list[str], labels: list[int]) -> None:
    path.write_text(json.dumps({"label_names": label_names, "image_names": images,
                                "image_labels": labels}))


def _closer_look_cub_files(root: Path, names: list[str], foreign: str) -> None:
    """CloserLookFewShot's files: all 200 label names, each split with absolute foreign paths."""
    splits = cub.closer_look_split(len(names))
    for split, filename in (("train", "base.json"), ("val", "val.json"), ("test", "novel.json")):
        images, labels = [], []
        for c in splits[split]:
            folder = root / "CUB_200_2011" / "images" / names[c]
            for f in sorted(folder.iterdir(), reverse=True):
                images.append(f"{foreign}/CUB_200_2011/images/{names[c]}/{f.name}")
                labels.append(c)
        _split_json(root / filename, names, images, labels)


def test_closer_look_split_files_carry_over_with_foreign_paths(cub_dir):
    names = sorted(p.name for p in (cub_dir / "cub/CUB_200_2011/images").iterdir())
    _closer_look_cub_files(cub_dir / "cub", names, "/home/someone/filelists/CUB")
    ds = cub.load_cub(cub_dir, download=False)
    derived = cub.closer_look_split(N_CUB)
    for split in ("train", "val", "test"):
        assert [ds.class_names[c] for c in ds.splits[split]] == [names[c] for c in derived[split]]
    first = ds.files[ds.splits["test"][0]][0]
    assert first.is_file() and first.is_relative_to(cub_dir / "cub" / "CUB_200_2011")
    assert first.name == f"{names[3][4:]}_{PER_CLASS - 1:04d}.jpg"  # the files' order, kept


def test_split_file_naming_a_missing_image(tmp_path):
    _split_json(tmp_path / "base.json", ["a"], ["/x/a/nope.jpg"], [0])
    for f in ("val.json", "novel.json"):
        _split_json(tmp_path / f, ["a"], [], [])
    with pytest.raises(DataMissingError) as err:
        load_split_files(tmp_path, tmp_path)
    assert "/x/a/nope.jpg" in str(err.value) and "base.json" in str(err.value)


def test_malformed_split_files_are_explained(tmp_path):
    _split_json(tmp_path / "bad.json", ["a"], ["x.jpg"], [3])
    with pytest.raises(ZooError, match="not an index"):
        read_split_file(tmp_path / "bad.json")
    (tmp_path / "worse.json").write_text('{"label_names": []}')
    with pytest.raises(ZooError, match="image_names"):
        read_split_file(tmp_path / "worse.json")


MINI = {"train": ["n01", "n02", "n03"], "val": ["n04", "n05"], "test": ["n06", "n07"]}


def test_miniimagenet_ravi_csv_layout(tmp_path):
    root = tmp_path / "miniimagenet"
    for split, classes in MINI.items():
        rows = ["filename,label"]
        for c, wnid in enumerate(classes):
            for k in range(2):
                name = f"{wnid}0000{k}.jpg"
                _photo(root / "images" / name, 100 * c + k)
                rows.append(f"{name},{wnid}")
        (root / f"{split}.csv").write_text("\n".join(rows) + "\n")
    ds = load_miniimagenet(tmp_path)
    assert {s: [ds.class_names[c] for c in cs] for s, cs in ds.splits.items()} == MINI
    ep = EpisodeSampler(ds, "test", way=2, shot=1, query=1, seed=3)[0]
    assert ep.support_x.shape == (2, 3, 84, 84)


def test_miniimagenet_closer_look_layout(tmp_path):
    root = tmp_path / "miniimagenet"
    everything = [w for cs in MINI.values() for w in cs]
    for split, filename in (("train", "base.json"), ("val", "val.json"), ("test", "novel.json")):
        images, labels = [], []
        for wnid in MINI[split]:
            _photo(root / "train" / wnid / f"{wnid}_1.JPEG", 7)
            images.append(f"/home/x/ILSVRC2015/Data/CLS-LOC/train/{wnid}/{wnid}_1.JPEG")
            labels.append(everything.index(wnid))
        _split_json(root / filename, everything, images, labels)
    ds = load_miniimagenet(tmp_path)
    assert [ds.class_names[c] for c in ds.splits["val"]] == MINI["val"]


def test_miniimagenet_missing_says_there_is_no_public_source(tmp_path):
    with pytest.raises(DataMissingError) as err:
        load_miniimagenet(tmp_path)
    msg = str(err.value)
    assert "no stable public download" in msg and "train.csv" in msg and "--data-dir" in msg


def _idx(path: Path, array: np.ndarray, magic: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic))
        f.write(b"".join(struct.pack(">I", d) for d in array.shape))
        f.write(array.astype(np.uint8).tobytes())


def test_emnist_cross_domain_splits_and_orientation(tmp_path):
    raw = tmp_path / "emnist" / "EMNIST" / "raw"
    labels = np.repeat(np.arange(62), 3)
    upright = np.zeros((len(labels), 28, 28), dtype=np.uint8)
    upright[:, 2:6, :] = 255  # a bar along the top of every character
    _idx(raw / "emnist-byclass-test-images-idx3-ubyte", upright.transpose(0, 2, 1), 0x803)
    _idx(raw / "emnist-byclass-test-labels-idx1-ubyte", labels, 0x801)
    ds = load_emnist(tmp_path, download=False)
    assert ds.splits["val"] == list(range(0, 62, 2)) and ds.splits["test"] == list(range(1, 62, 2))
    assert ds.class_names[:3] == ["0", "1", "2"] and ds.class_names[10] == "A"
    x = ds.gather(torch.tensor([1]), torch.tensor([[0]]))[0, 0, 0]
    assert float(x[2:6].min()) == 1.0 and float(x[10:].max()) == 0.0  # upright, bright strokes


def test_emnist_missing_without_download(tmp_path):
    with pytest.raises(DataMissingError, match="emnist-byclass-test-images-idx3-ubyte") as err:
        load_emnist(tmp_path, download=False)
    assert "DIR/emnist/EMNIST/raw/" in str(err.value)


# -- bad input ---------------------------------------------------------------------------------


def test_way_larger_than_the_classes_of_a_split(cub_dir):
    ds = cub.load_cub(cub_dir, download=False)
    hint = r"a way of 2 or less \(zoo bench: --set ways=\.\.\.; zoo train and zoo evaluate: --way\)"
    with pytest.raises(EpisodeError, match=r"split 'test' of data set 'cub' has 2 classes.*" + hint):
        EpisodeSampler(ds, "test", way=3, shot=1, query=1)


def test_shot_plus_query_larger_than_a_class(cub_dir):
    ds = cub.load_cub(cub_dir, download=False)
    with pytest.raises(EpisodeError, match=r"has 3 examples, but shot \+ query = 4.*--shot"):
        EpisodeSampler(ds, "test", way=2, shot=2, query=2)


def test_an_unreadable_image_file_is_named(cub_dir):
    folder = cub_dir / "cub/CUB_200_2011/images/004.Bird_D"
    bad = sorted(folder.iterdir())[0]
    bad.write_bytes(b"\xff\xd8 truncated jpeg")
    ds = cub.load_cub(cub_dir, download=False)
    with pytest.raises(ZooError, match=f"cannot read image {bad}"):
        ds.gather(torch.tensor([3]), torch.tensor([[0]]))


def test_every_real_data_set_is_registered_under_its_contract_name():
    from zoo.plugins import registry

    names = {"omniglot", "omniglot-minimal", "omniglot-lake-runs", "cub", "miniimagenet", "emnist"}
    assert names <= set(registry().names("datasets"))
    assert all(registry().owner("datasets", n) == "zoo" for n in names)
