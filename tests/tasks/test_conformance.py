"""Every built-in task kind passes :func:`zoo.testing.check_task` with its baseline."""

from __future__ import annotations

import pytest

from zoo.testing import check_task

KINDS = [("classification", "protonet", "glyphs", {"ways": [3], "shots": [1]}),
         ("regression", "gp", "sinusoid", {"context_sizes": [4]}),
         ("sequential", "online-logreg", "digits-stream", {}),
         ("integration", "mc", "gaussian-cosine", {})]


@pytest.mark.parametrize(("kind", "method", "dataset", "settings"), KINDS, ids=[k[0] for k in KINDS])
def test_task_kind_conforms(kind, method, dataset, settings):
    check_task(kind, method, dataset, **settings)


def test_data_of_another_kind_is_refused_naming_what_the_suite_needs():
    from zoo.errors import EpisodeError
    from zoo.plugins import load_dataset, registry

    regression = registry().get("tasks", "regression")
    with pytest.raises(EpisodeError, match="'glyphs' is not a function family; a regression suite "
                                           "needs one such as sinusoid"):
        regression.check_data(load_dataset("glyphs"), "glyphs")
