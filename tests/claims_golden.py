"""The claims' verdicts on one constructed ``shapes-mini`` results folder that runs every
claim (ablation rows and HUG's ladder included), as ``tests/claims_verdicts.json`` holds
them: computed by the report's code before the claims became data (issue 46; main at
50818f3, after issue 47's wording of p-values and short titles), so that
``test_claims_data.py`` can show the claims read from a file give the very same verdicts.
Rewritten once since (issue 70): "inconclusive" renamed "undecided" and each comparison's
numbers ending in its smallest decidable difference; no verdict changed otherwise (no
difference here is equivalent within a point: 300 queries cannot decide one).

``python tests/claims_golden.py`` rewrites the file (only ever to record a deliberate change)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERDICTS = HERE / "claims_verdicts.json"
N_RESAMPLES = 200

# R@10 hit probability of the rows test_claims.py does not write: ConeSep's ablation
# variants (one behind the full method, one level, one ahead) and HUG's Table 3 ladder
# (one step that lowers recall by more than a point).
_EXTRA = {
    "conesep:no_gfq": {0.0: 0.60, 0.5: 0.50, 0.8: 0.40},
    "conesep:no_nbl": {0.0: 0.70, 0.5: 0.65, 0.8: 0.60},
    "conesep:no_btu": {0.0: 0.75, 0.5: 0.70, 0.8: 0.65},
    "conesep:no_rcl": {0.0: 0.55, 0.5: 0.55, 0.8: 0.50},
    "hug:point_matching": {0.0: 0.25, 0.5: 0.15, 0.8: 0.08},
    "hug:probabilistic": {0.0: 0.27, 0.5: 0.17, 0.8: 0.09},
    "hug:component": {0.0: 0.27, 0.5: 0.18, 0.8: 0.09},
    "hug:instance": {0.0: 0.35, 0.5: 0.25, 0.8: 0.12},
    "hug:modality": {0.0: 0.20, 0.5: 0.12, 0.8: 0.06},
    "hug:cross_modal": {0.0: 0.28, 0.5: 0.19, 0.8: 0.10},
    "hug:coordination": {0.0: 0.29, 0.5: 0.20, 0.8: 0.10},
}


PARTIAL = [(m, r, s) for m, r in (("sprc", 0.5), ("tme", 0.5), ("habit", 0.0), ("hug:instance", 0.5)) for s in (0, 1)]
"""A folder in which most checks cannot run: each claim's "not run" wording."""


def write_golden_results(root: Path, folder: str) -> None:
    """``full``: every cell of ``test_claims.py``'s results plus :data:`_EXTRA`'s, at 0%,
    50% and 80%, seeds 0-2; ``partial``: :data:`PARTIAL`; labelled ``shapes-mini``."""
    sys.path.insert(0, str(HERE))
    from test_claims import HITS, SEEDS, write_claims_results

    hits = {**HITS, **_EXTRA}
    cells = [(m, r, s) for m in hits for r in (0.0, 0.5, 0.8) for s in SEEDS] if folder == "full" else PARTIAL
    write_claims_results(root, cells, hits, dataset="shapes-mini")


def verdicts(claims: list) -> list[dict]:
    """Each claim as data: its text, source, short title, verdict and checks (label, verdict, numbers)."""
    return [{"text": c.text, "source": c.source, "short": c.short, "verdict": c.verdict_text,
             "checks": [[k.label, k.verdict, k.numbers] for k in c.checks]} for c in claims]


def main() -> None:
    import tempfile

    from cirbench.report import load_results
    from cirbench.report.analysis.verdicts.claims import paper_claims

    out = {}
    for name in ("full", "partial"):
        with tempfile.TemporaryDirectory() as folder:
            write_golden_results(Path(folder), name)
            (setting,) = load_results(Path(folder)).settings
            out[name] = verdicts(paper_claims(setting, n_resamples=N_RESAMPLES))
    VERDICTS.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
