"""A sweep's selection and the tuned leaderboard (``docs/selection.md``).

:func:`trial_selection`: per method, noise rate and seed the sweep ran at, the trial whose
held-out headline is best (each trial at its own ``holdout``-selected epoch; ties to the lower
trial), never read on the validation queries. :func:`picked_trials`: each method's pick at
each rate, read on the sweep's first seed (the one a study's sweep runs, seed 0): the trial
the tuned cells re-run on the other seeds (a sweep's ``tuned_seeds``, as ``<method>:trial<k>``
cells with the sweep's own run ids; a pick of trial 0 is the method's own cells).

:func:`tuned_board`: the leaderboard of those picked trials, every seed they ran at, read as
the default leaderboard is read (the same marks and four answers, against the baseline's own
picked trial), and by name every answer that differs from the default leaderboard's."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace

import pandas as pd

from cirbench.report.analysis.statistics.bootstrap import N_RESAMPLES
from cirbench.report.analysis.rankings.leaderboard import ANSWERS, BETTER, TUNED_BOARD, WORSE, Leaderboard, build_leaderboard
from cirbench.report.analysis.loading.load import Setting, sweep_seeds
from cirbench.report.analysis.loading.numbers import format_number, rate_label
from cirbench.results.labels import TRIAL_LABEL, trial_label
from cirbench.results.roles import BASELINE
from cirbench.results.selection import headline_by_epoch

def trial_selection(setting: Setting) -> pd.DataFrame:
    """One row per (method, noise rate, seed) of a sweep: the selected ``trial``, its
    ``holdout`` headline and epoch, its validation headline there (``tuned``), trial 0's
    (``default``) and the selected trial's ``changed`` hyperparameters (text)."""
    runs = sweep_runs(setting)
    if runs.empty:
        return pd.DataFrame(columns=["method", "noise_rate", "seed", "trial", "holdout", "epoch", "tuned", "default", "changed"])
    held_out = setting.metrics[setting.metrics.run_id.isin(set(runs.run_id))]
    best_held = {run_id: headline_by_epoch(own, "holdout").max() for run_id, own in held_out.groupby("run_id")}
    chosen = setting.selection.reindex(runs.run_id)  # the holdout rule's epoch and the validation headline there
    frame = pd.DataFrame({
        "base": runs.base.to_numpy(), "noise_rate": runs.noise_rate.to_numpy(), "seed": runs.seed.to_numpy(),
        "trial": runs.trial.to_numpy(), "config": runs.config.to_numpy(),
        "holdout": [float(best_held.get(r, math.nan)) for r in runs.run_id],
        "epoch": chosen["holdout_epoch"].to_numpy(), "val": chosen["holdout"].to_numpy(),
    })
    rows = []
    for (base, rate, seed), group in frame.groupby(["base", "noise_rate", "seed"]):
        ranked = group.dropna(subset=["holdout"]).sort_values(["holdout", "trial"], ascending=[False, True])
        default = group[group.trial == 0]
        if ranked.empty:
            continue
        best = ranked.iloc[0]
        rows.append({"method": base, "noise_rate": rate, "seed": seed, "trial": int(best.trial), "holdout": best.holdout,
                     "epoch": int(best.epoch), "tuned": best.val,
                     "default": float(default.val.iloc[0]) if len(default) else math.nan,
                     "changed": _changed(best.config, default.config.iloc[0] if len(default) else None)})
    return pd.DataFrame(rows)


