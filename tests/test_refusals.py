"""Values and files refused before any work, each with the option, the value and what is
valid: out-of-range hyperparameters, negative seeds, empty or repeated lists, an output
folder that cannot be written, a plugin file that is missing or does not import, a plugin
class without ``training_step``."""

from __future__ import annotations

import errno
import tempfile
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cirbench import plugins
from cirbench.cli import app
from cirbench.settings.config import ConfigError, build_config
from cirbench.engine.cell.life import run_reference
from cirbench.engine.running.grid import Grid, GridError, GridSpec
from cirbench.method import MethodConfig
from cirbench.registry import UnknownNameError

runner = CliRunner()


def _refused(tmp_path: Path, *args: str, output: Path | None = None) -> str:
    out = output or tmp_path / "r"
    result = runner.invoke(app, ["run", "--methods", "sprc", "--dataset", "shapes-mini", "--output", str(out), *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not out.exists()  # nothing ran, nothing was written
    return " ".join(result.output.split())


@pytest.mark.parametrize(
    "entry, message",
    [
        ("sprc.lr=-1", "lr=-1.0 is out of range: must be > 0 and finite"),
        ("sprc.lr=nan", "lr=nan is out of range: must be > 0 and finite"),
        ("sprc.lr=inf", "lr=inf is out of range"),
        ("sprc.weight_decay=-0.1", "weight_decay=-0.1 is out of range: must be >= 0"),
        ("sprc.beta1=1", "beta1=1.0 is out of range: must be in [0, 1)"),
        ("sprc.beta2=-0.5", "beta2=-0.5 is out of range: must be in [0, 1)"),
        ("sprc.eps=0", "eps=0.0 is out of range: must be > 0"),
        ("sprc.warmup=1.5", "warmup=1.5 is out of range: must be in [0, 1]"),
        ("sprc.grad_clip=-1", "grad_clip=-1.0 is out of range: must be >= 0"),
    ],
)
def test_out_of_range_hyperparameters(tmp_path: Path, entry: str, message: str) -> None:
    text = _refused(tmp_path, "--set", entry)
    assert message in text and f"(--set {entry})" in text


@pytest.mark.parametrize("method", ["conesep", "tme", "hug"])
def test_methods_with_their_own_checks_still_check_the_shared_fields(tmp_path: Path, method: str) -> None:
    result = runner.invoke(app, ["run", "--methods", method, "--set", f"{method}.lr=-1", "--output", str(tmp_path / "r")])
    assert result.exit_code == 2 and "lr=-1.0 is out of range" in " ".join(result.output.split())


def test_the_shared_config_checks_its_fields_directly() -> None:
    MethodConfig(lr=1e-4, weight_decay=0.0, beta1=0.0, warmup=1.0, grad_clip=0.0)  # the edges are valid
    with pytest.raises(ValueError, match="lr=0.0 is out of range"):
        MethodConfig(lr=0.0)
    with pytest.raises(ConfigError, match=r"^sprcish: eps=-1.0 is out of range.*\(--set sprcish.eps=-1\)$"):
        build_config(MethodConfig, {"eps": "-1"}, "sprcish")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds", "-1"], "--seeds -1: seed -1 is negative; a seed must be >= 0"),
        (["--seeds", "0,-2"], "seed -2 is negative"),
        (["--noise", ""], "--noise is empty"),
        (["--seeds", ""], "--seeds is empty"),
        (["--methods", ""], "no method selected"),
        (["--noise", "0.5,0.5"], "--noise 0.5,0.5 lists 0.5 more than once"),
        (["--noise", "0,0.5,0.50"], "lists 0.5 more than once"),
        (["--seeds", "0,0"], "--seeds 0,0 lists 0 more than once"),
        (["--methods", "sprc,sprc"], "listed twice"),
    ],
)
def test_bad_lists_and_seeds(tmp_path: Path, args: list[str], message: str) -> None:
    assert message in _refused(tmp_path, *args)


def test_an_output_folder_below_a_file_is_refused(tmp_path: Path) -> None:
    """Read-only simulated by a path under a regular file (root ignores chmod)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    text = _refused(tmp_path, output=blocker / "results")
    assert "cannot be written" in text and "Nothing was run" in text


def test_a_read_only_output_folder_is_refused_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read-only simulated by a probe that fails with EROFS (monkeypatched tempfile.mkstemp)."""
    out = tmp_path / "r"
    out.mkdir()

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(out))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    result = runner.invoke(app, ["run", "--methods", "sprc", "--dataset", "shapes-mini", "--output", str(out)])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "Read-only file system" in text and "cannot be written" in text
    assert list(out.iterdir()) == []  # not even the reference rows ran


def test_a_failed_write_is_a_failed_cell_not_a_traceback(tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grid = Grid(GridSpec(methods=["sprc"], noise_rates=[0.0], dataset="shapes-mini", epochs=1, batch_size=64,
                         output=tmp_path / "r", cache_dir=cache_dir))

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(grid.store, "write_run", read_only)
    (reference, *_) = grid.reference_cells()
    outcome = run_reference(grid.resources, reference, announce=lambda m: None)
    assert outcome.status == "failed" and "cannot write the results" in outcome.error and "Read-only" in outcome.error
    assert not (tmp_path / "r" / "locks" / f"{reference.key.run_id}.lock").exists()  # the lock is released


def _plugin(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_missing_plugin_file_is_refused(tmp_path: Path) -> None:
    text = _refused(tmp_path, "--plugin", str(tmp_path / "nope.py"))
    assert f"--plugin {tmp_path / 'nope.py'}: no such file" in text


def test_a_plugin_with_a_syntax_error_is_refused_with_file_and_line(tmp_path: Path) -> None:
    path = _plugin(tmp_path, "broken", "from cirbench.method import Method\ndef broken(:\n    pass\n")
    text = _refused(tmp_path, "--plugin", str(path), "--methods", "broken")
    assert f"{path}, line 2: SyntaxError" in text and "unknown method" not in text


def test_a_plugin_that_fails_to_import_is_refused_with_file_and_line(tmp_path: Path) -> None:
    path = _plugin(tmp_path, "needs", "import os\nimport this_module_does_not_exist\n")
    text = _refused(tmp_path, "--plugin", str(path))
    assert f"{path.resolve()}, line 2: ModuleNotFoundError" in text and "this_module_does_not_exist" in text


NO_STEP = '''
    from cirbench.method import Method

    class Lazy(Method):
        """Forgot its training_step."""
        name = "lazy"
'''


def test_a_plugin_class_without_training_step_is_refused(tmp_path: Path) -> None:
    path = _plugin(tmp_path, "lazy", NO_STEP)
    text = _refused(tmp_path, "--plugin", str(path), "--methods", "lazy")
    assert "class Lazy (method 'lazy') does not implement training_step" in text
    discovery = plugins.discover([path])
    with pytest.raises(UnknownNameError, match="does not implement training_step"):
        discovery.methods.get("lazy")
    with pytest.raises(GridError, match="does not implement training_step"):
        Grid(GridSpec(methods=["sprc"], noise_rates=[0.0], plugin_files=[path], output=tmp_path / "g"))


def test_a_broken_plugin_named_only_in_the_environment_stays_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _plugin(tmp_path, "envbroken", "import this_module_does_not_exist\n")
    monkeypatch.setenv(plugins.PLUGINS_ENV, str(path))
    discovery = plugins.discover()
    assert discovery.errors == [] and any("envbroken.py" in p for p in discovery.problems)
