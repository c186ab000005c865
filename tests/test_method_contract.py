"""A method author is never misled (issue 58): every broken plugin of ``tests/broken_plugins/``
(one mistake each) is refused by ``cirbench check-plugin`` and by ``cirbench run``, with one
message naming the method, the field, what the contract wants and what came, at the step
where it came; a method whose name is taken is refused by both before any work, naming both
files. Each rule of :mod:`cirbench.engine.cell.step_rules` has a plugin here that would run to
exit 0 with wrong numbers, or fail with another library's words, without its check."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cirbench.cli import app

BROKEN = Path(__file__).resolve().parent / "broken_plugins"
NAMED_SPRC = BROKEN / "names" / "named_sprc.py"
SEPARATOR = BROKEN / "names" / "replay_tme.py"
SEPARATOR_RULE = ("class ReplayTme (method 'replay:tme'): a method name may not hold ':', the harness's separator of a "
                  "label's parts")
READ_ONLY = "must be left as the harness gave it (the batch is read-only)"
MASK, SCORE = "must be None or a boolean mask of the batch's length", "must be None or a finite float vector of the batch's length"
CASES: dict[str, tuple[str, ...]] = {
    # method: the words its refusal holds after "method '<name>': ", in order
    "argsort_mask": (f"StepOutput.selected_clean {MASK}", "got a torch.int64 tensor", "at epoch 0, step 0",
                     "nothing is cast"),
    "short_mask": (f"StepOutput.selected_clean {MASK}", "got a torch.bool tensor", "at epoch 0, step 0"),
    "late_short_mask": (f"StepOutput.selected_clean {MASK}", "got a torch.bool tensor", "at epoch 0, step 1"),
    "detached_loss": ("StepOutput.loss must be a finite scalar tensor that requires grad",
                      "got a torch.float32 tensor of shape () that does not require grad", "at epoch 0, step 0"),
    "vector_loss": ("StepOutput.loss must be a finite scalar tensor that requires grad", "got a torch.float32 tensor of shape (",
                    "at epoch 0, step 0", "e.g. .mean()"),
    "nan_score": (f"StepOutput.noise_score {SCORE}", "got a torch.float32 tensor", "at epoch 0, step 0", "1 NaN value"),
    "rank_score": (f"StepOutput.noise_score {SCORE}", "got a torch.int64 tensor", "at epoch 0, step 0"),
    "short_score": (f"StepOutput.noise_score {SCORE}", "got a torch.float32 tensor", "at epoch 0, step 0"),
    "nan_extra_score": (f"StepOutput.extra_scores['uncertainty'] {SCORE}", "at epoch 0, step 0", "1 NaN value"),
    "tensor_result": ("training_step's result must be a StepOutput", "got a torch.float32 tensor of shape ()",
                      "at epoch 0, step 0"),
    "short_partition": ("Partition.selected_clean must be a boolean mask of the training split's length",
                        "got a numpy bool array", "at epoch 0 (on_epoch_start"),
    # issue 66: what a plugin could break silently, or from a later step
    "nan_late_loss": ("StepOutput.loss must be a finite scalar tensor that requires grad", "of value nan",
                      "at epoch 0, step 3"),
    "later_short_mask": (f"StepOutput.selected_clean {MASK}", "got a torch.bool tensor", "at epoch 0, step 2"),
    "empty_kept_set": ("the epoch's kept set", "must hold at least one row", "got 0 of", "kept at the end of epoch 0"),
    "batch_in_place": (f"Batch.reference {READ_ONLY}", "changed in place", "at epoch 0, step 0", "batch.reference.clone()"),
    "batch_after_loss": (f"Batch.target {READ_ONLY}", "changed in place", "at epoch 0, step 0", "batch.target.clone()"),
    "batch_data_edit": (f"Batch.reference {READ_ONLY}", "changed in place", "at epoch 0, step 0"),
    "meta_mask": ("StepOutput.selected_clean must be on the batch's device (cpu)", "on meta", "at epoch 0, step 0"),
}
SHORT = re.compile(r"\((\d+),\); got a [^;]*? of shape \((\d+),\)")
"""A length breach's wanted and given lengths."""


def flat(text: str) -> str:
    """``text`` with its whitespace runs as one space (rich wraps at 80 columns here)."""
    return " ".join(text.split())


def squashed(text: str) -> str:
    """``text`` without whitespace (rich may fold a long path anywhere)."""
    return "".join(text.split())


def assert_refusal(method: str, message: str) -> None:
    """``message`` is the refusal of ``method``'s plugin: its name, then its case's words in
    order (a length breach one short)."""
    assert message.startswith(f"method {method!r}: "), message
    at = 0
    for words in CASES[method]:
        found = message.find(words, at)
        assert found >= 0, f"{words!r} not after position {at} of: {message}"
        at = found + len(words)
    if method.startswith(("short", "late_short", "later_short")):
        wanted, given = map(int, SHORT.search(message).groups())
        assert given == wanted - 1, message


@pytest.fixture(scope="module")
def checked(cache_dir: Path) -> str:
    """``cirbench check-plugin tests/broken_plugins``'s output, whitespace runs as one space."""
    result = CliRunner().invoke(app, ["check-plugin", str(BROKEN), "--cache-dir", str(cache_dir)])
    assert result.exit_code == 1, result.output
    return flat(result.output)


