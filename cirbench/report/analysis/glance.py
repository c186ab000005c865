"""The report's "at a glance" lines: the highest mean at each noise rate, the cleanest kept
set, and the kind of noise each method misses most (oracles, ablation rows and sweep
trials excluded throughout)."""

from __future__ import annotations

import pandas as pd

from cirbench.report.analysis.load import BELOW_CHANCE_MARK, COLLAPSE_MARK, Setting, final_epoch
from cirbench.report.analysis.numbers import (
    CLAIMS_EPOCH, LAST_EPOCH, ON_VALIDATION, best_per_rate, flagged_shares, rate_label,
)


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
        parts.append(f"{rate_label(rate)}: {best}{setting.collapse_mark(best, rate)} ({100 * block.max():.1f}% clean; "
                     f"a random subset: {100 * clean_share[rate]:.1f}%)")
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
            shown = f"{100 * block.min():.0f}%" if value == "noise_recall" else f"{100 * block.min():.0f}"
            if value == "noise_recall" and method in flagged.get(float(rate), {}):
                shown += f" of them, flags {100 * flagged[float(rate)][method]:.0f}% of all samples"
            parts.append(f"{rate_label(rate)}{setting.collapse_mark(method, rate)}: {block.idxmin()} ({what} {shown})")
        lines.append(f"{method} misses most ({LAST_EPOCH}): " + "; ".join(parts) + ".")
    return lines


def at_a_glance(setting: Setting) -> list[str]:
    """Plain-text sentences answering: who is best, whose kept set is cleanest, what is missed
    (a method at a rate where it collapsed on any seed marked as the tables mark it), and how
    many runs are flagged."""
    lines = []
    best = best_per_rate(setting)
    if best:
        column = best[0][1]
        lines.append(
            f"Highest mean {column} ({ON_VALIDATION}, %) {CLAIMS_EPOCH} (perfect filters, ablation rows and sweep "
            "trials excluded; whether it beats the others surely is the leaderboard's mark): "
            + "; ".join(f"{rate_label(rate)}: {setting.label(method, rate)} ({value:.2f}%)" for rate, _, method, value in best) + "."
        )
    flagged = setting.collapsed
    if len(flagged):
        lines.append(f"{COLLAPSE_MARK} {len(flagged)} run(s) flagged collapsed (below the text_only row or a constant loss): "
                     "a defect to explain, not a robustness result; see Collapsed cells.")
    dirty = setting.below_chance
    if len(dirty):
        lines.append(f"{BELOW_CHANCE_MARK} {len(dirty)} run(s) kept a set less clean than a random subset of the same "
                     "size (a flag, not a failure); see Kept sets below chance.")
    return lines + _best_purity(setting) + _misses(setting)
