"""Suites and cells: what a benchmark runs, resolved down to hashable configurations.

A suite is a TOML file (or a dict a plugin registers) with three tables::

    [suite]                      # settings; every key below may be overridden with --set KEY=VALUE
    methods = "*"                # every registered classification method, or a list of names
    train_datasets = ["glyphs"]
    test_datasets = ["glyphs", "digits"]   # scored with each model; empty: the training data set
    ways = [5]
    shots = [1, 5]
    train_episodes = 200         # or per shot: {1 = 600, 5 = 400}

    [methods.maml]               # hyper-parameter overrides for one method (--set maml.KEY=VALUE)
    inner_steps = 1

    [[part]]                     # optional: each part overrides [suite] settings for its cells;
    variant = "steps=5"          #   with a variant label and hyper-parameters it is one row of
    hparams = {inner_steps = 5}  #   an ablation table ("maml steps=5")

    [references.omniglot-small1] # published numbers shown next to ours in the report
    "BPL (Lake et al. 2015)" = 4.3

or, instead of cells, ``entry = "module:function"``: the function runs the whole experiment as
``function(out_dir, data_dir, device, settings)``.

A :class:`Cell` is one model trained and scored on one test data set. Its identity is the hash of
its resolved configuration (method, every hyper-parameter, data sets, backbone, kernel, way, shot,
query, seed, episode counts); two cells that differ only in the test data set share one training
(:attr:`Cell.train_hash`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import tomllib

from zoo.errors import HyperParameterError, UnknownNameError
from zoo.method import resolve_hparams
from zoo.runner.validate import check_settings
from zoo.spec import SpecError, parse_value

SETTINGS: dict[str, Any] = {
    "description": "",
    "methods": "*",
    "train_datasets": ["glyphs"],
    "test_datasets": [],
    "ways": [5],
    "shots": [1, 5],
    "train_shot": 0,
    "query": 15,
    "train_query": 15,
    "seeds": [0],
    "backbone": "",
    "kernel": "",
    "train_episodes": 1000,
    "val_episodes": 100,
    "val_every": 250,
    "test_episodes": 600,
    "checkpoint_every": 50,
    "max_bad_steps": 20,
    "requires": [],
    "report_error": False,
    "variant": "",
    "hparams": {},
    "entry": "",
}
"""Suite settings and their defaults. ``checkpoint_every`` and ``max_bad_steps`` steer the run but
do not change its result, so they are not part of a cell's identity. ``train_shot = 0`` trains a
model per test shot; a positive value trains one model at that shot and scores it at every shot.
``hparams`` (usually in a ``[[part]]``) sets hyper-parameters of every method of the part that has
them, over ``[methods.*]``; ``variant`` labels those cells, so that the report shows them as their
own row ``"METHOD VARIANT"`` (a one-factor-at-a-time study: one labelled part per value). The
label is part of a cell's identity but not of its training's: parts that differ only in the label
share one model."""

LIST_SETTINGS = {"train_datasets", "test_datasets", "ways", "shots", "seeds", "requires"}


class SuiteError(SpecError):
    """A suite file or a --set override that does not make sense."""


@dataclass(frozen=True)
class Suite:
    """A named suite: settings, per-method hyper-parameter overrides, published references."""

    name: str
    settings: dict[str, Any]
    method_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    references: dict[str, dict[str, float]] = field(default_factory=dict)
    source: str = ""
    entry_settings: dict[str, Any] = field(default_factory=dict)
    parts: list[dict[str, Any]] = field(default_factory=list)

    def part_settings(self) -> list[dict[str, Any]]:
        """The settings of each part (``[[part]]`` tables override ``[suite]``), or the suite's."""
        return [{**self.settings, **p} for p in self.parts] or [self.settings]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def suite_names() -> list[str]:
    from zoo.plugins import registry

    return registry().names("suites")


def load_suite(name: str) -> Suite:
    """The registered suite ``name`` (built-in TOML or a plugin's), validated."""
    from zoo.plugins import registry

    spec = registry().get("suites", name)
    if isinstance(spec, Mapping):
        raw, source = dict(spec), f"plugin {registry().owner('suites', name)!r}"
    else:
        path = Path(spec)
        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SuiteError(f"suite {name!r}: cannot read {path}: {exc}") from exc
        source = str(path)
    return suite_from_dict(name, raw, source)


