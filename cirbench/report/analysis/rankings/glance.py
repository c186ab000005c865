"""The report's answers: one line per noise rate saying who beats the baseline surely, by how
much, and what the perfect filter would gain (:func:`answer_lines`, read from the leaderboard's
marks and nothing else: the first screen, "At a glance" and the README say these lines), then
the cleanest kept set and the kind of noise each method misses most (oracles, ablation rows and
sweep trials excluded throughout)."""

from __future__ import annotations

import pandas as pd

from cirbench.report.analysis.rankings.leaderboard import (
    ANSWERS, BEST, BETTER, DEFAULT_BOARD, MARKS, PERFECT_FILTER, TUNED_BOARD, WORSE, LeaderCell, Leaderboard, LeaderRow,
)
from cirbench.report.analysis.loading.load import BELOW_CHANCE_MARK, COLLAPSE_MARK, Setting, final_epoch
from cirbench.report.analysis.loading.numbers import LAST_EPOCH, flagged_shares, format_number, format_percent, format_points, rate_label


def _named(row: LeaderRow, cell: LeaderCell, gain: float | None = None) -> str:
    """A method as an answer names it (in backticks, with its collapse mark), with its difference and mark."""
    name = f"`{row.method}`" + (COLLAPSE_MARK if cell.collapsed else "")
    return name if gain is None else f"{name} ({format_points(gain)} {MARKS[cell.versus]})"


BOARD_WORDS: dict[str, str] = {
    DEFAULT_BOARD: "**Who wins at the defaults** (the default leaderboard: every method at its default hyperparameters)",
    TUNED_BOARD: "**Who wins tuned** (the tuned leaderboard: each method at the trial its sweep picked on the held-out split)",
}
"""How the answers' intro names its leaderboard (:attr:`Leaderboard.name`) where a setting has two."""


def answers_intro(board: Leaderboard) -> str:
    """The line above the answers: which leaderboard they read (where a setting has two), what
    they compare, on which number, by which rule."""
    who = BOARD_WORDS.get(board.name, "**Who wins**")
    against = f"`{board.baseline}`" + (" at its picked trial" if board.name == TUNED_BOARD else "")
    return (f"{who} on {board.metric} against {against}, in points, by the marks' rule (both 95% "
            "intervals on one side of 0):")


def answer_line(board: Leaderboard, rate: float) -> str | None:
    """The answer at ``rate``, from the leaderboard's marks and means alone: who beats the
    baseline surely and by how much (or that nothing does), who is worse, the methods of each
    other answer, and the perfect filter's gain; None without the baseline's cell."""
    base = next((r.cells[rate] for r in board.ranked if r.method == board.baseline and rate in r.cells), None)
    if base is None:
        return None
    groups: dict[str, list[tuple[float, str]]] = {key: [] for key in ANSWERS}
    leader = None
    for row in board.ranked:
        cell = row.cells.get(rate)
        leader = row if cell is not None and cell.lead == BEST else leader
        if row.method == board.baseline or cell is None or cell.versus not in groups:
            continue
        gain = cell.metric.mean - base.metric.mean
        groups[cell.versus].append((gain, _named(row, cell, gain if cell.versus in (BETTER, WORSE) else None)))
    better = [name for _, name in sorted(groups[BETTER], reverse=True)]
    worse = [name for _, name in sorted(groups[WORSE])]
    leads = leader is not None and leader.method == board.baseline
    parts = [f"`{leader.method}` leads every other method surely"] if leader is not None and not leads else []
    parts.append(f"{', '.join(better)} {'beats' if len(better) == 1 else 'beat'} `{board.baseline}` surely" if better
                 else f"no method beats `{board.baseline}` surely" + (" (it leads every other surely)" if leads else ""))
    if worse:
        parts.append(f"{', '.join(worse)} {'is' if len(worse) == 1 else 'are'} worse")
    parts += [f"{ANSWERS[key].word} {MARKS[key]}: {', '.join(name for _, name in sorted(found, key=lambda f: f[1]))}"
              for key, found in groups.items() if key not in (BETTER, WORSE) and found]
    perfect = next((r.cells[rate] for r in board.unranked if r.kind == PERFECT_FILTER and rate in r.cells), None)
    if perfect is not None:
        parts.append(f"a perfect filter would gain {format_points(perfect.metric.mean - base.metric.mean)}"
                     + (f" {MARKS[perfect.versus]}" if perfect.versus in MARKS else ""))
    return f"**{rate_label(rate)}**: " + "; ".join(parts) + "."


