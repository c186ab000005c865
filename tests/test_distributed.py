"""Distributed data parallel on the CPU: ``torchrun`` with two gloo processes trains a cell
to the same losses, scores and metrics as one process with the same global batch, and
writes the results once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.engine.cell.distributed import average_gradients, gather_rows, init_distributed, shard_range

METHODS = "sprc,tme,conesep"


@pytest.mark.parametrize(("n", "world"), [(10, 2), (7, 3), (2, 2), (5, 1)])
def test_shards_cover_the_rows_in_order(n: int, world: int) -> None:
    bounds = [shard_range(n, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1


def _gather_worker(rank: int, world: int, port: int, out: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    init_distributed("cpu")
    torch.manual_seed(0)
    layer, unused = torch.nn.Linear(4, 3), torch.nn.Parameter(torch.ones(2))
    x = torch.randn(5, 4)
    start, stop = shard_range(5, rank, world)
    features = gather_rows(layer(x[start:stop]), 5)
    loss = (features @ features.T).logsumexp(dim=1).mean() + layer.bias.sum()  # an in-batch term and a direct one
    loss.backward()
    average_gradients([*layer.parameters(), unused])
    torch.save({"loss": loss.detach(), "weight": layer.weight.grad, "bias": layer.bias.grad, "unused": unused.grad}, out / f"{rank}.pt")


def test_gathered_rows_give_the_one_process_gradient(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    torch.multiprocessing.spawn(_gather_worker, args=(2, port, tmp_path), nprocs=2)
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4)
    features = layer(x)
    loss = (features @ features.T).logsumexp(dim=1).mean() + layer.bias.sum()
    loss.backward()
    for rank in (0, 1):
        got = torch.load(tmp_path / f"{rank}.pt")
        assert torch.allclose(got["loss"], loss.detach(), atol=1e-6)
        assert torch.allclose(got["weight"], layer.weight.grad, atol=1e-6)
        assert torch.allclose(got["bias"], layer.bias.grad, atol=1e-6)
        assert got["unused"] is None  # no gradient anywhere: the optimiser must skip it, as in one process


def _args(output: Path, data_dir: Path) -> list[str]:
    # One epoch of four steps at a global batch of 150 (75 rows per rank). TME partitions
    # from the first epoch on, so its epoch-level pass and GMM run sharded too. (Longer runs
    # drift apart where a near-chance model meets Adam's normalised first steps: float
    # summation order then decides the sign of near-zero updates.)
    return ["run", "--methods", METHODS, "--noise", "0.5", "--dataset", "shapes-mini", "--epochs", "1",
            "--batch-size", "150", "--output", str(output), "--cache-dir", str(data_dir),
            "--set", "tme.warmup_qformer=0", "--set", "tme.warmup_proj=0", "--set", "tme.warmup_last=0"]


def _tables(output: Path) -> dict[str, pd.DataFrame]:
    return {name: pd.read_parquet(output / name) for name in ("runs", "losses", "metrics", "purity", "scores")}


def _run_bounded(command: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``command`` in its own process group; past ``timeout`` kill the whole group (torchrun
    and its workers, which a plain ``subprocess.run`` timeout would leave running) and fail."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            pytest.fail(f"{' '.join(command[:6])} ... ran past {timeout} s:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def test_two_gloo_processes_match_one_process(tmp_path: Path, cache_dir: Path) -> None:
    data_dir = cache_dir
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = CliRunner().invoke(app, _args(tmp_path / "one", data_dir))
    finally:
        torch.set_num_threads(threads)
    assert single.exit_code == 0, single.output
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "cirbench.cli", *_args(tmp_path / "two", data_dir)]
    done = _run_bounded(command, env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    one, two = _tables(tmp_path / "one"), _tables(tmp_path / "two")
    trained = two["runs"][~two["runs"].is_reference]  # the reference rows come with every grid
    assert len(trained) == len(METHODS.split(",")) and (two["runs"].status == "completed").all()
    assert two["runs"].device.str.contains("x2 ranks").all() and not one["runs"].device.str.contains("ranks").any()
    assert sorted(p.name for p in (tmp_path / "two" / "runs").iterdir()) == sorted(p.name for p in (tmp_path / "one" / "runs").iterdir())

    keys = ["method", "epoch", "step", "name"]
    losses = one["losses"].merge(two["losses"], on=keys, suffixes=("_1", "_2"))
    assert len(losses) == len(one["losses"]) == len(two["losses"])
    losses = losses[~losses.name.str.endswith("_seconds")]  # timings, logged beside the losses
    np.testing.assert_allclose(losses.value_2, losses.value_1, rtol=1e-4, atol=1e-5)

    scores = one["scores"].merge(two["scores"], on=["method", "epoch", "sample_id"], suffixes=("_1", "_2"))
    assert set(scores.method) == {"sprc", "tme", "conesep"} and len(scores) == len(one["scores"])  # sprc: its per-sample loss
    np.testing.assert_allclose(scores.score_2, scores.score_1, rtol=1e-4, atol=1e-5)
    decided = scores.selected_clean_1.notna()
    n_train = int(trained.n_train.iloc[0])  # shapes-mini holds out 10% by default: 540 of 600 trained on
    assert n_train == 540 and (trained.n_holdout == 60).all()
    assert decided.sum() == 2 * n_train and (scores.selected_clean_1[decided] == scores.selected_clean_2[decided]).all()
    purity = one["purity"].merge(two["purity"], on=["method", "epoch", "noise_type"], suffixes=("_1", "_2"))
    np.testing.assert_allclose(purity.auroc_2, purity.auroc_1, atol=1e-4)

    keys = ["method", "epoch", "split", "group", "metric"]
    metrics = one["metrics"].merge(two["metrics"], on=keys, suffixes=("_1", "_2"))
    assert len(metrics) == len(one["metrics"]) > 0 and set(metrics.split) == {"val", "holdout"}
    for split, atol in (("val", 0.0051), ("holdout", 1.01 / 60)):  # a query or so moves (60 held out)
        own = metrics[metrics.split == split]
        np.testing.assert_allclose(own.value_2, own.value_1, atol=atol)


FLAKY = '''
import torch.distributed as dist
from cirbench_methods.sprc import SPRC


class Flaky(SPRC):
    """sprc whose rank 1 raises at its third step, while rank 0 is inside the step's collectives."""

    name = "flaky"
    version = "1"

    def training_step(self, batch, epoch, step):
        if dist.is_initialized() and dist.get_rank() == 1 and step >= 2:
            raise ValueError("flaky gives up on rank 1")
        return super().training_step(batch, epoch, step)