@pytest.fixture(scope="module")
def ran(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pd.DataFrame, Path, str]:
    """``cirbench run`` of every broken plugin at 50% noise on shapes-mini: its output
    (whitespace runs as one space), its runs table, its results folder and its output as printed."""
    out = tmp_path_factory.mktemp("broken") / "results"
    result = CliRunner().invoke(app, ["run", "--plugin", str(BROKEN), "--methods", ",".join(CASES), "--noise", "0.5",
                                      "--dataset", "shapes-mini", "--epochs", "1", "--batch-size", "64", "--output", str(out),
                                      "--cache-dir", str(cache_dir)], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    return flat(result.output), pd.read_parquet(out / "runs").set_index("method"), out, result.output


def test_every_rule_has_a_broken_plugin_and_each_plugin_a_case() -> None:
    assert sorted(p.stem for p in BROKEN.glob("*.py")) == sorted(CASES)


@pytest.mark.parametrize("method", sorted(CASES))
def test_check_plugin_refuses_it_naming_the_method_and_the_field(method: str, checked: str) -> None:
    line = checked.split(f"method {method}: ", 1)[1]
    assert_refusal(method, line.split(" checked: ", 1)[0])


@pytest.mark.parametrize("method", sorted(CASES))
def test_a_run_stops_its_cell_with_the_same_message(method: str, ran: tuple[str, pd.DataFrame, Path, str]) -> None:
    output, runs, _, _ = ran
    row = runs.loc[method]
    assert row.status == "failed" and row.steps == 0
    last = row.error.strip().splitlines()[-1]
    assert last.startswith("cirbench.engine.cell.step_rules.MethodContractError: "), row.error
    message = last.split(": ", 1)[1]
    assert_refusal(method, message)
    assert f"failed: {method} noise=0.5 seed=0: MethodContractError: {message}" in output  # whole, not cut at 80 columns
    assert "cirbench results errors --results" in output


def test_the_summary_table_is_whole_in_a_log(ran: tuple[str, pd.DataFrame, Path, str]) -> None:
    """Not a terminal (here, a log): rich assumed 80 columns and cut the table's last columns."""
    header = next(line for line in ran[3].splitlines() if "┃ method" in line)
    assert len(header) > 80 and header.split()[-2:] == ["AUROC", "┃"]


def test_the_whole_error_is_printed_by_results_errors(ran: tuple[str, pd.DataFrame, Path, str]) -> None:
    _, runs, folder, _ = ran
    result = CliRunner().invoke(app, ["results", "errors", "--results", str(folder), runs.loc["argsort_mask", "run_id"]])
    assert result.exit_code == 0 and "Traceback" in result.output and "MethodContractError" in result.output
    every = CliRunner().invoke(app, ["results", "errors", "--results", str(folder)])
    assert all(runs.loc[m, "run_id"] in flat(every.output) for m in CASES)


def test_a_taken_name_is_refused_by_check_plugin_naming_both(cache_dir: Path) -> None:
    result = CliRunner().invoke(app, ["check-plugin", str(NAMED_SPRC), "--cache-dir", str(cache_dir)])
    text = squashed(result.output)
    assert result.exit_code == 1 and "nopluginfound" not in text
    assert squashed(f"--plugin {NAMED_SPRC}: method 'sprc' has the name of method 'sprc' of built-in sprc.py") in text


@pytest.mark.parametrize("command", [["run", "--methods", "sprc", "--noise", "0.5"], ["sweep", "--methods", "sprc"]])
def test_a_taken_name_is_refused_by_a_grid_before_any_work(command: list[str], tmp_path: Path, cache_dir: Path) -> None:
    out = tmp_path / "results"
    result = CliRunner().invoke(app, [*command, "--plugin", str(NAMED_SPRC), "--dataset", "shapes-mini", "--output", str(out),
                                      "--cache-dir", str(cache_dir)])
    assert result.exit_code == 2, result.output
    assert squashed(f"--plugin {NAMED_SPRC}: method 'sprc' has the name of method 'sprc' of built-in sprc.py") in squashed(
        result.output)
    assert not out.exists()


def test_a_name_with_the_separator_is_refused_by_check_plugin_naming_the_rule(cache_dir: Path) -> None:
    result = CliRunner().invoke(app, ["check-plugin", str(SEPARATOR), "--cache-dir", str(cache_dir)])
    assert result.exit_code == 1 and squashed(SEPARATOR_RULE) in squashed(result.output), result.output
    listed = CliRunner().invoke(app, ["list", "methods", "--plugin", str(SEPARATOR)])
    assert "│ replay:tme" not in listed.output and squashed(SEPARATOR_RULE) in squashed(listed.output)


def test_a_name_with_the_separator_is_refused_by_a_grid_before_any_work(tmp_path: Path, cache_dir: Path) -> None:
    out = tmp_path / "results"
    result = CliRunner().invoke(app, ["run", "--plugin", str(SEPARATOR), "--methods", "sprc", "--noise", "0.5", "--dataset",
                                      "shapes-mini", "--output", str(out), "--cache-dir", str(cache_dir)])
    assert result.exit_code == 2 and squashed(SEPARATOR_RULE) in squashed(result.output), result.output
    assert not out.exists()
