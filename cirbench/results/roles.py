"""The roles a method may declare (``Method.role``), recorded in each run's ``role`` column,
so that the report finds the ordinary baseline and the perfect filter in a results folder by
role, never by name.

The reference rows (``cirbench.results.labels``) are not methods and have no role: they are
the runs flagged ``is_reference``, told apart by their labels."""

from __future__ import annotations

import pandas as pd

BASELINE = "baseline"
"""The ordinary fine-tune every robust method is compared with (the claims' ``{baseline}``)."""
PERFECT_FILTER = "perfect_filter"
"""The method trained on the truly clean triplets only (the calibration's room to win)."""
ROLES: dict[str, str] = {
    BASELINE: "the ordinary fine-tune the robust methods are compared with",
    PERFECT_FILTER: "trained on the truly clean triplets only: what a method that only removes noise can reach",
}
"""Every role a method may declare, and what it means."""

LEGACY_ROLES: dict[str, str] = {BASELINE: "sprc", PERFECT_FILTER: "oracle"}
"""The method of each role in a results folder that records none: runs written before the
``role`` column existed (null there), or a folder without a method of that role (its checks
then read as not run, naming this method)."""


def role_method(runs: pd.DataFrame, role: str) -> str:
    """The method of ``runs`` (a ``runs`` table) that declares ``role``, its ablation rows,
    sweep trials (labels with ``:``) and reference rows left out; the first by name if several
    do; :data:`LEGACY_ROLES`'s when none does."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: the roles are {', '.join(ROLES)}")
    if "role" in runs.columns and len(runs):
        plain = ~runs.method.astype(str).str.contains(":", regex=False)
        if "is_reference" in runs.columns:
            plain &= ~runs.is_reference.eq(True)
        named = sorted(set(runs.loc[runs.role.eq(role).fillna(False).astype(bool) & plain, "method"]))
        if named:
            return str(named[0])
    return LEGACY_ROLES[role]
