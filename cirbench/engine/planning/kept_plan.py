"""The kept-set cells of a grid, planned before any work (docs/kept-sets.md): the baseline
trained as the perfect filter trains (its ``sprc_step`` on the kept rows of each batch, every
target of the batch a negative), on a kept set of known composition:

- the frontier (``--frontier``): every clean training triplet plus a seeded uniform share of
  the noisy ones, so that the kept set's purity is p, for each p above the rate's clean
  share (1 - rate); p = 1 is the perfect filter's own cell, never a kept-set cell;
- the noise types (``--noise-types``): every clean triplet plus the noisy triplets of one
  noise type of the protocol only, one cell per type;
- the replays (``--replay METHODS``): the kept set a run of a method that partitions
  recorded, replayed epoch by epoch, keyed to that run's id. Its source is a cell of the
  grid, run before it (:func:`waves`), or a run complete in the results folder; a grid
  whose replay has neither is refused, naming the missing source.

Each is a :class:`~cirbench.engine.planning.spec.Cell` with a :class:`~cirbench.engine.planning.spec.KeptSet`,
the perfect filter's class and configuration (its ``--set`` scope when the grid lists it),
and a run id from the identity of the perfect filter's cell under the kept-set label and
the kept set's own. Kept-set cells are made at noise rates above 0 only. What a cell trains
on is built when it runs (:mod:`cirbench.engine.cell.kept_sets`); nothing here loads data.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from cirbench.settings.config import build_config
from cirbench.data.noise.injection import NOISE_PROTOCOLS
from cirbench.engine.planning.spec import Cell, GridError, GridSpec, KeptSet, backbone_label, dataset_label, run_id_for
from cirbench.method import Method, MethodConfig, method_role
from cirbench.registry import Registry
from cirbench.results.labels import (FRONTIER, NOISE_TYPE, REPLAY, TRIAL_LABEL, frontier_label, noise_type_label,
                                     rate_label, replay_label)
from cirbench.results.roles import PERFECT_FILTER
from cirbench.results.store import CellKey, ResultsStore

KEPT_SET_VERSION = "1"
"""Part of every kept-set cell's run id: bump it whenever what such a cell trains changes."""


@dataclass
class KeptSetPlan:
    """The kept-set cells of a grid, and a line for each one asked for and not made (why)."""

    cells: list[Cell] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Trainer:
    """What trains every kept-set cell of a grid: the perfect filter's class, its
    configuration and its source."""

    cls: type[Method]
    config: MethodConfig
    source: str


def perfect_filter_name(methods: Registry[type[Method]]) -> str:
    """The registered method that declares the perfect filter's role (the first by name): the
    class every kept-set cell trains with; GridError when there is none."""
    names = sorted(n for n in methods.names() if method_role(methods.get(n)) == PERFECT_FILTER)
    if not names:
        raise GridError("kept-set cells (--frontier, --noise-types, --replay) train the perfect filter's step: no "
                        f"registered method declares role {PERFECT_FILTER!r}")
    return names[0]


def trainer(spec: GridSpec, methods: Registry[type[Method]]) -> Trainer:
    """The perfect filter's class (:func:`perfect_filter_name`), configured with the grid's
    ``--set`` of its label when the grid lists it; GridError when there is none or it has no
    ``sprc_step`` to train the kept rows with."""
    names = [perfect_filter_name(methods)]
    entry = methods.entry(names[0])
    if not callable(getattr(entry.obj, "sprc_step", None)):
        raise GridError(f"kept-set cells train the perfect filter's sprc_step on the kept rows: method {names[0]!r} "
                        f"({entry.source}) has none")
    try:
        config = build_config(entry.obj.Config, spec.overrides.get(names[0], {}), names[0])
    except ValueError as exc:
        raise GridError(str(exc)) from None
    return Trainer(entry.obj, config, entry.source)


