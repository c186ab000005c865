"""The training step's cost of two or more start files, measured in one process (issue 43).

    python experiments/exploration/step_cost.py datasets/starts/seeing-cir2400-h64.pt datasets/starts/q4.pt

One thread (as each of ``cirbench run``'s two worker processes has), a batch of 128
composed queries through the composer and the targets' features, the max-over-tokens
contrastive loss, backward and an AdamW step; the starts take turns, and each one's best of
six rounds of three steps is printed with its ratio to the first. Only the ratio means
anything: absolute times depend on the machine and on what else runs.
"""

from __future__ import annotations

import sys
import time

import torch

from cirbench.backbones.base import max_token_similarity

sys.path.insert(0, "experiments/exploration")
from plugin import load_start_file  # noqa: E402


def step_seconds(paths: list[str], rounds: int = 6, steps: int = 3, batch: int = 128) -> dict[str, float]:
    """Best seconds per training step of each start in ``paths`` over ``rounds`` turns."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    backbones = {path: load_start_file(path) for path in paths}
    tokens = torch.randn(batch, 16, 64)  # the tiny tower's (B, 16, 64) tokens
    texts = ["make the red circle in the top left a small blue square"] * batch
    best = {path: float("inf") for path in paths}
    for _ in range(rounds):
        for path, backbone in backbones.items():
            optimiser = torch.optim.AdamW([p for p in backbone.parameters() if p.requires_grad], lr=1e-4)
            text = backbone.tokenize(texts)
            start = time.perf_counter()
            for _ in range(steps):
                scores = max_token_similarity(backbone.composed_feature(tokens, text), backbone.target_features(tokens))
                loss = torch.nn.functional.cross_entropy(scores / 0.07, torch.arange(batch))
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
            best[path] = min(best[path], (time.perf_counter() - start) / steps)
    return best


if __name__ == "__main__":
    seconds = step_seconds(sys.argv[1:])
    first = next(iter(seconds.values()))
    for path, value in seconds.items():
        print(f"{path}: {value:.3f} s/step, {value / first:.2f}x")