def suite_from_dict(name: str, raw: Mapping[str, Any], source: str = "") -> Suite:
    unknown_tables = sorted(set(raw) - {"suite", "part", "methods", "references", "settings"})
    if unknown_tables:
        raise SuiteError(f"suite {name!r} ({source}): unknown table(s) {unknown_tables}; "
                         "allowed: suite, part, methods, references, settings (of an entry suite)")
    settings = dict(SETTINGS)
    for key, value in dict(raw.get("suite", {})).items():
        if key == "name":
            if value != name:
                raise SuiteError(f"suite {name!r} ({source}) calls itself {value!r}")
            continue
        settings[key] = _check_setting(key, value, f"suite {name!r}")
    if raw.get("settings") and not settings["entry"]:
        raise SuiteError(f"suite {name!r} ({source}): a [settings] table is for suites with an "
                         "entry function; put cell settings in [suite]")
    overrides = {m: dict(h) for m, h in dict(raw.get("methods", {})).items()}
    references = {d: {k: float(v) for k, v in r.items()}
                  for d, r in dict(raw.get("references", {})).items()}
    parts = [{k: _check_setting(k, v, f"suite {name!r}, part {i + 1}") for k, v in p.items()}
             for i, p in enumerate(raw.get("part", []))]
    return Suite(name, settings, overrides, references, source, dict(raw.get("settings", {})),
                 parts)


def _check_setting(key: str, value: Any, where: str) -> Any:
    if key not in SETTINGS:
        raise SuiteError(f"{where}: unknown setting {key!r}; settings are: "
                         f"{', '.join(sorted(SETTINGS))}")
    default = SETTINGS[key]
    if key in LIST_SETTINGS and not isinstance(value, list):
        value = [value]
    if key == "methods" and isinstance(value, str) and value != "*":
        value = [v.strip() for v in value.split(",") if v.strip()]
    if key == "train_episodes" and isinstance(value, Mapping):
        return {str(k): int(v) for k, v in value.items()}
    if key == "methods":
        ok = value == "*" or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    elif isinstance(default, bool) or isinstance(value, bool):
        ok = isinstance(value, bool) and isinstance(default, bool)
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise SuiteError(f"{where}: setting {key}={value!r} must be a {type(default).__name__} "
                         f"like its default {default!r}")
    check_settings({key: value}, where)
    return value


def apply_overrides(suite: Suite, assignments: Sequence[str], methods: Sequence[str]) -> Suite:
    """``--set KEY=VALUE``: a suite setting, ``METHOD.HPARAM``, or a bare ``HPARAM`` applied to every
    selected method that has it. Unknown keys are an error listing every choice."""
    from zoo.plugins import registry

    reg = registry()
    settings = dict(suite.settings)
    overrides = {m: dict(h) for m, h in suite.method_overrides.items()}
    entry = dict(suite.entry_settings)
    parts = [dict(p) for p in suite.parts]
    for item in assignments:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SuiteError(f"--set {item!r}: expected KEY=VALUE")
        value = parse_value(text.strip())
        if key in SETTINGS:
            settings[key] = _check_setting(key, value, "--set")
            parts = [{**p, key: settings[key]} if key in p else p for p in parts]
            continue
        if settings["entry"]:
            if key not in entry:
                raise SuiteError(f"--set {key}: suite {suite.name!r} has no setting {key!r}; its "
                                 f"settings are: {', '.join(sorted(entry))}")
            entry[key] = value
            continue
        if "." in key:
            method, hparam = key.split(".", 1)
            cls = reg.get("methods", method)
            if hparam not in cls.all_defaults():
                raise SuiteError(f"--set {key}: method {method!r} has no hyper-parameter "
                                 f"{hparam!r}; it has: {', '.join(sorted(cls.all_defaults()))}")
            overrides.setdefault(method, {})[hparam] = value
            continue
        owners = [m for m in methods if key in reg.get("methods", m).all_defaults()]
        if not owners:
            hparams = sorted({h for m in methods for h in reg.get("methods", m).all_defaults()})
            raise SuiteError(
                f"--set {key}: unknown key; choose a suite setting ({', '.join(sorted(SETTINGS))}), "
                f"a hyper-parameter of the selected methods ({', '.join(hparams)}), "
                "or METHOD.HYPERPARAMETER")
        for m in owners:
            overrides.setdefault(m, {})[key] = value
    return Suite(suite.name, settings, overrides, suite.references, suite.source, entry, parts)


def select_methods(suite: Suite, only: Iterable[str] | None = None) -> list[str]:
    """The suite's methods (``"*"``: every registered classification method), filtered by ``only``."""
    from zoo.plugins import registry

    reg = registry()
    classification = [n for n, c in reg.items("methods").items() if "classification" in c.tasks]
    wanted = suite.settings["methods"]
    names = sorted(classification) if wanted == "*" else list(wanted)
    for n in names:
        reg.get("methods", n)
    if only:
        only = [o.strip() for o in only if o.strip()]
        for o in only:
            if o not in names:
                raise UnknownNameError(f"method in suite {suite.name!r}", o, names)
        names = [n for n in names if n in only]
    return names


