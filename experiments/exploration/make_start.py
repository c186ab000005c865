"""Make a ``tiny`` start file for exploring the embedded default (issue 43).

A start is the frozen tower and the pre-trained composer, made with the library's own
pre-trainings (:mod:`cirbench.backbones.tiny_pretrain`), every one on data disjoint from
the benchmark; only their lengths, the tower and the composer's size vary here. It also
prints the composer's composed retrieval (R@10) on held-out pre-training triplets after
each stage, so a run says whether more pre-training still lifts its own task.

    python experiments/exploration/make_start.py --tower pretrained --cir-steps 2400 \
        --out datasets/starts/seeing-cir2400.pt
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from cirbench.backbones import tiny_pretrain as tp
from cirbench.backbones.base import max_token_similarity
from cirbench.backbones.tiny import _WORD, HashingTokenizer, TinyBackbone
from cirbench.data.datasets.shapes import SHAPES_COLOURS

CACHE = Path("datasets/starts/cache")
"""Towers and stage-1 composers already made, reused by later starts."""


SHIFTS = {
    "none": lambda word: word,
    "colours": lambda word: f"{word}ish" if word in SHAPES_COLOURS else word,
    "words": lambda word: f"{word}zq",
}
"""Words the pre-training sees in place of the benchmark's (one-to-one maps): under
``colours`` the start never reads a benchmark colour word, under ``words`` no benchmark
word at all; the fine-tune must teach them."""


class ShiftedTokenizer(HashingTokenizer):
    """The hashing tokenizer with each word first mapped through ``shift``."""

    def __init__(self, shift: Callable[[str], str]) -> None:
        super().__init__()
        self.shift = shift

    def word_ids(self, text: str) -> list[int]:
        return super().word_ids(" ".join(self.shift(w) for w in _WORD.findall(text.lower())))


def heldout_composed_r10(backbone: TinyBackbone, n_scenes: int = 200, mods: int = 4) -> tuple[float, float]:
    """R@1 and R@10 of the composed query against every image of a held-out pre-training
    split (another generator seed than any pre-training draw), reference excluded."""
    rng = np.random.default_rng([99, 13])
    images, split = tp.composed_pretraining_data(rng, n_scenes, mods)
    backbone.eval()
    with torch.no_grad():
        tokens = backbone.encode_image_tokens(tp._normalised_pixels(images))
        targets = backbone.target_features(tokens)
        reference = torch.as_tensor(split["reference"])
        queries = backbone.composed_feature(tokens[reference], backbone.tokenize(split["texts"]))
        scores = max_token_similarity(queries, targets)
        scores[torch.arange(len(reference)), reference] = -float("inf")
        target = torch.as_tensor(split["target"])
        rank = (scores > scores[torch.arange(len(target)), target].unsqueeze(1)).sum(1)
    backbone.train()
    return round(float((rank < 1).float().mean()), 4), round(float((rank < 10).float().mean()), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tower", choices=("random", "pretrained"), default="random")
    parser.add_argument("--tower-steps", type=int, default=300)
    parser.add_argument("--stage1-steps", type=int, default=600)
    parser.add_argument("--cir-steps", type=int, default=600)
    parser.add_argument("--cir-scenes", type=int, default=2000)
    parser.add_argument("--cir-lr", type=float, default=1e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--queries", type=int, default=8)
    parser.add_argument("--shift", choices=sorted(SHIFTS), default="none")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    shape = {"hidden_size": args.hidden, "embed_dim": args.hidden, "num_query_tokens": args.queries,
             "num_layers": 2, "num_heads": 4}
    log: dict[str, object] = {"args": {k: str(v) for k, v in vars(args).items()}}
    t0 = time.perf_counter()
    with torch.random.fork_rng(), tp.pinned_threads(tp.PRETRAIN_THREADS):
        tower_state = None
        if args.tower == "pretrained":
            tower_state = tp._cached(CACHE / f"tower-{args.tower_steps}.pt",
                                     lambda: tp.pretrain_tiny_tower(steps=args.tower_steps).state_dict())
        log["tower_s"] = round(time.perf_counter() - t0, 1)

        def fresh() -> TinyBackbone:
            return TinyBackbone(seed=0, tower=args.tower, tower_state=tower_state, **shape)

        backbone = fresh()
        backbone.tokenizer = ShiftedTokenizer(SHIFTS[args.shift])
        log["r10_random"] = heldout_composed_r10(backbone)
        stage1_key = f"{backbone.tower_key()}-h{args.hidden}-q{args.queries}-stage1-{args.stage1_steps}-{args.shift}"
        stage1 = tp._cached(CACHE / f"{stage1_key}.pt", lambda: tp.pretrain_stage1(backbone, steps=args.stage1_steps))
        backbone.load_state_dict(stage1, strict=False)
        log["r10_stage1"] = heldout_composed_r10(backbone)
        log["stage1_s"] = round(time.perf_counter() - t0, 1)
        tp.pretrain_composed_retrieval(backbone, steps=args.cir_steps, n_scenes=args.cir_scenes, lr=args.cir_lr)
        log["r10_cir"] = heldout_composed_r10(backbone)
        log["total_s"] = round(time.perf_counter() - t0, 1)
    tower = {name: value.detach().clone() for name, value in backbone.tower.state_dict().items()}
    info = {**{key: str(value) for key, value in shape.items()}, "recipe": json.dumps(log["args"])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": 1, "tower": tower, "composer": tp.composer_state(backbone), "info": info}, args.out)
    print(json.dumps(log))


if __name__ == "__main__":
    main()