def kept_run_id(spec: GridSpec, label: str, made: Trainer, rate: float, seed: int, kept: KeptSet) -> str:
    """The run id of a kept-set cell: the perfect filter's identity under ``label`` (so the
    setting, the start, the options and its configuration count) with the kept set's."""
    base = run_id_for(spec, label, made.cls, made.config, rate, seed)
    identity = json.dumps({"cell": base, "version": KEPT_SET_VERSION, "kind": kept.kind, "purity": kept.purity,
                           "noise_type": kept.noise_type, "source": kept.source.run_id if kept.source else ""},
                          sort_keys=True)
    return f"{base.rsplit('-', 1)[0]}-{hashlib.sha256(identity.encode()).hexdigest()[:8]}"


def _cell(spec: GridSpec, label: str, made: Trainer, rate: float, seed: int, kept: KeptSet) -> Cell:
    key = CellKey(kept_run_id(spec, label, made, rate, seed, kept), label, dataset_label(spec), backbone_label(spec),
                  spec.noise_protocol, float(rate), int(seed))
    return Cell(key, made.cls, made.config, made.source, kept)


def _frontier(spec: GridSpec, made: Trainer, rates: list[float], plan: KeptSetPlan) -> None:
    """The frontier's cells: each purity (once, however often it is asked for) at each rate
    whose clean share it lies above."""
    asked = [float(p) for p in spec.frontier]
    purities = list(dict.fromkeys(asked))
    plan.skipped += [f"{frontier_label(p)} asked for {asked.count(p)} times: planned once" for p in purities
                     if asked.count(p) > 1]
    for purity in purities:
        if purity == 1.0:
            raise GridError("--frontier-purity 1: p = 1 is the perfect filter's own cell (its kept set is every clean "
                            "triplet): list the perfect filter in --methods instead")
        if not 0.0 < purity < 1.0:
            raise GridError(f"--frontier-purity {purity:g} is outside (0, 1): give the kept set's clean share, e.g. 0.8,0.6,0.4")
        for rate in rates:
            clean_share = round(1.0 - rate, 9)
            if purity <= clean_share:
                plan.skipped.append(f"{frontier_label(purity)} at {rate_label(rate)} noise: not above the clean share "
                                    f"{clean_share:g} (every kept set there is that clean): not trained")
                continue
            plan.cells += [_cell(spec, frontier_label(purity), made, rate, seed, KeptSet(FRONTIER, purity=float(purity)))
                           for seed in spec.seeds]


def _noise_types(spec: GridSpec, made: Trainer, rates: list[float], plan: KeptSetPlan) -> None:
    """One cell per noise type of the protocol at each rate (none when it has only one type)."""
    types = list(getattr(NOISE_PROTOCOLS.get(spec.noise_protocol), "noise_types", {}) or {})
    if not types:
        raise GridError(f"--noise-types: noise protocol {spec.noise_protocol!r} declares no noise_types "
                        "(NoiseProtocol.noise_types): there is no type to keep one at a time")
    if len(types) == 1:
        plan.skipped.append(f"{noise_type_label(types[0])}: the only noise type of {spec.noise_protocol!r}, so its kept "
                            "set is every triplet (the baseline's cell): not trained")
        return
    plan.cells += [_cell(spec, noise_type_label(kind), made, rate, seed, KeptSet(NOISE_TYPE, noise_type=kind))
                   for kind in types for rate in rates for seed in spec.seeds]


def _replayable(name: str, methods: Registry[type[Method]]) -> type[Method]:
    """The registered method ``name`` when its runs can be replayed, else GridError saying why."""
    if ":" in name:
        what = "a sweep trial" if TRIAL_LABEL.fullmatch(name) else "an ablation variant"
        raise GridError(f"--replay {name}: {what}; replays are made of a method's own runs only (name the method, "
                        f"e.g. {name.split(':', 1)[0]})")
    try:
        cls = methods.get(name)
    except KeyError as exc:
        raise GridError(str(exc)) from None
    if not cls.partitions:
        partitioning = sorted(n for n in methods.names() if methods.get(n).partitions)
        raise GridError(f"--replay {name}: method {name!r} keeps no set (Method.partitions is False): its replay would "
                        "train on every row, the baseline's cell; methods that partition: "
                        f"{', '.join(partitioning) or 'none'}")
    return cls


