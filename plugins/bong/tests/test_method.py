"""The ``bong`` method over the sequential task kind."""

import pytest
import torch
from zoo_bong.beliefs import FAMILIES
from zoo_bong.method import Bong
from zoo_bong.rules import RULES, TRACTABLE

from zoo import HyperParameterError
from zoo.data import load_digits_stream
from zoo.testing import check_task, registry

SHORT = {"stream_length": 20, "eval_steps": [0, 20]}


def tractable_combinations() -> list[str]:
    """Every accepted ``rule/curvature/family``."""
    return [f"{r}/{c}/{f}" for r in RULES for f in FAMILIES for c in TRACTABLE[f]]


@pytest.mark.parametrize("hparams", [
    {"network": "linear"},
    {"network": "linear", "family": "dg", "dg_mean": "vd-ekf"},
    {"network": "mlp", "rule": "blr", "curvature": "mc-ef", "family": "dg", "samples": 4,
     "predictive": "lin-mc", "predictive_samples": 4},
    {"network": "cnn", "rule": "bbb", "family": "dlr", "rank": 2, "iterations": 2, "alpha": 1e-3,
     "predictive": "mc", "predictive_samples": 4},
])
def test_bong_conforms_to_the_sequential_kind(hparams):
    check_task("sequential", "bong", "digits-stream", **SHORT, hparams=hparams)


def test_untractable_combinations_are_refused_naming_the_accepted_ones():
    with pytest.raises(HyperParameterError, match="'bong'.*mc-hess.*dlr.*not tractable.*fc: mc-ef"):
        Bong(dim=64, classes=10, curvature="mc-hess", family="dlr")
    with pytest.raises(HyperParameterError, match="dg_mean = 'vd-ekf' applies only to family"):
        Bong(dim=64, classes=10, family="dlr", dg_mean="vd-ekf")
    assert "bbb/mc-ef/dlr" in tractable_combinations()
    assert "bong/mc-hess/dg-mom" in tractable_combinations()


def _run(method, stream_seed, steps=15):
    data = load_digits_stream()
    task = registry().get("tasks", "sequential")
    get = task.episodes(data, "test", {"stream_length": steps, "eval_steps": [steps]},
                        stream_seed, training=False)
    return task.predict(method, get(0)).probs[-1]


def test_draws_are_seeded_by_the_stream():
    torch.manual_seed(0)
    method = Bong(dim=64, classes=10, network="linear", curvature="mc-ef", family="dg",
                  samples=3, predictive="mc", predictive_samples=3)
    assert torch.equal(_run(method, 0), _run(method, 0))
    assert not torch.equal(_run(method, 0), _run(method, 1))


def test_bong_learns_digits_from_one_pass():
    torch.manual_seed(0)
    method = Bong(dim=64, classes=10, network="linear", prior_var=1.0)
    probs = _run(method, 0, steps=150)
    held = load_digits_stream().held_out
    error = (probs.argmax(1) != load_digits_stream().y[held]).float().mean()
    assert error < 0.35  # chance is 0.9


def test_validation_streams_never_see_the_test_examples():
    data = load_digits_stream()
    val_pool, val_held = data.indices("val")
    assert not set(val_pool.tolist()) & set(data.held_out.tolist())
    assert not set(val_held.tolist()) & set(data.held_out.tolist())
    assert not set(val_pool.tolist()) & set(val_held.tolist())
    assert torch.equal(data.indices("test")[1], data.held_out)


def test_mnist_stream_names_the_four_files_and_where_they_go(tmp_path):
    from zoo import DataMissingError
    from zoo.data import load_mnist_stream

    raw = tmp_path / "mnist" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte.gz").touch()
    (raw / "t10k-labels-idx1-ubyte").touch()
    with pytest.raises(DataMissingError) as err:
        load_mnist_stream(tmp_path, download=False)
    message = str(err.value)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte", "DIR/mnist/MNIST/raw/", "--data-dir DIR"):
        assert name in message
    assert "missing: train-labels-idx1-ubyte, t10k-images-idx3-ubyte)" in message


