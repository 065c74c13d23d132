"""An ensemble of trained classification models: the average of their class probabilities.

Deep ensembles (Lakshminarayanan et al. 2017) are the baseline of the uncertainty literature; the
runner builds one from a cell's independently trained seeds without retraining
(:mod:`zoo.runner.ensembles`). Its own uncertainty is the mutual information between the label
and the member, ``H(mean_m p_m) - mean_m H(p_m)`` (the members' disagreement; zero when they
agree, whatever their entropy), which scores the detection of unknown-class queries beside the
entropy of the average.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from zoo.episode import Episode
from zoo.tasks.classification import Prediction


class Ensemble(nn.Module):
    """The members' mean class probabilities, each member asked in turn (its RNG use included)."""

    uncertainty_name = ("mutual information between label and member: entropy of the mean minus "
                        "the members' mean entropy")

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"an ensemble needs two members or more, got {len(members)}")
        self.members = nn.ModuleList(members)
        self.hparams = dict(getattr(members[0], "hparams", {}))  # the members' (one cell's)

    def predict(self, episode: Episode) -> Prediction:
        probs = torch.stack([m.predict(episode).probs.detach().double() for m in self.members])
        mean = probs.mean(0)
        # H(mean) - mean H(p_m) written as the members' mean KL to the mean: exactly 0 where they agree
        log_p, log_mean = probs.clamp_min(1e-300).log(), mean.clamp_min(1e-300).log()
        disagreement = (probs * (log_p - log_mean)).sum(-1).mean(0).clamp_min(0)
        return Prediction(mean.float(), {"uncertainty": disagreement.float()})

    def counters(self) -> dict[str, int]:
        """The members' counters, summed."""
        out: dict[str, int] = {}
        for m in self.members:
            for k, v in getattr(m, "counters", dict)().items():
                out[k] = out.get(k, 0) + v
        return out