def sweep_runs(setting: Setting) -> pd.DataFrame:
    """The runs of ``setting``'s sweeps with their ``base`` method and ``trial`` number, at
    the seeds each sweep ran at (:func:`~cirbench.report.analysis.loading.load.sweep_seeds`: a picked
    trial re-run on further seeds is no sweep there): every ``<method>:trial<k>`` row, and as
    trial 0 the plain method's row (its defaults) at each rate and seed its trials were run
    at, where it has a held-out split (a folder written before trial 0 was the plain row has
    ``<method>:trial0`` rows, used instead)."""
    runs = setting.runs
    trials = runs[runs.method.isin(setting.trials)].copy()
    parsed = trials.method.str.extract(TRIAL_LABEL)
    trials["base"], trials["trial"] = parsed["method"], parsed["trial"].astype(int)
    seeds = sweep_seeds(trials)
    at_sweep = [int(seed) in seeds.get((base, float(rate)), ())
                for base, rate, seed in trials[["base", "noise_rate", "seed"]].itertuples(index=False, name=None)]
    trials = trials[at_sweep] if len(trials) else trials
    swept = trials[["base", "noise_rate", "seed"]].drop_duplicates()
    legacy = set(map(tuple, trials.loc[trials.trial == 0, ["base", "noise_rate", "seed"]].itertuples(index=False)))
    plain = runs.merge(swept, left_on=["method", "noise_rate", "seed"], right_on=["base", "noise_rate", "seed"])
    plain = plain[plain.n_holdout.gt(0)]
    plain = plain[[key not in legacy for key in plain[["base", "noise_rate", "seed"]].itertuples(index=False, name=None)]]
    return pd.concat([trials, plain.assign(trial=0)], ignore_index=True)


