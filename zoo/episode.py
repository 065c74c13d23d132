"""Episodes and the sampler that makes each one a pure function of its coordinates.

An episode is determined by (base seed, data set, split, way, shot, query, index): the sampler
hashes these into a per-episode seed that feeds a local ``torch.Generator``; the global RNG is
never touched. Every method therefore sees bit-identical test episodes, in any process, and
per-episode results can be compared pairwise.

Unknown-class queries (:func:`with_unknown_queries`) are drawn the same way, from a generator of
their own seeded by the episode's seed and their source: adding them changes nothing else of the
episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from zoo.errors import EpisodeError
from zoo.seeds import Identified, coordinate_seed

if TYPE_CHECKING:
    from zoo.data.base import FewShotDataset


@dataclass(frozen=True)
class Episode(Identified):
    """One few-shot classification task: labels ``0..way-1``. ``unknown_x``: queries of classes
    outside the support (open-set or another data set), to be told apart from the known ones;
    ``None``: none."""

    support_x: Tensor
    support_y: Tensor
    query_x: Tensor
    query_y: Tensor
    way: int
    shot: int
    info: dict[str, Any] = field(default_factory=dict)
    unknown_x: Tensor | None = None

    @property
    def query(self) -> int:
        """Queries per class."""
        return self.query_x.shape[0] // self.way

    def to(self, device: torch.device | str) -> Episode:
        return replace(self, support_x=self.support_x.to(device), support_y=self.support_y.to(device),
                       query_x=self.query_x.to(device), query_y=self.query_y.to(device),
                       unknown_x=None if self.unknown_x is None else self.unknown_x.to(device))

    def known(self) -> Episode:
        """The episode without its unknown-class queries (what a method is asked about)."""
        return self if self.unknown_x is None else replace(self, unknown_x=None)

    def unknown(self) -> Episode:
        """The support with the unknown-class queries as its queries (labels: placeholders 0)."""
        if self.unknown_x is None:
            raise EpisodeError(f"episode {self.id} has no unknown-class queries")
        return replace(self, query_x=self.unknown_x,
                       query_y=torch.zeros(self.unknown_x.shape[0], dtype=torch.long,
                                           device=self.query_y.device), unknown_x=None)

    def unlabelled(self) -> UnlabelledEpisode:
        """The episode without its query labels: what ``predict`` is given."""
        return UnlabelledEpisode(self.support_x, self.support_y, self.query_x, None, self.way,
                                 self.shot, self.info)


HIDDEN = ("predict is given the query inputs without their labels: a prediction may use the "
          "labelled support set and the query inputs only (the runner scores it against the labels "
          "afterwards); read labels in meta_loss, which trains on them")


class UnlabelledEpisode(Episode):
    """An :class:`Episode` whose query labels are withheld (:meth:`Episode.unlabelled`): reading
    ``query_y`` raises an ``AttributeError`` that says why. It holds no labels to read: a
    prediction made from it cannot have used them."""

    def __getattribute__(self, name: str) -> Any:
        if name == "query_y":
            raise AttributeError(f"episode.query_y: {HIDDEN}")
        return super().__getattribute__(name)

    def __repr__(self) -> str:
        return (f"UnlabelledEpisode({self.id}, way={self.way}, shot={self.shot}, "
                f"queries={self.query_x.shape[0]})")

    def to(self, device: torch.device | str) -> UnlabelledEpisode:
        return UnlabelledEpisode(self.support_x.to(device), self.support_y.to(device),
                                 self.query_x.to(device), None, self.way, self.shot, self.info)

    def unlabelled(self) -> UnlabelledEpisode:
        return self


def episode_seed(seed: int, dataset: str, split: str, way: int, shot: int, query: int,
                 index: int) -> int:
    """A 63-bit seed that depends on every coordinate of the episode and on nothing else."""
    return coordinate_seed(int(seed), dataset, split, int(way), int(shot), int(query), int(index))


class EpisodeSampler:
    """Draws ``way``-way ``shot``-shot episodes with ``query`` queries per class from one split."""

    def __init__(self, dataset: FewShotDataset, split: str, way: int, shot: int, query: int,
                 seed: int = 0):
        if min(way, shot, query) < 1:
            raise EpisodeError(f"way, shot and query must be positive, got way={way}, "
                               f"shot={shot}, query={query}")
        self.dataset, self.split = dataset, split
        self.way, self.shot, self.query, self.seed = int(way), int(shot), int(query), int(seed)
        self.classes = dataset.split_classes(split)  # LongTensor of class indices, fixed order
        n = len(self.classes)
        if way > n:
            raise EpisodeError(
                f"split {split!r} of data set {dataset.name!r} has {n} classes, but way={way}: "
                f"use a way of {n} or less (zoo bench: --set ways=...; zoo train and zoo "
                f"evaluate: --way), or a data set with more classes")
        sizes = dataset.class_sizes[self.classes]
        smallest = int(sizes.argmin())
        if shot + query > int(sizes[smallest]):
            raise EpisodeError(
                f"class {dataset.class_names[int(self.classes[smallest])]!r} in split {split!r} of "
                f"{dataset.name!r} has {int(sizes[smallest])} examples, but shot + query = "
                f"{shot + query}: lower the shot or the queries per class (zoo bench: --set "
                f"shots=... or --set query=... / train_query=...; zoo train and zoo evaluate: "
                f"--shot or --query)")
        self._sizes = sizes

    def seed_for(self, index: int) -> int:
        return episode_seed(self.seed, self.dataset.name, self.split, self.way, self.shot,
                            self.query, index)

    def __getitem__(self, index: int) -> Episode:
        seed = self.seed_for(index)
        g = torch.Generator().manual_seed(seed)
        pick = torch.randperm(len(self.classes), generator=g)[: self.way]
        classes = self.classes[pick]
        k = self.shot + self.query
        # One draw for all classes: a random key per example, keys past a class's size pushed
        # behind every real one, so the k smallest keys are k distinct examples of that class.
        sizes = self._sizes[pick]
        keys = torch.rand((self.way, int(sizes.max())), generator=g)
        keys[torch.arange(keys.shape[1]) >= sizes[:, None]] = 2.0
        examples = keys.argsort(dim=1)[:, :k]
        x = self.dataset.augment(self.dataset.gather(classes, examples), self.split, g)
        labels = torch.arange(self.way, device=x.device)
        return Episode(
            support_x=x[:, : self.shot].reshape(self.way * self.shot, *x.shape[2:]),
            support_y=labels.repeat_interleave(self.shot),
            query_x=x[:, self.shot:].reshape(self.way * self.query, *x.shape[2:]),
            query_y=labels.repeat_interleave(self.query),
            way=self.way, shot=self.shot,
            info={"dataset": self.dataset.name, "split": self.split, "index": int(index),
                  "seed": seed,
                  "classes": [self.dataset.class_names[int(c)] for c in classes]},
        )

    def __iter__(self):
        i = 0
        while True:
            yield self[i]
            i += 1


def unknown_count(known: int, way: int, fraction: float) -> int:
    """Unknown-class queries for ``known`` known ones so that they are ``fraction`` of all queries,
    rounded to a multiple of ``way`` (a method may lay queries out per class): ``way *
    round(known / way * fraction / (1 - fraction))``, at least ``way``."""
    if not 0 < fraction < 1:
        raise EpisodeError(f"unknown_fraction must lie in (0, 1) to add unknown-class queries, "
                           f"got {fraction}; 0 adds none")
    return way * max(1, round(known / way * fraction / (1 - fraction)))


def with_unknown_queries(episode: Episode, source: FewShotDataset, split: str,
                         fraction: float) -> Episode:
    """``episode`` with unknown-class queries drawn from ``split`` of ``source``, without
    replacement among the examples of its classes that are not the episode's (by name: the
    same data set gives open-set queries, another one cross-domain queries), as a pure function
    of the episode's seed, the source and the count (:func:`unknown_count`). The rest of the
    episode is unchanged."""
    count = unknown_count(episode.query_y.shape[0], episode.way, fraction)
    own = set(episode.info.get("classes") or ())
    if episode.info.get("dataset") == source.name and not own:
        raise EpisodeError(f"episode {episode.id} does not name its classes, so open-set queries "
                           "cannot avoid them; draw unknown queries from another data set")
    classes = torch.as_tensor([int(c) for c in source.split_classes(split)
                               if source.class_names[int(c)] not in own], dtype=torch.long)
    sizes = source.class_sizes[classes]
    available = int(sizes.sum())
    if count > available:
        raise EpisodeError(f"split {split!r} of {source.name!r} has {available} examples outside "
                           f"episode {episode.id}'s classes, but it needs {count} unknown queries: "
                           "lower unknown_fraction or use a larger data set")
    seed = coordinate_seed(episode.info.get("seed"), "unknown", source.name, split, count)
    g = torch.Generator().manual_seed(seed)
    pick = torch.randperm(available, generator=g)[:count]
    ends = sizes.cumsum(0)
    which = torch.searchsorted(ends, pick, right=True)  # the class each pick falls in
    examples = pick - (ends[which] - sizes[which])
    x = source.augment(source.gather(classes[which], examples[:, None]), split, g)
    return replace(episode, unknown_x=x.reshape(count, *x.shape[2:]).to(episode.query_x.device))
