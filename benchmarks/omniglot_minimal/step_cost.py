"""Where one training step of the held-out Omniglot recipe goes: episode vs model.

Loads ``omniglot-minimal`` as the ``lake-oneshot-recipe`` suite names it (small1, rotations as
classes, 4 affine copies per image), draws the recipe's training episodes (20-way 1-shot, 5
queries per class: 120 images) through :class:`zoo.EpisodeSampler`, and times separately the
episode (sampling, gathering, rotation, uint8 -> float) and ProtoNet's step (forward, backward,
Adam). CPU time of this process (``time.process_time``), so the numbers hold on a loaded machine;
run it with one thread, as the runner's units do:

    OMP_NUM_THREADS=1 python benchmarks/omniglot_minimal/step_cost.py --data-dir ~/data
"""

from __future__ import annotations

import argparse
import time

import torch

from zoo.episode import EpisodeSampler
from zoo.method import build_method
from zoo.plugins import load_dataset, registry
from zoo.spec import parse_spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--dataset",
                        default="omniglot-minimal[background=small1,rotations=true,distortions=4]")
    parser.add_argument("--widths", type=int, nargs="+", default=[64])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--way", type=int, default=20)
    parser.add_argument("--query", type=int, default=5)
    args = parser.parse_args()

    name, options = parse_spec(args.dataset, "dataset")
    dataset = load_dataset(name, data_dir=args.data_dir, **options)
    sampler = EpisodeSampler(dataset, "train", args.way, 1, args.query, seed=0)
    start = time.process_time()
    episodes = [sampler[i] for i in range(args.steps)]
    episode_ms = 1000 * (time.process_time() - start) / args.steps
    print(f"{args.dataset}: {torch.get_num_threads()} thread(s); {args.way}-way 1-shot, "
          f"{args.query} queries: {episodes[0].support_x.shape[0] + episodes[0].query_x.shape[0]} "
          f"images per episode")
    print(f"episode (sample, gather, rotate, to float): {episode_ms:.1f} ms CPU")
    for width in args.widths:
        method = build_method("protonet", way=args.way, in_channels=1, image_size=28,
                              backbone="conv4s", backbone_options={"width": width}, seed=0,
                              registry=registry())
        optimizer = torch.optim.Adam(method.parameters(), lr=1e-3)
        method.meta_loss(episodes[0]).backward()  # warm-up
        start = time.process_time()
        for episode in episodes:
            optimizer.zero_grad()
            method.meta_loss(episode).backward()
            optimizer.step()
        step_ms = 1000 * (time.process_time() - start) / args.steps
        print(f"protonet conv4s[width={width}] step: {step_ms:.0f} ms CPU; episode / step = "
              f"{episode_ms / step_ms:.3f}")


if __name__ == "__main__":
    main()
