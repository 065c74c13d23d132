"""zoo: Bayesian few-shot and meta-learning methods side by side, on identical episodes."""

from zoo.episode import Episode, EpisodeSampler
from zoo.hookspecs import hookimpl
from zoo.hparams import HParam
from zoo.method import Method, Prediction, build_method

__version__ = "0.1.0"
__all__ = ["Episode", "EpisodeSampler", "HParam", "Method", "Prediction", "build_method", "hookimpl"]
