"""GMM-NP (Volpp et al., ICLR 2023): a neural-process decoder whose task posteriors are Gaussian
mixtures fitted per task by trust-region natural-gradient VI (:mod:`zoo_gmm_np.trng`).

Model (Eq. 2, 15): ``y | x, z ~ N(dec(concat(x, z)), sigma^2)``, ``dec`` a tanh MLP,
``z ~ p(z)`` a fixed ``K``-component mixture with means ``~ N(0, I)`` and identity covariances
(A.1.2; ``prior = "normal"``: ``N(0, I)``). There is no encoder.

Meta-training (Alg. 1): every training function carries ``subtasks`` fixed subsets of its
points (sizes cycling through ``1..N``), each with its own mixture ``q_l``, initialised as a copy
of the prior. A visit takes ``train_trng_steps`` TRNG steps on the visited function's subtask
mixtures at once (target ``log p~_l(z) = sum_{n in l} log p(y_n | x_n, z) + log p(z)``), then
returns minus the subtask ELBO's decoder term (Eq. 9): ``z ~ q_l`` detached (the prior is fixed and
``q_l`` does not depend on the decoder), averaged over draws and subtasks, summed over points. With
the regression kind's ``train_tasks = L`` the functions form a fixed pool and their mixtures
persist across visits (in the state dict, so a resumed run continues them); without a pool every
function is new, so ``train_trng_steps`` should then be larger than the paper's 1.

Test time (Alg. 2): a fresh mixture, a copy of the prior, gets ``test_trng_steps`` steps on the
context (none for an empty context); the prediction is ``predict_samples`` draws ``z_s ~ q`` and
per-target ``N(dec(x, z_s), sigma^2)``. The runner's ``prepare`` hands over a cell's test
episodes first, and their fits run batched (each task from its own generator, so a prediction
does not depend on the batch).

Public API besides the runner's (used by the np-paper suite; other regression methods with a
latent variable offer the same two):

- ``fit(x [T, N, dx], y [T, N, dy], mask [T, N] | None, steps=None, prior=None,
  generators=None) -> GMM``: posteriors of ``T`` tasks fitted together (test-time inference,
  batched);
- ``bounds(episode, samples=1024) -> {"": Bounds(elbo, iw), "free": Bounds(elbo, iw)}``: the
  ELBO and the importance-weighted bound of
  ``log p(target_y | target_x, context) = log E_{q(z|context)} prod_n p(y_n | x_n, z)`` (both
  floats, same draws; ``iw - elbo`` is an ELBO looseness, A.3.3) with two proposals
  ``q(z|targets)``: ``""`` fitted by TRNG from ``q(z|context)`` to the bounded density
  ``p(targets | z) q(z|context)`` itself; ``"free"`` fitted from ``p(z)`` to
  ``p(targets | z) p(z)``, context-free like the NPs' encoder ``q(z|D)`` (the paper's Eq. 22-23).
  With an empty context the two are the same fit.

Ablations are hyper-parameters (:data:`VARIANTS`): ``covariance = "diag"``, ``components = 1``,
``update = "direct"`` (iBayes-GMM).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo import HParam, draw_seed, hash_seed
from zoo.tasks import RegressionEpisode, RegressionMethod, RegressionPrediction
from zoo_gmm_np import trng
from zoo_gmm_np.gmm import GMM

log = logging.getLogger(__name__)

VARIANTS: dict[str, dict[str, Any]] = {
    "trng-diag-k1": {"covariance": "diag", "components": 1},
    "trng-full-k1": {"covariance": "full", "components": 1},
    "ibayes-gmm": {"update": "direct"},
}
"""The paper's ablations (Sec. 5.2) as hyper-parameter overrides of ``gmm-np``: suite parts
``{variant = NAME, hparams = VARIANTS[NAME]}``."""

PREDICT_SALT, BOUNDS_SALT, SUBTASK_SALT, CONTEXT_FIT_SALT, PROPOSAL_FIT_SALT = 1, 2, 3, 4, 5


@contextmanager
def seeded(episode: RegressionEpisode, salt: int) -> Iterator[None]:
    """The global generators (the CPU's, and the episode's device's) seeded by the episode for
    the block and restored after it, so that a prediction is a function of weights and episode."""
    device = episode.target_x.device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(draw_seed(episode, salt))
        yield


def generator(episode: RegressionEpisode, salt: int) -> torch.Generator:
    """A generator of the episode's device seeded by the episode and ``salt``."""
    return torch.Generator(episode.target_x.device).manual_seed(draw_seed(episode, salt))


def episode_key(episode: RegressionEpisode) -> tuple[str, Any, int]:
    """What names a test episode's posteriors among those :meth:`GMMNP.prepare` fitted."""
    return episode.id, episode.info.get("seed"), len(episode.context_x)


class Bounds(NamedTuple):
    elbo: float
    iw: float


def importance_bounds(log_likelihood: Tensor, prior: GMM, proposal: GMM, z: Tensor) -> Bounds:
    """ELBO and importance-weighted bound of ``log E_prior p(data | z)`` from draws
    ``z [S, 1, d]`` of ``proposal`` and ``log_likelihood = log p(data | z) [S, 1]``: the mean and
    the log-mean-exp of ``log p(data | z) + log prior(z) - log proposal(z)``; they are equal
    when the proposal is the exact posterior."""
    w = (log_likelihood.to(z.dtype) + prior.log_prob(z) - proposal.log_prob(z))[:, 0]
    return Bounds(float(w.mean()), float(torch.logsumexp(w, 0) - math.log(len(w))))


class GMMNP(RegressionMethod):
    """GMM-NP; defaults are the paper's sinusoid configuration (Table 2, A.3)."""

    name = "gmm-np"
    hyperparameters = {
        "lr": HParam(1.87e-3, gt=0, doc="Adam learning rate of the decoder (paper: HPO 1.87e-3)"),
        "latent_dim": HParam(3, ge=1, doc="d_z (paper: 3 sinusoid, 4 affine+sinusoid)"),
        "components": HParam(4, ge=1, doc="K of prior and posteriors (paper Table 2: 4; the "
                                          "authors' public sinusoid config: 7)"),
        "hidden": HParam(8, ge=1, doc="width of the decoder's two tanh layers (paper: 8 / 44)"),
        "layers": HParam(2, ge=1, doc="hidden layers of the decoder"),
        "covariance": HParam("full", choices=("full", "diag"), doc="posterior covariances"),
        "update": HParam("trust-region", choices=("trust-region", "direct"),
                         doc="trust-region: TRNG (GMM-NP); direct: iBayes-GMM's step size"),
        "kl_bound": HParam(1e-3, gt=0, doc="per-component KL trust region eps (paper: 1.04e-3)"),
        "step_size": HParam(0.1, gt=0, le=1, doc="beta of the direct (iBayes-GMM) update"),
        "trng_samples": HParam(128, ge=1, doc="samples per task per TRNG step, split over K"),
        "decoder_samples": HParam(32, ge=1, doc="z draws per subtask for the decoder step"),
        "subtasks": HParam(32, ge=1, doc="fixed subtasks per training function (L~ = 32 L)"),
        "train_trng_steps": HParam(1, ge=1, doc="TRNG steps per visit of a training function"),
        "test_trng_steps": HParam(1000, ge=0, doc="TRNG steps fitting a test context (paper 1000)"),
        "predict_samples": HParam(1024, ge=1, doc="z draws of the prediction (LMLHD: 1024)"),
        "prior": HParam("gmm", choices=("gmm", "normal"),
                        doc="gmm: fixed random K-component prior (paper); normal: N(0, I)"),
        "noise": HParam("learned", choices=("learned", "fixed"),
                        doc="observation noise: one learned std >= noise_std, or fixed at it"),
        "noise_std": HParam(0.1, gt=0, doc="the noise std's floor (learned) or value (fixed)"),
    }

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        h = self.hparams
        width, dz, k = h["hidden"], h["latent_dim"], h["components"]
        layers: list[nn.Module] = []
        size = self.x_dim + dz
        for _ in range(h["layers"]):
            layers += [nn.Linear(size, width), nn.Tanh()]
            size = width
        self.decoder = nn.Sequential(*layers, nn.Linear(size, self.y_dim))
        self.raw_noise = nn.Parameter(torch.zeros(()), requires_grad=h["noise"] == "learned")
        prior_means = (torch.randn(k, dz, dtype=torch.float64) if h["prior"] == "gmm"
                       else torch.zeros(k, dz, dtype=torch.float64))
        self.register_buffer("prior_means", prior_means)
        self.trng = trng.TRNGConfig(update=h["update"], kl_bound=h["kl_bound"],
                                    step_size=h["step_size"], diagonal=h["covariance"] == "diag",
                                    samples=h["trng_samples"],
                                    dtype=self.decoder[0].weight.dtype)
        self.posteriors: dict[str, GMM] = {}
        self.prepared: dict[tuple[str, Any, int], tuple[GMM, GMM | None, GMM | None]] = {}
        self.steps = self.failures = 0

    # -- model -----------------------------------------------------------------------------------

    def prior(self, tasks: int = 1) -> GMM:
        return GMM.standard(self.prior_means, tasks)

    @property
    def noise_std(self) -> Tensor:
        floor = self.hparams["noise_std"]
        return floor + F.softplus(self.raw_noise) if self.hparams["noise"] == "learned" else \
            self.raw_noise.new_tensor(float(floor))

    def decode(self, x: Tensor, z: Tensor) -> Tensor:
        """Means ``[..., T, N, dy]`` at ``x [T, N, dx]`` for latents ``z [..., T, dz]``: the MLP on
        ``concat(x, z)``, its first layer applied to the two parts apart and summed (the same map,
        without materialising every (x, z) pair)."""
        first = self.decoder[0]
        w_x, w_z = first.weight[:, :self.x_dim], first.weight[:, self.x_dim:]
        hidden = F.linear(x, w_x, first.bias) + F.linear(z.to(x.dtype), w_z)[..., None, :]
        return self.decoder[1:](hidden)

    def log_likelihood(self, x: Tensor, y: Tensor, mask: Tensor, z: Tensor) -> Tensor:
        """``sum_n mask_tn log N(y_tn | dec(x_tn, z), sigma^2)``: ``[..., T]``."""
        dist = torch.distributions.Normal(self.decode(x, z), self.noise_std, validate_args=False)
        return (dist.log_prob(y).sum(-1) * mask).sum(-1)

    def log_target(self, x: Tensor, y: Tensor, mask: Tensor) -> trng.LogTarget:
        """``log p(y | x, z)`` for ``z [S, K, T, d]``: the part of ``log p~`` besides the prior."""
        return lambda z: self.log_likelihood(x, y, mask, z).to(z.dtype)

    # -- inference -------------------------------------------------------------------------------

    def fit(self, x: Tensor, y: Tensor, mask: Tensor | None = None, steps: int | None = None,
            prior: GMM | None = None, generators: Sequence[torch.Generator] | None = None) -> GMM:
        """Posteriors of ``T`` tasks (``x [T, N, dx]``, ``y [T, N, dy]``, ``mask [T, N]``: which
        points are observed), fitted together from ``prior`` (one mixture for every task or one
        per task; default ``p(z)``), which is also their prior; ``generators``: one per task
        (:func:`zoo_gmm_np.trng.fit`)."""
        steps = self.hparams["test_trng_steps"] if steps is None else steps
        mask = torch.ones(x.shape[:2], dtype=x.dtype, device=x.device) if mask is None else \
            mask.to(x.dtype)
        prior = prior or self.prior()
        start = prior if len(prior.mean) == len(x) else GMM(
            prior.log_w.expand(len(x), -1), prior.mean.expand(len(x), -1, -1),
            prior.prec.expand(len(x), -1, -1, -1))
        gmm, failures = trng.fit(start, self.log_target(x, y, mask), self.trng, steps, prior,
                                 generators)
        if failures:
            log.debug("%s: %d component steps failed while fitting %d tasks", self.name,
                      failures, len(x))
        return gmm.detach()

    def context_posterior(self, episode: RegressionEpisode) -> GMM:
        """``q(z | context)`` (the prior if the context is empty), its draws seeded by the
        episode."""
        if len(episode.context_x) == 0:
            return self.prior()
        return self.fit(episode.context_x[None], episode.context_y[None],
                        generators=[generator(episode, CONTEXT_FIT_SALT)])

    def prepare(self, episodes: Sequence[RegressionEpisode]) -> None:
        """Fit the context posteriors (and, where the episode asks for bounds, the proposals of
        :meth:`bounds`) of all ``episodes`` together, grouped by context size; each task draws
        from its own generator, so :meth:`predict` and :meth:`bounds` give what they give
        without this, only faster."""
        self.prepared = {}
        groups: dict[int, list[RegressionEpisode]] = {}
        for e in episodes:
            groups.setdefault(len(e.context_x), []).append(e)
        for size, group in groups.items():
            if size:
                posteriors = self.fit(torch.stack([e.context_x for e in group]),
                                      torch.stack([e.context_y for e in group]),
                                      generators=[generator(e, CONTEXT_FIT_SALT) for e in group])
            else:
                posteriors = self.prior()
            bounded = [i for i, e in enumerate(group) if e.info.get("bound_samples", 0)]
            proposals: list[GMM | None] = [None, None]  # from q(z|context), from p(z)
            if bounded:
                x = torch.stack([group[i].target_x for i in bounded])
                y = torch.stack([group[i].target_y for i in bounded])
                starts = [posteriors.select(bounded), self.prior()] if size else [posteriors]
                proposals = [self.fit(x, y, prior=start, generators=[
                    generator(group[i], PROPOSAL_FIT_SALT) for i in bounded]) for start in starts]
                proposals = proposals * (3 - len(proposals))  # no context: one fit is both
            for i, e in enumerate(group):
                own = posteriors.select(slice(i, i + 1)) if size else posteriors
                at = slice(bounded.index(i), bounded.index(i) + 1) if i in bounded else None
                self.prepared[episode_key(e)] = (own, *(
                    None if p is None or at is None else p.select(at) for p in proposals))

    # -- meta-training ---------------------------------------------------------------------------

    def _function(self, episode: RegressionEpisode) -> tuple[str | None, Tensor, Tensor]:
        """The visited function's key (``None``: not from a pool) and its points in their own
        order, so that its subtasks are the same subsets at every visit."""
        x, y = episode.target_x, episode.target_y
        if "task" not in episode.info:
            return None, x, y
        order = torch.argsort(torch.tensor(episode.info["order"], device=x.device))
        return f"{episode.info['dataset']}/{episode.info['task']}", x[order], y[order]

    def subtask_masks(self, n: int, seed: int) -> Tensor:
        """``[subtasks, n]``: sizes cycling through the distinct values of ``linspace(1, n, J)``
        (the authors' code), each subset drawn by a generator seeded by the function."""
        j = self.hparams["subtasks"]
        sizes = torch.linspace(1, n, j).round().long().unique()
        g = torch.Generator().manual_seed(seed)
        ranks = torch.argsort(torch.rand(j, n, generator=g), -1).argsort(-1)
        return ranks < sizes.repeat(math.ceil(j / len(sizes)))[:j, None]

    meta_loss_name = "negative decoder log-likelihood at the subtask posteriors' draws, per point"

    def meta_loss(self, episode: RegressionEpisode) -> Tensor:
        self.prepared = {}  # fitted with the weights before this step
        key, x, y = self._function(episode)
        seed = hash_seed(key, bits=56) if key else draw_seed(episode, SUBTASK_SALT)
        mask = self.subtask_masks(len(x), seed).to(device=x.device, dtype=x.dtype)
        xs, ys = x.expand(len(mask), *x.shape), y.expand(len(mask), *y.shape)
        gmm = self.posteriors.get(key) if key else None
        if gmm is None:
            gmm = self.prior(len(mask))
        target, prior = self.log_target(xs, ys, mask), self.prior()
        for _ in range(self.hparams["train_trng_steps"]):
            gmm, info = trng.step(gmm, target, self.trng, prior=prior)
            self.steps += info.failed.numel()
            self.failures += int(info.failed.sum())
        if key:
            self.posteriors[key] = gmm.detach()
        z = gmm.mixture.sample((self.hparams["decoder_samples"],)).detach()  # [S, J, d]
        return -self.log_likelihood(xs, ys, mask, z).mean()

    def get_extra_state(self) -> dict[str, Any]:
        return {key: {"log_w": g.log_w, "mean": g.mean, "prec": g.prec}
                for key, g in self.posteriors.items()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.prepared = {}
        self.posteriors = {key: GMM(v["log_w"], v["mean"], v["prec"]) for key, v in state.items()}

    def counters(self) -> dict[str, int]:
        return {"trng_component_steps": self.steps, "trng_failed_steps": self.failures}

    # -- prediction ------------------------------------------------------------------------------

    def predict(self, episode: RegressionEpisode) -> RegressionPrediction:
        q = self.prepared.get(episode_key(episode), (None, None, None))[0]
        q = self.context_posterior(episode) if q is None else q
        with seeded(episode, PREDICT_SALT):
            z = q.mixture.sample((self.hparams["predict_samples"],))[:, 0]  # [S, d]
        with torch.no_grad():
            mean = self.decode(episode.target_x, z[:, None])[:, 0]  # [S, N, dy]
            var = self.noise_std.square().expand_as(mean)
        return RegressionPrediction(mean, var)

    def bounds(self, episode: RegressionEpisode, samples: int = 1024) -> dict[str, Bounds]:
        """ELBO and importance-weighted bound of ``log E_{q(z|context)} p(targets | z)`` (with an
        empty context ``q(z|context) = p(z)``) with two proposals ``q(z|targets)``, each drawn
        ``samples`` times (the same generator): ``""`` fitted by TRNG from ``q(z|context)`` to
        ``p(targets | z) q(z|context)``, the bounded density itself; ``"free"`` fitted from
        ``p(z)`` to ``p(targets | z) p(z)``, without the context (the paper's, A.3.3). ``iw >=
        elbo``; ``iw - elbo`` estimates ``KL(proposal || posterior)``, the ELBO looseness."""
        x, y = episode.target_x, episode.target_y
        prior, proposal, free = self.prepared.get(episode_key(episode), (None, None, None))
        prior = self.context_posterior(episode) if prior is None else prior
        if proposal is None:
            proposal = self.fit(x[None], y[None], prior=prior,
                                generators=[generator(episode, PROPOSAL_FIT_SALT)])
        if free is None:
            free = proposal if len(episode.context_x) == 0 else self.fit(
                x[None], y[None], generators=[generator(episode, PROPOSAL_FIT_SALT)])
        mask = torch.ones(1, len(x), dtype=x.dtype, device=x.device)
        out = {}
        for name, q in (("", proposal), ("free", free)):
            with seeded(episode, BOUNDS_SALT):
                z = q.mixture.sample((samples,))  # [S, 1, d]
            with torch.no_grad():
                out[name] = importance_bounds(self.log_likelihood(x[None], y[None], mask, z),
                                              prior, q, z)
        return out