'''


def test_a_failure_on_one_rank_fails_the_cell_on_every_rank_and_the_grid_goes_on(tmp_path: Path, cache_dir: Path) -> None:
    plugin = tmp_path / "flaky.py"
    plugin.write_text(FLAKY)
    out, reports = tmp_path / "out", tmp_path / "reports"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "cirbench.cli",
               "run", "--plugin", str(plugin), "--methods", "flaky,sprc", "--noise", "0.5", "--dataset", "shapes-mini",
               "--epochs", "1", "--batch-size", "150", "--output", str(out), "--cache-dir", str(cache_dir),  # tiny's start pre-trained
               "--save", "--report", "--report-dir", str(reports)]
    # the bound is the point: before, gloo aborted both ranks on the collective mismatch, or they waited for the timeout
    done = _run_bounded(command, {**os.environ, "OMP_NUM_THREADS": "1"}, timeout=60)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # a cell failed: exit 1 on every rank
    runs = pd.read_parquet(out / "runs")
    assert runs[runs.is_reference].status.eq("completed").all()  # the reference rows before the grid
    runs = runs[~runs.is_reference].set_index("method")
    assert runs.status.to_dict() == {"flaky": "failed", "sprc": "completed"}
    error = runs.error["flaky"]
    assert error.startswith("failed on rank 1 of 2") and error.rstrip().endswith("ValueError: flaky gives up on rank 1")
    assert runs.device["sprc"].endswith("x2 ranks") and (out / "checkpoints").is_dir()
    assert [p.name for p in (out / "checkpoints").iterdir()] == [f"{runs.run_id['sprc']}.pt"]
    assert (reports / "index.html").is_file() and "flaky gives up on rank 1" in (reports / "report.md").read_text()
