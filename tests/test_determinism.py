"""Same run id, same numbers (issue 77): a cell's metrics, kept sets and noise scores do not
depend on ``--jobs``, on the thread count of the process it runs in, nor on the instruction set
the environment asks the kernels for; every ``runs`` row records the CPU and the kernels; the
report's provenance names the machines and warns when runs from different kernels are pooled.

A grid of a ``habit`` cell (whose DBSCAN, from its second epoch on, turns a last-bit
difference into another mask) and a ``conesep`` cell (whose boundary samples go through the
tower's convolutions, oneDNN's kernels) on ``shapes-mini``, two epochs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from cirbench import api
from cirbench.engine.running import worker
from cirbench.engine.running.runner import Event
from cirbench.report.analysis.loading.machines import UNRECORDED, machine_lines
from cirbench.settings import kernels

GRID = dict(dataset="shapes-mini", epochs=2, batch_size=150, seeds=[0])
METHODS, RATE = ["habit", "conesep"], 0.8
TABLES = {"metrics": ["epoch", "split", "group", "metric"], "scores": ["sample_id", "epoch", "score_name"],
          "purity": ["epoch", "score_name", "noise_type"], "losses": ["epoch", "step", "name"]}
"""The tables compared, each by its rows' keys: the metrics, the noise scores and kept sets
(``scores.selected_clean``) and the kept sets' purity, and every logged loss."""
HIGHER = {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX", "DNNL_MAX_CPU_ISA": "AVX512_CORE_AMX",
          "MKL_CBWR": "AVX512", "OPENBLAS_CORETYPE": "SkylakeX", "NPY_DISABLE_CPU_FEATURES": ""}
"""A higher instruction set asked for from outside, for every library the pins hold."""


def _run(output: Path, cache_dir: Path, jobs: int, methods: list[str] = METHODS) -> list[Event]:
    events: list[Event] = []
    outcomes = api.run(api.grid(methods, [RATE], output=output, cache_dir=cache_dir, **GRID), jobs, events.append)
    assert {o.status for o in outcomes} == {"completed"}, [o.error for o in outcomes]
    return events


def _tables(root: Path) -> dict[str, pd.DataFrame]:
    """Every compared table of every trained cell under ``root``, in one order."""
    runs = pd.read_parquet(root / "runs")
    trained = sorted(runs[~runs.is_reference].run_id)
    found = {}
    for table, keys in TABLES.items():
        frame = pd.concat([pd.read_parquet(root / table / f"{run_id}.parquet") for run_id in trained])
        found[table] = frame.sort_values(["run_id", *keys]).reset_index(drop=True)
    return found


