"""Conformance checks every registered component must pass, and small fixtures, importable by
plugins' tests (in the spirit of gpytorch's ``BaseKernelTestCase``).

- :func:`check_method`: probabilities of shape ``[Q, way]`` that sum to one, predicted from the
  episode without its query labels (as the runner asks); the same probabilities for the same
  episode whatever the global RNG state; shuffled queries give the predictions shuffled alike
  (unless the method declares ``transductive``); a finite ``meta_loss`` whose gradient reaches
  the backbone; all of it for 2-way 1-shot and 20-way 5-shot episodes; and, for a method that
  declares it scores any way (:meth:`zoo.Method.scores_any_way`), 20-way episodes scored by a
  model built 2-way.
- :func:`check_kernel`: a symmetric positive semi-definite gram matrix, ``gram_diag`` (the
  outputscale times the subclass's ``base_diag``) equal to its diagonal, per-class batching,
  gradients that reach the kernel's parameters and the features.
- :func:`check_dataset`: disjoint splits, class sizes, what ``gather`` returns, episodes that are
  a function of their coordinates.
- :func:`check_task`: a task kind with one of its methods on one data set: episodes that are a
  function of their coordinates, an admissible prediction, a JSON record, a summary and a finite
  selection value from the kind's own functions.
- :func:`check_batched_meta_loss`: a method that declares ``batches_episodes`` gives the
  per-episode loop's losses, gradients and BatchNorm running averages from one batched call over
  a meta-batch (:mod:`zoo.batching`).
- :func:`check_regression_method`: a regression method at context sizes 0, 1 and 5: a finite
  ``meta_loss`` that reaches its parameters, an admissible prediction that does not depend on the
  global RNG, and, where it has evidence bounds, ``ELBO <= IW bound`` (exact on shared draws).

Fixtures: :func:`toy_episode` (class-dependent images), :func:`tiny_episode` (four-feature
vectors, float64), :func:`line_episode` (one feature), :func:`softmax_marginals` and the reference
:func:`exact_expected_log_softmax`; backbones :class:`IdentityBackbone` and
:class:`TanhBackbone`; :class:`GaussianLikelihood`, a likelihood with closed-form expectations to
test variational algebra against. :func:`registry` is the process-wide registry, for tests that
build a registered component by name.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from zoo.backbones import Backbone
from zoo.data.base import FewShotDataset
from zoo.episode import Episode, EpisodeSampler, episode_seed
from zoo.gp import DTYPE
from zoo.io import json_line
from zoo.kernels import Kernel
from zoo.method import Method, build_method
from zoo.plugins import registry
from zoo.variational import Expectations

__all__ = ["GaussianLikelihood", "IdentityBackbone", "TanhBackbone", "build_for_tests",
           "check_algebra_routes", "check_batched_meta_loss", "check_data_object", "check_dataset",
           "check_kernel",
           "check_method", "check_regression_method", "check_task", "exact_expected_log_softmax",
           "line_episode", "registry", "softmax_marginals", "tiny_episode", "toy_episode"]

class GaussianLikelihood:
    """``p(y_n | f_n) = prod_c N(y_nc | f_nc, noise)``: the conjugate case, in closed form."""

    def __init__(self, targets: Tensor, noise: float):
        self.targets, self.noise = targets.to(DTYPE), float(noise)

    def expectations(self, mean: Tensor, var: Tensor) -> Expectations:
        r = self.targets - mean
        ell = -0.5 * ((r**2 + var) / self.noise + math.log(2 * math.pi * self.noise)).sum(-1)
        return Expectations(ell, r / self.noise, torch.full_like(var, -0.5 / self.noise))


SETTINGS = ((2, 1), (20, 5))
PERMUTATION_ATOL = 1e-5
"""How far the predictions of shuffled queries may be from the predictions shuffled."""


# -- fixtures --------------------------------------------------------------------------------------

def toy_episode(way: int, shot: int, query: int = 2, image_size: int = 28, channels: int = 1,
                seed: int = 0) -> Episode:
    """Class-dependent random images, so that methods have something to fit."""
    g = torch.Generator().manual_seed(seed)
    means = torch.rand(way, channels, image_size, image_size, generator=g)

    def draw(k: int) -> tuple[Tensor, Tensor]:
        y = torch.arange(way).repeat_interleave(k)
        x = means[y] + 0.3 * torch.randn(len(y), channels, image_size, image_size, generator=g)
        return x, y

    (sx, sy), (qx, qy) = draw(shot), draw(query)
    return Episode(sx, sy, qx, qy, way=way, shot=shot,
                   info={"dataset": "toy", "split": "test", "index": 0,
                         "seed": episode_seed(seed, "toy", "test", way, shot, query, 0),
                         "classes": [f"toy-{c}" for c in range(way)]})


def tiny_episode(seed: int = 0) -> Episode:
    """2-way 2-shot, 3 queries per class, standard-normal 4-feature inputs in float64 (for
    :class:`TanhBackbone` and gradient checks)."""
    g = torch.Generator().manual_seed(seed)
    sx = torch.randn(4, 4, generator=g, dtype=torch.float64)
    qx = torch.randn(6, 4, generator=g, dtype=torch.float64)
    return Episode(sx, torch.tensor([0, 0, 1, 1]), qx, torch.tensor([0, 0, 0, 1, 1, 1]), way=2,
                   shot=2, info={"seed": 7})


def softmax_marginals(N: int = 4, C: int = 3, seed: int = 1) -> tuple[Tensor, Tensor, Tensor]:
    """One-hot labels ``[N, C]`` and Gaussian marginals (mean, variance ``[N, C]``, float64) for
    tests of softmax expectations."""
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(N, C, generator=g, dtype=torch.float64)
    var = 0.2 + torch.rand(N, C, generator=g, dtype=torch.float64)
    onehot = torch.nn.functional.one_hot(torch.arange(N) % C, C).to(torch.float64)
    return onehot, mean, var


def exact_expected_log_softmax(onehot: Tensor, mean: Tensor, var: Tensor,
                               nodes: int = 40) -> Tensor:
    """``E[log softmax(f)_y]`` for ``f ~ N(mean, diag var)`` by the tensor-product Gauss-Hermite
    rule (C <= 3; the rule is checked against closed forms in tests/test_expectations.py):
    accurate to ~1e-12 and differentiable in ``mean`` and ``var``, a reference for estimators."""
    from zoo.expectations import GaussHermiteEstimator

    rule = GaussHermiteEstimator(nodes=nodes).rule(mean.shape[-1])
    return rule.expect(lambda f: (torch.log_softmax(f, -1) * onehot[..., None, :]).sum(-1),
                       mean, var)


def line_episode() -> Episode:
    """2 classes, 3 support points on a line (two of class 0), one query of class 1."""
    sx = torch.tensor([[-1.0], [-0.2], [0.9]])
    return Episode(sx, torch.tensor([0, 0, 1]), torch.tensor([[0.3]]), torch.tensor([1]),
                   way=2, shot=1, info={"seed": 5})


class IdentityBackbone(Backbone):
    """Features are the inputs ``[n, feature_dim]``; ``learnable`` multiplies them by a scalar
    parameter (1 at start), so that an optimizer has something to reach."""

    def __init__(self, feature_dim: int, learnable: bool = False):
        super().__init__()
        self.feature_dim = feature_dim
        self.scale = nn.Parameter(torch.ones(())) if learnable else None

    def forward(self, x: Tensor) -> Tensor:
        return x if self.scale is None else self.scale * x


class TanhBackbone(Backbone):
    """``tanh(W x + b)``, 4 inputs to 3 features: small and smooth, so second-order terms of an
    inner loop are not zero."""

    feature_dim = 3

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.layer(x))


# -- methods ---------------------------------------------------------------------------------------

def build_for_tests(name: str, way: int, **hparams: Any) -> Method:
    from zoo.plugins import registry

    return build_method(name, way=way, in_channels=1, image_size=28, backbone="conv4s", seed=0,
                        registry=registry(), **hparams)


def _backward_meta_loss(method: Any, episode: Any, at: str) -> None:
    """``meta_loss`` in training mode is a finite scalar; back-propagate it from zeroed grads."""
    method.train()
    method.zero_grad()
    loss = method.meta_loss(episode)
    assert loss.ndim == 0 and torch.isfinite(loss), \
        f"{at}: meta_loss is {loss}; return a finite scalar tensor"
    loss.backward()


def check_method(name: str, settings=SETTINGS, **hparams: Any) -> None:
    """The method conformance suite (see the module docstring) on a Conv4S backbone, CPU."""
    for way, shot in settings:
        method = build_for_tests(name, way, **hparams)
        episode = toy_episode(way, shot)
        at = f"{name} ({way}-way {shot}-shot)"

        _backward_meta_loss(method, episode, at)
        grads = [p.grad for p in method.backbone.parameters() if p.requires_grad]
        assert any(g is not None and g.abs().sum() > 0 for g in grads), \
            f"{at}: meta_loss does not back-propagate into the backbone; compute it from " \
            "self.features(...) without detaching"

        method.eval()
        with torch.no_grad():
            torch.manual_seed(1)
            prediction = _prediction(method, episode, at)
            first = prediction.probs
            torch.manual_seed(2)
            again = _predict(method, episode, at)
        q = episode.query_y.numel()
        _check_uncertainty(method, prediction, q, at)
        assert first.shape == (q, way), \
            f"{at}: probs shape {tuple(first.shape)} != {(q, way)}; return one row per query"
        assert torch.isfinite(first).all() and (first >= 0).all(), \
            f"{at}: probs have negative or non-finite values; return probabilities, not logits"
        sums = first.sum(-1).double()
        assert torch.allclose(sums, torch.ones(q, dtype=torch.float64), atol=1e-5), \
            f"{at}: rows of probs sum to {sums.tolist()}; normalise them (softmax)"
        assert torch.equal(first, again), \
            f"{at}: predict depends on the global RNG state; draw from " \
            "zoo.episode_generator(episode)"
        if not method.transductive:
            _check_permuted_queries(method, episode, first, at)
        _check_objective_names(method, at)
    _check_any_way(name, settings, **hparams)


def _check_uncertainty(method: Any, prediction: Any, queries: int, at: str) -> None:
    """A method that declares its own uncertainty gives it, one finite number per query; one
    that does not declare it gives none (the report would not know what it is)."""
    own = prediction.extras.get("uncertainty")
    if not getattr(method, "uncertainty_name", ""):
        assert own is None, f"{at}: predict gives extras['uncertainty'] but the class sets no " \
            "uncertainty_name; say what it is"
        return
    assert own is not None, f"{at}: the class declares uncertainty_name " \
        f"{method.uncertainty_name!r} but predict gives no extras['uncertainty']; return it " \
        "(one number per query) or set uncertainty_name = ''"
    assert tuple(own.shape) == (queries,) and torch.isfinite(own).all(), \
        f"{at}: extras['uncertainty'] has shape {tuple(own.shape)}; give one finite number per query"
def _predict(method: Any, episode: Episode, at: str) -> Tensor:
    """``predict``'s probabilities for ``episode`` without its query labels, as the runner asks."""
    return _prediction(method, episode, at).probs


