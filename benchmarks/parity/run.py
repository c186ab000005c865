"""Compare a hosted port with its authors' release, term by term, on seeded float64 inputs.

    python benchmarks/parity/run.py conesep --release /path/to/ConeSep          # print the differences
    python benchmarks/parity/run.py conesep --release /path/to/ConeSep --record # and re-record tests/parity/conesep.json

Prints, for every term the adapter compares, the largest absolute difference between the
release and the port under the release's readings (which must be within the tolerance) and
under the port's defaults (the paper's readings: how far they take the term). ``--record``
writes the release's values, with its commit, to ``tests/parity/<method>.json``, which
``tests/parity/test_parity.py`` checks without the release. Exit status 1 when a term under
the release's readings is outside the tolerance.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from parity import harness  # noqa: E402

METHODS = ("sprc", "tme", "conesep", "hug", "habit", "intent", "ssn", "cala")


def adapter(method: str):
    """The parity adapter module of ``method`` (``benchmarks/parity/<method>.py``)."""
    return importlib.import_module(f"parity.{method}")


def compare(method: str, release_dir: Path, record: bool = False, commit: str = "") -> int:
    """Print ``method``'s term-by-term differences against the release at ``release_dir``;
    with ``record``, write the release's values. Returns the number of terms out of tolerance."""
    mod = adapter(method)
    inputs = mod.make_inputs(mod.SEED)
    release = mod.release_terms(release_dir, inputs)
    port = mod.port_terms(inputs, "release")
    paper = mod.port_terms(inputs, "paper")
    failures = 0
    print(f"{method}: {mod.RELEASE.repo}, inputs seed {mod.SEED}, tolerance rtol {harness.RTOL:g} atol {harness.ATOL:g}")
    print(f"{'term':<28} {'release readings':>18} {'':>4} {'defaults (paper)':>18}")
    for term in release:
        if term not in port:
            print(f"{term:<28} {'missing in port':>18}")
            failures += 1
            continue
        ok = harness.within_tolerance(port[term], release[term])
        failures += not ok
        default = f"{harness.max_difference(paper[term], release[term]):18.3g}" if term in paper else f"{'-':>18}"
        print(f"{term:<28} {harness.max_difference(port[term], release[term]):18.3g} {'ok' if ok else 'FAIL':>4} {default}")
    for term, why in mod.NOT_COMPARABLE.items():
        print(f"{term:<28} not comparable: {why}")
    if record:
        release_info = harness.Release(mod.RELEASE.repo, dict(mod.RELEASE.files),
                                       commit or harness.release_commit(release_dir) or mod.RELEASE.commit)
        path = harness.write_record(method, release_info, mod.SEED, inputs, release, mod.NOT_COMPARABLE)
        print(f"recorded {path}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("methods", nargs="+", choices=METHODS, help="hosted methods to compare")
    parser.add_argument("--release", type=Path, required=True, action="append",
                        help="the release's checkout (one per method, in order, or one for all)")
    parser.add_argument("--record", action="store_true", help="write tests/parity/<method>.json")
    parser.add_argument("--commit", default="", help="the release's commit, when the checkout is not a git work tree")
    args = parser.parse_args(argv)
    releases = args.release if len(args.release) == len(args.methods) else args.release * len(args.methods)
    failures = sum(compare(m, d, args.record, args.commit) for m, d in zip(args.methods, releases))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
