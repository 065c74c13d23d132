"""Suites: what a benchmark runs, parsed and validated, with ``--set`` applied.

A suite is a TOML file (or a dict a plugin registers) with these tables::

    [suite]                      # settings; every key below may be overridden with --set KEY=VALUE
    task = "classification"      # the task kind (zoo tasks); it adds its own settings (shape)
    methods = "*"                # every registered method of the kind, or a list of names
    train_datasets = ["glyphs"]
    test_datasets = ["glyphs", "digits"]   # scored with each model; empty: the training data set
    val_dataset = "emnist"       # whose "val" split selects the model and fits the temperature;
                                 #   empty: the training data set's (a cross-domain protocol's
                                 #   validation classes come from the target domain)
    ways = [5]                   # classification's shape settings (regression: context_sizes...)
    shots = [1, 5]
    train_episodes = 200         # or per shot: {1 = 600, 5 = 400}
    lr_schedule = "cosine"       # the learning rates' decay over training (zoo.runner.schedule)

    [methods.maml]               # hyper-parameter overrides for one method (--set maml.KEY=VALUE)
    inner_steps = 1

    [methods.md-bfsc]            # a method that uses a kernel may have its own (--set
    kernel = "cosine"            #   md-bfsc.kernel=...), over the suite's `kernel`

    [methods.md-bfsc.kernel_per_dataset]   # ... and one per training data set, over both: a
    cub = "cosine"                         #   key is a data set as the suite names it or its
    omniglot = "rbf"                       #   base name (``omniglot`` for ``omniglot[...]``)

    [[part]]                     # optional: each part overrides [suite] settings for its cells;
    variant = "steps=5"          #   with a variant label and hyper-parameters it is one row of
    hparams = {inner_steps = 5}  #   an ablation table ("maml steps=5"); methods = [...] limits
                                 #   the part to those of the suite's methods

    [references.omniglot-small1] # published numbers shown next to ours in the report
    "BPL (Lake et al. 2015)" = 4.3

A list setting given as text is split at its top-level commas (``--set test_datasets=glyphs,digits``
is ``["glyphs", "digits"]``, ``--set ways=5,20`` is ``[5, 20]``; a comma inside a spec's brackets
stays). A suite runs the methods that are installed: one of the zoo's own methods that a suite
names but that is not installed is skipped and named with the distribution that provides it, and
only the ``[methods.NAME]`` tables of installed methods are checked.

or, instead of cells, ``entry = "module:function"``: the function runs the whole experiment as
``function(out_dir, data_dir, device, settings)``. :mod:`zoo.runner.cells` expands a suite into
cells.

Functions that look names up take the plugin ``registry`` (:func:`zoo.plugins.registry` is the
process's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomllib

from zoo.catalogue import methods_of_kind, providing_distribution
from zoo.errors import UnknownNameError
from zoo.runner.validate import check_settings
from zoo.spec import SpecError, parse_list, parse_spec, parse_value

if TYPE_CHECKING:
    from zoo.plugins import Registry

SETTINGS: dict[str, Any] = {
    "description": "",
    "task": "classification",
    "methods": "*",
    "train_datasets": ["glyphs"],
    "test_datasets": [],
    "val_dataset": "",
    "seeds": [0],
    "backbone": "",
    "kernel": "",
    "train_episodes": 1000,
    "val_episodes": 100,
    "val_every": 250,
    "test_episodes": 600,
    "checkpoint_every": 50,
    "max_bad_steps": 20,
    "max_skipped_fraction": 0.01,
    "lr_schedule": "constant",
    "requires": [],
    "report_error": False,
    "variant": "",
    "hparams": {},
    "entry": "",
}
"""Settings of every suite and their defaults; the suite's task kind adds its shape settings
(:attr:`zoo.tasks.Task.settings`). ``checkpoint_every``, ``max_bad_steps`` (non-finite training
steps in a row that stop a training) and ``max_skipped_fraction`` (the fraction of all training
steps that may be skipped as non-finite before the cell fails) steer the run but do not change its
result, so they are not part of a cell's identity. ``hparams`` (usually in a
``[[part]]``) sets hyper-parameters of every method of the part that has them, over
``[methods.*]``; ``variant`` labels those cells, so that the report shows them as their own row
``"METHOD VARIANT"`` (a one-factor-at-a-time study: one labelled part per value). The label is part
of a cell's identity but not of its training's: parts that differ only in the label share one
model. ``lr_schedule`` multiplies every parameter group's learning rate by a factor of the
training episode (:mod:`zoo.runner.schedule`: ``"constant"`` or ``"cosine"``); it is part of the
training's identity when it is not ``"constant"``."""


