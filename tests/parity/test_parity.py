"""Every hosted port against its authors' release, without the release: the release's values
on the parity inputs are recorded in ``tests/parity/<method>.json`` (by
``python benchmarks/parity/run.py <method> --release DIR --record``); each test recomputes
the port's terms under ``readings=release`` and compares them at the one tolerance."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from parity import harness  # noqa: E402

RECORDED = sorted(path.stem for path in harness.RECORDS.glob("*.json"))


def adapter(method: str):
    return importlib.import_module(f"parity.{method}")


@pytest.mark.parametrize("method", RECORDED)
def test_the_port_equals_its_release_on_every_recorded_term(method: str) -> None:
    record = harness.read_record(method)
    mod = adapter(method)
    inputs = mod.make_inputs(record["seed"])
    assert {k: list(v.shape) for k, v in inputs.items()} == record["input_shapes"], "the inputs changed: re-record"
    port = mod.port_terms(inputs, "release")
    assert record["terms"], f"{method}: the record compares no term"
    for term, value in record["terms"].items():
        assert term in port, f"{method}: the port no longer computes {term!r}"
        torch.testing.assert_close(harness.as_tensor(port[term]), torch.tensor(value, dtype=torch.float64),
                                   rtol=record["tolerance"]["rtol"], atol=record["tolerance"]["atol"],
                                   msg=lambda m: f"{method}.{term} differs from the release: {m}")


@pytest.mark.parametrize("method", RECORDED)
def test_a_record_names_its_release_commit_and_lines(method: str) -> None:
    release = harness.read_record(method)["release"]
    assert len(release["commit"]) == 40 and release["files"] and all(release["files"].values())


def test_the_tolerance_catches_a_difference_above_it() -> None:
    assert harness.within_tolerance(torch.tensor([1.0]), torch.tensor([1.0 + 5e-6]))
    assert not harness.within_tolerance(torch.tensor([1.0]), torch.tensor([1.0 + 5e-5]))
    assert not harness.within_tolerance(torch.zeros(2), torch.zeros(3))
