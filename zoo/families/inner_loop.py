"""The inner-loop family: methods that adapt to the support set with gradient steps, and the
inner-loop settings their papers publish.

MAML's published settings (Finn, Abbeel & Levine, ICML 2017, appendix A.1): Omniglot 5-way:
1 step of 0.4, 3 at test; Omniglot 20-way: 5 steps of 0.1 in training and at test;
mini-ImageNet: 5 steps of 0.01, 10 at test. Inner-loop hyper-parameters left at ``None`` take the
setting of the protocol (``protocol="auto"``: ``omniglot`` for single-channel inputs,
``miniimagenet`` otherwise); the resolved values are written back to ``self.hparams`` so results
record what actually ran. ``meta_batch`` (episodes per optimizer step, read by the trainer through
:attr:`~zoo.method.Method.meta_batch`) is 4, mini-ImageNet's 1-shot setting; the published
Omniglot values, 32 tasks (5-way) and 16 (20-way), are set by the reproduction card's ``--set``.

The base needs no meta-learning library: how a subclass takes its steps (learn2learn's
``clone``/``adapt``, ``torch.func``) is its own business; :func:`learn2learn_algorithms` imports
learn2learn lazily for the plugins that use it.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Mapping
from importlib.util import find_spec
from types import ModuleType
from typing import Any, ClassVar

from torch import nn

from zoo.backbones import Backbone, use_batch_statistics
from zoo.hparams import HParam
from zoo.method import Method

PROTOCOLS = ("omniglot", "miniimagenet")

#: Published inner-loop settings: protocol -> way -> settings (``None``: any other way).
PUBLISHED: Mapping[str, Mapping[int | None, Mapping[str, Any]]] = {
    "omniglot": {
        5: {"inner_lr": 0.4, "inner_steps": 1, "test_inner_steps": 3},
        20: {"inner_lr": 0.1, "inner_steps": 5, "test_inner_steps": 5},
        None: {"inner_lr": 0.4, "inner_steps": 1, "test_inner_steps": 3},
    },
    "miniimagenet": {
        None: {"inner_lr": 0.01, "inner_steps": 5, "test_inner_steps": 10},
    },
}

#: The remedy :func:`zoo.jitter.check_finite` gives for a non-finite inner-loop objective.
DIVERGED = "the inner loop diverged: lower inner_lr or inner_steps"


def published_with_steps(steps: int) -> dict[str, dict[int | None, dict[str, Any]]]:
    """:data:`PUBLISHED` with ``steps`` inner steps in training and at test (Meta-SGD, ABML)."""
    return {p: {w: {**s, "inner_steps": steps, "test_inner_steps": steps} for w, s in t.items()}
            for p, t in PUBLISHED.items()}


LEARN2LEARN_INSTALL = (
    "pip install Cython && pip install --no-deps learn2learn==0.2.0 "
    "--config-settings=--build-option=build_ext && pip install gym requests tqdm scipy")
"""How learn2learn 0.2.0 installs on Python 3.11+ (``tools/install-learn2learn.sh`` in a source
checkout): its sdist's generated C files do not compile there, so Cython regenerates them; it is
installed without its declared extras (``qpth``, ``gsutil``: unused, and not installable as
wheels), then with what ``import learn2learn`` needs."""


def require_learn2learn(distribution: str) -> None:
    """Raise :class:`ImportError` with the install command if learn2learn is missing (a plugin that
    uses it calls this at load time, so that ``zoo plugins`` shows the remedy, not a first step's
    traceback)."""
    if find_spec("learn2learn") is None:
        raise ImportError(f"{distribution} needs learn2learn, which is not installed; install it "
                          f"with: {LEARN2LEARN_INSTALL}")


def learn2learn_algorithms() -> ModuleType:
    """``learn2learn.algorithms``, imported on first use (learn2learn imports gym, slowly and
    noisily); plugins that use it check at load time that it is installed."""
    _import_gym_without_its_notice()
    import learn2learn

    return learn2learn.algorithms


def _import_gym_without_its_notice() -> None:
    """Import gym, dropping the one deprecation notice it prints to stderr on every import (from
    ``gym_notices``, for gym 0.26); anything else it writes there is passed on."""
    if "gym" in sys.modules or find_spec("gym") is None:
        return
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):
        import gym
    text = captured.getvalue()
    try:
        from gym_notices.notices import notices
    except ImportError:
        notices = {}
    notice = notices.get(getattr(gym, "__version__", None))
    if notice:
        text = text.replace(notice + "\n", "", 1)
    sys.stderr.write(text)


def infer_protocol(backbone: nn.Module) -> str:
    """``omniglot`` when the backbone's first convolution (or layer) takes one channel, else
    ``miniimagenet``: character data sets are grey-scale, natural-image ones are RGB."""
    for m in backbone.modules():
        if isinstance(m, nn.Conv2d):
            return "omniglot" if m.in_channels == 1 else "miniimagenet"
    return "omniglot"


class InnerLoopMethod(Method):
    """A method with a support-set inner loop and protocol-dependent published defaults; batch
    norm uses batch statistics, as in the MAML papers.

    Subclasses may override :attr:`published` (same layout as :data:`PUBLISHED`).
    """

    hyperparameters = {
        "protocol": HParam("auto", choices=("auto", *PROTOCOLS),
                           doc="whose published inner-loop settings fill those left at None"),
        "inner_lr": HParam(None, type=float, ge=0, doc="inner-loop step size"),
        "inner_steps": HParam(None, type=int, ge=0, doc="inner steps in meta-training"),
        "test_inner_steps": HParam(None, type=int, ge=0, doc="inner steps at test"),
        "meta_batch": HParam(4, ge=1, doc="episodes per optimizer step (read by the trainer)"),
    }
    published: ClassVar[Mapping[str, Mapping[int | None, Mapping[str, Any]]]] = PUBLISHED

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        use_batch_statistics(self.backbone)
        protocol = self.hparams["protocol"]
        if protocol == "auto":
            protocol = infer_protocol(self.backbone)
        table = self.published[protocol]
        self.hparams["protocol"] = protocol
        for key, value in table.get(way, table[None]).items():
            given = self.hparams[key]
            self.hparams[key] = type(value)(value if given is None else given)

    def inner_steps(self) -> int:
        """Inner steps for the current mode: ``inner_steps`` in training, else ``test_inner_steps``."""
        return self.hparams["inner_steps" if self.training else "test_inner_steps"]