SETTING_DOCS: dict[str, str] = {
    "description": "one line saying what the suite measures (``zoo suites`` shows it)",
    "task": "the task kind (``zoo tasks``); it adds its shape settings; ``--set`` cannot change it",
    "methods": "``\"*\"`` (every installed method of the kind) or a list of method names",
    "train_datasets": "the data sets a model is trained on (specs: ``omniglot[rotations=true]``)",
    "test_datasets": "the data sets each model is scored on; empty: its training data set",
    "val_dataset": "whose ``val`` split selects the checkpoint and fits the temperature; empty: "
                   "the training data set's",
    "seeds": "the seeds: each trains its own model and draws its own episodes",
    "backbone": "the feature extractor (``conv4s[width=128]``); empty: each method's "
                "``default_backbone``",
    "kernel": "the kernel of every method that uses one (``rbf[lengthscale=2]``); empty: each "
              "method's ``default_kernel``; ``[methods.M] kernel`` or ``--set M.kernel=...`` sets "
              "one method's",
    "train_episodes": "meta-training steps (one episode each); one number or a table per shot",
    "val_episodes": "validation episodes at each validation (model selection, temperature)",
    "val_every": "training steps between validations",
    "test_episodes": "test episodes each model is scored on",
    "checkpoint_every": "training steps between checkpoints (at most one per second); not part of "
                        "a result's identity",
    "max_bad_steps": "non-finite training steps in a row that stop a training; not part of a "
                     "result's identity",
    "max_skipped_fraction": "the fraction of training steps that may be skipped as non-finite "
                            "before the cell fails; not part of a result's identity",
    "lr_schedule": "``\"constant\"`` or ``\"cosine\"`` (every learning rate decays to 0 over "
                   "``train_episodes``)",
    "requires": "what the suite needs to start, e.g. ``[\"cuda\"]``: refused up front without it",
    "report_error": "show the error in % instead of the accuracy (Lake's one-shot runs), with "
                    "``err`` after the number",
    "variant": "a label for the cells of a ``[[part]]``: the report shows them as the row "
               "``METHOD VARIANT``",
    "hparams": "hyper-parameters of every method (of a ``[[part]]``) that has them, over "
               "``[methods.M]``",
    "entry": "``module:function`` running the whole experiment instead of cells, as "
             "``function(out_dir, data_dir, device, settings)``",
}
"""What each of :data:`SETTINGS` means, in a few words (the documentation's table of suite
settings is made from it; every setting must have one)."""


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

    @property
    def where(self) -> str:
        """How errors name the suite: its name and the file (or plugin) it comes from."""
        return f"suite {self.name!r} ({self.source})" if self.source else f"suite {self.name!r}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def suite_names(registry: Registry) -> list[str]:
    return registry.names("suites")


def load_suite(name: str, registry: Registry) -> Suite:
    """The registered suite ``name`` (built-in TOML or a plugin's), or the suite file at the path
    ``name`` (ending in ``.toml``; its name is the file's stem), validated."""
    reg = registry
    if name.endswith(".toml"):
        spec: Any = Path(name)
        if not spec.is_file():
            raise SuiteError(f"suite file {name}: no such file (a registered suite is named without "
                             ".toml: zoo suites lists them)")
        name = spec.stem
    else:
        spec = reg.get("suites", name)
    if isinstance(spec, Mapping):
        raw, source = dict(spec), f"plugin {reg.owner('suites', name)!r}"
    else:
        path = Path(spec)
        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SuiteError(f"suite {name!r}: cannot read {path}: {exc}") from exc
        source = str(path)
    return suite_from_dict(name, raw, source, registry=reg)