def _prediction(method: Any, episode: Episode, at: str) -> Any:
    """``predict``'s prediction for ``episode`` without its query labels, as the runner asks."""
    try:
        return method.predict(episode.unlabelled())
    except AttributeError as exc:
        if "query_y" in str(exc):
            raise AssertionError(f"{at}: predict read the query labels ({exc})") from exc
        raise


def _check_permuted_queries(method: Any, episode: Episode, probs: Tensor, at: str) -> None:
    """Shuffled queries give the same predictions, shuffled alike (queries come sorted by class:
    a prediction read off positions is caught). Up to the noise of draws a method makes per query
    position (its episode's seed is the same): a tolerance far below the gap between a prediction
    and the prediction of another query."""
    g = torch.Generator().manual_seed(3)
    perm = torch.randperm(episode.query_x.shape[0], generator=g)
    shuffled = dataclasses.replace(episode, query_x=episode.query_x[perm],
                                   query_y=episode.query_y[perm])
    with torch.no_grad():
        got = _predict(method, shuffled, at)
    worst = float((got.double() - probs[perm].double()).abs().max())
    assert worst <= PERMUTATION_ATOL, \
        f"{at}: shuffling the queries does not shuffle the predictions alike (they differ by " \
        f"up to {worst:.3g}): a prediction must not depend on a query's position; set " \
        "transductive = True on the class if it uses the order of the query set"


