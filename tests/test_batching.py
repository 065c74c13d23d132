"""The episodes of a meta-batch as one batched call (zoo.batching): when it runs, what it leaves
untouched when it does not, and the loop's numbers when it does (the per-method equivalence tests
are `check_batched_meta_loss` in the protonet and dkt plugins)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from zoo_dkt import DKT
from zoo_md_bfsc import GDBFSC, MDBFSC

from zoo import Method, Prediction
from zoo.batching import _Batch, _entered, batched_losses, per_episode, stack_episodes
from zoo.errors import ZooError
from zoo.jitter import JitterPolicy
from zoo.plugins import registry
from zoo.seeds import draw_seed, episode_generator, episode_own_seed
from zoo.testing import build_for_tests, check_batched_meta_loss, toy_episode


def batch(n: int = 3, way: int = 3, shot: int = 1) -> list:
    return [toy_episode(way, shot, seed=s) for s in range(n)]


def buffers(method: nn.Module) -> dict[str, torch.Tensor]:
    return {k: b.clone() for k, b in method.named_buffers()}


def unchanged(method: nn.Module, before: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(b, before[k]) for k, b in method.named_buffers())


def test_stacking_needs_episodes_of_one_shape():
    same = batch()
    assert stack_episodes(same)["support_x"].shape == (3, *same[0].support_x.shape)
    assert stack_episodes([*same, toy_episode(3, 2)]) is None
    assert stack_episodes([*same, toy_episode(2, 1)]) is None


@pytest.mark.parametrize("episodes", [batch(1), [*batch(2), toy_episode(3, 2)]],
                         ids=["one episode", "two shapes"])
def test_the_loop_runs_where_one_call_cannot(episodes):
    method = build_for_tests("protonet", 3).train()
    before = buffers(method)
    assert batched_losses(method, episodes, method.meta_loss) is None
    assert unchanged(method, before)


def test_draws_are_each_episodes_own_and_a_method_that_cannot_declares_it():
    assert DKT.batches_episodes and not GDBFSC.batches_episodes
    elbo = build_for_tests("md-bfsc", 3, steps_train=1, samples_train=8)
    predictive = build_for_tests("md-bfsc", 3, steps_train=1, samples_train=8, loss="predictive")
    assert elbo.batches_episodes and not predictive.batches_episodes
    assert batched_losses(predictive.train(), batch(), predictive.meta_loss) is None

    class Declares(MDBFSC):  # a wrong declaration fails loudly: it does not share one seed
        batches_episodes = True

    wrong = Declares(elbo.backbone, way=3, kernel=elbo.kernel, steps_train=1, samples_train=8,
                     loss="predictive")
    with pytest.raises(ZooError, match="per_episode"):
        batched_losses(wrong.train(), batch(), wrong.meta_loss)


def test_per_episode_draws_are_the_loops():
    episodes = batch()
    seeds = torch.stack([torch.tensor(draw_seed(e, 1)) for e in episodes])

    def one(slot):
        with _entered(_Batch(episodes, slot)):
            return per_episode(episodes[0], lambda e: torch.tensor(draw_seed(e, 1)))

    assert torch.equal(torch.func.vmap(one, randomness="same")(torch.arange(3)), seeds)
    assert per_episode(episodes[1], lambda e: torch.tensor(draw_seed(e, 1))) == seeds[1]
    with _entered(_Batch(episodes, torch.tensor(0))):  # the episode's seed is not the batch's
        for ask in (lambda e: draw_seed(e, 1), episode_generator, episode_own_seed):
            with pytest.raises(ZooError, match="per_episode"):
                ask(episodes[0])


@pytest.mark.parametrize("name", ["md-bfsc", "gd-bfsc", "dkt", "ove", "logistic-softmax"])
def test_gp_methods_take_one_episode_per_step_unless_told(name):
    assert registry().get("methods", name).all_hparams()["meta_batch"].default == 1


def test_a_failed_check_drops_the_batched_result_untouched():
    method = build_for_tests("dkt", 3).train()
    episodes = batch()
    episodes[1].support_x[0, 0, 0, 0] = torch.nan  # non-finite features in one episode
    before = buffers(method)
    assert batched_losses(method, episodes, method.meta_loss) is None
    assert unchanged(method, before)


class Factorises(Method):
    """A loss through the jitter policy's Cholesky of ``diag(support_x)``."""

    name = "factorises-test"
    batches_episodes = True

    def __init__(self) -> None:
        super().__init__(nn.Identity(), way=2)
        self.jitter = JitterPolicy()

    def meta_loss(self, episode):
        L = self.jitter.cholesky(torch.diag_embed(episode.support_x), "diag", "test")
        return L.diagonal().log().sum()

    def predict(self, episode):  # pragma: no cover - not exercised
        return Prediction(torch.ones(1, 2) / 2)


def test_a_factorisation_that_needs_jitter_is_left_to_the_loop():
    def episode(diag):
        x = torch.tensor(diag, dtype=torch.float64)
        y = torch.zeros(2, dtype=torch.long)
        return toy_episode(2, 1).__class__(x, y, x, y, way=2, shot=1, info={"seed": 0})

    method = Factorises()
    good = [episode([1.0, 2.0]), episode([3.0, 4.0])]
    losses = batched_losses(method, good, method.meta_loss)
    assert torch.allclose(losses, torch.stack([method.meta_loss(e) for e in good]), rtol=1e-12)
    singular = [episode([1.0, 2.0]), episode([1.0, 0.0])]
    assert batched_losses(method, singular, method.meta_loss) is None
    assert method.jitter.uses == 0  # the batched call tried no jitter; the loop will
    method.meta_loss(singular[1])
    assert method.jitter.uses > 0


def test_a_cumulative_running_average_keeps_the_loop():
    method = build_for_tests("protonet", 3).train()
    for m in method.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None
    assert batched_losses(method, batch(), method.meta_loss) is None


def test_running_averages_of_a_meta_batch_are_the_loops_in_any_mode():
    """Layers in evaluation mode, or without running averages, are left as the loop leaves them."""
    looped, batched = (build_for_tests("protonet", 3).double().train() for _ in range(2))
    for method in (looped, batched):
        method.backbone.body[1].eval()
        method.backbone.body[5].track_running_stats = False
    episodes = [dataclasses.replace(e, support_x=e.support_x.double(),
                                    query_x=e.query_x.double()) for e in batch(4)]
    for e in episodes:
        looped.meta_loss(e)
    batched_losses(batched, episodes, batched.meta_loss)
    expected = dict(looped.named_buffers())
    for key, b in batched.named_buffers():
        assert torch.allclose(b, expected[key], rtol=1e-12, atol=1e-14), key


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["protonet", "dkt", "md-bfsc"])
def test_a_batched_meta_batch_equals_the_loop_on_cuda(name):
    options = {"steps_train": 2, "samples_train": 32} if name == "md-bfsc" else {}
    check_batched_meta_loss(name, dtype=torch.float64, rtol=1e-10, grad_rtol=1e-10,
                            device="cuda", **options)