def _write_idx(path, array, magic: int) -> None:
    import struct

    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape))
        f.write(array.astype("uint8").tobytes())


@pytest.fixture
def fake_mnist(tmp_path):
    """MNIST's four idx files in torchvision's layout with random images (2,600 train, 1,100 test);
    a pixel encodes the label so that the stream's order can be checked."""
    import numpy as np

    raw = tmp_path / "mnist" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 2600), ("t10k", 1100)):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 256, (n, 28, 28))
        images[:, 0, 0] = labels
        _write_idx(raw / f"{split}-images-idx3-ubyte", images, 0x803)
        _write_idx(raw / f"{split}-labels-idx1-ubyte", labels, 0x801)
    return tmp_path


def test_mnist_stream_reads_the_papers_splits_from_idx_files(fake_mnist):
    from zoo.data import load_mnist_stream

    data = load_mnist_stream(fake_mnist, download=False)
    assert data.x.shape == (3500, 784) and float(data.x.min()) >= 0 and float(data.x.max()) <= 1
    assert torch.equal((data.x[:, 0] * 255).round().long(), data.y)  # images and labels aligned
    assert (len(data.pool), len(data.held_out)) == (2000, 1000)
    val_pool, val_held = data.indices("val")  # tuning: the same stream, scored on 500 others
    assert torch.equal(val_pool, data.pool) and len(val_held) == 500
    assert not set(val_held.tolist()) & (set(data.pool.tolist()) | set(data.held_out.tolist()))



@pytest.mark.parametrize("name", ["mlp", "linear"])
def test_the_direct_forward_of_linear_stacks_is_the_modules(name):
    from torch.func import functional_call, vmap
    from zoo_bong.networks import build_network, flat_function

    torch.manual_seed(0)
    net = build_network(name, 5, 3, hidden=7)
    theta, f = flat_function(net)
    thetas = theta + 0.1 * torch.randn(4, len(theta), dtype=theta.dtype)
    x = torch.randn(6, 5)
    names = [n for n, _ in net.named_parameters()]
    sizes = [p.numel() for p in net.parameters()]
    shapes = [p.shape for p in net.parameters()]

    def module_f(flat):
        params = {n: c.reshape(s) for n, c, s in zip(names, flat.split(sizes), shapes)}
        return functional_call(net, params, (x.to(flat.dtype),))

    assert torch.equal(f(theta, x), module_f(theta))
    assert torch.equal(vmap(lambda t: f(t, x))(thetas), vmap(module_f)(thetas))
    # a batch of parameter vectors: batched products on [K, ...] views of the rows
    torch.testing.assert_close(f(thetas, x), vmap(module_f)(thetas), rtol=0, atol=1e-15)


@pytest.mark.parametrize(("family", "curvature"), [("dg", "lin-ef"), ("dlr", "lin-hess"),
                                                  ("fc-mom", "lin-hess")])
def test_a_compiled_bong_makes_the_eager_updates(family, curvature):
    # compile = true by inductor with its C++ wrapper: dg and dlr the whole update (dlr's eigh
    # and Cholesky solves are library calls inside the program), fc-mom the curvature; the same
    # beliefs to rounding
    from zoo_bong.method import Bong

    torch.manual_seed(0)
    data = [(torch.rand(5), torch.tensor(i % 3)) for i in range(3)]
    beliefs = []
    for flag in (False, True):
        torch.manual_seed(1)  # the same initial weights
        method = Bong(dim=5, classes=3, network="mlp", hidden=8, family=family, rank=2,
                      curvature=curvature, compile=flag)
        state = method.init()
        for x, y in data:
            state = method.update(state, x, y)
        beliefs.append(state.belief)
    torch.testing.assert_close(beliefs[1].mu, beliefs[0].mu, rtol=0, atol=1e-14)
    torch.testing.assert_close(beliefs[1].gaussian.variance(), beliefs[0].gaussian.variance(),
                               rtol=1e-12, atol=0)


