"""An ensemble of trained classification models: the average of their class probabilities.

Deep ensembles (Lakshminarayanan et al. 2017) are the baseline of the uncertainty literature; the
runner builds one from a cell's independently trained seeds without retraining
(:mod:`zoo.runner.ensembles`). Its own uncertainty is the mutual information between the label
and the member, ``H(mean_m p_m) - mean_m H(p_m)`` (the members' disagreement; zero when they
agree, whatever their entropy), which scores the detection of unknown-class queries beside the
entropy of the average.

An ensemble's predictions are also built member by member: :class:`Recorded` keeps what a member
predicts in a pass over episodes, :class:`Replayed` gives those predictions back in the same
order, and the ensemble of replayed members averages them as it would average the members (the
runner's ensemble cells, which so take the predictions a member's own cell already made on the
same episodes instead of asking for them again).
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


class Recorded(nn.Module):
    """``method``, the class probabilities of each of its predictions kept in ``probs`` (in the
    order it was asked, detached)."""

    def __init__(self, method: nn.Module):
        super().__init__()
        self.method = method
        self.probs: list[torch.Tensor] = []
        self.train(method.training)

    def predict(self, episode: Episode) -> Prediction:
        prediction = self.method.predict(episode)
        self.probs.append(prediction.probs.detach())
        return prediction


class Replayed(nn.Module):
    """A member that answers each call with the next of ``probs`` (a :class:`Recorded` member's,
    asked again in the same order): the member as an ensemble sees it, without its work."""

    def __init__(self, probs: Sequence[torch.Tensor], what: str = "the member"):
        super().__init__()
        self.probs, self.what, self.calls = list(probs), what, 0

    def predict(self, episode: Episode) -> Prediction:
        if self.calls >= len(self.probs):
            raise ValueError(f"{self.what}: {len(self.probs)} recorded predictions, and a "
                             f"prediction {self.calls + 1} was asked for (episode {episode.id})")
        probs = self.probs[self.calls]
        if probs.shape[0] != episode.query_x.shape[0]:
            raise ValueError(f"{self.what}: recorded prediction {self.calls + 1} has "
                             f"{probs.shape[0]} queries, episode {episode.id} asks for "
                             f"{episode.query_x.shape[0]}: not the episodes it was recorded on")
        self.calls += 1
        return Prediction(probs)

    def finished(self) -> None:
        """Raise unless every recorded prediction was asked for."""
        if self.calls != len(self.probs):
            raise ValueError(f"{self.what}: {len(self.probs)} recorded predictions, "
                             f"{self.calls} asked for: not the episodes they were recorded on")