@dataclass(frozen=True)
class Cell:
    """One model (method, hyper-parameters, training data, shape of episodes, seed) scored on one
    test data set. ``checkpoint_every`` and ``max_bad_steps`` are not part of its identity.

    ``provenance`` (:meth:`zoo.plugins.Registry.provenance` of the method: plugin, distribution,
    version, code digest) is: a result made by other code under the same name is another cell.
    """

    method: str
    hparams: dict[str, Any]
    train_dataset: str
    dataset: str
    backbone: str
    kernel: str | None
    way: int
    shot: int
    train_shot: int
    query: int
    train_query: int
    seed: int
    train_episodes: int
    val_episodes: int
    val_every: int
    test_episodes: int
    checkpoint_every: int = 50
    max_bad_steps: int = 20
    variant: str = ""
    provenance: dict[str, Any] | None = None

    TRAIN_KEYS = ("method", "hparams", "train_dataset", "backbone", "kernel", "way", "train_shot",
                  "train_query", "seed", "train_episodes", "val_episodes", "val_every",
                  "provenance")

    def config(self) -> dict[str, Any]:
        """The resolved configuration that names the cell (``variant`` and ``provenance`` only
        when set, so cells without them keep the hashes they had before those existed)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("checkpoint_every", "max_bad_steps")
                and (f.name not in ("variant", "provenance") or getattr(self, f.name))}

    def train_config(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.TRAIN_KEYS
                if k != "provenance" or self.provenance}

    @property
    def hash(self) -> str:
        return config_hash(self.config())

    @property
    def train_hash(self) -> str:
        return config_hash(self.train_config())

    @property
    def label(self) -> str:
        where = (self.dataset if self.dataset == self.train_dataset
                 else f"{self.train_dataset}->{self.dataset}")
        trained = f" (trained {self.train_shot}-shot)" if self.train_shot != self.shot else ""
        return (f"{row_name(self.method, self.variant)} {where} {self.way}w{self.shot}s{trained} "
                f"seed{self.seed}")

    @classmethod
    def from_config(cls, config: Mapping[str, Any], **run: Any) -> Cell:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in config.items() if k in names}, **run)


def row_name(method: str, variant: str = "") -> str:
    """The report's row for a method's cells: the method, or ``"METHOD VARIANT"``."""
    return f"{method} {variant}" if variant else method


def config_hash(config: Mapping[str, Any]) -> str:
    """16 hex digits of the SHA-256 of the canonical JSON of ``config``."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def expand_cells(suite: Suite, methods: Sequence[str]) -> list[Cell]:
    """Every cell of ``suite`` for ``methods``, in a fixed order (train data, shape, seed, method)."""
    from zoo.plugins import registry

    reg = registry()
    for m in suite.method_overrides:
        reg.get("methods", m)
    cells = []
    for s in suite.part_settings():
        cells += _part_cells(suite, s, methods)
    return list({c.hash: c for c in cells}.values())


def _part_cells(suite: Suite, s: dict[str, Any], methods: Sequence[str]) -> list[Cell]:
    from zoo.plugins import registry

    reg = registry()
    owned = {m: set(reg.get("methods", m).all_defaults()) for m in methods}
    unknown = sorted(set(s["hparams"]) - set().union(*owned.values()))
    if unknown:
        raise SuiteError(f"suite {suite.name!r}: hparams {unknown} belong to none of the methods "
                         f"{list(methods)}")
    cells = []
    for train in s["train_datasets"]:
        tests = s["test_datasets"] or [train]
        for way in s["ways"]:
            for shot in s["shots"]:
                for seed in s["seeds"]:
                    for m in methods:
                        cls = reg.get("methods", m)
                        given = {**suite.method_overrides.get(m, {}),
                                 **{k: v for k, v in s["hparams"].items() if k in owned[m]}}
                        try:
                            hparams = resolve_hparams(cls, given)
                        except HyperParameterError as exc:
                            raise SuiteError(f"suite {suite.name!r}: {exc}") from None
                        kernel = (s["kernel"] or cls.default_kernel) if cls.uses_kernel else None
                        train_shot = int(s["train_shot"]) or int(shot)
                        for test in tests:
                            cells.append(Cell(
                                method=m, hparams=hparams, train_dataset=train, dataset=test,
                                backbone=s["backbone"] or cls.default_backbone, kernel=kernel,
                                way=int(way), shot=int(shot), train_shot=train_shot,
                                query=int(s["query"]),
                                train_query=int(s["train_query"]), seed=int(seed),
                                train_episodes=_per_shot(s["train_episodes"], train_shot),
                                val_episodes=int(s["val_episodes"]), val_every=int(s["val_every"]),
                                test_episodes=int(s["test_episodes"]),
                                checkpoint_every=int(s["checkpoint_every"]),
                                max_bad_steps=int(s["max_bad_steps"]),
                                variant=str(s["variant"]),
                                provenance=reg.provenance("methods", m)))
    return cells


def _per_shot(value: int | Mapping[str, int], shot: int) -> int:
    if isinstance(value, Mapping):
        if str(shot) not in value:
            raise SuiteError(f"train_episodes gives counts for shots {sorted(value)}, "
                             f"not for shot {shot}")
        return int(value[str(shot)])
    return int(value)