def _check_objective_names(method: Any, at: str) -> None:
    """The names a method gives its meta-loss and inner objective are text, and the objective's
    direction one the report's figures know."""
    for key in ("meta_loss_name", "inner_objective_name"):
        assert isinstance(getattr(method, key, ""), str), f"{at}: {key} must be a str"
    assert getattr(method, "inner_objective_better", None) in ("lower", "higher", None), \
        f"{at}: inner_objective_better must be 'lower', 'higher' or None"


def _check_any_way(name: str, settings, **hparams: Any) -> None:
    """A method that says it scores any way gives ``[Q, way]`` probabilities for an episode of
    the last setting's way from a model built for the first setting's way."""
    (built, _), (way, shot) = settings[0], settings[-1]
    method = build_for_tests(name, built, **hparams).eval()
    if built == way or not method.scores_any_way(method.hparams):
        return
    episode = toy_episode(way, shot)
    with torch.no_grad():
        probs = method.predict(episode).probs
    assert probs.shape == (episode.query_y.numel(), way) and torch.isfinite(probs).all(), \
        f"{name}: built {built}-way, it gave probs of shape {tuple(probs.shape)} for a {way}-way " \
        "episode; set any_way = False on the class if its parameters depend on the way"


def check_regression_method(name: str, **hparams: Any) -> None:
    """The regression-method conformance suite (see the module docstring), 1-d sinusoids, CPU."""
    from zoo.data.functions import load_sinusoid
    from zoo.tasks.regression import Regression, bound_pairs, sample_task

    task = Regression()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        method = registry().get("methods", name)(x_dim=1, y_dim=1, **hparams)
    for context in (0, 1, 5):
        episode = sample_task(load_sinusoid(), "test", 0, 12, 0, context)
        at = f"{name} (context {context})"
        _backward_meta_loss(method, episode, at)
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in method.parameters()), \
            f"{at}: meta_loss does not back-propagate into the method's parameters"
        method.eval()
        with torch.no_grad():
            torch.manual_seed(1)
            first = task.predict(method, episode)
            torch.manual_seed(2)
            again = task.predict(method, episode)
            bounds = method.bounds(episode, 64)
        task.check(first, episode, name)
        assert torch.equal(first.mean, again.mean) and torch.equal(first.var, again.var), \
            f"{at}: predict depends on the global RNG state; draw from " \
            "zoo.episode_generator(episode)"
        for bound, (elbo, iw) in bound_pairs(bounds).items():
            which = f" ({bound} bound)" if bound else ""
            assert math.isfinite(elbo) and elbo <= iw + 1e-6, \
                f"{at}{which}: ELBO {elbo} above the importance-weighted bound {iw}; compute " \
                "both on the same draws (the IW bound is their log-mean-exp, the ELBO their mean)"


