"""``omniglot-lake-runs``: Lake et al.'s 20 official 20-way within-alphabet one-shot runs.

The evaluation protocol that goes with ``omniglot-minimal`` (and the full background set): each
run is one 20-way 1-shot episode whose support is ``runNN/training/class01..20.png`` (labels 0..19
in that order) and whose queries are the run's 20 test items ``runNN/test/itemMM.png``, labelled
by ``runNN/class_labels.txt`` (lines ``runNN/test/itemMM.png runNN/training/classKK.png``), one
item per class. Queries are put in class order (the file each query came from is kept in
``episode.info["query_files"]``). Twenty runs give the 400 trials whose error is the published
number. The runs are :meth:`fixed_episodes` of the ``test`` split.

Files: ``all_runs.zip`` (read in place) or its extracted ``runNN/`` folders, in
``<data dir>/omniglot/`` or ``<data dir>/omniglot/all_runs/``. No digest of ``all_runs.zip`` is
pinned here, so the zoo does not download it: get it from :data:`URL`.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch

from zoo.data.characters import CharacterDataset, decode_all
from zoo.data.download import missing
from zoo.episode import Episode, episode_seed
from zoo.errors import ZooError
from zoo.paths import data_root

NAME = "omniglot-lake-runs"
URL = "https://github.com/brendenlake/omniglot/raw/master/python/one-shot-classification/all_runs.zip"
LABELS_RE = re.compile(r"^(?P<prefix>(?:.*/)?)(?P<run>run\d+)/class_labels\.txt$")
CLASS_RE = re.compile(r"class(\d+)\.png$")


def _source(root: Path) -> tuple[list[str], Callable[[str], bytes], str]:
    """Member names, a reader, and a description: from ``all_runs.zip`` or extracted folders."""
    for base in (root, root / "all_runs"):
        names = sorted(p.relative_to(base).as_posix() for p in base.glob("run*/**/*")
                       if p.is_file())
        if any(LABELS_RE.match(n) for n in names):
            return names, lambda n, b=base: (b / n).read_bytes(), str(base)
    archive = root / "all_runs.zip"
    if archive.exists():
        try:
            zf = zipfile.ZipFile(archive)
        except (zipfile.BadZipFile, OSError) as exc:
            raise ZooError(f"cannot read archive {archive}: {exc}; download it again from "
                           f"{URL}") from exc
        return sorted(zf.namelist()), zf.read, str(archive)
    raise missing("all_runs.zip (or its extracted runNN/ folders)", root, NAME,
                  f"Download it from {URL} into that directory.")


class LakeRuns(CharacterDataset):
    """The 400 characters of the 20 runs (2 images each), and the runs as fixed episodes."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, class_names: list[str],
                 runs: list[tuple[str, list[int], list[str]]]):
        super().__init__(NAME, images, labels, class_names, {"test": list(range(len(class_names)))})
        self.runs = runs  # (run name, the run's 20 class indices, query file per class)

    def fixed_episodes(self, split: str) -> list[Episode] | None:
        if split != "test":
            return None
        episodes = []
        for index, (run, classes, query_files) in enumerate(self.runs):
            way = len(classes)
            x = self.gather(torch.tensor(classes), torch.tensor([[0, 1]] * way))
            labels = torch.arange(way)
            episodes.append(Episode(
                support_x=x[:, 0], support_y=labels, query_x=x[:, 1], query_y=labels.clone(),
                way=way, shot=1,
                info={"dataset": NAME, "split": "test", "index": index, "run": run,
                      "seed": episode_seed(0, NAME, "test", way, 1, 1, index),
                      "classes": [self.class_names[c] for c in classes],
                      "query_files": query_files}))
        return episodes


def load_omniglot_lake_runs(data_dir: str | os.PathLike | None = None,
                            download: bool = True) -> LakeRuns:
    """Lake's 20 one-shot runs (20-way, 1 shot, 20 queries each) as fixed test episodes."""
    root = data_root(data_dir) / "omniglot"
    names, read, where = _source(root)
    member_set = set(names)
    items: list[tuple[str, bytes]] = []
    class_names: list[str] = []
    runs = []
    for m in filter(None, map(LABELS_RE.match, names)):
        prefix, run = m["prefix"], m["run"]
        pairs = [line.split() for line in read(m.group(0)).decode().splitlines() if line.strip()]
        if any(len(p) != 2 for p in pairs):
            raise ZooError(f"{where}:{m.group(0)} has a line that is not "
                           "'runNN/test/itemMM.png runNN/training/classKK.png'")
        by_class = {train: test for test, train in pairs}
        order = sorted(by_class, key=lambda t: int(CLASS_RE.search(t)[1]) if CLASS_RE.search(t)
                       else -1)
        if len(by_class) != len(pairs) or not all(CLASS_RE.search(t) for t in order):
            raise ZooError(f"{where}:{m.group(0)} does not pair each training classKK.png with "
                           "exactly one test item")
        first = len(class_names)
        for train in order:
            for rel in (train, by_class[train]):
                if prefix + rel not in member_set:
                    raise ZooError(f"{where} lacks {prefix + rel}, named in {m.group(0)}; "
                                   f"download all_runs.zip again from {URL}")
                items.append((f"{where}:{prefix + rel}", read(prefix + rel)))
            class_names.append(f"{run}/{Path(train).stem}")
        runs.append((run, list(range(first, len(class_names))), [by_class[t] for t in order]))
    if not runs:
        raise ZooError(f"{where} holds no runNN/class_labels.txt; is it Lake's all_runs.zip?")
    images = decode_all(items)
    labels = torch.arange(len(class_names)).repeat_interleave(2)
    return LakeRuns(images, labels, class_names, runs)