def suite_from_dict(name: str, raw: Mapping[str, Any], source: str = "", *,
                    registry: Registry) -> Suite:
    unknown_tables = sorted(set(raw) - {"suite", "part", "methods", "references", "settings"})
    if unknown_tables:
        raise SuiteError(f"suite {name!r} ({source}): unknown table(s) {unknown_tables}; "
                         "allowed: suite, part, methods, references, settings (of an entry suite)")
    given = dict(raw.get("suite", {}))
    task_name = given.get("task", SETTINGS["task"])
    try:
        task = registry.get("tasks", task_name)
    except UnknownNameError as exc:
        raise SuiteError(f"suite {name!r} ({source}): {exc}") from None
    settings = {**SETTINGS, **task.settings}
    where = f"suite {name!r} ({source})" if source else f"suite {name!r}"
    for key, value in given.items():
        if key == "name":
            if value != name:
                raise SuiteError(f"suite {name!r} ({source}) calls itself {value!r}")
            continue
        settings[key] = _check_setting(key, value, where, settings)
    if raw.get("settings") and not settings["entry"]:
        raise SuiteError(f"suite {name!r} ({source}): a [settings] table is for suites with an "
                         "entry function; put cell settings in [suite]")
    overrides = {m: dict(h) for m, h in dict(raw.get("methods", {})).items()}
    for m, h in overrides.items():
        if PER_DATASET in h:
            h[PER_DATASET] = _check_kernel_table(m, h[PER_DATASET], where, registry)
    references = {d: {k: float(v) for k, v in r.items()}
                  for d, r in dict(raw.get("references", {})).items()}
    parts = []
    for i, p in enumerate(raw.get("part", [])):
        if "task" in p:
            raise SuiteError(f"{where}, part {i + 1}: a part cannot change the task kind; write "
                             "one suite per kind")
        parts.append({k: _check_setting(k, v, f"{where}, part {i + 1}", settings)
                      for k, v in p.items()})
    return Suite(name, settings, overrides, references, source, dict(raw.get("settings", {})),
                 parts)


PER_DATASET = "kernel_per_dataset"
"""The ``[methods.NAME]`` key of a per-training-data-set kernel table (see the module doc)."""


def _check_kernel_table(method: str, table: Any, where: str, registry: Registry
                        ) -> dict[str, str]:
    """``{data set: kernel spec}`` for a method that uses a kernel, every kernel registered (a
    method of the zoo's that is not installed keeps its table unchecked: it does not run)."""
    reg = registry
    if method not in reg.names("methods") and providing_distribution(method):
        return dict(table) if isinstance(table, Mapping) else table
    try:
        cls = reg.get("methods", method)
    except UnknownNameError as exc:
        raise SuiteError(f"{where}: [methods.{method}.{PER_DATASET}]: {exc}") from None
    if not getattr(cls, "uses_kernel", False):
        raise SuiteError(f"{where}: [methods.{method}.{PER_DATASET}]: {method} uses no kernel; "
                         "remove the table")
    if not isinstance(table, Mapping) or not all(isinstance(v, str) for v in table.values()):
        raise SuiteError(f"{where}: [methods.{method}.{PER_DATASET}] must map data set names to "
                         f"kernel specs (strings), e.g. cub = \"cosine\"; got {table!r}")
    for dataset, spec in table.items():
        try:
            reg.get("kernels", parse_spec(spec, "kernel")[0])
        except (UnknownNameError, SpecError) as exc:
            raise SuiteError(f"{where}: [methods.{method}.{PER_DATASET}] {dataset} = {spec!r}: "
                             f"{exc}") from None
    return {str(k): str(v) for k, v in table.items()}


