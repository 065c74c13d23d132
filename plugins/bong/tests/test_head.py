"""``bong-head``: the BONG updates as a few-shot head."""

import pytest
import torch

from zoo import HyperParameterError
from zoo.testing import build_for_tests, check_method, toy_episode


@pytest.mark.parametrize("hparams", [{}, {"curvature": "lin-ef"},
                                     {"rule": "blr", "family": "dg-mom", "curvature": "mc-ef",
                                      "samples": 4}])
def test_bong_head_conforms(hparams):
    check_method("bong-head", **hparams)


def test_bong_head_conforms_with_a_full_covariance_on_small_episodes():
    check_method("bong-head", settings=((2, 1), (3, 2)), family="fc")


def test_bong_head_updates_from_every_support_example_and_refuses_untractable_cells():
    method = build_for_tests("bong-head", 3, family="fc")
    episode = toy_episode(3, 2)
    phi, _ = method.head_features(episode)
    q = method.belief(phi, episode.support_y, episode)
    prior_precision = 1 / method.log_prior_var.exp()
    # each observation adds a GGN term (e_c (x) phi) R (e_c (x) phi)^T of rank C - 1 = 2 in the
    # span of the (centred, so rank-5) support features: the precision gained has rank 2 x 5
    gained = q.gaussian.precision() - prior_precision * torch.eye(len(q.mu), dtype=q.mu.dtype)
    assert torch.linalg.matrix_rank(gained.detach()) == 2 * torch.linalg.matrix_rank(phi) == 10
    with pytest.raises(HyperParameterError, match="bong-head.*not tractable"):
        build_for_tests("bong-head", 3, curvature="mc-hess", family="fc")
