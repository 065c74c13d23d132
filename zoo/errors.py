"""Errors the zoo raises for its users. Each message says what was wrong and what to do."""

from __future__ import annotations

from collections.abc import Iterable


class ZooError(Exception):
    """Base class of every error meant to be read by a user."""


class UnknownNameError(ZooError, KeyError):
    """A method, backbone, kernel, data set or suite name that nothing registered."""

    def __init__(self, kind: str, name: str, choices: Iterable[str]):
        self.kind, self.name, self.choices = kind, name, sorted(choices)
        listed = ", ".join(self.choices) or "(none registered)"
        super().__init__(f"unknown {kind} {name!r}; choose one of: {listed}")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class EpisodeError(ZooError, ValueError):
    """An episode that cannot be drawn from a split (too few classes or examples)."""


class DataMissingError(ZooError, FileNotFoundError):
    """Data files that are neither in the data directory nor downloadable here."""


class ChecksumError(ZooError):
    """A file whose digest differs from the published one."""


class NumericalError(ZooError, ArithmeticError):
    """Non-finite values or a matrix that stays indefinite after the jitter policy is spent."""


class PluginError(ZooError):
    """A plugin failed to load or register and strict mode is on."""


class HyperParameterError(ZooError, ValueError):
    """An unknown hyper-parameter, or a value that its declaration (zoo.hparams.HParam) refuses."""