def dataset_kernel(table: Mapping[str, str], train_dataset: str) -> str | None:
    """The kernel a per-data-set table gives ``train_dataset``: its exact name first, then its
    base name (``omniglot`` for ``omniglot[protocol=no-latin]``); ``None`` if neither is listed."""
    if train_dataset in table:
        return table[train_dataset]
    return table.get(parse_spec(train_dataset)[0])


def _check_setting(key: str, value: Any, where: str, known: Mapping[str, Any]) -> Any:
    if key not in known:
        raise SuiteError(f"{where}: unknown setting {key!r}; settings of a {known['task']} suite "
                         f"are: {', '.join(sorted(known))}")
    default = SETTINGS.get(key, known[key])
    if isinstance(default, list) and isinstance(value, str) and key != "methods":
        try:
            value = parse_list(value)
        except SpecError as exc:
            raise SuiteError(f"{where}: setting {key}: {exc}") from None
    if isinstance(default, list) and not isinstance(value, list):
        value = [value]
    if key == "methods" and isinstance(value, str) and value != "*":
        value = [v.strip() for v in value.split(",") if v.strip()]
    if key == "train_episodes" and isinstance(value, Mapping):
        bad = [v for v in value.values() if not _is(v, int)]
        if bad:
            raise SuiteError(f"{where}: setting {key}={value!r}: each shot's count must be a "
                             f"whole number, not {bad[0]!r}")
        check_settings({key: dict(value)}, where)
        return {str(k): v for k, v in value.items()}
    if key == "methods":
        ok = value == "*" or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    elif isinstance(default, list):
        kind = type(default[0]) if default else str  # an empty default lists names
        bad = [v for v in value if not _is(v, kind)]
        if bad:
            raise SuiteError(f"{where}: setting {key}={value!r}: {bad[0]!r} is not "
                             f"{_KINDS.get(kind, kind.__name__)}, as each item must be "
                             f"(default {default!r})")
        if default and not value:
            raise SuiteError(f"{where}: setting {key} = []: give at least one value (default "
                             f"{default!r}); an empty list leaves the suite without cells")
        ok = True
    elif isinstance(default, float) and _is(value, int):
        value, ok = float(value), True
    else:
        ok = _is(value, type(default))
    if not ok:
        kind = _KINDS.get(type(default), f"a {type(default).__name__}")
        raise SuiteError(f"{where}: setting {key}={value!r} must be {kind} like its default "
                         f"{default!r}")
    check_settings({key: value}, where)
    return value


_KINDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}


def _is(value: Any, kind: type) -> bool:
    """Whether ``value`` is a ``kind``, a bool counting only as a bool (not as the int 1)."""
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def apply_overrides(suite: Suite, assignments: Sequence[str], methods: Sequence[str],
                    registry: Registry) -> Suite:
    """``--set KEY=VALUE``: a suite setting, ``METHOD.HPARAM``, or a bare ``HPARAM`` applied to every
    selected method that has it. Unknown keys are an error listing every choice."""
    reg = registry
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
        if key == "task":
            raise SuiteError("--set task: the task kind is the suite's; choose a suite of the "
                             "kind you want (zoo suites)")
        if settings["entry"] and key in entry:  # an entry's own setting wins (np-bo's
            entry[key] = value                    # train_episodes is not the runner's)
            continue
        if key in settings:
            settings[key] = _check_setting(key, value, "--set", settings)
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
            if method not in reg.names("methods") and providing_distribution(method):
                raise SuiteError(f"--set {key}: method {method!r} is not installed: pip install "
                                 f"{providing_distribution(method)}")
            cls = reg.get("methods", method)
            if hparam == "kernel" and cls.uses_kernel:  # a kernel spec for this method alone
                overrides.setdefault(method, {})[hparam] = str(value)
                continue
            if hparam not in cls.all_defaults():
                kernel = " (and kernel: a kernel spec, zoo plugins -v lists the kernels)" \
                    if cls.uses_kernel else ""
                raise SuiteError(f"--set {key}: method {method!r} has no hyper-parameter "
                                 f"{hparam!r}; it has: {', '.join(sorted(cls.all_defaults()))}"
                                 f"{kernel}")
            overrides.setdefault(method, {})[hparam] = _as_declared(cls, hparam, text, value)
            continue
        owners = [m for m in methods if key in reg.get("methods", m).all_defaults()]
        if not owners:
            hparams = sorted({h for m in methods for h in reg.get("methods", m).all_defaults()})
            raise SuiteError(
                f"--set {key}: unknown key; choose a suite setting ({', '.join(sorted(settings))}), "
                f"a hyper-parameter of the selected methods ({', '.join(hparams)}), "
                "or METHOD.HYPERPARAMETER")
        for m in owners:
            overrides.setdefault(m, {})[key] = _as_declared(reg.get("methods", m), key, text,
                                                            value)
    return Suite(suite.name, settings, overrides, suite.references, suite.source, entry, parts)


