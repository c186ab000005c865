"""One writer per cell: a cell held by a live process is skipped, a stale lock is taken
over, and two identical ``cirbench run`` processes on one folder train each cell once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from cirbench.engine.cell.life import run_cell
import cirbench.engine.cell.life as cell_module
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.results.locks import STALE_AFTER_SECONDS, CellLock, live_holder, live_locks, lock_path


def _spec(tmp_path: Path, cache_dir: Path, **kw) -> GridSpec:
    base = dict(methods=["sprc"], noise_rates=[0.5], dataset="shapes-mini", epochs=1, batch_size=64,
                output=tmp_path / "results", cache_dir=cache_dir)
    return GridSpec(**{**base, **kw})


def _hold(path: Path, pid: int, host: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(), "since": "2026-01-01T00:00:00+00:00",
                                "token": "someone-else"}))


@pytest.fixture
def sleeper():
    """A live process of this host that is not this one."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield process
    process.kill()
    process.wait()


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_one_holder_at_a_time_and_release(tmp_path: Path) -> None:
    first, second = CellLock(tmp_path, "cell"), CellLock(tmp_path, "cell")
    assert first.acquire() is None
    holder = second.acquire()
    assert holder is not None and holder.pid == os.getpid() and holder.host == socket.gethostname()
    assert set(live_locks(tmp_path)) == {"cell"}
    second.release()  # not its lock: nothing happens
    assert lock_path(tmp_path, "cell").exists()
    first.release()
    assert not lock_path(tmp_path, "cell").exists() and live_holder(tmp_path, "cell") is None
    assert second.acquire() is None
    second.release()


def test_a_lock_of_another_host_is_stale_only_without_heartbeat(tmp_path: Path) -> None:
    path = lock_path(tmp_path, "cell")
    _hold(path, 1, host="another-node")
    assert live_holder(tmp_path, "cell").host == "another-node"
    old = time.time() - STALE_AFTER_SECONDS - 5
    os.utime(path, (old, old))
    assert live_holder(tmp_path, "cell") is None
    lock = CellLock(tmp_path, "cell")
    assert lock.acquire() is None  # taken over
    assert json.loads(path.read_text())["pid"] == os.getpid()
    lock.release()


def test_a_cell_held_by_a_live_process_is_skipped_and_named(
    tmp_path: Path, cache_dir: Path, sleeper: subprocess.Popen, monkeypatch: pytest.MonkeyPatch
) -> None:
    grid = Grid(_spec(tmp_path, cache_dir))
    (cell,) = grid.cells
    _hold(lock_path(grid.store.root, cell.key.run_id), sleeper.pid)
    trained = []
    monkeypatch.setattr(cell_module, "train_cell", lambda *a, **k: trained.append(1))
    outcome = run_cell(grid.resources, cell, lambda info: None, announce=lambda m: None)
    assert outcome.status == "locked" and f"pid {sleeper.pid} on {socket.gethostname()}" in outcome.error
    assert trained == [] and grid.store.status(cell.key.run_id) is None
    assert lock_path(grid.store.root, cell.key.run_id).exists()  # still the other process's


def test_a_stale_lock_is_taken_over_and_the_cell_runs(tmp_path: Path, cache_dir: Path) -> None:
    grid = Grid(_spec(tmp_path, cache_dir))
    (cell,) = grid.cells
    path = lock_path(grid.store.root, cell.key.run_id)
    _hold(path, _dead_pid())  # a run killed with SIGKILL leaves its lock behind
    outcome = run_cell(grid.resources, cell, lambda info: None, announce=lambda m: None)
    assert outcome.status == "completed" and grid.store.is_complete(cell.key.run_id)
    assert not path.exists()  # released after the cell
    assert run_cell(grid.resources, cell, lambda info: None, announce=lambda m: None).status == "skipped"


COUNTED = '''
    import os

    from cirbench_methods.sprc import SPRC


    class Counted(SPRC):
        """sprc that notes every training it starts."""

        name = "counted"

        def on_epoch_start(self, epoch):
            if epoch == 0:
                with open(os.environ["CIRBENCH_TEST_TRAININGS"], "a") as log:
                    log.write(f"{self.context.seed} {os.getpid()}\\n")
            return super().on_epoch_start(epoch)
'''


def test_two_identical_runs_on_one_folder_train_each_cell_once(tmp_path: Path, cache_dir: Path) -> None:
    from cirbench.backbones.registry import BACKBONES

    warm = Grid(_spec(tmp_path, cache_dir, output=tmp_path / "warm"))  # data and tower tokens cached once, read by both
    warm.resources.tokens(BACKBONES.get("tiny")(0, cache_dir, None), announce=lambda m: None)
    plugin = tmp_path / "counted.py"
    plugin.write_text(textwrap.dedent(COUNTED))
    log = tmp_path / "trainings.txt"
    out = tmp_path / "results"
    command = [sys.executable, "-m", "cirbench.cli", "run", "--plugin", str(plugin), "--methods", "counted",
               "--noise", "0.5", "--seeds", "0,1,2", "--dataset", "shapes-mini", "--epochs", "1", "--batch-size", "64",
               "--jobs", "1", "--output", str(out), "--cache-dir", str(cache_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CIRBENCH_TEST_TRAININGS": str(log), "COLUMNS": "200"}
    processes = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
        assert "Traceback" not in output
    seeds = sorted(int(line.split()[0]) for line in log.read_text().splitlines())
    assert seeds == [0, 1, 2], outputs  # each cell trained once, by one of the two
    runs = pd.read_parquet(out / "runs")
    assert len(runs) == 3 + 3 * 3 and (runs.status == "completed").all()
    assert not list((out / "locks").glob("*.lock"))
