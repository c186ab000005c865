"""The papers' published numbers shipped as data, a user's own reference file, and the
report that sets them beside FashionIQ and CIRR runs with the gap per cell."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.report.analysis.loading.load import COLLAPSE_MARK
from cirbench.report.analysis.verdicts.published import METRICS, PublishedFileError, load_published, read_published
from fixtures import write_cirr, write_fashioniq


def _row(refs: pd.DataFrame, source: str, method: str, rate: float) -> pd.Series:
    found = refs[refs.source.str.startswith(source) & (refs.method == method) & (refs.noise_rate == rate)]
    assert len(found) == 1, found
    return found.iloc[0]


def test_the_shipped_tables_are_complete_and_carry_their_provenance() -> None:
    refs = load_published()
    sizes = refs.groupby(["dataset", "source", "table"]).size().to_dict()
    assert sizes == {("cirr", "ConeSep paper", "Table 2"): 28, ("cirr", "HUG paper (arXiv 2601.11393)", "Table 2"): 12,
                     ("fashioniq", "ConeSep paper", "Table 1"): 28, ("fashioniq", "HUG paper (arXiv 2601.11393)", "Table 1"): 18}
    cone = refs[refs.source == "ConeSep paper"]
    assert sorted(cone.noise_rate.unique()) == [0.0, 0.2, 0.5, 0.8] and cone.groupby(["dataset", "noise_rate"]).size().eq(7).all()
    assert set(cone.split) == {"val", "test1"} and (refs.protocol != "").all() and (refs.note != "").all()
    assert set(refs.cirbench_method) == {"", "sprc", "tme", "conesep", "hug", "habit", "intent", "ssn", "cala"}
    # cells checked by hand against the papers' text
    fiq, cirr = refs[refs.dataset == "fashioniq"], refs[refs.dataset == "cirr"]
    assert _row(fiq, "ConeSep", "ConeSep", 0.5)[list(METRICS["fashioniq"])].tolist() == [
        48.39, 71.34, 54.56, 73.25, 57.22, 77.87, 53.39, 74.15, 63.77]
    assert _row(cirr, "ConeSep", "SPRC", 0.8)[list(METRICS["cirr"])].tolist() == [
        29.95, 51.25, 58.51, 73.86, 70.22, 86.05, 93.21, 60.74]
    hug = _row(cirr, "HUG", "HUG", 0.0)
    assert (hug["R@1"], hug["Avg(R@5, R_sub@1)"], hug.split) == (51.09, 81.93, "unstated")
    covr = _row(fiq, "HUG", "CoVR★", 0.0)
    assert pd.isna(covr["dress R@10"]) and covr["AVG"] == 60.19  # the paper prints '-' for the categories
    assert "is not the mean" in _row(fiq, "ConeSep", "SPRC", 0.0).note  # the paper's own slip


@pytest.mark.parametrize(("edit", "message"), [
    (lambda f: f.drop(columns=["split"]), "missing column(s) split"),
    (lambda f: f.assign(dataset="shapes"), "line 2 (sprc-mine): dataset 'shapes'"),
    (lambda f: f.assign(**{"R@5": "high"}), "line 2 (sprc-mine): R@5 'high' is not a number"),
    (lambda f: f.assign(noise_rate="1.5"), "noise_rate '1.5' is outside"),
    (lambda f: f.assign(**{"R@1": "", "R@5": ""}), "no metric value"),
    (lambda f: f.assign(**{"dress R@10": "3"}), "dress R@10 are not cirr metrics"),
    (lambda f: f.rename(columns={"R@5": "recall@5"}), "unknown column(s) recall@5"),
])
def test_a_bad_file_of_numbers_is_refused_with_file_line_and_reason(tmp_path, edit, message) -> None:
    good = pd.DataFrame([{"dataset": "cirr", "source": "my lab", "table": "run 3", "split": "val",
                          "protocol": "cirr:ref-excluded:R@1,5,10,50+subset@1,2,3", "noise_rate": "0.5",
                          "method": "sprc-mine", "cirbench_method": "sprc", "note": "", "R@1": "40.1", "R@5": "70.2"}])
    path = tmp_path / "mine.csv"
    good.to_csv(path, index=False)
    assert read_published(path).loc[0, "R@5"] == 70.2
    edit(good).to_csv(path, index=False)
    with pytest.raises(PublishedFileError) as info:
        read_published(path)
    assert str(path) in str(info.value) and message in str(info.value)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """One results directory with an sprc and a conesep run on FashionIQ- and CIRR-layout fixtures."""
    base = tmp_path_factory.mktemp("published")
    write_fashioniq(base / "fiq")
    write_cirr(base / "cirr")
    out = base / "results"
    for name, root in (("fashioniq", base / "fiq"), ("cirr", base / "cirr")):
        done = CliRunner().invoke(app, [
            "run", "--dataset", name, "--data-root", str(root), "--methods", "sprc,conesep", "--noise", "0,0.5",
            "--epochs", "1", "--batch-size", "8", "--output", str(out), "--cache-dir", str(base / "cache")])
        assert done.exit_code == 0, done.output
    return out


def test_the_report_sets_published_rows_and_gaps_beside_the_runs(results, tmp_path) -> None:
    mine = tmp_path / "mine.csv"
    pd.DataFrame([{"dataset": "fashioniq", "source": "my lab notebook", "table": "run 7", "split": "val",
                   "protocol": "fashioniq:ref-keep:R@10,50", "noise_rate": "0.5", "method": "SPRC (ours, BLIP-2)",
                   "cirbench_method": "sprc", "note": "", "AVG": "55.5"}]).to_csv(mine, index=False)
    out = tmp_path / "report"
    done = CliRunner().invoke(app, ["report", "--results", str(results), "--output", str(out), "--published", str(mine)])
    assert done.exit_code == 0, done.output
    text = (out / "report.md").read_text()
    sections = {part.split(",", 1)[0]: part for part in text.split("\n## ")[1:]}
    # a one-epoch toy cell may be flagged collapsed (its rows marked †): not what this test checks
    fiq, cirr = (sections[name].replace(COLLAPSE_MARK, "") for name in ("fashioniq", "cirr"))
    for section in (fiq, cirr):
        assert "### Published numbers and the reproduction gap" in section
        assert "| 0% | sprc (measured) |" in section and "| 50% | sprc (measured) |" in section
        assert "|  | gap (measured - published) |" in section
    assert "|  | SPRC: ConeSep paper, Table 1 |" in fiq and "|  | HUG: HUG paper (arXiv 2601.11393), Table 1 |" not in fiq  # no hug run
    assert "|  | ConeSep: ConeSep paper, Table 1 |" in fiq and "SPRC (ours, BLIP-2): my lab notebook, run 7" in fiq
    assert "same split and protocol" in fiq and "protocol differs: published fashioniq:ref-keep:R@10,50" in fiq
    assert "|  | SPRC: ConeSep paper, Table 2 |" in cirr
    assert "split differs: published test1, measured val" in cirr
    assert "CIRR test1 numbers come from the evaluation server; local runs measure val" in cirr
    # one gap cell recomputed: measured sprc AVG at 50% minus the published 51.12
    table = fiq.split("### Published numbers and the reproduction gap", 1)[1].split("###", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("|")]
    at = rows[0].index("AVG")
    measured = next(r for r in rows if r[:2] == ["50%", "sprc (measured)"])
    published = next(i for i, r in enumerate(rows) if r[1] == "SPRC: ConeSep paper, Table 1" and r[at] == "51.12")
    assert rows[published + 1][1] == "gap (measured - published)"
    assert float(rows[published + 1][at]) == pytest.approx(float(measured[at]) - 51.12, abs=0.011)
    assert "Published numbers" in (out / "index.html").read_text()
