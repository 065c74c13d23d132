"""The zoo's own method families: the distribution that provides each of their method names, so
that a suite run with only some families installed can say what it skipped and what to install.
A third party's methods are not listed here; they are found only when installed."""

from __future__ import annotations

from zoo.hookspecs import DISTRIBUTION

C = "classification"
FAMILIES: dict[str, dict[str, str]] = {
    "abpml": {"abpml": C},
    "bayes-last-layer": {"bayes-last-layer": C},
    "bayesian-maml": {"abml": C, "bmaml": C},
    "bong": {"bong": "sequential", "bong-head": C},
    "dkt": {"dkt": C},
    "gmm-np": {"gmm-np": "regression"},
    "logistic-softmax": {"logistic-softmax": C},
    "maml": {"anil": C, "fomaml": C, "maml": C, "metasgd": C},
    "md-bfsc": {"gd-bfsc": C, "md-bfsc": C},
    "metric": {"baseline-pp": C, "feature-transfer": C, "matchingnet": C, "relationnet": C},
    "neural-processes": {
        "anp": "regression",
        "ba-np": "regression",
        "banp": "regression",
        "bnp": "regression",
        "ma-np": "regression",
    },
    "ove": {"ove": C},
    "protonet": {"protonet": C},
}
"""Plugin (entry-point name) -> the methods it registers and the task kind of each; its
distribution is ``bayes-meta-zoo-<plugin>``."""


def family_distribution(plugin: str) -> str:
    """The distribution of one of the zoo's plugins (``maml`` -> ``bayes-meta-zoo-maml``)."""
    return f"{DISTRIBUTION}-{plugin}"


def providing_distribution(method: str) -> str | None:
    """The distribution that provides ``method``, if it is one of the zoo's own; else ``None``."""
    for plugin, methods in FAMILIES.items():
        if method in methods:
            return family_distribution(plugin)
    return None


def methods_of_kind(task: str) -> list[str]:
    """The zoo's methods (installed or not) that solve ``task`` tasks."""
    return sorted(m for methods in FAMILIES.values() for m, kind in methods.items() if kind == task)
