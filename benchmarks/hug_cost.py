"""HUG's cost relative to SPRC, measured in one process on the same data and backbone.

Seconds per training step (forward, backward, optimiser step, as the harness times them)
and retrieval time (``cirbench.engine.evaluate.evaluate``: encode the validation queries
and the gallery, score, rank) for ``sprc`` and ``hug``; also HUG's training step with a
mismatched pair for every sample (``cord_pairs=0``) and its retrieval with the exact query
variance (``exact_query_variance``). The methods are timed in interleaved rounds and the
median of each is reported, so load from other processes hits all of them alike. Both wall-clock and
process CPU seconds are reported: on a shared, loaded machine the CPU seconds (with
``--threads 1``, so no thread spins waiting for a core) are the steadier ratio.

Run by hand::

    python benchmarks/hug_cost.py --dataset shapes --cache-dir datasets --steps 6 --rounds 3 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from cirbench.backbones.base import TextBatch
from cirbench.backbones.registry import BACKBONES
from cirbench.data.base import CIRDataset, TripletSplit
from cirbench.data.noise import inject_noise
from cirbench.data.registry import DATASETS
from cirbench.engine.evaluate import evaluate
from cirbench.engine.features import image_tokens
from cirbench.engine.grid import GridSpec
from cirbench.engine.train import BatchMaker, build_optimizer, epoch_batches
from cirbench.method import Method, MethodConfig, TrainingContext
from cirbench.plugins import discover


@dataclass
class Contender:
    """A method on its own fresh backbone, with its optimiser and batch maker."""

    method: Method
    config: MethodConfig
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    make_batch: BatchMaker
    val_texts: TextBatch


def build(
    name: str, overrides: dict, dataset: CIRDataset, tokens: np.ndarray, noisy: TripletSplit,
    batch_size: int, seed: int, cache_dir: Path,
) -> Contender:
    """Method ``name`` with config ``overrides`` on a fresh ``tiny`` backbone seeded ``seed``."""
    backbone = BACKBONES.get("tiny")(seed, cache_dir, None)
    cls: type[Method] = discover().methods.get(name)
    config = replace(cls.Config(), **overrides)
    device = torch.device("cpu")
    n = len(noisy)
    context = TrainingContext(
        num_train=n, epochs=1, batch_size=batch_size, steps_per_epoch=len(epoch_batches(n, batch_size, seed, 0)),
        seed=seed, device=device, iterate=lambda shuffle=True: iter(()),
    )
    method = cls(backbone, config, context)
    optimizer, scheduler = build_optimizer(method, config, backbone, total_steps=1000)
    maker = BatchMaker(noisy, tokens, backbone.tokenize(noisy.texts), device)
    return Contender(method, config, optimizer, scheduler, maker, backbone.tokenize(dataset.val.texts))


def clock() -> tuple[float, float]:
    """(wall, process CPU) seconds now."""
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    """(wall, CPU) seconds elapsed since ``start``."""
    wall, cpu = clock()
    return wall - start[0], cpu - start[1]


def time_steps(c: Contender, batches: list[np.ndarray]) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each training step on ``batches``, timed as the harness does."""
    c.method.train()
    out = []
    for index in batches:
        batch = c.make_batch(index)
        tick = clock()
        result = c.method.training_step(batch, 0, 0)
        c.optimizer.zero_grad(set_to_none=True)
        result.loss.backward()
        if c.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(c.method.parameters(), c.config.grad_clip)
        c.optimizer.step()
        c.scheduler.step()
        out.append(since(tick))
    return out


def time_retrieval(c: Contender, dataset: CIRDataset, tokens: np.ndarray) -> tuple[float, float]:
    """(wall, CPU) seconds of one full validation retrieval."""
    tick = clock()
    evaluate(c.method, dataset, dataset.val, tokens, c.val_texts, torch.device("cpu"))
    return since(tick)


def main(args: argparse.Namespace) -> None:
    """Measure and print the table (see the module docstring)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    dataset = DATASETS.get(args.dataset)(args.cache_dir, None)
    probe = BACKBONES.get("tiny")(args.seed, args.cache_dir, None)
    tokens = image_tokens(dataset, probe, args.cache_dir)
    noisy, _ = inject_noise(dataset, "thirds", args.noise, args.seed,
                            image_features=lambda: np.asarray(tokens, dtype=np.float32).mean(axis=1))
    variants = {  # label: (method, overrides, time training?, time retrieval?)
        "sprc": ("sprc", {}, True, True),
        "hug": ("hug", {}, True, True),
        "hug pairs=B": ("hug", {"cord_pairs": 0}, True, False),
        "hug exact": ("hug", {"exact_query_variance": True}, False, True),
    }
    entries = {
        key: build(name, overrides, dataset, tokens, noisy, args.batch_size, args.seed, args.cache_dir)
        for key, (name, overrides, _, _) in variants.items()
    }
    batches = epoch_batches(len(noisy), args.batch_size, args.seed, 0)
    step_times: dict[str, list[tuple[float, float]]] = {k: [] for k in entries}
    retrieval_times: dict[str, list[tuple[float, float]]] = {k: [] for k in entries}
    for round_ in range(args.rounds):
        chosen = [batches[(round_ * args.steps + i) % len(batches)] for i in range(args.steps)]
        for key, (_, _, train, retrieve) in variants.items():
            if train:
                step_times[key] += time_steps(entries[key], chosen)
            if retrieve:
                retrieval_times[key].append(time_retrieval(entries[key], dataset, tokens))

    def median(values: list[tuple[float, float]], which: int) -> float:
        return statistics.median(v[which] for v in values) if values else float("nan")

    print(f"dataset {args.dataset}, batch {args.batch_size}, {args.rounds} rounds x {args.steps} steps, "
          f"{len(dataset.val)} queries, {sum(len(g) for g in dataset.gallery.values())} gallery images, "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'method':<12} {'clock':<5} {'s/step':>8} {'ratio':>6} {'retrieval s':>12} {'ratio':>6}")
    for which, clock_name in ((1, "cpu"), (0, "wall")):
        for key in entries:
            step, ret = median(step_times[key], which), median(retrieval_times[key], which)
            base_step, base_ret = median(step_times["sprc"], which), median(retrieval_times["sprc"], which)
            print(f"{key:<12} {clock_name:<5} {step:8.3f} {step / base_step:6.2f} {ret:12.3f} {ret / base_ret:6.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="shapes-mini")
    parser.add_argument("--cache-dir", type=Path, default=Path("datasets"))
    parser.add_argument("--batch-size", type=int, default=GridSpec.batch_size, help="default: the CLI's")
    parser.add_argument("--steps", type=int, default=5, help="training steps per method per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    main(parser.parse_args())
