"""``predict`` is given an episode without its query labels, and the conformance checks shuffle
the queries: a method that reads the labels, or infers them from the queries' positions (they
arrive sorted by class), is caught; one declared transductive is not held to the permutation."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from zoo_protonet import ProtoNet

from zoo import Prediction
from zoo.backbones import conv4s
from zoo.episode import HIDDEN, UnlabelledEpisode
from zoo.tasks import BUILTIN
from zoo.testing import check_method, registry, toy_episode


class LabelReader(ProtoNet):
    name = "label-reader"

    def predict(self, episode):
        return Prediction(F.one_hot(episode.query_y, episode.way).double() * 0.9 + 0.1 / episode.way)


class PositionReader(ProtoNet):
    """Infers each query's class from its position (queries come sorted by class)."""

    name = "position-reader"

    def predict(self, episode):
        guessed = torch.arange(episode.way).repeat_interleave(episode.query)
        probs = F.one_hot(guessed, episode.way).double() * 0.9 + 0.1 / episode.way
        return Prediction(probs + 0 * self.logits(episode).double())


class OrderedQueries(PositionReader):
    name = "ordered-queries"
    transductive = True


@pytest.fixture
def registered():
    reg = registry()
    for cls in (LabelReader, PositionReader, OrderedQueries):
        reg.register("methods", cls.name, cls, owner="tests")
    yield
    for cls in (LabelReader, PositionReader, OrderedQueries):
        reg.unregister("methods", cls.name)


def test_the_unlabelled_episode_holds_no_query_labels():
    episode = toy_episode(3, 2, query=4)
    view = episode.unlabelled()
    assert isinstance(view, UnlabelledEpisode) and view.unlabelled() is view
    with pytest.raises(AttributeError, match="predict is given the query inputs without their labels"):
        view.query_y  # noqa: B018
    assert object.__getattribute__(view, "query_y") is None  # nothing to read by other means
    assert view.query == 4 and view.id == episode.id and view.way == 3 and view.shot == 2
    assert torch.equal(view.query_x, episode.query_x) and torch.equal(view.support_y, episode.support_y)
    moved = view.to("cpu")
    assert isinstance(moved, UnlabelledEpisode) and "query_y" not in repr(moved)
    assert "meta_loss" in HIDDEN


def test_the_runner_predicts_from_the_unlabelled_episode():
    """The classification kind's predict (what the runner and the validation call) hides the
    labels; a genuine method's prediction is the same as from the whole episode."""
    task = BUILTIN["classification"]()
    episode = toy_episode(3, 1)
    with pytest.raises(AttributeError, match="episode.query_y: predict is given"):
        task.predict(LabelReader(conv4s(), way=3), episode)
    method = ProtoNet(conv4s(), way=3).eval()
    with torch.no_grad():
        assert torch.equal(task.predict(method, episode).probs, method.predict(episode).probs)


def test_conformance_catches_a_method_that_reads_the_labels(registered):
    with pytest.raises(AssertionError, match="predict read the query labels"):
        check_method("label-reader")


def test_conformance_catches_a_method_that_reads_positions(registered):
    with pytest.raises(AssertionError, match="shuffling the queries does not shuffle the "
                                             "predictions alike"):
        check_method("position-reader")
    check_method("ordered-queries")  # declared transductive: not held to the permutation
    check_method("protonet")


def test_shuffled_queries_permute_a_genuine_method_s_predictions():
    """The property the check relies on, shown on ProtoNet directly."""
    method = ProtoNet(conv4s(), way=3).eval()
    episode = toy_episode(3, 1, query=3)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(0))
    shuffled = dataclasses.replace(episode, query_x=episode.query_x[perm],
                                   query_y=episode.query_y[perm])
    with torch.no_grad():
        assert torch.allclose(method.predict(shuffled.unlabelled()).probs,
                              method.predict(episode.unlabelled()).probs[perm])
