"""A grid from Python, as ``cirbench run``, ``sweep`` and ``calibrate`` build it: the held-out
rule, the default rows and noise rates (:mod:`cirbench.settings.defaults`), an ablation's rows
(:mod:`cirbench.engine.planning.ablation`), a sweep's trials (:mod:`cirbench.engine.planning.sweep`) and the
calibration grid (:mod:`cirbench.engine.running.calibrate`), then the pre-flight and the run. The
command line parses its options into these calls and shows what they return.

Every builder takes the other :class:`~cirbench.engine.planning.spec.GridSpec` fields as keywords
(``seeds``, ``dataset``, ``epochs``, ``output``, ``plugin_files``, ...) and raises
:class:`~cirbench.engine.planning.spec.GridError` (or :class:`~cirbench.settings.config.ConfigError` for a bad
override) before any work.
"""

from __future__ import annotations

from typing import Any, Callable

from cirbench.settings import defaults
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.planning.ablation import describe_ablation, expand_ablations, merge_rows
from cirbench.engine.running.calibrate import calibration_grid
from cirbench.engine.cell.life import CellOutcome
from cirbench.engine.running.grid import Grid
from cirbench.engine.running.runner import Preflight, Report, preflight, resolve_jobs, run_grid
from cirbench.engine.planning.spec import GridError, GridSpec, absolute_spec
from cirbench.engine.planning.sweep import SweepError, sweep_rows
from cirbench.plugins import Discovery, discover

Announce = Callable[[str], None]


def _silent(message: str) -> None:
    """An announce that shows nothing."""


def _quiet(event: Any) -> None:
    """A progress report that shows nothing."""


def resolved_holdout(holdout: float | None, dataset: str) -> float:
    """The held-out share of a grid: ``holdout`` as given, else the default of ``dataset``:
    :data:`cirbench.settings.defaults.HOLDOUT` for a generated dataset, none for one read from the
    user's files (its training set stays the papers'). An unknown dataset resolves to 0;
    the grid then names it."""
    if holdout is not None:
        return holdout
    loader = DATASETS.get(dataset) if dataset in DATASETS else None
    return defaults.HOLDOUT if loader is not None and not loader.files else 0.0


def kept_set_fields(frontier: bool = False, purities: list[float] | None = None, noise_types: bool = False,
                    replay: list[str] | None = None) -> dict[str, Any]:
    """The ``GridSpec`` fields of the kept-set cells (:mod:`cirbench.engine.planning.kept_plan`): the
    frontier at ``purities`` (which imply it; default :data:`cirbench.settings.defaults.FRONTIER_PURITIES`),
    a cell per noise type, and the replays of ``replay``'s runs."""
    chosen = list(purities) if purities is not None else list(defaults.FRONTIER_PURITIES)
    return {"frontier": chosen if frontier or purities is not None else [], "noise_types": noise_types,
            "replay": list(replay or [])}


def _discovered(fields: dict[str, Any], discovery: Discovery | None) -> Discovery:
    """The plugins of ``fields``' ``plugin_files`` (``discovery`` when already discovered);
    GridError when one does not load."""
    discovery = discovery or discover(list(fields.get("plugin_files", [])))
    if discovery.errors:
        raise GridError("; ".join(discovery.errors))
    return discovery


