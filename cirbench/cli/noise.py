"""``cirbench noise export``: a noise instance written as files (:mod:`cirbench.api.noise`),
for ``--noise-file`` and for the papers' own code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from cirbench.cli.options import (CacheDir, DataRoot, DatasetName, DatasetOptions, NoiseProtocol, Opt, console, fail,
                                  parse_dataset_options)

noise_app = typer.Typer(no_args_is_help=True, help="Noise instances as files.")


@noise_app.command("export")
def export(
    output: Annotated[Path, Opt("--output", "-o", help="The folder the instance is written to.")],
    rate: Annotated[float, Opt("--noise", "-n", help="The noise rate, in [0, 1).")],
    dataset: DatasetName = "shapes", data_root: DataRoot = None, dataset_option: DatasetOptions = [],
    noise_protocol: NoiseProtocol = "thirds",
    seed: Annotated[int, Opt("--seed", help="The cell's seed (the 'release' protocol's instance is its shuffle seed's, 42, "
                             "whatever this seed).")] = 0,
    cache_dir: CacheDir = Path("datasets"),
    allow_missing: Annotated[bool, Opt("--allow-missing", help="Accept a dataset with missing or broken samples.")] = False,
    release_json: Annotated[bool, Opt("--release-json/--no-release-json", help="Also write the release's training files "
                                      "(FashionIQ, CIRR) with the noisy values in, "
                                      "one folder per rate and seed under OUTPUT/release/.")] = True,
) -> None:
    """Write a noise instance: one row per training triplet (index, noise type, the values it
    got, the flag) as parquet, for `cirbench run --noise-file`, and the release's JSON training
    files with the noisy values written in, for the authors' own code, in a folder of their own
    per rate and seed (OUTPUT/release/<dataset>-<protocol>-<rate>-seed<seed>/), so that exporting
    another rate into the same OUTPUT overwrites nothing."""
    from cirbench.api.noise import export_noise
    from cirbench.data.datasets.check import DatasetProblemsError

    try:
        done = export_noise(output, dataset, noise_protocol, rate, seed, data_root, parse_dataset_options(dataset_option),
                            cache_dir, allow_missing, release_json)
    except DatasetProblemsError as exc:
        fail(str(exc).split(":\n", 1)[0])
    except (KeyError, ValueError, OSError) as exc:
        fail(str(exc).strip("'\""))
    noisy = ", ".join(f"{n} {kind}" for kind, n in sorted(done.noisy.items())) or "none"
    console.print(f"{escape(str(done.instance))}: {done.n_triplets} training triplets, noisy: {noisy}")
    for path in done.release_files:
        console.print(f"  {escape(str(path))}")
