"""A finished cell is reused only under the evaluation it was measured with (issue 58): a
rerun after a change of the dataset's evaluation protocol or of the metric code is refused
before any work, naming both evaluations and the way out, and ``--overwrite`` reruns the
cells under the new one (docs/benchmark.md#run-ids)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import cirbench.engine.running.reuse as reuse
from cirbench.cli import app
from cirbench.data.base import EvalProtocol

REFUSED = "finished cell(s) of this grid were measured under another evaluation"


def test_a_finished_cell_is_reused_only_under_its_evaluation(tmp_path: Path, cache_dir: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "results"
    args = ["run", "--methods", "sprc", "--noise", "0.5", "--dataset", "shapes-mini", "--epochs", "1", "--batch-size", "64",
            "--output", str(out), "--cache-dir", str(cache_dir)]
    run = lambda *more: CliRunner().invoke(app, [*args, *more], catch_exceptions=False)  # noqa: E731
    assert run().exit_code == 0
    first = pd.read_parquet(out / "runs")
    assert set(first.metrics_version) == {reuse.METRICS_VERSION} and first.eval_protocol.str.startswith("shapes").all()
    assert "already complete (skipped)" in run().output

    with monkeypatch.context() as patch:  # the metric code changed
        patch.setattr(reuse, "METRICS_VERSION", "2")
        refused = run()
    text = " ".join(refused.output.split())
    assert refused.exit_code == 2 and f"4 {REFUSED}" in text  # the cell and its 3 reference rows
    assert "metrics v1; this code and dataset evaluate with" in text and "metrics v2" in text and "--overwrite" in text

    old = EvalProtocol.describe
    monkeypatch.setattr(EvalProtocol, "describe", lambda self: old(self) + ":new-cut")  # the dataset's protocol changed
    refused = run()
    text = " ".join(refused.output.split())
    assert refused.exit_code == 2 and REFUSED in text and ":new-cut'" in text
    pd.testing.assert_frame_equal(pd.read_parquet(out / "runs"), first)  # nothing was run or written

    assert run("--overwrite").exit_code == 0  # rerun under the new evaluation, then reused under it
    assert pd.read_parquet(out / "runs").eval_protocol.str.endswith(":new-cut").all()
    assert "already complete (skipped)" in run().output