def answer_lines(board: Leaderboard) -> list[str]:
    """One :func:`answer_line` per noise rate of ``board``."""
    return [line for line in (answer_line(board, rate) for rate in board.rates) if line]


def _best_purity(setting: Setting) -> list[str]:
    last = final_epoch(setting.purity)
    overall = last[(last.noise_type == "all") & (last.noise_rate > 0) & last.method.isin(setting.methods)
                   & ~last.method.isin(setting.oracles)]
    overall = overall.dropna(subset=["purity"])
    if overall.empty:
        return []
    means = overall.groupby(["noise_rate", "method"]).purity.mean()
    runs = setting.runs.set_index("run_id")
    clean_share = (1.0 - runs.n_noisy / runs.n_train).reindex(overall.run_id).groupby(overall.noise_rate.to_numpy()).mean()
    parts = []
    for rate in sorted(means.index.get_level_values(0).unique()):
        block = means.xs(rate)
        best = str(block.idxmax())
        parts.append(f"{rate_label(rate)}: {best}{setting.collapse_mark(best, rate)} ({format_percent(100 * block.max())}% clean; "
                     f"a random subset: {format_percent(100 * clean_share[rate])}%)")
    return [f"Cleanest kept set {LAST_EPOCH}: " + "; ".join(parts) + "."]


def _misses(setting: Setting) -> list[str]:
    last = final_epoch(setting.purity)
    typed = last[last.noise_type.isin(setting.noise_types) & (last.noise_rate > 0) & ~last.method.isin(setting.oracles)]
    flagged = flagged_shares(setting)
    lines = []
    for method in setting.methods:
        rows = typed[typed.method == method]
        value, what = ("noise_recall", "caught") if rows.noise_recall.notna().any() else ("auroc", "AUROC x100")
        rows = rows.dropna(subset=[value])
        if rows.empty:
            continue
        means: pd.Series = rows.groupby(["noise_rate", "noise_type"])[value].mean()
        parts = []
        for rate in sorted(means.index.get_level_values(0).unique()):
            block = means.xs(rate)
            shown = format_number(100 * block.min(), 0) + ("%" if value == "noise_recall" else "")
            if value == "noise_recall" and method in flagged.get(float(rate), {}):
                shown += f" of them, flags {format_number(100 * flagged[float(rate)][method], 0)}% of all samples"
            parts.append(f"{rate_label(rate)}{setting.collapse_mark(method, rate)}: {block.idxmin()} ({what} {shown})")
        lines.append(f"{method} misses most ({LAST_EPOCH}): " + "; ".join(parts) + ".")
    return lines


def at_a_glance(setting: Setting, board: Leaderboard | None) -> list[str]:
    """Plain-text sentences answering: who wins at each noise rate (:func:`answer_lines`, the
    first screen's lines), whose kept set is cleanest, what is missed (a method at a rate where
    it collapsed on any seed marked as the tables mark it), and how many runs are flagged."""
    lines = answer_lines(board) if board is not None else []
    flagged = setting.collapsed
    if len(flagged):
        lines.append(f"{COLLAPSE_MARK} {len(flagged)} run(s) flagged collapsed (below the text_only row or a constant loss): "
                     "a defect to explain, not a robustness result; see Collapsed cells.")
    dirty = setting.below_chance
    if len(dirty):
        lines.append(f"{BELOW_CHANCE_MARK} {len(dirty)} run(s) kept a set less clean than a random subset of the same "
                     "size (a flag, not a failure); see Kept sets below chance.")
    return lines + _best_purity(setting) + _misses(setting)
