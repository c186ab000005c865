"""The report speaks of the protocol it reads: the detection figure's wording is each noise
type as its protocol describes it (``NoiseProtocol.noise_types``), and a setting's heading
pluralises its epochs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cirbench.plugins import discover
from cirbench.report.load import Setting

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
