"""Every built-in task kind passes :func:`zoo.testing.check_task` with its baseline."""

from __future__ import annotations

import re

import pytest

from zoo.testing import check_task

KINDS = [("classification", "protonet", "glyphs", {"ways": [3], "shots": [1]}),
         ("regression", "gp", "sinusoid", {"context_sizes": [4]}),
         ("sequential", "online-logreg", "digits-stream", {}),
         ("sequential", "online-blr", "diabetes-stream",
          {"stream_length": 100, "eval_steps": [0, 50, 100]}),
         ("integration", "mc", "gaussian-cosine", {})]


@pytest.mark.parametrize(("kind", "method", "dataset", "settings"), KINDS,
                         ids=[f"{k[0]}-{k[1]}" for k in KINDS])
def test_task_kind_conforms(kind, method, dataset, settings):
    check_task(kind, method, dataset, **settings)


def test_data_of_another_kind_is_refused_naming_what_the_suite_needs():
    from zoo.errors import EpisodeError
    from zoo.plugins import load_dataset, registry

    regression = registry().get("tasks", "regression")
    with pytest.raises(EpisodeError, match="'glyphs' is not a function family; a regression suite "
                                           "needs one such as sinusoid"):
        regression.check_data(load_dataset("glyphs"), "glyphs")


@pytest.mark.parametrize(("kind", "built", "scored", "named"), [
    ("regression", {"x_dim": 1, "y_dim": 1}, {"x_dim": 2, "y_dim": 1}, "x_dim = 2, y_dim = 1"),
    ("sequential", {"dim": 10, "classes": 0}, {"dim": 10, "classes": 3}, "dim = 10, classes = 3"),
    ("integration", {"dim": 2}, {"dim": 5}, "dim = 5")])
def test_a_model_is_scored_only_on_data_of_the_shape_it_was_built_for(kind, built, scored, named):
    """The kinds whose models are built from the data's dimensions refuse test data of other
    dimensions before any work, naming both shapes; equal shapes pass."""
    from types import SimpleNamespace

    from zoo.errors import EpisodeError
    from zoo.plugins import registry

    task = registry().get("tasks", kind)
    train, same, other = (SimpleNamespace(name=n, **shape) for n, shape in
                          (("a", built), ("b", built), ("c", scored)))
    task.check_compatible(train, same, "m")
    with pytest.raises(EpisodeError, match=rf"m was built for 'a' \(.*\) and cannot be scored on "
                                           rf"'c' \({named}\); choose a test data set"):
        task.check_compatible(train, other, "m")


class _Splits:
    splits = {"test": (0,)}

    def to(self, device):
        return self


def test_check_data_object_refuses_what_the_runner_cannot_use():
    from zoo.testing import check_data_object

    good = _Splits()
    assert check_data_object(good, "k", "d") is good

    class NoSplits(_Splits):
        splits = None

    class BadSplit(_Splits):
        splits = {"test": 0}

    class NoTo:
        splits = {"test": (0,)}

    class ToNothing(_Splits):
        def to(self, device):  # moves in place and forgets to return it
            return None

    for bad, words in ((NoSplits(), "no `splits`"), (BadSplit(), "len()"),
                       (NoTo(), "no `to(device)`"), (ToNothing(), "returned None")):
        with pytest.raises(AssertionError, match=re.escape(words)):
            check_data_object(bad, "k", "d")


def test_check_task_asks_summarise_for_what_the_runner_prints(monkeypatch):
    from zoo.tasks.regression import Regression

    original = Regression.summarise
    monkeypatch.setattr(Regression, "summarise", lambda self, records: {
        k: v for k, v in original(self, records).items() if k != "eval_seconds_per_episode"})
    with pytest.raises(AssertionError, match="eval_seconds_per_episode"):
        check_task("regression", "constant", "sinusoid", context_sizes=[3])