# -- kernels ---------------------------------------------------------------------------------------

def check_kernel(kernel: str | type[Kernel], feature_dim: int = 4, points: int = 6,
                 classes: int = 3, atol: float = 1e-6, **options: Any) -> None:
    """The kernel conformance suite for a registered kernel (by name) or a kernel class, built
    with ``options``, in float64 on random features: shared and per-class
    (``batch_shape=(classes,)``, distinct hyper-parameters per class)."""

    cls = registry().get("kernels", kernel) if isinstance(kernel, str) else kernel
    name = kernel if isinstance(kernel, str) else cls.__name__
    g = torch.Generator().manual_seed(0)
    x = torch.randn(points, feature_dim, generator=g, dtype=torch.float64)
    y = torch.randn(points // 2, feature_dim, generator=g, dtype=torch.float64)
    for batch in ((), (classes,)):
        at = f"kernel {name!r} (batch_shape={batch})"
        kernel = cls(feature_dim, batch, **options).double()
        with torch.no_grad():  # distinct per-class values, away from the defaults
            for p in kernel.parameters():
                p.add_(torch.linspace(0, 0.5, p.numel(), dtype=p.dtype).view_as(p))
        features = x.clone().requires_grad_()
        z = kernel.prepare(torch.cat([features, y]))
        zx, zy = z[:points], z[points:]
        K, Kxy, d = kernel.gram(zx, zx), kernel.gram(zx, zy), kernel.gram_diag(zx)
        assert K.shape == (*batch, points, points) and Kxy.shape == (*batch, points, len(y)) \
            and d.shape == (*batch, points), \
            f"{at}: shapes {tuple(K.shape)}, {tuple(Kxy.shape)}, {tuple(d.shape)}; gram must be " \
            "[*batch_shape, n1, n2] and gram_diag [*batch_shape, n]"
        assert torch.isfinite(K).all(), f"{at}: non-finite gram matrix on random features"
        assert torch.allclose(K, K.transpose(-1, -2), atol=atol), \
            f"{at}: gram(z, z) is not symmetric"
        low = float(torch.linalg.eigvalsh(K.detach()).min())
        scale = float(K.detach().abs().amax())
        assert low >= -1e-8 * max(1.0, scale) * points, \
            f"{at}: gram(z, z) is not positive semi-definite (smallest eigenvalue {low:.3g})"
        assert torch.allclose(d, torch.diagonal(K, dim1=-2, dim2=-1), atol=atol), \
            f"{at}: gram_diag(z) differs from the diagonal of gram(z, z)"
        full = kernel.gram(z, z)
        assert torch.allclose(full[..., :points, points:], Kxy, atol=atol), \
            f"{at}: gram(zx, zy) differs from the block of gram on all points"
        if batch:
            assert not torch.allclose(K[0], K[-1]), \
                f"{at}: every class has the same gram matrix; give each class its own parameters"
        weights = torch.randn(K.shape, generator=g, dtype=K.dtype)
        ((K * weights).sum() + d.sum()).backward()
        for pname, p in kernel.named_parameters():
            if p.requires_grad:
                assert p.grad is not None and torch.isfinite(p.grad).all() \
                    and p.grad.abs().sum() > 0, \
                    f"{at}: no gradient reaches parameter {pname!r}; compute the gram from it"
        assert features.grad is not None and features.grad.abs().sum() > 0, \
            f"{at}: no gradient reaches the features; a deep kernel must be differentiable in them"


# -- data sets -------------------------------------------------------------------------------------

def check_dataset(dataset: str | FewShotDataset, way: int = 5, shot: int = 1, query: int = 2,
                  **options: Any) -> None:
    """The data set conformance suite for a registered data set (by name, built with ``options``)
    or a built one: class names and sizes, disjoint splits of valid class indices, ``gather``'s
    shape and dtype, and episodes of every split that are a function of their coordinates."""
    if isinstance(dataset, str):
        from zoo.plugins import load_dataset

        dataset = load_dataset(dataset, **options)
    at = f"data set {dataset.name!r}"
    n = len(dataset.class_names)
    assert len(set(dataset.class_names)) == n, f"{at}: class names are not unique"
    sizes = dataset.class_sizes
    assert sizes.shape == (n,) and sizes.dtype == torch.long and bool((sizes > 0).all()), \
        f"{at}: class_sizes must be a LongTensor of {n} positive counts, one per class name"
    seen: dict[int, str] = {}
    for split, members in dataset.splits.items():
        assert len(members) > 0, f"{at}: split {split!r} has no classes; drop it"
        for c in members:
            assert 0 <= int(c) < n, f"{at}: split {split!r} names class index {c} of {n}"
            assert int(c) not in seen, \
                f"{at}: class {dataset.class_names[int(c)]!r} is in splits {seen[int(c)]!r} and " \
                f"{split!r}; splits must be disjoint"
            seen[int(c)] = split
    shape = (dataset.in_channels, dataset.image_size, dataset.image_size)
    for split in dataset.splits:
        classes = dataset.split_classes(split)
        k = min(shot + query, int(sizes[classes].min()))
        images = dataset.gather(classes[:2], torch.arange(k).expand(len(classes[:2]), k))
        assert images.shape == (len(classes[:2]), k, *shape) and images.is_floating_point(), \
            f"{at}: gather gave {tuple(images.shape)} {images.dtype}; it must give float " \
            f"[way, k, {', '.join(map(str, shape))}] (in_channels, image_size)"
        ways = min(way, len(classes))
        sampler = EpisodeSampler(dataset, split, ways, shot, query, seed=0)
        first, again = sampler[3], EpisodeSampler(dataset, split, ways, shot, query, seed=0)[3]
        assert first.support_x.shape == (ways * shot, *shape) \
            and first.query_x.shape == (ways * query, *shape), \
            f"{at} ({split}): episode images {tuple(first.support_x.shape)}, " \
            f"{tuple(first.query_x.shape)} do not match in_channels and image_size"
        names = {dataset.class_names[int(c)] for c in classes}
        assert set(first.info["classes"]) <= names, \
            f"{at} ({split}): an episode drew classes outside the split"
        assert all(torch.equal(a, b) for a, b in zip(
            (first.support_x, first.query_x, first.support_y, first.query_y),
            (again.support_x, again.query_x, again.support_y, again.query_y))), \
            f"{at} ({split}): the same episode coordinates gave different episodes; gather " \
            "must be deterministic"


def _same(a: Any, b: Any) -> bool:
    """Equal episodes: every tensor field bit-identical, every other field equal."""
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, Tensor):
        return isinstance(b, Tensor) and torch.equal(a, b)
    return a == b


