"""The classic baselines: their formulas on tiny inputs, the class table, and conformance."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zoo_metric import BaselinePP, CosineLinear, FeatureTransfer, MatchingNet, RelationNet

from zoo import Episode, EpisodeError, HyperParameterError
from zoo.testing import IdentityBackbone


def episode(classes=("a", "b"), seed: int = 0) -> Episode:
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[3.0, 0.0], [-3.0, 1.0]])
    sy, qy = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 1])
    return Episode(centres[sy] + 0.1 * torch.randn(4, 2, generator=g), sy,
                   centres[qy] + 0.1 * torch.randn(3, 2, generator=g), qy, way=2, shot=2,
                   info={"seed": 3, "classes": list(classes), "index": seed})


def test_class_table_grows_persists_and_refuses_overflow():
    m = FeatureTransfer(IdentityBackbone(2, learnable=True), way=2, num_classes=3)
    m.meta_loss(episode(("x", "y")))
    m.meta_loss(episode(("y", "z")))
    assert m.pretraining.class_index == {"x": 0, "y": 1, "z": 2}
    # the rows: "y" is row 1 in both episodes
    ep = episode(("z", "y"))
    assert m.pretraining.global_labels(ep, ep.support_y).tolist() == [2, 2, 1, 1]
    again = FeatureTransfer(IdentityBackbone(2, learnable=True), way=2, num_classes=3)
    again.load_state_dict(m.state_dict())
    assert again.pretraining.class_index == m.pretraining.class_index
    with pytest.raises(HyperParameterError, match="num_classes"):
        m.meta_loss(episode(("w", "x")))
    ep = episode()
    ep.info.pop("classes")
    with pytest.raises(EpisodeError, match="classes"):
        FeatureTransfer(IdentityBackbone(2, learnable=True), way=2).meta_loss(ep)


def test_pretraining_loss_is_cross_entropy_over_global_rows():
    m = FeatureTransfer(IdentityBackbone(2, learnable=True), way=2, num_classes=4)
    m.pretraining.class_index = {"q": 0, "b": 1, "a": 2}
    ep = episode(("a", "b"))
    x = torch.cat([ep.support_x, ep.query_x])
    y = torch.tensor([2, 2, 1, 1, 2, 1, 1])
    assert torch.allclose(m.meta_loss(ep), F.cross_entropy(m.pretraining.classifier(x), y))


def test_feature_transfer_logistic_regression_separates_the_classes():
    with torch.no_grad():
        probs = FeatureTransfer(IdentityBackbone(2, learnable=True), way=2).eval().predict(episode()).probs
    assert (probs.argmax(1) == torch.tensor([0, 1, 1])).all()
    assert torch.allclose(probs.sum(1), torch.ones(3))


def test_cosine_classifier_is_scaled_cosine_similarity():
    w = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    out = CosineLinear(w, scale=10.0)(torch.tensor([[2.0, 0.0]]))
    assert torch.allclose(out, torch.tensor([[10.0, 10.0 / 2 ** 0.5]]))


def test_baseline_pp_fine_tuning_separates_the_classes():
    m = BaselinePP(IdentityBackbone(2, learnable=True), way=2, finetune_epochs=20).eval()
    with torch.no_grad():
        probs = m.predict(episode()).probs
    assert (probs.argmax(1) == torch.tensor([0, 1, 1])).all()


def test_matching_net_without_fce_is_the_attention_kernel_sum():
    m, ep = MatchingNet(IdentityBackbone(2, learnable=True), way=2, fce=False, scale=5.0), episode()
    s, q = ep.support_x, ep.query_x
    cos = (q / q.norm(dim=1, keepdim=True)) @ (s / s.norm(dim=1, keepdim=True)).T
    a = torch.softmax(5.0 * cos, 1)
    expected = torch.stack([a[:, :2].sum(1), a[:, 2:].sum(1)], 1)
    with torch.no_grad():
        assert torch.allclose(m.predict(ep).probs, expected, atol=1e-6)
    assert torch.allclose(m.meta_loss(ep), F.nll_loss(expected.log(), ep.query_y), atol=1e-5)


def test_matching_net_fce_support_embedding_is_input_plus_both_directions():
    m, ep = MatchingNet(IdentityBackbone(2, learnable=True), way=2), episode()
    s = ep.support_x
    h = m.support_lstm(s[None])[0][0]
    assert torch.allclose(m.embed_support(s), s + h[:, :2] + h[:, 2:])


def test_relation_net_compares_queries_with_summed_support_embeddings():
    m, ep = RelationNet(IdentityBackbone(2, learnable=True), way=2), episode()
    s = ep.support_x
    classes = torch.stack([s[:2].sum(0), s[2:].sum(0)])
    q = ep.query_x[1]
    score = m.relation(torch.cat([q, classes[1]]))
    assert torch.allclose(m.scores(ep)[1, 1], score.squeeze())
    target = F.one_hot(ep.query_y, 2).float()
    assert torch.allclose(m.meta_loss(ep), ((m.scores(ep) - target) ** 2).mean())


def test_unpooled_convnet_keeps_its_weights_and_drops_the_last_two_pools():
    from zoo.backbones import conv4s

    torch.manual_seed(0)
    net = conv4s()
    before = [p.clone() for p in net.parameters()]
    x = torch.randn(3, 1, 28, 28)
    net.eval().unpool_last(2)
    assert net.feature_shape == (64, 7, 7) and net.feature_dim == 64 * 7 * 7
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))
    convs = [m for m in net.body if isinstance(m, nn.Conv2d)]
    norms = [m for m in net.body if isinstance(m, nn.BatchNorm2d)]
    h = x
    for i, (conv, norm) in enumerate(zip(convs, norms)):
        h = torch.relu(norm(conv(h)))
        h = F.max_pool2d(h, 2) if i < 2 else h
    assert torch.allclose(net(x), h.flatten(1))


def test_relation_net_on_conv4s_is_sung_et_al_architecture():
    """Maps 64x7x7, class maps summed over shots, two conv blocks on the channel-concatenated
    pair, FC 8, FC 1, sigmoid."""
    from zoo.testing import build_for_tests, toy_episode

    m = build_for_tests("relationnet", 3).eval()
    assert m.backbone.feature_shape == (64, 7, 7)
    convs = [x for x in m.relation.modules() if isinstance(x, nn.Conv2d)]
    fcs = [x for x in m.relation.modules() if isinstance(x, nn.Linear)]
    assert [c.in_channels for c in convs] == [128, 64]
    assert [(f.in_features, f.out_features) for f in fcs] == [(64, 8), (8, 1)]
    assert isinstance(m.relation[-1], nn.Sigmoid)
    ep = toy_episode(3, 2, query=2)
    with torch.no_grad():
        maps = m.backbone(torch.cat([ep.support_x, ep.query_x])).view(-1, 64, 7, 7)
        support, query = maps[:6], maps[6:]
        cls = support[ep.support_y == 2].sum(0)
        expected = m.relation(torch.cat([query[1], cls])[None]).squeeze()
        assert torch.allclose(m.scores(ep)[1, 2], expected, atol=1e-6)


def test_relation_net_meta_training_beats_chance():
    """Each class a bright 8x8 square at its own place; 30 meta-steps. The former relation module
    (an MLP on pooled 64-d vectors) reached 0.24 here."""
    from zoo.testing import build_for_tests

    def squares(seed: int) -> Episode:
        g = torch.Generator().manual_seed(seed)
        corners = torch.randint(0, 20, (5, 2), generator=g)
        y = torch.arange(5).repeat_interleave(2)  # 1 support and 1 query per class
        x = 0.2 * torch.randn(10, 1, 28, 28, generator=g)
        for i, c in enumerate(y.tolist()):
            r, s = corners[c].tolist()
            x[i, 0, r:r + 8, s:s + 8] += 1.0
        return Episode(x[0::2], y[0::2], x[1::2], y[1::2], way=5, shot=1, info={"seed": seed})

    torch.manual_seed(0)
    m = build_for_tests("relationnet", 5).train()
    opt = torch.optim.Adam(m.param_groups())
    for i in range(30):
        opt.zero_grad()
        m.meta_loss(squares(i)).backward()
        opt.step()
    m.eval()
    with torch.no_grad():
        hits = torch.cat([m.predict(ep).probs.argmax(1) == ep.query_y
                          for ep in (squares(10_000 + i) for i in range(20))])
    assert hits.double().mean() > 0.6
