"""How long ``cirbench data check`` takes on a FashionIQ-sized root, with and without ``--deep``.

Builds a root in the release layout (``captions/``, ``image_splits/``, ``images/``) with
``--images`` small images (PNG and JPEG alternating, 3 categories, a few exact repeated
caption entries), then runs the check as a user would (``cirbench data check``, a fresh
process each time) and prints the wall time of:

- the default header check with an empty verdict cache, then again with the cache warm;
- ``--deep`` (every image decoded) with an empty cache, then warm.

Run by hand (``tests/test_benchmarks.py`` runs it on a few small images only to see that
it works)::

    python benchmarks/data_check_time.py --root /tmp/fiq-bench --images 30000

The root is built once and reused when it exists (``--rebuild`` to redo it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

CATEGORIES = ("dress", "shirt", "toptee")


def build_root(root: Path, n_images: int, size: int, seed: int = 0) -> dict[str, int]:
    """Write a FashionIQ-layout root of ``n_images`` images of ``size`` px; returns counts."""
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    per_category = n_images // len(CATEGORIES)
    counts = {"images": 0, "train": 0, "val": 0, "repeats": 0}
    for c, category in enumerate(CATEGORIES):
        names = [f"B{c}{i:08d}" for i in range(per_category)]
        for i, name in enumerate(names):  # smooth random pictures: PNG and JPEG compress them like photos
            coarse = Image.fromarray(rng.integers(0, 256, size=(6, 6, 3), dtype=np.uint8))
            picture = coarse.resize((size, size), Image.Resampling.BILINEAR)
            picture.save(root / "images" / f"{name}.{'png' if i % 2 == 0 else 'jpg'}")
        counts["images"] += len(names)
        cut = int(len(names) * 0.6)
        for split, split_names in (("train", names[:cut]), ("val", names[cut:])):
            pairs = rng.integers(0, len(split_names), size=(len(split_names), 2))
            entries = [{"candidate": split_names[a], "target": split_names[b], "captions": ["is darker", "has longer sleeves"]}
                       for a, b in pairs if a != b]
            entries += entries[:3]  # exact repeats: warnings, never errors
            counts[split] += len(entries)
            counts["repeats"] += 3
            (root / "image_splits").mkdir(exist_ok=True)
            (root / "captions").mkdir(exist_ok=True)
            (root / "image_splits" / f"split.{category}.{split}.json").write_text(json.dumps(split_names))
            (root / "captions" / f"cap.{category}.{split}.json").write_text(json.dumps(entries))
    return counts


def timed_check(root: Path, cache: Path, *extra: str, source: Path | None = None) -> tuple[float, int, str]:
    """Run ``cirbench data check fashioniq`` in a fresh process (from ``source`` when given);
    (seconds, exit code, last line)."""
    command = [sys.executable, "-m", "cirbench.cli", "data", "check", "fashioniq", "--data-root", str(root),
               "--cache-dir", str(cache), "--limit", "3", *extra]
    start = time.perf_counter()
    env = {**os.environ, "COLUMNS": "200", **({"PYTHONPATH": str(source)} if source else {})}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root.parent)  # not this checkout
    seconds = time.perf_counter() - start
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return seconds, done.returncode, lines[-1] if lines else done.stderr[-300:]


def main(argv: list[str] | None = None) -> None:
    """Build the root unless it exists and time the checks."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path("/tmp/cirbench-fiq-bench"))
    parser.add_argument("--images", type=int, default=30000)
    parser.add_argument("--size", type=int, default=256, help="image side in pixels (FashionIQ's are a few hundred)")
    parser.add_argument("--workers", type=int, default=0, help="--workers for the check (0: its default)")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a checkout of an older cirbench to time too (its check, e.g. a0876e4's serial full decode)")
    args = parser.parse_args(argv)

    if args.rebuild and args.root.exists():
        shutil.rmtree(args.root)
    if not (args.root / "captions").is_dir():
        start = time.perf_counter()
        counts = build_root(args.root, args.images, args.size)
        print(f"built {args.root}: {counts} in {time.perf_counter() - start:.0f} s")
    n = len(os.listdir(args.root / "images"))
    print(f"{n} images, {os.cpu_count()} CPU(s), torch threads from OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    workers = ["--workers", str(args.workers)] if args.workers else []
    cache = args.root.parent / f"{args.root.name}-cache"
    for label, extra in (("header", []), ("deep", ["--deep"])):
        shutil.rmtree(cache, ignore_errors=True)
        for state in ("cold cache", "warm cache"):
            seconds, code, last = timed_check(args.root, cache, *extra, *workers)
            print(f"data check {label:6s} {state}: {seconds:6.1f} s  (exit {code}) {last[:160]}")
    if args.baseline is not None:
        shutil.rmtree(cache, ignore_errors=True)
        seconds, code, last = timed_check(args.root, cache, source=args.baseline)
        print(f"baseline {args.baseline} cold cache: {seconds:6.1f} s  (exit {code}) {last[:160]}")
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