def check_data_object(data: Any, kind: str, name: str) -> Any:
    """What the runner needs of every task kind's data object, whatever its kind: ``splits`` (split
    name -> a sized collection; ``val``, when present and non-empty, selects the model) and
    ``to(device)`` returning the data object (the runner keeps what it returns). Returns
    ``data.to("cpu")``."""
    splits = getattr(data, "splits", None)
    assert isinstance(splits, Mapping) and splits, (
        f"{kind}: data set {name!r} has no `splits` mapping ({splits!r}); give it "
        "`splits = {'train': ..., 'val': ..., 'test': ...}` (split name -> a sized collection)")
    for split, members in splits.items():
        assert hasattr(members, "__len__"), (
            f"{kind}: data set {name!r}: splits[{split!r}] is {members!r}; the runner takes its "
            "len() to know whether the split is there: give a tuple or list")
    assert callable(getattr(data, "to", None)), (
        f"{kind}: data set {name!r} has no `to(device)`; the runner moves every data set with "
        "data.to(device): return the data set on that device (or self, if nothing moves)")
    moved = data.to("cpu")
    assert moved is not None and isinstance(moved, type(data)), (
        f"{kind}: data set {name!r}: to('cpu') returned {moved!r}; the runner uses what it "
        f"returns, so return the data set (a {type(data).__name__})")
    return moved


