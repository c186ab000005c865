"""Registry errors and method discovery: built-ins, plugin files, entry points."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import cirbench.plugins as plugins
from cirbench.registry import Registry, UnknownNameError

PLUGIN = textwrap.dedent(
    '''
    from dataclasses import dataclass
    from cirbench.method import Method, MethodConfig, StepOutput

    @dataclass
    class MyConfig(MethodConfig):
        strength: float = 1.0

    class {cls}(Method):
        """A user's method."""
        name = "{name}"
        version = "3"
        Config = MyConfig

        def training_step(self, batch, epoch, step):
            return StepOutput(self.backbone.composed_feature(batch.reference, batch.text).sum() * 0)
    '''
)


def write_plugin(tmp_path: Path, name: str, cls: str = "Mine", filename: str | None = None) -> Path:
    path = tmp_path / (filename or f"{name}_plugin.py")
    path.write_text(PLUGIN.format(name=name, cls=cls))
    return path


def test_registry_unknown_name_suggests() -> None:
    reg: Registry[int] = Registry("widget")
    reg.add("conesep", 1)
    reg.add("sprc", 2)
    with pytest.raises(UnknownNameError) as err:
        reg.get("conesepp")
    assert "Did you mean 'conesep'" in str(err.value) and "sprc" in str(err.value)
    with pytest.raises(ValueError, match="already registered"):
        reg.add("sprc", 3)


def test_builtins_are_discovered_from_the_methods_folder() -> None:
    d = plugins.discover()
    assert {"sprc", "oracle"} <= set(d.methods.names())
    assert d.methods.entry("sprc").source == "built-in sprc.py"
    assert plugins.builtin_methods_dir().name == "methods"
    assert d.methods.get("oracle").oracle and not d.methods.get("sprc").oracle


def test_plugin_file_is_discovered(tmp_path: Path) -> None:
    path = write_plugin(tmp_path, "mymethod")
    d = plugins.discover([path])
    assert d.methods.get("mymethod").version == "3"
    assert str(path.resolve()) in d.methods.entry("mymethod").source


def test_plugins_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_plugin(tmp_path, "envmethod")
    monkeypatch.setenv(plugins.PLUGINS_ENV, str(path))
    assert "envmethod" in plugins.discover().methods


def test_builtin_wins_a_name_collision_of_a_discovered_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin of ``CIRBENCH_PLUGINS`` (or an entry point) named like a built-in is ignored, with a warning."""
    monkeypatch.setenv(plugins.PLUGINS_ENV, str(write_plugin(tmp_path, "sprc", filename="fake_sprc.py")))
    d = plugins.discover()
    assert d.methods.entry("sprc").source == "built-in sprc.py" and d.errors == []
    assert any("'sprc'" in p and "ignored" in p for p in d.problems)


def test_a_named_file_whose_name_is_taken_is_an_error_naming_both(tmp_path: Path) -> None:
    """The user named the file: its method must be the one that runs, so a taken name is refused."""
    path = write_plugin(tmp_path, "sprc", filename="fake_sprc.py")
    d = plugins.discover([path])
    assert d.methods.entry("sprc").source == "built-in sprc.py"
    assert d.errors == [f"--plugin {path.resolve()}: method 'sprc' has the name of method 'sprc' of built-in sprc.py: one "
                        "name, two plugins; give the plugin of your file another `name` (nothing was run)"]


def test_a_named_file_clashing_with_another_plugin_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    first, second = write_plugin(tmp_path / "a", "twin"), write_plugin(tmp_path / "b", "twin")
    assert any(f"of file {first.resolve()}" in e for e in plugins.discover([first, second]).errors)
    assert plugins.discover([second, second]).errors == []  # one file named twice is one plugin
    monkeypatch.setenv(plugins.PLUGINS_ENV, str(first))  # the environment's is found first: the named file clashes
    assert any(f"--plugin {second.resolve()}: method 'twin'" in e for e in plugins.discover([second]).errors)
    monkeypatch.delenv(plugins.PLUGINS_ENV)
    module = plugins.load_plugin_file(first)
    monkeypatch.setattr(plugins, "entry_points", lambda group: [FakeEntryPoint("twin", module.Mine)]
                        if group == plugins.METHOD_ENTRY_POINT_GROUP else [])
    errors = plugins.discover([second]).errors  # the named file first, then a package's entry point of its name
    assert errors and "package cirbench-extra 0.4" in errors[0] and f"--plugin {second.resolve()}" in errors[0]


def test_broken_plugin_is_reported_and_fails_only_when_selected(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import this_module_does_not_exist\n")
    d = plugins.discover([broken])
    assert "sprc" in d.methods
    assert any("broken.py" in p and "this_module_does_not_exist" in p for p in d.problems)
    with pytest.raises(UnknownNameError, match="failed to load"):
        d.methods.get("broken")


class FakeDist:
    name, version = "cirbench-extra", "0.4"


class FakeEntryPoint:
    def __init__(self, name: str, target: object) -> None:
        self.name, self.value, self.dist, self._target = name, f"pkg:{name}", FakeDist(), target

    def load(self) -> object:
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


def test_entry_point_methods(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = plugins.load_plugin_file(write_plugin(tmp_path, "epmethod", cls="EpMethod"))
    eps = [FakeEntryPoint("epmethod", module.EpMethod), FakeEntryPoint("bad", ImportError("no such package"))]
    monkeypatch.setattr(plugins, "entry_points", lambda group: eps if group == plugins.METHOD_ENTRY_POINT_GROUP else [])
    d = plugins.discover()
    assert d.methods.get("epmethod") is module.EpMethod
    assert d.methods.entry("epmethod").source == "package cirbench-extra 0.4"
    assert any("'bad'" in p for p in d.problems)