def grid(methods: list[str] | None = None, noise: list[float] | None = None, *, ablate: list[str] | None = None,
         overrides: dict[str, dict[str, str]] | None = None, discovery: Discovery | None = None, absolute: bool = False,
         announce: Announce = _silent, **fields: Any) -> Grid:
    """The validated grid of ``cirbench run``: ``methods`` (default :data:`cirbench.settings.defaults.METHODS`,
    none with ``ablate``) at ``noise`` (default :data:`cirbench.settings.defaults.NOISE_RATES`, with
    ``ablate`` the ablated methods' own rates), ``ablate``'s rows added, ``overrides``
    (``{label: {key: value}}``, as ``--set`` gives them) over the ablation's. A ``holdout``
    missing or None is the dataset's default (:func:`resolved_holdout`), resolved once the
    plugins (which may define the dataset) are registered. With ``absolute``, the paths are
    made absolute, as a scheduler job elsewhere needs them (and so the run ids name them).
    ``announce`` is told the ablation's rows."""
    discovery = _discovered(fields, discovery)
    fields = {**fields, "holdout": resolved_holdout(fields.get("holdout"), fields.get("dataset", "shapes"))}
    labels = list(methods) if methods is not None else ([] if ablate else list(defaults.METHODS))
    overrides, rates = dict(overrides or {}), list(noise) if noise is not None else None
    if ablate:
        ablation = expand_ablations(list(ablate), discovery.methods)
        labels, overrides = merge_rows(labels, overrides, ablation)
        rates = ablation.noise_rates if rates is None else rates
        announce(f"--ablate: {describe_ablation(ablation)}")
    rates = rates if rates is not None else list(defaults.NOISE_RATES)
    spec = GridSpec(methods=labels, noise_rates=rates, overrides=overrides, **fields)
    return Grid(absolute_spec(spec) if absolute else spec, discovery)


def sweep(methods: list[str], noise: list[float] | None = None, trials: int = defaults.TRIALS, *,
          discovery: Discovery | None = None, **fields: Any) -> Grid:
    """The validated grid of ``cirbench sweep``: ``trials`` rows per method (trial 0 the
    defaults, :mod:`cirbench.engine.planning.sweep`) at ``noise`` (default as :func:`grid`), on a
    held-out share (``holdout``, default :data:`cirbench.settings.defaults.HOLDOUT` whatever the
    dataset: a sweep selects on it); the other ``fields`` as in :func:`grid`."""
    holdout = fields.get("holdout")
    holdout = defaults.HOLDOUT if holdout is None else holdout
    if not 0.0 < holdout < 1.0:
        raise GridError(f"--holdout {holdout:g}: a sweep selects on the held-out split, give a share in (0, 1), e.g. 0.1")
    discovery = _discovered(fields, discovery)
    try:
        labels, overrides = sweep_rows(list(methods), trials, discovery, fields.get("backbone", "tiny"))
    except (SweepError, KeyError) as exc:
        raise GridError(str(exc).strip("'\"")) from None
    return grid(labels, noise, overrides=overrides, discovery=discovery, **{**fields, "holdout": holdout})


def calibration(hosted: bool = True, discovery: Discovery | None = None, **fields: Any) -> Grid:
    """The calibration grid of ``cirbench calibrate`` on the setting of ``fields``
    (:mod:`cirbench.engine.running.calibrate`; a ``holdout`` missing or None: the dataset's default),
    with the hosted methods' clean cells unless ``hosted`` is False."""
    discovery = _discovered(fields, discovery)  # a plugin's dataset resolves its own held-out default
    fields = {**fields, "holdout": resolved_holdout(fields.get("holdout"), fields.get("dataset", "shapes"))}
    spec = GridSpec(methods=list(defaults.CALIBRATION_METHODS), noise_rates=list(defaults.CALIBRATION_RATES), **fields)
    return calibration_grid(spec, discovery, hosted)


def check(built: Grid, announce: Announce = _silent) -> Preflight | None:
    """The pre-flight of ``built`` before any cell runs (:func:`cirbench.engine.running.runner.preflight`):
    its dataset loaded and checked, its plugins' static checks, the folder's start and
    evaluation; what a dataset read from files dropped (None for a generated one)."""
    return preflight(built, announce)


def run(built: Grid, jobs: int = 0, report: Report = _quiet) -> list[CellOutcome]:
    """Run ``built`` here, ``jobs`` cells at a time (0: automatic,
    :func:`~cirbench.engine.running.runner.resolve_jobs`), its events to ``report``; every cell's outcome."""
    return run_grid(built, resolve_jobs(jobs, built.spec.device), report)