def check_task(kind: str, method: str, dataset: str, **settings: Any) -> None:
    """Conformance of task kind ``kind`` (a registered :class:`zoo.tasks.Task`) run with ``method``
    on ``dataset``, through the kind's own functions as the runner calls them; ``settings`` are
    suite settings (the kind's shape, e.g. ``context_sizes``)."""
    from zoo.plugins import load_dataset
    from zoo.runner.cells import expand_cells
    from zoo.runner.suite import suite_from_dict
    from zoo.spec import parse_spec

    reg = registry()
    task = reg.get("tasks", kind)
    assert task.name == kind, f"task kind registered as {kind!r} calls itself {task.name!r}"
    suite = suite_from_dict("conformance", {"suite": {
        "task": kind, "methods": [method], "train_datasets": [dataset], "seeds": [0],
        "train_episodes": 1, "val_episodes": 1, "test_episodes": 2, **settings}}, "check_task",
        registry=reg)
    cell = expand_cells(suite, [method], reg)[0]
    base, options = parse_spec(dataset)
    data = check_data_object(load_dataset(base, **options), kind, dataset)
    task.check_data(data, dataset)
    count, get = task.test_episodes(data, cell.shape, cell.seed, cell.test_episodes)
    assert count >= 1, f"{kind}: no test episodes for {dataset}"
    episode = get(0)
    assert _same(episode, get(0)), (f"{kind}: test episode 0 of {dataset} differs between two "
                                    "calls; draw it from a generator seeded by its coordinates")
    model = reg.get("methods", method).from_cell(cell, data, reg)
    model.eval()
    with torch.no_grad():
        task.prepare(model, get, range(count))  # as the runner, before the predictions
        prediction = task.predict(model, episode)
    task.check(prediction, episode, method)  # raises PredictionError, naming what to fix
    record = {"index": 0} | task.score(prediction, episode) | {"seconds": 0.0}  # as the runner
    json_line(record)  # records go to episodes.jsonl
    summary = task.summarise([record, record])
    assert isinstance(summary, dict) and summary, f"{kind}: summarise gave {summary!r}"
    missing = {"test_episodes", "eval_seconds_per_episode"} - set(summary)
    assert not missing, (f"{kind}: summarise gave no {', '.join(sorted(missing))}; the runner "
                         "prints them for every cell (the count of records, and the mean of "
                         "their 'seconds', which the runner adds to each record)")
    value = task.selection_value([record])
    assert math.isfinite(value), f"{kind}: selection value {value} of a valid record is not finite"
    from zoo.tasks import TaskView
    from zoo.tasks.figures import Coverage, CurveGrid, MetricLines, ParameterLines, Reliability

    assert isinstance(task.view, TaskView), f"{kind}: view is not a zoo.tasks.TaskView"
    assert isinstance(task.view.cell_text(summary), str), f"{kind}: cell_text must give text"
    figures = (Coverage, CurveGrid, MetricLines, ParameterLines, Reliability)
    assert all(isinstance(f, figures) for f in task.view.figures), \
        f"{kind}: view.figures must hold figures of zoo.tasks.figures (the runner draws those)"