def _source(spec: GridSpec, name: str, cls: type[Method], rate: float, seed: int, grid_cells: dict) -> CellKey:
    """The key of ``name``'s run at ``rate`` and ``seed``: the grid's cell, else the run these options make."""
    if (name, rate, seed) in grid_cells:
        return grid_cells[(name, rate, seed)].key
    run_id = run_id_for(spec, name, cls, build_config(cls.Config, {}, name), rate, seed)
    return CellKey(run_id, name, dataset_label(spec), backbone_label(spec), spec.noise_protocol, float(rate), int(seed))


def _replays(spec: GridSpec, made: Trainer, rates: list[float], methods: Registry[type[Method]], grid_cells: list[Cell],
             store: ResultsStore, plan: KeptSetPlan) -> None:
    """One replay per run of each method of ``--replay``, whose source is a cell of the grid or complete in ``store``."""
    if len(set(spec.replay)) != len(spec.replay):
        raise GridError(f"--replay {','.join(spec.replay)} lists a method twice; give each once")
    by_cell = {(c.key.method, c.key.noise_rate, c.key.seed): c for c in grid_cells if c.kept is None}
    for name in spec.replay:
        cls = _replayable(name, methods)
        sources = [_source(spec, name, cls, rate, seed, by_cell) for rate in rates for seed in spec.seeds]
        missing = [k.run_id for k in sources if (k.method, k.noise_rate, k.seed) not in by_cell
                   and not store.is_complete(k.run_id)]
        if missing:
            raise GridError(f"--replay {name}: {len(missing)} source run(s) are neither cells of this grid nor complete in "
                            f"{spec.output} ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): add {name} to "
                            "--methods (the grid runs each source before its replay) or run them first")
        plan.cells += [_cell(spec, replay_label(name), made, key.noise_rate, key.seed, KeptSet(REPLAY, source=key))
                       for key in sources]


def kept_set_cells(spec: GridSpec, methods: Registry[type[Method]], grid_cells: list[Cell],
                   store: ResultsStore) -> KeptSetPlan:
    """The kept-set cells ``spec`` asks for (none when it asks for none), after the grid's
    own cells ``grid_cells``; GridError for a request that cannot be made (see the module docstring)."""
    plan = KeptSetPlan()
    if not (spec.frontier or spec.noise_types or spec.replay):
        return plan
    made = trainer(spec, methods)
    rates = [float(r) for r in spec.noise_rates if r > 0]
    if len(rates) < len(spec.noise_rates):
        plan.skipped.append("kept-set cells at 0% noise: there is no noisy triplet to keep or drop: none made")
    _frontier(spec, made, rates, plan)
    if spec.noise_types:
        _noise_types(spec, made, rates, plan)
    _replays(spec, made, rates, methods, grid_cells, store, plan)
    return plan


def is_replay(cell: Cell) -> bool:
    """Whether ``cell`` replays another run's kept set (and so runs after it)."""
    return cell.kept is not None and cell.kept.kind == REPLAY


def waves(cells: list[Cell]) -> list[list[Cell]]:
    """``cells`` in the groups that may run at once, in order: every cell but the replays,
    then the replays (whose sources are in the first group or complete already)."""
    return [group for group in ([c for c in cells if not is_replay(c)], [c for c in cells if is_replay(c)]) if group]


def waiting_replays(cells: list[Cell], pending: set[str]) -> list[Cell]:
    """The replays among ``cells`` whose source's run id is in ``pending`` (not complete yet)."""
    return [c for c in cells if is_replay(c) and c.kept.source.run_id in pending]
