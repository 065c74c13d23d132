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
