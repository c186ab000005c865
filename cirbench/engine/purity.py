"""Clean-set purity (ConeSep, Appendix C.3) and noise-detection quality per noise type."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score


def _auroc(score: np.ndarray, positive: np.ndarray) -> float:
    if positive.all() or not positive.any() or not np.isfinite(score).all():
        return float("nan")
    return float(roc_auc_score(positive, score))


def purity_rows(
    selected_clean: np.ndarray | None,
    noise_score: np.ndarray | None,
    is_noisy: np.ndarray,
    noise_type: np.ndarray,
) -> pd.DataFrame:
    """One row for all samples and one per noise type present in the data.

    ``all``: ``n_selected`` kept as clean, of which ``n_selected_clean`` truly clean
    ("Real Positive") and ``n_selected_noisy`` truly noisy ("Wrong Positive"); ``purity`` =
    clean share of the kept set; ``clean_recall`` = share of clean samples kept;
    ``noise_recall`` = share of noisy samples caught (not kept); ``auroc`` of the noise score
    against the true flag. A noise-type row restricts the counts to samples of that type and
    computes its AUROC on the clean samples plus that type (clean vs this kind of noise).
    ``selected_clean`` None (a method that only scores) leaves the count columns empty.
    """
    is_noisy = np.asarray(is_noisy, dtype=bool)
    noise_type = np.asarray(noise_type, dtype=object)
    clean = ~is_noisy
    rows = []
    types = ["all"] + [t for t in ("reference", "caption", "target") if (noise_type == t).any()]
    types += sorted(set(noise_type[is_noisy]) - set(types))
    for kind in types:
        members = np.ones_like(is_noisy) if kind == "all" else noise_type == kind
        roc_members = members if kind == "all" else (members | clean)
        row: dict[str, float | int | str] = {"noise_type": kind, "n_samples": int(members.sum())}
        if selected_clean is not None:
            kept = np.asarray(selected_clean, dtype=bool) & members
            n_sel = int(kept.sum())
            n_sel_clean = int((kept & clean).sum())
            n_noisy = int((members & is_noisy).sum())
            n_clean = int((members & clean).sum())
            row.update(
                n_selected=n_sel,
                n_selected_clean=n_sel_clean,
                n_selected_noisy=n_sel - n_sel_clean,
                purity=n_sel_clean / n_sel if n_sel else float("nan"),
                clean_recall=n_sel_clean / n_clean if n_clean else float("nan"),
                noise_recall=1.0 - (n_sel - n_sel_clean) / n_noisy if n_noisy else float("nan"),
            )
        else:
            row.update(n_selected=None, n_selected_clean=None, n_selected_noisy=None,
                       purity=float("nan"), clean_recall=float("nan"), noise_recall=float("nan"))
        row["auroc"] = (
            _auroc(np.asarray(noise_score, dtype=float)[roc_members], is_noisy[roc_members])
            if noise_score is not None
            else float("nan")
        )
        rows.append(row)
    frame = pd.DataFrame(rows)
    counts = ["n_selected", "n_selected_clean", "n_selected_noisy"]
    frame[counts] = frame[counts].astype("Int64")
    return frame
