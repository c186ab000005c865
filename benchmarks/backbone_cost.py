"""Cost of a training step of sprc, tme, conesep and hug on the ``blip2`` backbone, as
ratios to sprc, beside the ConeSep paper's Table 4 (BLIP-2, batch 128, one A40).

Random weights (no download): ``--size real`` is the blip2-itm-vit-g architecture (EVA
ViT-g/14 tower, 12-layer Q-Former of width 768, 32 query tokens), ``--size tiny`` the CPU
test configuration. Inputs are random "cached" tower tokens of the right shape and
shapes-style captions; each method runs the step the harness runs
(:func:`cirbench.engine.cell.train.optimizer_step` with the optimiser of
:func:`cirbench.engine.cell.train.build_optimizer`: ``training_step``, backward, clipping,
AdamW) in its main training phase (after any warm-up), with its epoch-level work (TME's GMM
pass) done once beforehand and not timed.

Time: the median seconds per step, with the methods' steps interleaved (one step of each
method in turn) so that load on a shared machine hits every method alike. Memory: on a
GPU the peak allocated memory of a step; everywhere the bytes that autograd saves for the
backward pass (activations; deduplicated by storage, parameters excluded), which is what
grows with the batch and differs between methods.

Usage (``tests/test_benchmarks.py`` runs it on ``--size tiny`` and a batch of 4 only to see
that it works)::

    python benchmarks/backbone_cost.py --size real --device cuda --batch-size 128   # a GPU
    python benchmarks/backbone_cost.py --size tiny --device cpu --batch-size 128    # the CPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

from cirbench.backbones.base import TextBatch
from cirbench.backbones.blip2 import Blip2Backbone, random_model
from cirbench.backbones.preprocess import ImagePrep
from cirbench.engine.cell.precision import use_precision
from cirbench.engine.cell.train import build_optimizer, optimizer_step
from cirbench.method import Batch, TrainingContext
from cirbench.plugins import discover

PAPER_TABLE_4 = {  # ConeSep paper, Table 4: seconds per iteration and MiB on one A40, batch 128
    "sprc": (2.624, 24478), "tme": (7.858, 12405), "conesep": (5.15, 25807),
}
WORDS = ("make the red circle bigger and move it to the top left corner remove blue square add a green "
         "triangle in centre change colour of yellow one to purple shrink large cyan").split()


def build_backbone(size: str, device: torch.device) -> Blip2Backbone:
    """A random-weight blip2 backbone of ``size`` on ``device``."""
    model, tokenizer = random_model(size, seed=0, words=list(WORDS))
    image = int(model.config.vision_config.image_size)
    return Blip2Backbone(model, tokenizer, ImagePrep(size=(image, image)), source=f"random-{size}").to(device)


def make_batch(backbone: Blip2Backbone, size: int, device: torch.device, seed: int = 0) -> Batch:
    """Random tower tokens and shapes-style captions of 12 to 24 words."""
    generator = torch.Generator().manual_seed(seed)
    vision = backbone.vision.config
    patches = (vision.image_size // vision.patch_size) ** 2 + 1
    shape = (size, patches, vision.hidden_size)
    reference, target = (torch.randn(shape, generator=generator).to(device) for _ in range(2))
    lengths = torch.randint(12, 25, (size,), generator=generator).tolist()
    texts = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(n)) for i, n in enumerate(lengths)]
    text = backbone.tokenize(texts)
    return Batch(torch.arange(size, device=device), reference, target, TextBatch(text.ids.to(device), text.mask.to(device)), texts)


class SavedBytes:
    """Counts the bytes autograd saves for backward (deduplicated storages, no parameters)."""

    def __init__(self, parameters: list[nn.Parameter]) -> None:
        self.skip = {p.untyped_storage().data_ptr() for p in parameters}
        self.seen: set[int] = set()
        self.total = 0

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer not in self.skip and pointer not in self.seen:
            self.seen.add(pointer)
            self.total += storage.nbytes()
        return tensor


def main(argv: list[str] | None = None) -> None:
    """Time the methods' steps and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("tiny", "real"), default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per method (after one warm-up step)")
    parser.add_argument("--methods", default="sprc,tme,conesep,hug")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    torch.manual_seed(0)
    backbone = build_backbone(args.size, device)
    use_precision(backbone, device, args.precision)
    batch = make_batch(backbone, args.batch_size, device)
    registry = discover().methods
    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    epochs = 10

    methods, optimizers, configs = {}, {}, {}
    for name in names:
        cls = registry.get(name)
        context = TrainingContext(
            num_train=len(batch), epochs=epochs, batch_size=len(batch), steps_per_epoch=1, seed=0, device=device,
            iterate=lambda shuffle: iter([batch]),
        )
        configs[name] = cls.Config()
        method = cls(backbone, configs[name], context).to(device)
        with torch.no_grad():
            method.on_epoch_start(epochs - 1)  # the main phase (TME's partition, after ConeSep's warm-up)
        methods[name] = method
        optimizers[name] = build_optimizer(method, configs[name], backbone, epochs * (args.steps + 1))

    seconds: dict[str, list[float]] = {n: [] for n in names}
    saved: dict[str, int] = {}
    peak: dict[str, float] = {}
    cuda = device.type == "cuda"
    for step in range(args.steps + 1):
        for name in names:
            method, optimization = methods[name], optimizers[name]
            counter = SavedBytes(list(method.parameters()))
            if cuda:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            tick = time.perf_counter()
            with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
                optimizer_step(method, *optimization, configs[name], batch, epochs - 1, step, parallel=False)
            if cuda:
                torch.cuda.synchronize(device)
                peak[name] = max(peak.get(name, 0.0), torch.cuda.max_memory_allocated(device) / 2**20)
            if step > 0:
                seconds[name].append(time.perf_counter() - tick)
            saved[name] = counter.total

    base = names[0]
    rows = []
    for name in names:
        sec = statistics.median(seconds[name])
        row = {
            "method": name, "seconds_per_step": sec, "time_ratio": sec / statistics.median(seconds[base]),
            "saved_MiB": saved[name] / 2**20, "saved_ratio": saved[name] / max(saved[base], 1),
        }
        if cuda:
            row.update(peak_MiB=peak[name], peak_ratio=peak[name] / peak[base])
        if name in PAPER_TABLE_4 and base in PAPER_TABLE_4:
            row.update(paper_time_ratio=PAPER_TABLE_4[name][0] / PAPER_TABLE_4[base][0],
                       paper_memory_ratio=PAPER_TABLE_4[name][1] / PAPER_TABLE_4[base][1])
        rows.append(row)

    header = (f"blip2 {args.size} (random weights), batch {args.batch_size}, {args.device}, {args.precision}, "
              f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {args.steps} steps")
    print(header)
    columns = ["method", "seconds_per_step", "time_ratio", "saved_MiB", "saved_ratio"]
    columns += ["peak_MiB", "peak_ratio"] if cuda else []
    columns += ["paper_time_ratio", "paper_memory_ratio"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        cells = [row.get(c, "") for c in columns]
        print("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in cells) + " |")
    if args.json:
        args.json.write_text(json.dumps({"setup": header, "rows": rows}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