# -- GP algebra routes -----------------------------------------------------------------------------

def check_algebra_routes(cls: type[Method], capture: str, kernel: str = "cosine", way: int = 4,
                         shot: int = 3, feature_dim: int = 6, routes=("dense", "features"),
                         atol: float = 1e-8, **hparams: Any) -> None:
    """A GP method gives the same answer on every algebra route (:mod:`zoo.gram`), in float64:
    the float64 output of its method ``capture`` (e.g. ``query_probs`` or ``latent``) at test and
    the gradient of ``meta_loss`` with respect to every parameter. The episode has more points
    than features, so the dense kernel matrix is singular (rank ``feature_dim``): the hard case
    for the dense route and the one the feature route exists for."""
    from zoo.kernels import BUILTIN

    g = torch.Generator().manual_seed(3)
    n, q = way * shot, way * 2
    episode = Episode(torch.randn(n, feature_dim, generator=g, dtype=torch.float64),
                      torch.arange(way).repeat_interleave(shot),
                      torch.randn(q, feature_dim, generator=g, dtype=torch.float64),
                      torch.arange(way).repeat_interleave(2), way=way, shot=shot, info={"seed": 3})
    outputs, grads = {}, {}
    for route in routes:
        torch.manual_seed(0)
        method = cls(IdentityBackbone(feature_dim, learnable=True), way=way,
                     kernel=BUILTIN[kernel](feature_dim), algebra=route, **hparams).double()
        seen: list[Tensor] = []
        original = getattr(method, capture)

        def record(*args: Any, _original=original, _seen=seen, **kwargs: Any) -> Any:
            out = _original(*args, **kwargs)
            _seen.append(out[0] if isinstance(out, tuple) else out)
            return out

        setattr(method, capture, record)
        method.eval()
        with torch.no_grad():
            method.predict(episode)
        method.train()
        method.zero_grad()
        method.meta_loss(episode).backward()
        outputs[route] = seen[-1]
        grads[route] = [p.grad for p in method.parameters() if p.grad is not None]
    first, *rest = routes
    for route in rest:
        diff = (outputs[route] - outputs[first]).abs().max()
        assert diff < atol, f"{cls.name}: {capture} differs between {first} and {route} by {diff}"
        assert len(grads[route]) == len(grads[first]) > 0
        for a, b in zip(grads[route], grads[first], strict=True):
            gap = (a - b).abs().max() / b.abs().max().clamp_min(1)
            assert gap < atol, \
                f"{cls.name}: meta-gradients differ between {first} and {route} by {gap:.1e}"


