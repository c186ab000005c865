"""The published numbers beside a FashionIQ or CIRR reproduction, with the gap per cell.

For every noise rate measured, each measured method (mean over seeds) is followed by the
published rows of the same method at the same noise rate (see
:mod:`cirbench.report.analysis.verdicts.published`) and one gap row per published row (measured minus
published, percentage points). The note says plainly where the comparison is not like for
like: a different split (CIRR test1 numbers come from the evaluation server; local runs
measure validation), a different or unstated protocol, and the backbone of the runs.
"""

from __future__ import annotations

import math

import pandas as pd

from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import CLAIMS_EPOCH, format_number, rate_label, run_columns, summarize, validation_split
from cirbench.report.analysis.verdicts.published import METRICS, load_published
from cirbench.report.tables.model import Cell, TableModel, collapse_note, read_seeds


def dataset_family(dataset: str) -> str:
    """``fashioniq[reference=keep]`` -> ``fashioniq``."""
    return dataset.split("[", 1)[0]


def _cells(values: pd.Series, columns: list[str], sign: bool = False) -> list[Cell]:
    return [Cell(format_number(float(values.get(c, math.nan)), sign=sign)) for c in columns]


def _comparability(ref: pd.Series, split: str | None, protocols: set[str]) -> str:
    """One sentence on whether ``ref``'s split and protocol match the measured ones."""
    parts = []
    if ref.split == "unstated":
        parts.append("the paper does not state the split")
    elif ref.split != split:
        parts.append(f"split differs: published {ref.split}, measured {split}")
        if ref.split == "test1":
            parts.append("CIRR test1 numbers come from the evaluation server; local runs measure val")
    if "unstated" in ref.protocol:
        parts.append(f"protocol {ref.protocol}: the paper does not say whether the reference is in the gallery")
    elif ref.protocol not in protocols:
        parts.append(f"protocol differs: published {ref.protocol}, measured {', '.join(sorted(protocols))}")
    sentence = "; ".join(parts) if parts else "same split and protocol"
    note = f" Its note: {ref.note}." if ref.note else ""
    return f"{ref.source}, {ref.table} ({ref.split}, {ref.protocol}): {sentence}.{note}"


def reproduction_table(setting: Setting, published: pd.DataFrame | None = None) -> TableModel | None:
    """Measured rows, the published rows of the same methods and noise rates, and the gaps;
    None for a dataset without published numbers or when no published row matches."""
    family = dataset_family(setting.dataset)
    if family not in METRICS:
        return None
    refs = load_published() if published is None else published
    refs = refs[(refs.dataset == family) & (refs.cirbench_method != "")]
    per_run = run_columns(setting)
    columns = [c for c in METRICS[family] if c in per_run.columns]
    if refs.empty or not columns:
        return None
    means = summarize(setting, per_run)["mean"]
    rows: list[tuple[str, str, list[Cell]]] = []
    shown: dict[tuple, pd.Series] = {}
    measured: list[tuple[str, float]] = []
    for rate in sorted(means.index.get_level_values("noise_rate").unique()):
        block = means.xs(rate, level="noise_rate")
        first = True
        for method in [m for m in setting.methods if m in block.index]:
            matches = refs[(refs.cirbench_method == method.split(":", 1)[0]) & ((refs.noise_rate - rate).abs() < 1e-9)]
            if matches.empty:
                continue
            rows.append((rate_label(rate) if first else "", f"{setting.label(method, rate)} (measured)", _cells(block.loc[method], columns)))
            measured.append((method, rate))
            first = False
            for ref in (pd.Series(r) for r in matches.to_dict("records")):
                published = ref[columns].astype(float)
                rows.append(("", f"{ref.method}: {ref.source}, {ref.table}", _cells(published, columns)))
                rows.append(("", "gap (measured - published)", _cells(block.loc[method, columns] - published, columns, sign=True)))
                shown[(ref.source, ref.table, ref.split, ref.protocol)] = ref
    if not rows:
        return None
    split = validation_split(setting.metrics)
    protocols = {str(p) for p in setting.runs.eval_protocol.dropna() if str(p)}
    notes = [_comparability(ref, split, protocols) for ref in shown.values()]
    if setting.noise_protocol != "thirds" and any(ref.noise_rate > 0 for ref in shown.values()):
        notes.append(f"Noise protocol differs: measured {setting.noise_protocol}, the papers' noisy rows use thirds (TME).")
    note = (
        f"Percent; measured rows are the mean over seeds on split {split} {CLAIMS_EPOCH} "
        f"(protocol {', '.join(sorted(protocols)) or 'unknown'}, backbone {setting.backbone}; ConeSep and HUG "
        "train on BLIP-2); gap = measured - published, in points. " + " ".join(notes) + collapse_note(setting, measured)
    )
    return TableModel("Published numbers and the reproduction gap", columns, rows, note,
                      read_seeds(setting, measured, per_run.index))
