"""The report speaks of the protocol it reads: the detection figure's wording is each noise
type as its protocol describes it (``NoiseProtocol.noise_types``), and a setting's heading
pluralises its epochs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cirbench.plugins import discover
from cirbench.report.analysis.verdicts.claim_files import SHIPPED, read_claims
from cirbench.report.analysis.loading.load import Setting

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


def setting(protocol: str, types: list[str], epochs: list[int]) -> Setting:
    runs = pd.DataFrame({"epochs": epochs, "seed": [0] * len(epochs)})
    purity = pd.DataFrame({"noise_type": ["all", "clean", *types]})
    empty = pd.DataFrame()
    return Setting("shapes", "tiny", protocol, runs, empty, purity, empty, empty)


@pytest.mark.parametrize("protocol, types, wording", [
    ("thirds", ["reference", "caption", "target"],
     "reference: reference image swapped; caption: caption swapped; target: target image swapped"),
    ("hard", ["caption"], "caption: caption of a triplet with a visually close reference"),
    ("word_drop", ["paraphrase"], "paraphrase: one word of the caption dropped"),
    ("not_registered", ["polite"], "polite"),
])
def test_the_detection_wording_is_the_protocols(protocol: str, types: list[str], wording: str) -> None:
    discover([EXAMPLES / "word_drop.py"])
    assert setting(protocol, types, [1]).noise_type_wording() == wording


@pytest.mark.parametrize("epochs, text", [([1], "1 epoch,"), ([2], "2 epochs,"), ([1, 3], "1/3 epochs,")])
def test_the_heading_pluralises_epochs(epochs: list[int], text: str) -> None:
    assert text in setting("thirds", [], epochs).describe()


def test_without_a_perfect_filter_the_gain_figure_says_the_cap_is_not_measured_and_unrunnable_claims_are_a_line(
        tmp_path: Path) -> None:
    """A plugin's grid (issue 58): its baseline and its own method, no perfect filter, none of the papers' methods."""
    from cirbench.report import build_report
    from test_report import write_results

    write_results(tmp_path / "results", methods=("sprc", "robust"))
    page = " ".join((build_report(tmp_path / "results", tmp_path / "report").parent / "report.md").read_text().split())
    assert "no perfect filter in these results: the cap is not measured" not in page  # the title is drawn, not written
    assert ("No perfect filter (a method with the role perfect_filter) is in these results, so the cap, what a method "
            "that only removes noise can win here, is not measured") in page
    assert "The dashed black line" not in page
    claims = page.split("Do the papers' claims hold here?", 2)[-1].split("<a id=", 1)[0]
    shipped = len(read_claims(SHIPPED))
    assert claims.strip().startswith(f"None of the {shipped} claims could be checked here: the methods they compare (cala, conesep, ")
    assert "not run" not in claims and "Verdict rule" not in claims
