"""Sequential baselines: two one-pass online classifiers and an exact online regression.

- ``running-prototypes``: isotropic Gaussian class-conditionals ``N(mu_c, sigma^2 I)`` with
  running class means and a pooled within-class variance, class prior ``(n_c + 1) / (n + C)``:
  the online form of linear discriminant analysis with a shared spherical covariance. Exact
  sufficient statistics: the result does not depend on the order of the stream.
- ``online-logreg``: multinomial logistic regression, one SGD step per example on the
  cross-entropy (gradient ``x (p - onehot(y))``), learning rate ``lr``, weight decay ``decay``.
- ``online-blr`` (regression streams): Bayesian linear regression on ``[x, 1]``, prior
  ``N(0, prior_var I)``, known noise variance ``noise_var``, updated by the Kalman (recursive
  least squares) step ``k = S phi / (phi^T S phi + noise_var)``, ``m += k (y - phi^T m)``,
  ``S -= k phi^T S``: after any stream its belief is the exact batch posterior of the examples
  seen, whatever their order, and its predictive ``N(phi^T m, noise_var + phi^T S phi)`` is exact.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from zoo.hparams import HParam
from zoo.tasks.methods import StreamMethod

VARIANCE_FLOOR = 1e-2


class RunningPrototypes(StreamMethod):
    name = "running-prototypes"

    def init(self) -> tuple[Tensor, Tensor, Tensor]:
        return (torch.zeros(self.classes, self.dim, dtype=torch.float64),
                torch.zeros(self.classes, dtype=torch.float64),
                torch.zeros(self.classes, dtype=torch.float64))

    def update(self, state: Any, x: Tensor, y: Tensor) -> Any:
        sums, counts, squares = (t.clone() for t in state)
        c = int(y)
        sums[c] += x.double().cpu()
        counts[c] += 1
        squares[c] += float(x.double().square().sum())
        return sums, counts, squares

    def predict(self, state: Any, x: Tensor) -> Tensor:
        sums, counts, squares = state
        seen = counts > 0
        n = float(counts.sum())
        overall = sums.sum(0) / max(n, 1.0)
        means = torch.where(seen[:, None], sums / counts.clamp_min(1)[:, None], overall)
        within = float((squares - sums.square().sum(1) / counts.clamp_min(1)).sum())
        dof = max(n - int(seen.sum()), 1.0) * self.dim
        variance = within / dof + VARIANCE_FLOOR
        d2 = torch.cdist(x.double().cpu(), means).square()
        log_prior = torch.log((counts + 1) / (n + self.classes))
        return torch.softmax(log_prior - 0.5 * d2 / variance, dim=-1).float()


class OnlineLogisticRegression(StreamMethod):
    name = "online-logreg"
    hyperparameters = {
        "lr": HParam(0.5, gt=0, doc="step size of the online gradient update"),
        "decay": HParam(1e-4, ge=0, doc="L2 weight decay per update"),
    }

    def init(self) -> Tensor:
        return torch.zeros(self.classes, self.dim + 1, dtype=torch.float64)

    def update(self, state: Tensor, x: Tensor, y: Tensor) -> Tensor:
        features = torch.cat([x.double().cpu(), torch.ones(1, dtype=torch.float64)])
        p = torch.softmax(state @ features, 0)
        p[int(y)] -= 1
        grad = p[:, None] * features[None] + self.hparams["decay"] * state
        return state - self.hparams["lr"] * grad

    def predict(self, state: Tensor, x: Tensor) -> Tensor:
        features = torch.cat([x.double().cpu(), torch.ones(len(x), 1, dtype=torch.float64)], 1)
        return torch.softmax(features @ state.T, -1).float()


class OnlineBayesianLinearRegression(StreamMethod):
    name = "online-blr"
    regression = True
    classification = False
    hyperparameters = {
        "prior_var": HParam(1.0, gt=0, doc="prior variance of each weight and the bias"),
        "noise_var": HParam(0.5, gt=0, doc="observation noise variance"),
    }

    def init(self) -> tuple[Tensor, Tensor]:
        size = self.dim + 1
        return (torch.zeros(size, dtype=torch.float64),
                self.hparams["prior_var"] * torch.eye(size, dtype=torch.float64))

    def update(self, state: Any, x: Tensor, y: Tensor) -> Any:
        mean, cov = state
        phi = torch.cat([x.double().cpu(), torch.ones(1, dtype=torch.float64)])
        s_phi = cov @ phi
        gain = s_phi / (phi @ s_phi + self.hparams["noise_var"])
        return mean + gain * (float(y) - phi @ mean), cov - torch.outer(gain, s_phi)

    def predict(self, state: Any, x: Tensor) -> tuple[Tensor, Tensor]:
        mean, cov = state
        phi = torch.cat([x.double().cpu(), torch.ones(len(x), 1, dtype=torch.float64)], 1)
        return phi @ mean, self.hparams["noise_var"] + ((phi @ cov) * phi).sum(1)
