"""A grid's plan, before any work: the :class:`GridSpec`, a :class:`Cell` of it (with the
:class:`KeptSet` of a kept-set cell), the run id of a cell (from everything that changes its
numbers), the ``dataset`` and ``backbone`` labels of the results, the checks of the
``--noise`` and ``--seeds`` lists, and the reference rows' cells. Nothing here loads data or
builds a model."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from cirbench.settings import defaults
from cirbench.backbones.registry import BACKBONES
from cirbench.settings.config import identity_dict
from cirbench.data.noise.instance_file import NoiseFileError, file_digest, instance_metadata
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.planning.reference import REFERENCE_ROWS
from cirbench.method import Method, MethodConfig
from cirbench.results.store import CellKey

__all__ = ["Cell", "GridError", "GridSpec", "KeptSet", "backbone_label", "base_method", "check_lists", "dataset_label",
           "absolute_spec", "noise_file_problem", "reference_cells", "run_id_for", "same_cell_elsewhere"]


@dataclass
class GridSpec:
    """Everything a ``cirbench run`` needs; validated by :class:`~cirbench.engine.running.grid.Grid` before any work."""

    methods: list[str]
    noise_rates: list[float]
    seeds: list[int] = field(default_factory=lambda: [0])
    dataset: str = "shapes"
    backbone: str = "tiny"
    weights: str | None = None
    noise_protocol: str = "thirds"
    epochs: int = defaults.EPOCHS
    batch_size: int = defaults.BATCH_SIZE
    output: Path = Path("results")
    cache_dir: Path = Path("datasets")
    data_root: Path | None = None
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    plugin_files: list[Path] = field(default_factory=list)
    overwrite: bool = False
    device: str = "cpu"
    precision: str = "fp32"
    gradient_checkpointing: bool = False
    features: str = "cache"
    decode_workers: int = 0
    dataset_options: dict[str, str] = field(default_factory=dict)
    allow_missing: bool = False
    save: bool = False
    holdout: float = 0.0
    """The share of the noisy training triplets held out for selection (:mod:`cirbench.data.noise.holdout`)."""
    frontier: list[float] = field(default_factory=list)
    """The purities of the frontier's kept-set cells (``--frontier``; empty: none): :mod:`cirbench.engine.planning.kept_plan`."""
    noise_types: bool = False
    """Whether to add a kept-set cell per noise type of the protocol (``--noise-types``)."""
    replay: list[str] = field(default_factory=list)
    """The methods whose runs' kept sets are replayed (``--replay``)."""
    noise_file: Path | None = None
    """A noise instance read back (``--noise-file``, :mod:`cirbench.data.noise.instance_file`) instead of injected."""


@dataclass(frozen=True)
class KeptSet:
    """What a kept-set cell trains on (:mod:`cirbench.engine.planning.kept_plan`): its ``kind`` (a key of
    :data:`cirbench.results.labels.KEPT_SETS`) with the frontier's ``purity``, the noise type
    cell's ``noise_type`` or the key of the replayed run, ``source``."""

    kind: str
    purity: float | None = None
    noise_type: str = ""
    source: CellKey | None = None


@dataclass
class Cell:
    """One (method, noise rate, seed) of a grid, with its resolved configuration."""

    key: CellKey
    method_cls: type[Method]
    config: MethodConfig
    source: str
    kept: KeptSet | None = None
    """A kept-set cell's kept set (None for every other cell)."""


class GridError(ValueError):
    """A grid that cannot run: an unknown name, a bad rate or override. Raised before work."""


def base_method(label: str) -> str:
    """The registered method behind a grid label: ``conesep:no_ot`` -> ``conesep``.

    A label with a ``:variant`` suffix is a separate row of the grid with its own ``--set``
    scope (``--set conesep:no_ot.ot=false``), which is how an ablation grid is run."""
    return label.split(":", 1)[0]


def dataset_label(spec: GridSpec) -> str:
    """The ``dataset`` column of the results: the name, with its options if any, e.g.
    ``fashioniq[reference=keep]``."""
    options = ",".join(f"{k}={v}" for k, v in sorted(spec.dataset_options.items()))
    return f"{spec.dataset}[{options}]" if options else spec.dataset


def backbone_label(spec: GridSpec) -> str:
    """The ``backbone`` column of the results: the name, with its ``--weights`` if given
    (the last path component for a directory or file), e.g. ``tiny[stage1]``."""
    if not spec.weights:
        return spec.backbone
    return f"{spec.backbone}[{Path(spec.weights.rstrip('/')).name or spec.weights}]"