def test_compile_is_refused_for_mc_hess_before_any_work():
    from zoo_bong.method import Bong

    with pytest.raises(HyperParameterError, match="compile = true applies to the curvatures"):
        Bong(dim=5, classes=3, network="mlp", curvature="mc-hess", family="dg", compile=True)


#: One cell of every rule in every fixed-shape family, each curvature in each family and rule at
#: least once (the dg cell of blr with vd-ekf's mean: its mixed precision is checked mid-step).
COMPILED_CELLS = [
    (rule, family, ("mc-ef", "lin-hess", "lin-ef")[(i + j) % 3])
    for i, rule in enumerate(RULES) for j, family in enumerate(("dg", "dg-mom", "dlr"))]


@pytest.mark.parametrize(("rule", "family", "curvature"), COMPILED_CELLS)
def test_a_compiled_update_makes_the_eager_beliefs_with_one_graph(rule, family, curvature,
                                                                  monkeypatch):
    # compile = true on a fixed-shape family: the whole update (curvature of every iterate, the
    # steps, their checks) as one program, traced here by aot_eager (the graph inductor fuses);
    # the same beliefs and the same generator stream (MC-EF's draws) as the eager updates
    import torch._dynamo
    from zoo_bong import method as bong_method

    monkeypatch.setattr(bong_method, "BACKEND", "aot_eager")
    gen = torch.Generator().manual_seed(2)
    data = [(torch.rand(5, generator=gen), torch.tensor(i % 3)) for i in range(5)]
    dg_mean = "vd-ekf" if (rule, family) == ("blr", "dg") else "ngd"
    runs = []
    for flag in (False, True):
        torch.manual_seed(1)  # the same initial weights
        method = Bong(dim=5, classes=3, network="mlp", hidden=8, rule=rule, family=family,
                      curvature=curvature, rank=3, samples=4, dg_mean=dg_mean,
                      alpha=0.05 if rule in ("bong", "blr") else 1e-3,
                      iterations=2 if rule in ("blr", "bbb") else 1, compile=flag)
        state = method.init()
        with torch._dynamo.config.patch(error_on_recompile=True):
            for x, y in data:
                state = method.update(state, x, y)
        runs.append((state.belief.parts(), torch.rand(1, generator=state.generator)))
    for compiled, eager in zip(runs[1][0], runs[0][0]):
        torch.testing.assert_close(compiled, eager, rtol=1e-12, atol=1e-14)
    assert torch.equal(runs[1][1], runs[0][1])


def test_a_compiled_update_that_fails_raises_the_eager_updates_error(monkeypatch):
    # the program cannot stop on a value: a failing check makes its result invalid, and the
    # update is made again eagerly from the same draws, which names what failed
    from zoo_bong import method as bong_method
    from zoo_bong.beliefs import BeliefError

    monkeypatch.setattr(bong_method, "BACKEND", "aot_eager")
    for flag in (False, True):
        torch.manual_seed(1)
        method = Bong(dim=5, classes=3, network="mlp", hidden=8, rule="bog", family="dg-mom",
                      curvature="mc-ef", samples=4, alpha=1e4, prior_var=1.0, compile=flag)
        with pytest.raises(BeliefError, match="dg-mom belief lost positive variances"):
            method.update(method.init(), torch.rand(5), torch.tensor(1))


def test_compiled_methods_of_many_configurations_share_no_cache(monkeypatch):
    # each method's program has its own code object, so a process that runs more configurations
    # than Dynamo's recompile limit (8 graphs per code object) compiles each of them
    import torch._dynamo
    from zoo_bong import method as bong_method

    monkeypatch.setattr(bong_method, "BACKEND", "aot_eager")
    with torch._dynamo.config.patch(recompile_limit=1):
        for rule, family, curvature in COMPILED_CELLS[:3]:
            method = Bong(dim=5, classes=3, network="linear", rule=rule, family=family,
                          curvature=curvature, samples=2, rank=2, compile=True)
            method.update(method.init(), torch.rand(5), torch.tensor(0))
