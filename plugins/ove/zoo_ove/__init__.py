"""One-vs-each Polya-Gamma GP classifier (Snell & Zemel, ICLR 2021).

Likelihood: the one-vs-each approximation of the softmax, ``p(y | f) = prod_{c != y}
sigmoid(f_y - f_c)``, a product of logistic terms in the pairwise differences ``psi = A f``
(``M = N (C - 1)`` of them for ``N`` support points). Polya-Gamma augmentation gives each term an
exactly Gaussian site in ``psi``: precision ``w`` and natural mean ``kappa = 1/2``, so
``psi | w`` is a :class:`~zoo.inference.SitePosterior` with prior covariance ``K_psi = A K A^T`` and
``w | psi ~ PG(1, psi)``. All chains run as one batch. Two Gibbs samplers of the same posterior
``p(f, w | y)`` (hyper-parameter ``sampler``):

* ``joint`` (Snell & Zemel's, Sec. 3 and their code): ``w | f`` then all of ``psi = A f | w`` at
  once, one Cholesky of the ``M x M`` matrix ``I + S K_psi S`` per chain and step: ``O((N C)^3)``.
* ``blocked`` (default): ``w | f`` then ``f_c | f_{-c}, w`` for ``c = 1..C`` in turn. Given the
  other classes each pairwise term touching ``f_c`` is a Gaussian site on ``f_c`` alone, so the
  conditional is a GP with sites on the ``N`` support points (a :class:`~zoo.inference.SitePosterior`
  batched over chains): ``C`` factorisations of ``N x N`` per step, ``O(C N^3)``. For
  ``y_n = c``: precision ``sum_{c'} w_{n c'}``, natural mean ``(C - 1)/2 + sum_{c'} w_{n c'}
  f_{c'}(n)``; for ``y_n != c``: precision ``w_{n c}``, natural mean ``-1/2 + w_{n c} f_{y_n}(n)``.

Both chains start from a prior draw of ``f``. The predictive and the ML objective condition on the
chains' last ``w`` through the joint algebra of ``psi`` once per episode (not once per step):
``M x M`` (batched Cholesky), or, when the kernel has a finite feature map (``f_c = Phi_c
u_c``), in the ``C D`` class weights (:mod:`zoo_ove.weights`, or Woodbury on ``K_psi = Psi Psi^T``,
:meth:`Pairs.factor`), whichever :meth:`OVE.weights_pay` counts cheaper (the predictive's
whitening of the queries included); chains go a few at a time (:data:`PAIR_ELEMENTS`), so memory
grows linearly with the queries and, on the weights, not with the pairs.

Objectives (the paper's): ``ml``, the augmented log marginal likelihood ``log p(y | w)`` of support
and query together at the chains' last ``w``; ``pl``, the log predictive probability of the query
labels given the support. What ``ml`` is: by Fisher's identity ``grad log p(y) = E_{p(w | y)}[grad
log p(y | w)]``, so it would estimate that gradient at draws of the posterior ``p(w | y)``. With
``train_steps = 1`` (the authors' choice, kept as the default) the chains' last ``w`` is drawn from
``p(w | f_0, y)`` with ``f_0`` a prior draw: the loss is then the gradient of ``E_{q_1}[log p(y |
w)]`` under that one-sweep distribution ``q_1`` of ``w``, a surrogate, not an estimate of ``grad
log p(y)``. ``train_steps = k`` is a burn-in of ``k - 1`` sweeps that moves ``q_k`` towards
``p(w | y)`` (cost linear in ``k``); chains cannot persist across episodes, since ``w`` indexes an
episode's own points and classes.

Prediction: given a state of each chain, the Gaussian predictive of the query's class functions,
the ``estimator`` (Gauss-Hermite, 20 nodes) for ``E[log sigmoid(f_c - f_c')]`` on every pairwise
difference, class scores ``sum_{c' != c}`` of those, a softmax; the probabilities are then
averaged over chains (the authors average log-probabilities; a mixture over the chains' states is
the predictive). Two conditionings (hyper-parameter ``predictive``); both use the same posterior
of the query functions, ``p(f_* | y) = E_{p(w | y)}[p(f_* | w)] = E_{p(f | y)}[p(f_* | f)]``:

* ``conditional`` (default, the authors'): on each chain's last ``w``, the joint Gaussian of all
  class functions given the pair sites (the pair-space or class-weight algebra above: at 50 way
  a ``3,200 x 3,200`` factorisation and inverse per chain).
* ``samples`` (blocked sampler only): on each chain's last ``keep`` states of the support
  functions ``f`` ``[R, C, n]``. Given ``f`` the classes are independent GPs observed without
  noise, ``f_*c | f_c ~ N(K_*c K_c^-1 f_c, k_** - K_*c K_c^-1 K_c*)``, so each pairwise difference
  has mean ``m_c - m_c'`` and variance ``v_c + v_c'`` and the same estimator applies. The
  noise-free observation is the :class:`~zoo.inference.SitePosterior` with site precision ``1 /
  sigma^2`` and natural mean ``f_c / sigma^2`` (``sigma^2`` the jitter policy's initial relative
  jitter times the mean prior variance: the limit ``sigma -> 0`` up to that jitter, on the dense
  and the feature route alike, for a singular ``K_c`` too); its one factorisation per episode (per
  class, or one for a kernel shared by the classes) serves every chain and state.

The two give different class probabilities, not two estimates of one. Since ``f_*`` depends on
``w`` only through ``f``, ``conditional``'s class scores are the average over ``f | w`` of
``samples``' scores, ``E_{f_* | w}[g] = E_{f | w}[E_{f_* | f}[g]]``; ``conditional`` takes the
softmax of that average, ``samples`` averages the softmax over states, a mixture of the states'
sharper and more dispersed predictions. On validation the mixture is the less confident and the
worse (``benchmarks/cards/ove.md``), so ``conditional`` stays the default. For ``loss = pl`` the
chain's ``f``, like ``w``, is held fixed and the meta-gradient flows through ``K_c``, ``K_*c`` and
``k_**`` (at fixed ``f`` the mean does not depend on the kernel's output scale).
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

import zoo
from zoo import Episode, HParam, HyperParameterError, Prediction, device_generator, episode_generator
from zoo.families import GPMethod
from zoo.inference import (
    DTYPE,
    FeatureGram,
    FeatureSitePosterior,
    Gram,
    SitePosterior,
    augmented_log_marginal,
    choose_route,
    dense,
    prior_draws,
    sample_polyagamma,
    shared,
)
from zoo_ove.weights import ClassWeights, WeightPosterior, inverse_costs, predictive_costs

QUADRATURE_ELEMENTS = 2**24
"""Most quadrature evaluations (chains x queries x classes^2 x nodes) of the predictive formed at
once."""
PAIR_ELEMENTS = 2**22
"""Most entries of the chains' temporaries formed at once when conditioning on their last ``w``
(32 MB in float64): the ``M x M`` pair-space factors, the whitened ``M x Q C`` cross-covariances,
the queries' ``C x C`` covariance blocks. The chains go that many at a time, so the peak memory of
the predictive and of the dense ML objective is that of a few chains at any way (at quick-suite
sizes all chains fit in one block: the numbers are those of one batch)."""


class Pairs:
    """The one-vs-each differences ``psi_m = f[y_n, n] - f[c, n]`` for ``c != y_n``."""

    def __init__(self, y: Tensor, way: int):
        n = y.numel()
        cls = torch.arange(way, device=y.device).expand(n, way)
        keep = cls != y[:, None]
        self.point = torch.arange(n, device=y.device)[:, None].expand(n, way)[keep]
        self.other = cls[keep]
        self.label = y[self.point]

    def prior_cov(self, K: Tensor) -> Tensor:
        """``K_psi = A K A^T`` ``[M, M]`` from per-class ``K`` ``[C, n, n]``: ``Cov(f_a[n],
        f_b[n']) = [a = b] K_a[n, n']`` expanded over the four terms of the two differences."""
        p, y, c = self.point, self.label, self.other

        def block(a: Tensor, b: Tensor) -> Tensor:
            same = (a[:, None] == b[None, :]).to(K.dtype)
            return same * K[a[:, None], p[:, None], p[None, :]]

        return block(y, y) - block(y, c) - block(c, y) + block(c, c)

    def factor(self, phi: Tensor, way: int) -> Tensor:
        """``Psi`` ``[M, C D]`` with ``Psi Psi^T = K_psi`` from per-class factors ``K_c = Phi_c
        Phi_c^T`` (``phi`` ``[C, n, D]``, or ``[n, D]`` shared): with ``f_c = Phi_c u_c``,
        ``psi_m = phi_y(n)^T u_y - phi_c(n)^T u_c``, so row ``m`` holds ``phi_y(n)`` in block ``y``
        and ``-phi_c(n)`` in block ``c``."""
        phi = phi.expand(way, *phi.shape[-2:])
        M, D = len(self.point), phi.shape[-1]
        rows = torch.arange(M, device=phi.device)
        out = phi.new_zeros(M, way, D)
        out[rows, self.label] = phi[self.label, self.point]
        out[rows, self.other] = -phi[self.other, self.point]
        return out.reshape(M, way * D)

    @staticmethod
    def query_factor(phi_q: Tensor, way: int) -> Tensor:
        """The factor ``[Q C, C D]`` of the class functions at the queries, row ``q C + c`` holding
        ``phi_c(x_q)`` in block ``c`` (``phi_q`` ``[C, Q, D]`` or ``[Q, D]``): with
        :meth:`factor`, ``Psi R^T`` is :meth:`cross_cov` laid out as ``[M, Q C]``."""
        phi_q = phi_q.expand(way, *phi_q.shape[-2:]).transpose(0, 1)  # [Q, C, D]
        Q, D = phi_q.shape[0], phi_q.shape[-1]
        cls = torch.arange(way, device=phi_q.device)
        out = phi_q.new_zeros(Q, way, way, D)
        out[:, cls, cls] = phi_q
        return out.reshape(Q * way, way * D)

    def cross_cov(self, Ksq: Tensor) -> Tensor:
        """``Cov(psi_m, f_c(x_q))`` ``[C, M, Q]`` from per-class ``Ksq`` ``[C, n, Q]``."""
        C = Ksq.shape[0]
        cls = torch.arange(C, device=Ksq.device)[:, None]
        weight = (self.label[None, :] == cls).to(Ksq.dtype) - (self.other[None, :] == cls).to(Ksq.dtype)
        return weight[..., None] * Ksq[:, self.point, :]

    def apply(self, f: Tensor) -> Tensor:
        """``A f`` for ``f`` ``[..., C, n]``."""
        return f[..., self.label, self.point] - f[..., self.other, self.point]

    def pullback(self, G: Tensor, way: int, n: int) -> Tensor:
        """The adjoint of :meth:`prior_cov`: ``A_c^T G A_c`` ``[C, n, n]`` for ``G`` ``[M, M]``, the
        gradient with respect to each class's ``K_c`` of ``sum(G * K_psi)``, in ``O(M^2)``: with
        ``D = G`` laid out ``[n, C, n, C]`` and ``A^T e_(n, c') = e_(y_n, n) - e_(c', n)``,
        ``H_c = [y_1 = c][y_2 = c] sum D - [y_1 = c] sum_{c_1} D[.., c] - [y_2 = c] sum_{c_2} D[:, c]
        + D[:, c, :, c]``."""
        D = self.dense(self.dense(G, way, n).permute(1, 2, 0), way, n)  # [n2, C2, n1, C1]
        D = D.permute(2, 3, 0, 1)  # [n1, C1, n2, C2]
        own = torch.nn.functional.one_hot(self.labels(n), way).to(G.dtype).T  # [C, n]
        total = D.sum((1, 3))  # [n1, n2]
        into = D.sum(1).permute(2, 0, 1)  # [C2, n1, n2]: sum over c1
        out_of = D.sum(3).permute(1, 0, 2)  # [C1, n1, n2]: sum over c2
        diag = torch.diagonal(D, dim1=1, dim2=3).permute(2, 0, 1)  # [C, n1, n2]
        return (own[:, :, None] * own[:, None, :] * total - own[:, :, None] * into
                - own[:, None, :] * out_of + diag)

    def labels(self, n: int) -> Tensor:
        """The label of each of the ``n`` points."""
        y = torch.zeros(n, dtype=self.label.dtype, device=self.label.device)
        y[self.point] = self.label
        return y

    def dense(self, w: Tensor, way: int, n: int) -> Tensor:
        """Pair values ``[..., M]`` laid out as ``[..., n, C]``, zero at each point's own label."""
        out = w.new_zeros(*w.shape[:-1], n, way)
        out[..., self.point, self.other] = w
        return out


class OVE(GPMethod):
    """OVE Polya-Gamma GP with Gibbs sampling; ``loss`` is ``ml`` or ``pl``. Its predictive
    integrates over the pairwise differences ``f_c - f_c'`` of the class functions at the query
    (the one-vs-each likelihood sees nothing else): its own uncertainty is their latent
    predictive variance, summed over the unordered class pairs and averaged over the chains (or
    Gibbs states), ``sum_{c < c'} Var(f_c - f_c') = C tr(S) - 1^T S 1`` for the query's class
    covariance ``S``: large where the query is far from the support in the kernel's geometry."""

    uncertainty_name = ("latent predictive variance of the pairwise class differences f_c - f_c', "
                        "summed over class pairs (mean over chains)")

    name = "ove"
    inner_objective_name = "log-likelihood of the support labels at the Gibbs state"
    inner_objective_better = None  # a sampler's trace: it does not optimise

    @property
    def meta_loss_name(self) -> str:  # type: ignore[override]
        return ("query cross-entropy" if self.hparams["loss"] == "pl"
                else "negative log marginal likelihood per point")

    default_kernel: ClassVar[str | None] = "cosine"
    hyperparameters = {
        "loss": HParam("ml", choices=("ml", "pl"), doc="marginal (ml) or predictive (pl) likelihood"),
        "chains": HParam(20, ge=1, doc="parallel Gibbs chains"),
        "train_steps": HParam(1, ge=0, doc="Gibbs steps in meta-training"),
        "test_steps": HParam(50, ge=0, doc="Gibbs steps at test"),
        "quadrature": HParam(20, ge=1, doc="Gauss-Hermite nodes of the predictive"),
        "pg_sampler": HParam("auto", choices=("auto", "numpy", "torch"),
                             doc="Polya-Gamma sampler (zoo.polyagamma)"),
        "sampler": HParam("blocked", choices=("blocked", "joint"), doc="Gibbs update of f"),
        "estimator": HParam("gauss-hermite", doc="expectation estimator of the predictive "
                            "(zoo.expectations spec; `quadrature` nodes unless it names its own)"),
        "predictive": HParam("conditional", choices=("conditional", "samples"),
                             doc="condition the query functions on each chain's last Polya-Gamma "
                             "draws w (joint pair-space algebra) or on its Gibbs states of the "
                             "support functions f (per-class GP conditional; sampler=blocked)"),
        "keep": HParam(1, ge=1, doc="predictive=samples: the last `keep` Gibbs states of each "
                       "chain averaged (1: the last state only)"),
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        h = self.hparams
        if h["predictive"] == "samples" and h["sampler"] != "blocked":
            raise HyperParameterError(
                f"method 'ove': predictive='samples' conditions on the Gibbs states of the support "
                f"functions f, which sampler={h['sampler']!r} does not draw (it draws the pairwise "
                "differences psi); use sampler='blocked' or predictive='conditional'")
        if h["keep"] > 1 and h["predictive"] != "samples":
            raise HyperParameterError(
                f"method 'ove': keep={h['keep']} averages Gibbs states of f, which only "
                "predictive='samples' uses; leave keep at 1 or set predictive='samples'")

    # -- algebra routes ---------------------------------------------------------------------------

    def route(self, n: int, d: int, episode: Episode | None = None) -> str:
        """The family's route, except that a kernel with a feature map takes it, under ``algebra =
        auto``, whenever the episode's pair space is cheaper in the class weights
        (:meth:`weights_pay`) although ``n`` points alone would be dense: at 50-way 1-shot the
        dense ``M x M`` pair space (``M = 2,450``) whitens ``M x Q C`` (2,450 x 37,500) per chain,
        about 7 times the operations of the ``C D`` weights (and out of memory at once). The
        queries are the episode's points beyond the ``n`` labelled ones (none for the ML
        objective's labelled kernel)."""
        route = super().route(n, d, episode)
        D = self.kernel.map_dim(d)
        if route != "dense" or self.hparams["algebra"] != "auto" or D is None or episode is None:
            return route
        C = episode.way
        queries = episode.support_y.numel() + episode.query_x.shape[0] - n
        return "features" if self.weights_pay(n * (C - 1), C, D, queries * C) else route

    @staticmethod
    def weights_pay(pairs: int, way: int, rank: int, functionals: int = 0) -> bool:
        """Whether the pair-space algebra given ``w`` is cheaper in the ``C D`` class weights than
        in the ``M x M`` pair space (``pairs = M``, ``way = C``, ``rank = D`` features per class,
        ``functionals = Q C`` class functions at the queries for the predictive): more pairs than
        weights, :func:`~zoo.inference.choose_route`'s count for a factorisation, or the count of the
        algebra given ``w``: ``M^3 / 3 + M^2 Q C`` in the pair space (Cholesky, whitening the
        queries) against the weights' cheapest (:func:`~zoo_ove.weights.inverse_costs` without
        queries, :func:`~zoo_ove.weights.predictive_costs` with them: by Cholesky or through the
        arrow structure of ``A``)."""
        weights = way * rank
        if weights < pairs or choose_route("auto", pairs, weights) == "features":
            return True
        points = pairs // (way - 1)
        cost = (min(predictive_costs(points, way, rank, functionals // way)) if functionals
                else min(inverse_costs(points, way, rank)))
        return pairs**3 / 3 + pairs**2 * functionals > cost

    @staticmethod
    def chains_at_once(prior: Gram | ClassWeights, pairs: int, queries: int, way: int) -> int:
        """How many chains' temporaries fit in :data:`PAIR_ELEMENTS` when conditioning on ``w``:
        per chain the queries' ``[Q, C, C]`` blocks and, in the pair space, the ``M x M`` factor
        and ``M x Q C`` whitened cross-covariances (dense) or the ``C D x C D`` factor and ``C D
        x Q C`` whitened query factor (``Psi``); the class weights go a few chains at a time
        themselves (:data:`~zoo_ove.weights.CHAIN_ELEMENTS`)."""
        per_chain = queries * way * way
        if isinstance(prior, FeatureGram):
            per_chain += prior.rank * (prior.rank + queries * way)
        elif not isinstance(prior, ClassWeights):
            per_chain += pairs * (pairs + queries * way)
        return max(1, PAIR_ELEMENTS // max(per_chain, 1))

    # -- Gibbs sampling ---------------------------------------------------------------------------

    def gibbs(self, K: Tensor, y: Tensor, steps: int, episode: Episode,
              generator: torch.Generator, keep: int = 0
              ) -> tuple[Tensor, Tensor, list[float], Tensor | None]:
        """Run ``chains`` Gibbs chains as one batch from a prior draw of ``f`` (``K``: ``[C, n,
        n]`` prior covariances, ``y``: labels of the ``n`` points); returns the last ``w`` and
        ``psi = A f`` (each ``[R, M]``), per step the OVE log-likelihood ``sum log
        sigmoid(psi)`` of the state averaged over chains (a convergence trace, one host transfer
        at the end) and, with ``keep``, the last ``keep`` states of ``f`` of the ``steps + 1``
        (the prior draw first), ``[keep R, C, n]`` (state-major; blocked sampler only), else
        ``None``."""
        R, C, n = self.hparams["chains"], K.shape[0], K.shape[-1]
        if isinstance(K, FeatureGram) and self.hparams["algebra"] == "auto" and \
                choose_route("auto", n, K.rank) == "dense":
            K = dense(K)  # features for the class weights (weights_pay); n points alone: dense
        pairs = Pairs(y, C)
        gen = device_generator(generator, K.device)
        K = K.detach()
        blocked = self.hparams["sampler"] == "blocked"
        if keep and not blocked:
            raise ValueError("the joint sampler draws psi, not f: it keeps no states of f")
        priors = prior_draws(K, R * (steps + 1), gen).unflatten(0, (steps + 1, R))  # [S+1,R,C,n]
        f = priors[0].clone()
        psi = pairs.apply(f)
        kappa = torch.full_like(psi, 0.5)
        K_psi = None if blocked else self.pair_gram(K, pairs, weights=False)
        trace = []
        w = kappa
        states = [f] if keep and steps < keep else []
        for step in range(1, steps + 1):
            w = sample_polyagamma(1.0, psi, gen, self.hparams["pg_sampler"])
            if blocked:
                noise = torch.randn(f.shape, generator=gen, dtype=DTYPE, device=gen.device)
                f = self._sweep(K, f, pairs.dense(w, C, n), y, priors[step], noise.to(K.device),
                                episode)
                psi = pairs.apply(f)
                if step > steps - keep:
                    states.append(f)
            else:
                post = SitePosterior(K_psi, w, kappa, self.jitter, episode.id)
                noise = torch.randn(psi.shape, generator=gen, dtype=DTYPE, device=gen.device)
                psi = post.sample(pairs.apply(priors[step]), noise.to(K.device))
            trace.append(F.logsigmoid(psi).sum(-1).mean())
        kept = torch.cat(states) if states else None
        return w, psi, torch.stack(trace).tolist() if trace else [], kept

    @staticmethod
    def conditional_precisions(w: Tensor, y: Tensor) -> Tensor:
        """The site precisions ``[R, C, n]`` of every class's conditional: ``sum_{c'} w_{n c'}`` at
        the class's own points, ``w_{n c}`` elsewhere (``w``: ``[R, n, C]``). They depend on ``w``
        alone, not on the other classes' functions, so a sweep factorises them all at once."""
        own = F.one_hot(y, w.shape[-1]).T.to(w.dtype)  # [C, n]
        return w.transpose(-1, -2) + own * w.sum(-1)[..., None, :]

    @staticmethod
    def conditional_means(f: Tensor, w: Tensor, y: Tensor, c: int) -> Tensor:
        """Class ``c``'s conditional natural means ``[R, n]`` given the current ``f`` ``[R, C, n]``:
        ``(C - 1)/2 + sum_{c'} w_{n c'} f_{c'}(n)`` at its own points, ``-1/2 + w_{n c}
        f_{y_n}(n)`` elsewhere."""
        C, n = f.shape[-2:]
        pull = (w * f.transpose(-1, -2)).sum(-1)  # sum_{c'} w_{n c'} f_{c'}(n)
        f_label = f[..., y, torch.arange(n, device=f.device)]
        return torch.where(y == c, 0.5 * (C - 1) + pull, -0.5 + w[..., c] * f_label)

    def _sweep(self, K: Tensor, f: Tensor, w: Tensor, y: Tensor, prior: Tensor, noise: Tensor,
               episode: Episode) -> Tensor:
        """One systematic scan ``f_c ~ p(f_c | f_{-c}, w, y)``, ``c = 0..C-1``, each drawn by
        Matheron's rule from ``prior`` (draws of ``N(0, K_c)``) and ``noise``, all ``[R, C, n]``.
        The ``R C`` conditional precisions are factorised in one batch before the scan (they do
        not depend on ``f``); the scan itself only solves with them
        (:meth:`~zoo.inference.SitePosterior.draw`)."""
        lam = self.conditional_precisions(w, y)
        posts = SitePosterior(K, lam, torch.zeros_like(lam), self.jitter, episode.id)
        f = f.clone()
        for c in range(f.shape[-2]):
            nu = self.conditional_means(f, w, y, c)
            f[..., c, :] = posts.draw(c, nu, prior[..., c, :], noise[..., c, :])
        return f

    # -- objectives and prediction ---------------------------------------------------------------

    def class_log_scores(self, post: SitePosterior, pairs: Pairs, Ksq: Tensor, kqq: Tensor) -> Tensor:
        """``[R, Q, C]`` scores ``sum_{c' != c} E[log sigmoid(f_c - f_c')]`` under each chain's
        joint Gaussian predictive given its ``w`` (:meth:`joint_predictive`), by
        :meth:`pair_scores` on each pairwise difference, a one-dimensional Gaussian."""
        mean, cov = self.joint_predictive(post, pairs, Ksq, kqq)
        return self.pair_scores(mean, pair_variances(cov))

    @staticmethod
    def joint_predictive(post: SitePosterior | WeightPosterior, pairs: Pairs, Ksq: Gram,
                         kqq: Tensor) -> tuple[Tensor, Tensor]:
        """The class functions at each query given each chain's ``w``: mean ``[R, Q, C]`` and
        covariance ``[R, Q, C, C]``, in the class weights or the pair space (``psi``'s
        cross-covariances with the query functions, :meth:`Pairs.cross_cov`)."""
        C, _, Q = Ksq.shape
        if isinstance(post, WeightPosterior):
            right = Ksq.right
            mean, cov = post.predictive(right[0] if right.ndim > 2 else right, kqq)
        else:
            if isinstance(post, FeatureSitePosterior):  # the pair space's factor Psi, [M, C D]
                flat: Gram = FeatureGram(post.phi, pairs.query_factor(Ksq.right, C))
            else:
                cross = pairs.cross_cov(dense(Ksq))  # [C, M, Q]
                flat = cross.permute(1, 2, 0).reshape(cross.shape[1], Q * C)  # column q*C + c
            mean, _ = post.predict(flat, kqq.T.reshape(-1))
            cov = torch.diag_embed(kqq.T) - post.explained_blocks(flat, C)  # [R, Q, C, C]
            mean = mean.unflatten(-1, (Q, C))
        return mean, cov

    def pair_scores(self, mean: Tensor, diff_var: Tensor) -> Tensor:
        """``[..., Q, C]`` scores ``sum_{c' != c} E[log sigmoid(f_c - f_c')]`` from the means
        ``[..., Q, C]`` of the class functions and the variances ``[..., Q, C (C - 1) / 2]`` of
        their differences ``f_c - f_c'`` for ``c < c'`` (``triu_indices`` order), by the
        ``estimator`` once per unordered pair: ``E[log sigmoid(-d)] = E[log sigmoid(d)] - E[d]``."""
        C = mean.shape[-1]
        a, b = torch.triu_indices(C, C, 1, device=mean.device)
        diff_mean = mean[..., a] - mean[..., b]  # [..., Q, C (C - 1) / 2]
        diff_var = diff_var.clamp_min(0)
        estimator = self.estimator(nodes=self.hparams["quadrature"])
        # the [R, q, pairs, nodes] evaluations in blocks of queries (368 M at 50-way 15 queries
        # per class with 20 chains: GB at once); elementwise, so blocks change no number
        block = max(1, QUADRATURE_ELEMENTS // (diff_mean[..., :1, :].numel()
                                               * self.hparams["quadrature"]))

        g = estimator.per_point(_logsigmoid_of_scalar)

        def expect(m: Tensor, v: Tensor) -> Tensor:
            return estimator.expect(g, m[..., None], v[..., None]).value

        expected = torch.cat(self.in_blocks(expect, list(zip(
            diff_mean.split(block, dim=-2), diff_var.split(block, dim=-2), strict=True))), dim=-2)
        return (mean.new_zeros(mean.shape).index_add(-1, a, expected)
                .index_add(-1, b, expected - diff_mean))

    def state_predictive(self, Kss: Gram, f: Tensor, Ksq: Gram, kqq: Tensor,
                         episode: Episode) -> tuple[Tensor, Tensor]:
        """``f_*c | f_c`` for Gibbs states ``f`` ``[S, C, n]``: mean ``K_*c K_c^-1 f_c`` and
        variance ``k_** - K_*c K_c^-1 K_c*`` at the queries, each ``[S, Q, C]``, the classes
        independent. The noise-free observation of ``f_c`` is the :class:`~zoo.inference.SitePosterior`
        with site precisions ``1 / sigma^2`` and natural means ``f_c / sigma^2`` (GP regression
        with noise ``sigma^2``, on the dense or the feature route), ``sigma^2`` the jitter
        policy's initial relative jitter times the mean prior variance of the support (held
        fixed for gradients): its sites do not depend on ``f``, so one factorisation (per class,
        or one for a shared kernel) serves every state."""
        diag = (FeatureGram(shared(Kss.left), shared(Kss.right)).diagonal()
                if isinstance(Kss, FeatureGram) else torch.diagonal(shared(Kss), dim1=-2, dim2=-1))
        sigma2 = self.jitter.initial * diag.detach().to(DTYPE).mean(-1, keepdim=True)  # [1|C, 1]
        lam = (1 / sigma2).expand(-1, Kss.shape[-1])
        post = self.posterior(Kss, lam, f.detach().to(DTYPE) / sigma2, episode)
        mean, var = post.predict(Ksq, kqq)  # [S, C, Q]
        return mean.transpose(-1, -2), var.transpose(-1, -2)

    def query_probs(self, episode: Episode, steps: int) -> tuple[Tensor, list[float], Tensor]:
        """The queries' class probabilities ``[Q, C]``, the Gibbs trace, and the latent variance
        of the pairwise differences summed over pairs, mean over chains (or states), ``[Q]``."""
        mats = self.kernel_matrices(episode)
        pairs = Pairs(episode.support_y, episode.way)
        samples = self.hparams["predictive"] == "samples"
        w, _, trace, f = self.gibbs(mats.Kss, episode.support_y, steps, episode,
                                    episode_generator(episode),
                                    keep=self.hparams["keep"] if samples else 0)
        C, Q = episode.way, mats.kqq.shape[-1]
        if samples:
            mean, var = self.state_predictive(mats.Kss, f, mats.Ksq, mats.kqq, episode)
            a, b = torch.triu_indices(C, C, 1, device=mean.device)
            diff_var = var[..., a] + var[..., b]  # given f the classes are independent
            scores = self.pair_scores(mean, diff_var)
            return torch.softmax(scores, -1).mean(0), trace, diff_var.sum(-1).mean(0)
        prior = self.pair_gram(mats.Kss, pairs, functionals=Q * C)

        def block_probs(lam: Tensor) -> tuple[Tensor, Tensor]:
            post = self.posterior(prior, lam, torch.full_like(lam, 0.5), episode)
            mean, cov = self.joint_predictive(post, pairs, mats.Ksq, mats.kqq)
            diff_var = pair_variances(cov)
            return torch.softmax(self.pair_scores(mean, diff_var), -1), diff_var.sum(-1)

        blocks = [(lam,) for lam in w.split(self.chains_at_once(prior, len(pairs.point), Q, C))]
        probs, spread = zip(*self.in_blocks(block_probs, blocks), strict=True)
        return torch.cat(probs).mean(0), trace, torch.cat(spread).mean(0)

    def in_blocks(self, fn, blocks: list[tuple[Tensor, ...]]) -> list[Tensor]:
        """``fn`` on each block's arguments. Where a gradient flows (``loss = pl``) and there is
        more than one block, each is checkpointed: redone in the backward pass instead of keeping
        every block's temporaries (the chains' whitened cross-covariances, the quadrature's
        evaluations), so training keeps the memory of one block. Not for an estimator with state
        (the harvesting ``meta-cv``): a redone block would harvest its integrals and step the
        meta-CV a second time."""
        redo = torch.is_grad_enabled() and len(blocks) > 1 and self.estimator_state is None
        return [checkpoint(fn, *args, use_reentrant=False) if redo else fn(*args)
                for args in blocks]

    def integrates_in_training(self) -> bool:
        return self.hparams["loss"] == "pl"

    def meta_loss(self, episode: Episode) -> Tensor:
        steps = self.hparams["train_steps"]
        if self.hparams["loss"] == "pl":
            probs, _, _ = self.query_probs(episode, steps)
            picked = probs.gather(1, episode.query_y[:, None]).clamp_min(1e-300)
            return -picked.log().mean()
        K, y = self.labelled_kernel(episode)
        w, _, _, _ = self.gibbs(K, y, steps, episode, episode_generator(episode))
        return -self.mean_log_marginal(K, Pairs(y, episode.way), w, episode) / y.numel()

    def pair_gram(self, K: Gram, pairs: Pairs, weights: bool = True, functionals: int = 0
                  ) -> Gram | ClassWeights:
        """The prior of the pairwise differences: with per-class factors, in the ``C D`` class
        weights when the route is forced (``algebra`` features or nystrom) or when
        :meth:`weights_pay` finds them cheaper for ``M`` pairs (and ``functionals = Q C`` class
        functions at the queries, for the predictive):
        :class:`~zoo_ove.weights.ClassWeights` for a factor shared by the classes,
        the factor ``Psi`` of ``K_psi`` (:meth:`Pairs.factor`) for one factor per class or
        without ``weights`` (the joint sampler draws ``psi`` itself); else the dense ``K_psi``
        ``[M, M]``."""
        if isinstance(K, FeatureGram):
            C, M = K.shape[0], len(pairs.point)
            if self.hparams["algebra"] != "auto" or self.weights_pay(M, C, K.rank, functionals):
                if weights and K.outer is not None:
                    left = K.left
                    return ClassWeights(left[(0,) * (left.ndim - 2)].to(DTYPE), K.outer,
                                        pairs.labels(K.shape[-1]), C)
                return FeatureGram.of(pairs.factor(K.left, C))
        return pairs.prior_cov(dense(K))

    def posterior(self, K: Gram | ClassWeights, lam: Tensor, nu: Tensor, episode: Episode
                  ) -> SitePosterior | WeightPosterior:
        """The posterior given pair weights ``lam`` ``[R, M]`` (sites ``nu`` = 1/2), in the
        class weights for a :class:`~zoo_ove.weights.ClassWeights` prior."""
        if isinstance(K, ClassWeights):
            pairs = Pairs(K.y, K.way)
            return WeightPosterior(K, pairs.dense(lam, K.way, K.y.numel()), self.jitter,
                                   episode.id, pairs=len(pairs.point))
        return super().posterior(K, lam, nu, episode)

    def mean_log_marginal(self, K: Gram, pairs: Pairs, w: Tensor, episode: Episode) -> Tensor:
        """``log p(y | w)`` averaged over the chains' ``w`` ``[R, M]``, differentiable in ``K``
        ``[C, n, n]`` through its closed-form gradient instead of autograd through the ``M x M``
        Cholesky (several times cheaper). With ``z = kappa / w`` it is ``log N(z | 0, K_psi +
        W^-1) + const``, so ``d/dK_psi = (a a^T - S B^-1 S) / 2`` (``a`` the posterior's
        ``alpha``), pulled back to ``K`` by :meth:`Pairs.pullback`. The value is returned with
        that first derivative attached (a linear surrogate), which is all a meta-gradient needs.
        On the pair space's factor (:meth:`pair_gram`) it is autograd through the ``C D x C D``
        Woodbury algebra instead."""
        kappa = torch.full_like(w, 0.5)
        K_psi = self.pair_gram(K, pairs)
        if isinstance(K_psi, ClassWeights):
            return self.posterior(K_psi, w, kappa, episode).mean_log_marginal()
        if isinstance(K_psi, FeatureGram):
            post = self.posterior(K_psi, w, kappa, episode)
            return augmented_log_marginal(post, 1.0, kappa).mean()
        K = dense(K)
        C, n, M = K.shape[0], K.shape[-1], w.shape[-1]
        K_fixed, K_psi = K.detach(), K_psi.detach()
        values, grad_psi = [], K_psi.new_zeros(M, M)
        with torch.no_grad():
            for lam in w.split(max(1, PAIR_ELEMENTS // (3 * M * M))):  # B, its factor, inverse
                post = self.posterior(K_psi, lam, kappa[: len(lam)], episode)
                values.append(augmented_log_marginal(post, 1.0, kappa[: len(lam)]))
                if K.requires_grad:
                    inv_B = torch.cholesky_inverse(post.L)  # [r, M, M], scaled in place below
                    inv_B.mul_(post.s[:, :, None]).mul_(post.s[:, None, :])
                    grad_psi += post.alpha.T @ post.alpha - inv_B.sum(0)
            value = torch.cat(values).mean()
            if not K.requires_grad:
                return value
            grad_psi /= 2 * w.shape[0]  # chain mean
            grad_K = pairs.pullback(grad_psi, C, n)  # linear: the mean's gradient
        return value + (grad_K * (K - K_fixed)).sum()

    def predict(self, episode: Episode) -> Prediction:
        probs, trace, spread = self.query_probs(episode, self.hparams["test_steps"])
        return Prediction(probs.float(), extras={"inner_objective": trace,
                                                 "uncertainty": spread.float()})


def pair_variances(cov: Tensor) -> Tensor:
    """``Var(f_c - f_c') = S_cc + S_c'c' - 2 S_cc'`` ``[..., C (C - 1) / 2]`` for ``c < c'``
    (``triu_indices`` order) from class covariances ``S`` ``[..., C, C]``."""
    C = cov.shape[-1]
    a, b = torch.triu_indices(C, C, 1, device=cov.device)
    var_c = torch.diagonal(cov, dim1=-2, dim2=-1)
    return var_c[..., a] + var_c[..., b] - 2 * cov[..., a, b]


def _logsigmoid_of_scalar(f: Tensor) -> Tensor:
    """``log sigmoid`` of one-dimensional draws ``[..., S, 1]``, as ``[..., S]``."""
    return F.logsigmoid(f[..., 0])


@zoo.hookimpl
def zoo_register_methods(register):
    register(OVE)