def _changed(config: str, default: str | None) -> str:
    """The entries of ``config`` (JSON) that differ from ``default``'s: ``lr=0.00021, omega=0.41``."""
    if default is None:
        return "?"
    mine, base = json.loads(config), json.loads(default)
    diff = [f"{k}={format_number(v, digits=3)}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(mine.items()) if base.get(k) != v]
    return ", ".join(diff) or "defaults"


def picked_trials(setting: Setting) -> pd.DataFrame:
    """Each swept method's pick at each noise rate (:func:`trial_selection`) on the first seed
    its sweep ran at: ``method``, ``noise_rate``, ``seed`` (the picking seed), ``trial``,
    ``label`` (its cells' label: ``<method>:trial<k>``, the method itself for trial 0) and
    ``changed``."""
    selected = trial_selection(setting)
    columns = ["method", "noise_rate", "seed", "trial", "label", "changed"]
    if selected.empty:
        return pd.DataFrame(columns=columns)
    first = selected.sort_values("seed").groupby(["method", "noise_rate"], as_index=False).first()
    first["label"] = [trial_label(m, int(t)) for m, t in zip(first.method, first.trial)]
    return first[columns].sort_values(["noise_rate", "method"]).reset_index(drop=True)


@dataclass
class TunedBoard:
    """A setting's tuned leaderboard: the board of the picked trials (:attr:`board`), the
    picks, the methods not swept, the answers that differ from the default leaderboard's
    (:attr:`changed`) and those that stand (:attr:`kept`), each a line naming its cell."""

    board: Leaderboard
    picks: pd.DataFrame
    not_swept: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def picks_line(self) -> str:
        """The picks in words, per rate: ``50%: <a method> trial 2 (lr=0.0012), <another> the defaults; ...``."""
        parts = []
        for rate, block in self.picks.groupby("noise_rate"):
            named = [f"`{p.method}` " + ("the defaults" if p.trial == 0 else f"trial {p.trial} ({p.changed})")
                     for p in block.itertuples(index=False)]
            parts.append(f"{rate_label(float(rate))}: " + ", ".join(named))
        seeds = sorted({int(s) for s in self.picks.seed})
        return (f"**Tuned**: each method at the trial its sweep picked on seed {','.join(map(str, seeds))}'s held-out "
                "split (never the validation queries), that trial's cells on every seed: " + "; ".join(parts) + "."
                + (f" Not swept, so not here: {', '.join(f'`{m}`' for m in self.not_swept)}." if self.not_swept else ""))

    def changes_line(self) -> str:
        """The answers that differ between the two leaderboards, by name (or that none does),
        then the default's sure answers (better, worse) that tuning leaves standing."""
        text = ("**Answers that tuning changes**: " + "; ".join(self.changed) + "." if self.changed
                else "**Answers that tuning changes**: none; every answer of the default leaderboard at these rates stands.")
        if self.kept:
            text += " **Sure answers that survive tuning**: " + "; ".join(self.kept) + "."
        return text


def picks_rerun(setting: Setting, picks: pd.DataFrame) -> bool:
    """Whether the picks that are not the defaults ran on more than their sweep's one seed
    (a study's tuned cells), or every pick is the defaults."""
    runs = setting.runs
    seeds = [set(runs.loc[(runs.method == p.label) & (runs.noise_rate.astype(float) == float(p.noise_rate)), "seed"])
             for p in picks.itertuples(index=False) if p.trial]
    return not seeds or any(len(found) >= 2 for found in seeds)


def tuned_setting(setting: Setting, picks: pd.DataFrame) -> Setting:
    """``setting`` with, for each swept method and rate, its picked trial's runs under the
    method's own name (every seed they ran at), the perfect filter at those rates, and no
    other run; its tables (metrics, ranks, scores, ...) restricted and renamed alike."""
    runs = setting.runs
    keep, names = [], {}
    for pick in picks.itertuples(index=False):
        mine = runs[(runs.method == pick.label) & (runs.noise_rate.astype(float) == float(pick.noise_rate))]
        keep.append(mine)
        names.update({run_id: pick.method for run_id in mine.run_id})
    rates = {float(r) for r in picks.noise_rate}
    oracles = runs[runs.method.isin(setting.oracles) & runs.noise_rate.astype(float).isin(rates)]
    keep.append(oracles)
    names.update({run_id: method for run_id, method in zip(oracles.run_id, oracles.method)})
    chosen = pd.concat(keep, ignore_index=True)

    def renamed(frame: pd.DataFrame) -> pd.DataFrame:
        if frame.empty or "run_id" not in frame.columns:
            return frame
        frame = frame[frame.run_id.isin(names)].copy()
        if "method" in frame.columns:
            frame["method"] = frame.run_id.map(names)
        return frame.reset_index(drop=True)

    problems = setting.problems
    if len(problems):
        labels = {(p.label, float(p.noise_rate)): p.method for p in picks.itertuples(index=False)}
        hit = [(m, float(r)) in labels for m, r in zip(problems.method, problems.noise_rate)]
        problems = problems[hit].copy()
        problems["method"] = [labels[(m, float(r))] for m, r in zip(problems.method, problems.noise_rate)]
    tables = {name: renamed(getattr(setting, name)) for name in
              ("metrics", "purity", "scores", "losses", "ranks", "epoch_ranks", "extra_purity", "extra_scores")}
    return replace(setting, runs=renamed(chosen), problems=problems, kept_sets=None, **tables)


def _answer(word: str) -> str:
    """An answer with its mark, as the changed-answer list names it: ``▲ better``."""
    answer = ANSWERS.get(word)
    return f"{answer.mark} {answer.word}" if answer else "no answer"


def _compare(default: Leaderboard, tuned: Leaderboard) -> tuple[list[str], list[str]]:
    """Every (method, rate) of both boards whose answer against the baseline differs, in
    words, and the default's better or worse answers that tuning leaves as they are."""
    before = {(row.method, rate): cell.versus for row in default.ranked for rate, cell in row.cells.items()}
    changed, kept = [], []
    for rate in tuned.rates:
        for row in tuned.ranked:
            if row.method == tuned.baseline or rate not in row.cells or (row.method, rate) not in before:
                continue
            old, new = before[(row.method, rate)], row.cells[rate].versus
            where = f"`{row.method}` at {rate_label(rate)}"
            if old != new:
                changed.append(f"{where}: {_answer(old)} at the defaults, {_answer(new)} tuned")
            elif old in (BETTER, WORSE):
                kept.append(f"{where} {_answer(old)}")
    return changed, kept


def tuned_board(setting: Setting, default: Leaderboard | None = None, n_resamples: int = N_RESAMPLES,
                seed: int = 0) -> TunedBoard | None:
    """The tuned leaderboard of ``setting`` (see the module docstring) beside ``default`` (its
    default leaderboard, which the changed answers are read against); None without a sweep
    of its baseline, or while every pick but the defaults has cells on one seed only (before
    the tuned cells of a sweep's ``tuned_seeds`` have run)."""
    picks = picked_trials(setting)
    baseline = setting.role(BASELINE)
    if picks.empty or baseline not in set(picks.method):
        return None
    if not picks_rerun(setting, picks):
        return None  # the sweep alone: its picks have one seed each (the Tuned table shows them)
    board = build_leaderboard(tuned_setting(setting, picks), n_resamples, seed)
    if board is None:
        return None
    board.name = TUNED_BOARD
    changed, kept = _compare(default, board) if default is not None else ([], [])
    not_swept = [m for m in setting.methods if m not in set(picks.method) and m not in setting.oracles]
    return TunedBoard(board, picks, not_swept, changed, kept)
