"""The machines a report's runs were computed on, for its provenance: each (CPU model, the
kernels' instruction set, pinned or not, threads) with its number of runs, and a warning when
the runs were computed with more than one set of kernels, whose numbers differ in the last
bits and, through a training run, by more (``docs/usage.md#what-a-run-id-guarantees``).

Every ``runs`` row records its CPU and kernels (:mod:`cirbench.settings.kernels`; ``""`` in runs
written before them). Two runs computed with the pins in force used the same kernels on any
CPU (as far as the pins reach); unpinned runs used their CPU's own.
"""

from __future__ import annotations

import json

import pandas as pd

UNRECORDED = "not recorded"
"""A run written before its CPU and kernels were recorded."""


def _kernels(text: object) -> dict:
    try:
        found = json.loads(str(text)) if text and str(text) != "nan" else {}
    except json.JSONDecodeError:
        return {}
    return found if isinstance(found, dict) else {}


def machine_of(run: pd.Series) -> tuple[str, str]:
    """(how the report names ``run``'s machine, the identity of the kernels that computed it):
    two runs with one identity computed with the same kernels; a pinned run's identity leaves
    the CPU out."""
    kernels, model = _kernels(run.get("kernels")), str(run.get("cpu_model") or "")
    if not kernels or not model or model == "nan":
        return UNRECORDED, UNRECORDED
    threads = int(run.get("threads") or 0)
    pinned = bool(kernels.get("pinned"))
    name = f"{model}, {run.get('cpu_isa') or kernels.get('aten', '?')} {'pinned' if pinned else 'unpinned'}, {threads} thread(s)"
    used = {k: v for k, v in kernels.items() if k != "pinned"}
    identity = json.dumps({**used, "threads": threads, "cpu": "" if pinned else model}, sort_keys=True)
    return name, identity


def machine_lines(runs: pd.DataFrame) -> list[str]:
    """The provenance's lines on machines: each with its runs, and a warning when the runs
    were computed with different kernels (runs whose kernels were not recorded among them)."""
    if runs.empty:
        return []
    found = pd.DataFrame([machine_of(run) for _, run in runs.iterrows()], columns=["name", "identity"])
    counts = found.groupby("name", sort=True).size()
    text = "machines (CPU, the kernels' instruction set as torch reports it, pins, threads): " + "; ".join(
        f"{name} ({n} run(s))" for name, n in counts.items())
    kinds = found.identity.nunique()
    if kinds > 1:
        text = (f"WARNING: runs computed with {kinds} different sets of kernels are pooled (a cell's numbers move with "
                "its kernels: docs/usage.md#what-a-run-id-guarantees); " + text)
    return [text]