def check_batched_meta_loss(name: str, way: int = 3, shot: int = 2, episodes: int = 3,
                            dtype: torch.dtype = torch.float32, rtol: float = 1e-6,
                            grad_rtol: float | None = None, device: str = "cpu",
                            **hparams: Any) -> None:
    """A method that declares ``batches_episodes`` gives, from one batched call of its meta-loss
    over a meta-batch (:func:`zoo.batching.batched_losses`), the per-episode loop's numbers on a
    Conv4S backbone (BatchNorm in training mode: statistics per episode): the losses and the
    BatchNorm running averages within ``rtol`` of their largest magnitude, and every parameter's
    gradient of the mean loss within ``grad_rtol`` (default ``rtol``) of the model's largest
    gradient entry (the scale that matters: the gradients of biases that a BatchNorm follows are
    zero but for rounding). Only the order of floating-point sums may differ."""
    from zoo.batching import batched_losses

    batch = [toy_episode(way, shot, seed=s) for s in range(episodes)]
    batch = [dataclasses.replace(e.to(device), support_x=e.support_x.to(device, dtype),
                                 query_x=e.query_x.to(device, dtype)) for e in batch]
    looped, batched = (build_for_tests(name, way, **hparams).to(device, dtype).train()
                       for _ in range(2))
    assert batched.batches_episodes, f"{name} does not declare batches_episodes"
    expected = []
    for e in batch:
        loss = looped.meta_loss(e)
        (loss / episodes).backward()
        expected.append(loss.detach())
    losses = batched_losses(batched, batch, batched.meta_loss)
    assert losses is not None, f"{name}: the batched meta-loss fell back to the loop"
    (losses / episodes).sum().backward()

    def close(a: Tensor, b: Tensor, what: str, tol: float, scale: Tensor | None = None) -> None:
        scale = b.double().abs().max() if scale is None else scale
        gap = float((a.double() - b.double()).abs().max() / scale.clamp_min(1e-300))
        assert gap <= tol, f"{name}: batched {what} differs from the loop's by {gap:.1e} (relative)"

    close(losses.detach(), torch.stack(expected), "losses", rtol)
    grads = {k: p.grad for k, p in looped.named_parameters() if p.grad is not None}
    assert grads, f"{name}: the meta-loss reaches no parameter"
    largest = torch.stack([g.double().abs().max() for g in grads.values()]).max()
    for key, p in batched.named_parameters():
        assert (p.grad is None) == (key not in grads), f"{name}: {key}'s gradient differs in presence"
        if p.grad is not None:
            close(p.grad, grads[key], f"gradient of {key}", grad_rtol or rtol, largest)
    states = dict(looped.named_buffers())
    for key, b in batched.named_buffers():
        close(b, states[key], f"buffer {key}", rtol)
