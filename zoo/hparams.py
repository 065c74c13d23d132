"""Hyper-parameter declarations: default, type, choices and range in one place, checked once.

A method declares its hyper-parameters on the class, in the spirit of benchopt's ``parameters``::

    hyperparameters = {"kl_weight": HParam(1e-4, gt=0, doc="weight of the KL term; 1 is the ELBO")}

Declarations merge along the class hierarchy (a subclass's entry replaces its parent's), and
:func:`resolve_hparams` checks every given value against them, so a plugin never checks
a hyper-parameter by hand and every mistake is reported in the same words: the method, the key,
the value, what is allowed, and what to do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

from zoo.errors import HyperParameterError

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_ARTICLE = {bool: "a bool", int: "an int", float: "a float", str: "a string"}
_INVALID = object()  # what _convert returns for a value of the wrong type


@dataclass(frozen=True)
class HParam:
    """One hyper-parameter: its ``default``, ``type`` (inferred from a non-``None`` default),
    allowed ``choices``, bounds (``gt``/``ge``/``lt``/``le``, as in pydantic) and ``doc``.

    A ``None`` default means "decided by the method" (e.g. a published setting); ``None`` is then
    also an allowed value. Strings (``zoo train --set``, the Python API) are converted to the type;
    other values must already have it and are kept as given (an ``int`` is accepted for a
    ``float``), so a resolved configuration, and the hash that names it, is what the user wrote.
    """

    default: Any
    _: KW_ONLY
    type: type | None = None
    choices: tuple[Any, ...] | None = None
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.type is None and self.default is not None:
            object.__setattr__(self, "type", type(self.default))
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))

    def allowed(self) -> str:
        """What values are allowed, in words: ``"a float > 0"``, ``"one of 'ml', 'pl'"``."""
        if self.choices is not None:
            text = "one of " + ", ".join(map(repr, self.choices))
        else:
            text = _ARTICLE.get(self.type, self.type.__name__ if self.type else "any value")
            bounds = [f"{op} {v:g}" for op, v in ((">", self.gt), (">=", self.ge), ("<", self.lt),
                                                   ("<=", self.le)) if v is not None]
            if bounds:
                text += " " + " and ".join(bounds)
        return text + (" or None" if self.default is None else "")

    def check(self, value: Any, *, method: str, key: str) -> Any:
        """``value`` converted (from a string) and validated; :class:`HyperParameterError` if not
        allowed, naming the method, the key, the value, the allowed values and the remedy."""
        if value is None and self.default is None:
            return None
        converted = self._convert(value)
        ok = converted is not _INVALID and (
            self.choices is None or converted in self.choices) and self._in_range(converted)
        if not ok:
            raise HyperParameterError(
                f"method {method!r}: hyper-parameter {key}={value!r} is not allowed; it must be "
                f"{self.allowed()} (default {self.default!r}): set it with "
                f"--set {method}.{key}=VALUE or leave it out")
        return converted

    def _convert(self, value: Any) -> Any:
        t = self.type
        if t is None:
            return value
        if isinstance(value, str) and t is not str:
            text = value.strip()
            if t is bool:
                low = text.lower()
                return True if low in _TRUE else False if low in _FALSE else _INVALID
            try:
                return t(text)
            except ValueError:
                return _INVALID
        if t is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif t is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, t)
        return value if ok else _INVALID

    def _in_range(self, value: Any) -> bool:
        if all(b is None for b in (self.gt, self.ge, self.lt, self.le)):
            return True
        if isinstance(value, float) and math.isnan(value):
            return False
        return ((self.gt is None or value > self.gt) and (self.ge is None or value >= self.ge)
                and (self.lt is None or value < self.lt) and (self.le is None or value <= self.le))

    def to_json(self) -> dict[str, Any]:
        """The declaration as plain data (``zoo methods --json``)."""
        out: dict[str, Any] = {"default": self.default,
                               "type": self.type.__name__ if self.type else None,
                               "allowed": self.allowed(), "doc": self.doc}
        if self.choices is not None:
            out["choices"] = list(self.choices)
        out.update({k: v for k, v in (("gt", self.gt), ("ge", self.ge), ("lt", self.lt),
                                       ("le", self.le)) if v is not None})
        return out



def as_hparam(declared: HParam | Any) -> HParam:
    """A declaration from an :class:`HParam` or, shorthand, a bare default value."""
    return declared if isinstance(declared, HParam) else HParam(declared)


def merge_hparams(classes: list[type]) -> dict[str, HParam]:
    """The ``hyperparameters`` declared by ``classes`` (base first), later ones overriding."""
    merged: dict[str, HParam] = {}
    for klass in classes:
        if "defaults" in vars(klass) and isinstance(vars(klass)["defaults"], Mapping):
            raise TypeError(f"{klass.__qualname__} declares `defaults`; declare "
                            "`hyperparameters = {name: HParam(default, ...)}` instead")
        merged.update({k: as_hparam(v) for k, v in vars(klass).get("hyperparameters", {}).items()})
    return merged


class Configurable:
    """What every method base shares: ``hyperparameters`` (name -> :class:`HParam`, or a bare
    default) merged along the class hierarchy, read by the runner without building a method."""

    name: ClassVar[str]
    hyperparameters: ClassVar[Mapping[str, HParam | Any]] = {}
    #: The trainer may evaluate a meta-batch's episodes as one vmapped call of ``meta_loss``
    #: (:mod:`zoo.batching`): it is a function of the episode's tensors and of draws made through
    #: :func:`zoo.batching.per_episode`, with no Python branch on tensor values outside the core's
    #: checks (a property where a hyper-parameter decides).
    batches_episodes: ClassVar[bool] = False

    @classmethod
    def all_hparams(cls) -> dict[str, HParam]:
        """Every hyper-parameter's declaration, merged along the class hierarchy."""
        return merge_hparams(list(reversed(cls.__mro__)))

    @classmethod
    def all_defaults(cls) -> dict[str, Any]:
        return {k: h.default for k, h in cls.all_hparams().items()}

    @classmethod
    def describe_hparams(cls) -> dict[str, dict[str, Any]]:
        """The declarations as plain data, for ``zoo methods --json``."""
        return {k: h.to_json() for k, h in cls.all_hparams().items()}

    @property
    def meta_batch(self) -> int:
        """Episodes whose losses the trainer averages per optimizer step: the ``meta_batch``
        hyper-parameter where a method declares one (the inner-loop family does), else 1."""
        return int(self.hparams.get("meta_batch", 1))  # type: ignore[attr-defined]


def resolve_hparams(cls: type[Configurable], given: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overridden by ``given``, each value checked against its declaration; unknown keys
    are an error listing the known ones."""
    declared = cls.all_hparams()
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise HyperParameterError(f"method {cls.name!r}: no hyper-parameter(s) {unknown}; "
                                  f"known: {sorted(declared)}; check the spelling")
    return {k: h.check(given[k], method=cls.name, key=k) if k in given else h.default
            for k, h in declared.items()}
