"""The hyper-parameter study of MD-BFSC (paper Table 3) as two runner suites.

``md-hparams`` (``md-hparams.toml``) varies one factor at a time around the paper's defaults:
the meta-training step size rho in {0.01, 0.1, 0.5, 1}, the kernel in {COS, RBF, POL1, POL2} and
the number of meta-training inner steps in {1, 3, 5, 7}. Each value is a labelled ``[[part]]`` of
the suite, so every row is an ordinary runner cell (content-hashed, resumable, same metrics, seeds
and environment record as any result) and ``zoo report`` prints the table. It is sized for the
embedded ``glyphs`` data set on a CPU; ``--set train_datasets=NAME`` runs it on any registered
data set.

``md-hparams-paper`` is the same study under the paper's protocol (CUB 5-way 1/5-shot, Conv4 on
84x84 images, the ``paper`` suite's episode counts and seeds); it needs the data and a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomllib

SUITE = Path(__file__).resolve().parent / "md-hparams.toml"

PAPER_PROTOCOL: dict[str, Any] = {
    "description": "MD-BFSC Table 3 on CUB 5-way 1/5-shot, the paper's protocol (data + GPU)",
    "train_datasets": ["cub"], "backbone": "conv4", "query": 15, "train_query": 16,
    "seeds": [0, 1, 2, 3, 4], "train_episodes": {"1": 60000, "5": 40000}, "val_episodes": 100,
    "val_every": 1000, "test_episodes": 600, "checkpoint_every": 500, "requires": ["cuda"],
}
"""The settings of ``zoo/suites/paper.toml`` for CUB (Patacchiola et al. 2020; the MD-BFSC
paper follows them): 600 / 400 epochs of 100 episodes for 1 / 5 shots, 600 test episodes x 5
seeds."""


def paper_suite() -> dict[str, Any]:
    """``md-hparams`` with the paper's CUB protocol in place of the CPU sizes."""
    raw = tomllib.loads(SUITE.read_text())
    raw["suite"] = {**raw["suite"], **PAPER_PROTOCOL}
    return raw
