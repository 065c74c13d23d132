"""Image completions of the trained models of an ``np-image`` results folder (GMM-NP, Volpp et al.
2023, Figs. 5 and 9): the first row is the context pixels of one test image at each context size
(unobserved pixels hatched blue), then per method a few posterior draws of the predictive mean.

    python benchmarks/neural_processes/completions.py RESULTS [--index 3] [--samples 2]
        [--out completions.png] [--dataset digits-completion] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from zoo.plugins import registry  # noqa: E402
from zoo.runner.cell import DatasetCache  # noqa: E402
from zoo.runner.train import load_run  # noqa: E402
from zoo.tasks.regression import sample_task  # noqa: E402


def image(x: torch.Tensor, y: torch.Tensor, size: int) -> np.ndarray:
    """Pixels ``x [n, 2]`` in ``[-1, 1]^2`` with values ``y [n]`` on a NaN canvas."""
    canvas = np.full((size, size), np.nan)
    rc = ((x.detach().numpy() + 1) / 2 * (size - 1)).round().astype(int)
    canvas[rc[:, 0], rc[:, 1]] = y.detach().numpy()
    return canvas


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path)
    p.add_argument("--dataset", default="digits-completion")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--index", type=int, default=3, help="test image (episode index)")
    p.add_argument("--samples", type=int, default=2, help="draws shown per method")
    p.add_argument("--out", type=Path, default=Path("completions.png"))
    a = p.parse_args()
    suite = json.loads((a.results / "suites" / "np-image.json").read_text())
    contexts = suite["settings"]["context_sizes"]
    family = DatasetCache(a.data_dir, "cpu", registry()).get(a.dataset, download=False)
    models = []
    for folder in sorted((a.results / "train").iterdir()):
        if not (folder / "model.pt").exists():
            continue
        config, blob = load_run(folder, "cpu")
        if config["train_dataset"] != a.dataset or config["method"] in {m for m, _ in models}:
            continue  # one model per method (a resumed folder may hold an older one)
        cls = registry().get("methods", config["method"])
        method = cls(x_dim=family.x_dim, y_dim=family.y_dim, **config["hparams"])
        method.load_state_dict(blob["state_dict"])
        models.append((config["method"], method.eval()))
    models.sort()
    size = int(family.images["test"].shape[-1])
    targets = size * size
    rows = 1 + len(models) * a.samples
    fig, axes = plt.subplots(rows, len(contexts), figsize=(1.1 * len(contexts), 1.1 * rows),
                             squeeze=False)
    cmap = matplotlib.colormaps["gray"].with_extremes(bad="#9db8d9")
    for j, c in enumerate(contexts):
        episode = sample_task(family, "test", 0, targets, a.index, c)
        axes[0, j].imshow(image(episode.context_x, episode.context_y[:, 0], size), cmap=cmap,
                          vmin=0, vmax=1)
        axes[0, j].set_title(f"{c} px", fontsize=8)
        for i, (name, method) in enumerate(models):
            with torch.no_grad():
                prediction = method.predict(episode)
            for s in range(a.samples):
                ax = axes[1 + i * a.samples + s, j]
                ax.imshow(image(episode.target_x, prediction.mean[s % len(prediction.mean), :, 0],
                                size), cmap=cmap, vmin=0, vmax=1)
                if j == 0:
                    ax.set_ylabel(name if s == 0 else "", fontsize=8, rotation=0, ha="right",
                                  va="center")
    axes[0, 0].set_ylabel("context", fontsize=8, rotation=0, ha="right", va="center")
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout(pad=0.2)
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}: {len(models)} models x {a.samples} draws, contexts {contexts}")


if __name__ == "__main__":
    main()