def _same_bits(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    for table in TABLES:
        assert len(a[table]) > 0, table
        pd.testing.assert_frame_equal(a[table], b[table], check_exact=True, check_dtype=False, obj=table)


@pytest.fixture(scope="module")
def one_job(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    """The grid run here, one cell after another, in a process asking for two threads."""
    output = tmp_path_factory.mktemp("one-job")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _run(output, cache_dir, jobs=1)
    finally:
        torch.set_num_threads(threads)
    return output


def test_two_jobs_give_the_bits_of_one(one_job: Path, cache_dir: Path, tmp_path: Path) -> None:
    events = _run(tmp_path, cache_dir, jobs=2)
    assert sum(e.kind == "queued" for e in events) == 2  # the worker pool ran both cells
    _same_bits(_tables(one_job), _tables(tmp_path))


def test_a_higher_instruction_set_asked_for_changes_nothing(one_job: Path, cache_dir: Path, tmp_path: Path) -> None:
    """A process whose environment asks every library for AVX-512 gives the bits of one that
    asks nothing (its tower's convolutions run in the cell: ``conesep``'s boundary samples)."""
    command = [sys.executable, "-m", "cirbench.cli", "run", "--methods", "conesep", "--noise", str(RATE), "--dataset",
               GRID["dataset"], "--epochs", str(GRID["epochs"]), "--batch-size", str(GRID["batch_size"]), "--seeds", "0",
               "--jobs", "1", "--output", str(tmp_path / "results"), "--cache-dir", str(cache_dir)]
    done = subprocess.run(command, env={**os.environ, **HIGHER}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    here = {t: f[f.method == "conesep"].reset_index(drop=True) for t, f in _tables(one_job).items()}
    _same_bits(here, _tables(tmp_path / "results"))
    runs = pd.read_parquet(tmp_path / "results" / "runs")
    assert {json.loads(k)["aten"] for k in runs.kernels} == {"AVX2"} and runs.cpu_isa.eq("AVX2").all()


def test_every_runs_row_records_the_machine_and_the_kernels(one_job: Path) -> None:
    runs = pd.read_parquet(one_job / "runs")
    assert len(runs) == 2 + 3  # the two cells and the reference rows
    assert runs.cpu_model.str.len().gt(0).all() and runs.cpu_model.eq(kernels.cpu_model()).all()
    assert runs.cpu_isa.eq("AVX2").all() and runs.threads.eq(kernels.CELL_THREADS).all()
    for text in runs.kernels:
        used = json.loads(text)
        assert used["pinned"] is True and used["deterministic"] is True
        assert {k: used[k] for k in kernels.EXPECTED} == kernels.EXPECTED


def test_a_process_that_loaded_numpy_first_records_unpinned_kernels() -> None:
    """numpy's dispatch and OpenBLAS's kernels are fixed when numpy loads: imported before
    cirbench, they are not the pins', and the record says so; ``CIRBENCH_KERNEL_PINS=off``
    leaves the environment alone."""
    code = ("import numpy, os, json, cirbench; from cirbench.settings import kernels; "
            "print(json.dumps([kernels.kernels_used()['pinned'], os.environ.get('MKL_CBWR')]))")
    bare = {k: v for k, v in os.environ.items() if k not in {*kernels.PINS, *kernels.numpy_pin()}}  # as a user's shell
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, env=bare)
    off = subprocess.run([sys.executable, "-c", code.replace("import numpy, ", "import ")], capture_output=True, text=True,
                         check=True, timeout=120, env={**bare, kernels.SWITCH: "off", "MKL_CBWR": "AUTO"})
    assert json.loads(first.stdout) == [False, "COMPATIBLE"] and json.loads(off.stdout) == [False, "AUTO"]


def test_the_default_jobs_keep_the_cores_busy() -> None:
    assert worker.default_jobs("cpu") == worker.usable_cores() // kernels.CELL_THREADS
    assert worker.default_jobs("cuda") == 1


def _row(model: str, pinned: bool, aten: str = "AVX2") -> dict:
    used = {**kernels.EXPECTED, "aten": aten, "pinned": pinned, "deterministic": True}
    return {"cpu_model": model, "cpu_isa": aten, "threads": 1, "kernels": json.dumps(used)}


def test_the_provenance_names_the_machines_and_warns_when_kernels_differ() -> None:
    pinned = pd.DataFrame([_row("AMD EPYC", True), _row("Intel Xeon", True), _row("AMD EPYC", True)])
    (line,) = machine_lines(pinned)
    assert not line.startswith("WARNING") and "AMD EPYC, AVX2 pinned, 1 thread(s) (2 run(s))" in line
    assert "Intel Xeon, AVX2 pinned" in line
    mixed = pd.DataFrame([_row("AMD EPYC", True), _row("Intel Xeon", False, "AVX512"),
                          {"cpu_model": "", "cpu_isa": "", "threads": 0, "kernels": ""}])
    (line,) = machine_lines(mixed)
    assert line.startswith("WARNING: runs computed with 3 different sets of kernels")
    assert "Intel Xeon, AVX512 unpinned" in line and f"{UNRECORDED} (1 run(s))" in line
    old = pd.DataFrame([{"cpu_model": "", "cpu_isa": "", "threads": 0, "kernels": ""}] * 2)
    assert machine_lines(old) == [f"machines (CPU, the kernels' instruction set as torch reports it, pins, threads): "
                                  f"{UNRECORDED} (2 run(s))"]