def _as_declared(cls: Any, hparam: str, text: str, value: Any) -> Any:
    """A ``--set`` value for a hyper-parameter declared as a string is the text as written: a
    TOML literal such as ``nan``, ``inf`` or ``true`` would otherwise become a float or a bool."""
    declared = cls.all_hparams().get(hparam)
    return text.strip() if getattr(declared, "type", None) is str else value


def is_setting(suite: Suite, assignment: str) -> bool:
    """Whether a ``--set`` assignment names a suite setting (not a hyper-parameter)."""
    return assignment.partition("=")[0].strip() in suite.settings


def select_methods(suite: Suite, only: Iterable[str] | None = None, *,
                   registry: Registry) -> list[str]:
    """The suite's methods (``"*"``: every registered method of the suite's task kind), filtered by
    ``only``; the zoo's methods that the suite names but that are not installed are left out
    (:func:`missing_methods` names them). A named method of another kind, or one that does not
    implement its kind's interface, is an error saying what to do; so is a name in ``only`` that is
    not installed (with the distribution to install, if it is one of the zoo's)."""
    reg = registry
    kind = suite.settings["task"]
    task = reg.get("tasks", kind)
    wanted = suite.settings["methods"]
    installed = set(reg.names("methods"))
    if wanted == "*":
        names = sorted(n for n, c in reg.items("methods").items()
                       if getattr(c, "task", None) == kind)
    else:
        unknown = [n for n in wanted if n not in installed and not providing_distribution(n)]
        if unknown:
            raise SuiteError(f"{suite.where}: methods {unknown} are not installed and not the "
                             f"zoo's; installed: {', '.join(sorted(installed))}")
        names = [n for n in wanted if n in installed]
    only = [o.strip() for o in only or () if o.strip()]
    for o in only:
        if o not in installed and providing_distribution(o):
            raise SuiteError(f"method {o!r} is not installed: pip install "
                             f"{providing_distribution(o)}")
    for n in [*names, *(o for o in only if o in installed)]:
        cls = reg.get("methods", n)
        if getattr(cls, "task", None) != kind:
            raise SuiteError(
                f"method {n!r} solves {getattr(cls, 'task', None)!r} tasks, but suite "
                f"{suite.name!r} is a {kind} suite; choose {kind} methods (zoo methods lists each "
                f"method's task) or a suite of the method's kind (zoo suites)")
        task.check_method(cls)
    if only:
        for o in only:
            if o not in names:
                raise UnknownNameError(f"method for suite {suite.name!r}:", o, names)
        names = [n for n in names if n in only]
    return names


def missing_methods(suite: Suite, registry: Registry) -> dict[str, str]:
    """``{method: distribution}`` of the zoo's methods that the suite names (in its ``methods``,
    its ``[methods.NAME]`` tables or its parts' ``methods``; ``"*"``: every one of its task kind)
    but that are not installed."""
    reg = registry
    named = [*suite.method_overrides]
    if suite.settings["methods"] == "*":
        named += methods_of_kind(suite.settings["task"])
    for s in suite.part_settings():
        if s["methods"] != "*":
            named += s["methods"]
    installed = set(reg.names("methods"))
    return {m: providing_distribution(m) for m in sorted(set(named))
            if m not in installed and providing_distribution(m)}