def run_id_for(spec: GridSpec, label: str, method_cls: type[Method], config: MethodConfig, rate: float, seed: int) -> str:
    """A deterministic id from everything that changes a cell's numbers: the resolved
    configuration (an ``lr`` of None is the backbone's ``default_lr``, except for an untrained
    reference row), the start (the backbone factory's ``start_identity``, known without
    loading weights: the released ``tiny`` start's key; else ``--weights`` names it), the data,
    the noise, the seed and the training options. Ids changed once when the resolved ``lr``
    and the start joined them (docs/benchmark.md#run-ids)."""
    dataset_key = DATASETS.get(spec.dataset).key()  # a generated dataset's, known before it is loaded
    factory = BACKBONES.get(spec.backbone)
    resolved = identity_dict(config)
    if resolved.get("lr") is None and REFERENCE_ROWS.get(label) is not method_cls:
        resolved["lr"] = factory.default_lr
    start = getattr(factory, "start_identity", None)
    identity = json.dumps(
        {
            "method": label, "version": method_cls.version, "config": resolved,
            "dataset": spec.dataset, "data_root": str(spec.data_root or ""), "backbone": spec.backbone,
            "weights": spec.weights or "", "start": start(spec.weights) if start else "",
            "protocol": spec.noise_protocol, "rate": rate, "seed": seed,
            "epochs": spec.epochs, "batch_size": spec.batch_size,
            # only when set, so that the ids of runs without them stay as they were
            **({"dataset_options": spec.dataset_options} if spec.dataset_options else {}),
            **({"allow_missing": True} if spec.allow_missing else {}),
            **({"holdout": spec.holdout} if spec.holdout else {}),
            **({"dataset_key": dataset_key} if dataset_key is not None else {}),
            **({"precision": spec.precision} if spec.precision != "fp32" else {}),
            **({"noise_file": file_digest(spec.noise_file)} if spec.noise_file else {}),
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    return f"{label.replace(':', '_')}-{spec.dataset}-{spec.backbone}-{spec.noise_protocol}-{rate:g}-s{seed}-{digest}"


def same_cell_elsewhere(spec: GridSpec, label: str, method_cls: type[Method], rate: float) -> str:
    """The method whose cell ``label``'s at ``rate`` is (``Method.same_at_no_noise``, at 0%
    noise, when the two have the same ``--set`` overrides), else ""."""
    twin = method_cls.same_at_no_noise
    same = rate == 0.0 and twin and spec.overrides.get(label, {}) == spec.overrides.get(twin, {})
    return twin if same else ""


def check_lists(spec: GridSpec) -> None:
    """Refuse an empty or repeated ``--noise`` or ``--seeds`` list, and a negative seed."""
    for option, values, example in (("--noise", spec.noise_rates, "0,0.5,0.8"), ("--seeds", spec.seeds, "0,1,2")):
        if not values:
            raise GridError(f"{option} is empty: give at least one value, e.g. {option} {example}")
        repeated = sorted({v for v in values if list(values).count(v) > 1})
        if repeated:
            raise GridError(f"{option} {','.join(f'{v:g}' for v in values)} lists {', '.join(f'{v:g}' for v in repeated)} "
                            "more than once (the same cell would run twice); give each value once")
    negative = [seed for seed in spec.seeds if seed < 0]
    if negative:
        raise GridError(f"--seeds {','.join(str(s) for s in spec.seeds)}: seed {negative[0]} is negative; a seed must be >= 0")


def noise_file_problem(spec: GridSpec) -> None:
    """Refuse a ``--noise-file`` that is not an instance of the grid's dataset, protocol and
    (only) noise rate; its entries are checked against the dataset at the pre-flight."""
    if spec.noise_file is None:
        return
    try:
        meta = instance_metadata(spec.noise_file)
    except NoiseFileError as exc:
        raise GridError(f"--noise-file {exc}") from None
    wanted = (meta.get("dataset"), meta.get("protocol"), [float(meta.get("rate", -1))])
    if (spec.dataset, spec.noise_protocol, [float(r) for r in spec.noise_rates]) != wanted:
        raise GridError(f"--noise-file {spec.noise_file}: an instance of {wanted[0]!r}, protocol {wanted[1]!r}, rate "
                        f"{wanted[2][0]:g}; the grid asks for {spec.dataset!r}, {spec.noise_protocol!r} at "
                        f"{','.join(f'{r:g}' for r in spec.noise_rates)} (run it with --dataset {wanted[0]} "
                        f"--noise-protocol {wanted[1]} --noise {wanted[2][0]:g})")


def absolute_spec(spec: GridSpec) -> GridSpec:
    """``spec`` with every path absolute, so that a job started elsewhere finds the files."""
    resolve = lambda p: None if p is None else Path(p).expanduser().resolve()  # noqa: E731
    return replace(
        spec, output=resolve(spec.output), cache_dir=resolve(spec.cache_dir), data_root=resolve(spec.data_root),
        plugin_files=[resolve(p) for p in spec.plugin_files], noise_file=resolve(spec.noise_file),
    )


def reference_cells(spec: GridSpec) -> list[Cell]:
    """The reference rows of ``spec``'s grid (:mod:`cirbench.engine.planning.reference`): one per row
    and seed, noise rate NaN, independent of the methods and noise rates."""
    spec, cells = replace(spec, holdout=0.0), []  # untrained: a held-out share changes nothing
    for name, cls in REFERENCE_ROWS.items():
        for seed in spec.seeds:
            config = MethodConfig()
            run_id = run_id_for(spec, name, cls, config, float("nan"), seed).replace("-nan-", "-")
            key = CellKey(run_id, name, dataset_label(spec), backbone_label(spec), spec.noise_protocol, float("nan"), int(seed))
            cells.append(Cell(key, cls, config, "cirbench.engine.planning.reference"))
    return cells
