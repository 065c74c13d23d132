import pytest
import torch
from zoo_protonet import ProtoNet

from zoo import Episode
from zoo.testing import IdentityBackbone, check_batched_meta_loss


def test_logits_are_negative_squared_distances_to_class_means():
    support = torch.tensor([[0.0, 0.0], [2.0, 0.0], [10.0, 10.0], [10.0, 12.0]])
    ep = Episode(support, torch.tensor([0, 0, 1, 1]), torch.tensor([[1.0, 1.0]]),
                 torch.tensor([0]), way=2, shot=2)
    logits = ProtoNet(IdentityBackbone(2), way=2).logits(ep)
    # prototypes (1, 0) and (10, 11): squared distances 1 and 81 + 100
    assert torch.allclose(logits, torch.tensor([[-1.0, -181.0]]))


def test_query_at_a_prototype_is_classified_there():
    support = torch.randn(6, 2) + torch.tensor([[5.0, 0.0]] * 3 + [[-5.0, 0.0]] * 3)
    y = torch.tensor([0, 0, 0, 1, 1, 1])
    protos = torch.stack([support[:3].mean(0), support[3:].mean(0)])
    ep = Episode(support, y, protos, torch.tensor([0, 1]), way=2, shot=3)
    probs = ProtoNet(IdentityBackbone(2), way=2).predict(ep).probs
    assert (probs.argmax(1) == torch.tensor([0, 1])).all()


@pytest.mark.parametrize("dtype, rtol, grad_rtol", [(torch.float32, 1e-6, 1e-5),
                                                    (torch.float64, 1e-10, 1e-10)])
def test_a_batched_meta_batch_equals_the_episode_loop(dtype, rtol, grad_rtol):
    check_batched_meta_loss("protonet", dtype=dtype, rtol=rtol, grad_rtol=grad_rtol)
