"""What every parity adapter shares: the tolerance, seeded float64 inputs, stubs for a
release's heavy imports, CPU redirection, and the record files under ``tests/parity/``.

An adapter is a module ``benchmarks/parity/<method>.py`` with:

- ``RELEASE``: a :class:`Release` (repository, files and lines compared);
- ``SEED``: the input seed; ``make_inputs(seed) -> dict[str, Tensor]`` (float64, small shapes);
- ``release_terms(release_dir, inputs) -> dict[str, Tensor]``: the release's own code run on
  the inputs (imported from a checkout with :func:`load_release_module`; never copied);
- ``port_terms(inputs, readings) -> dict[str, Tensor]``: the port's functions on the same
  inputs, under ``readings`` ``"release"`` (must match) or ``"paper"`` (the defaults);
- ``NOT_COMPARABLE``: ``{term: why}`` for what the release computes but cannot be compared.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping
from unittest import mock

import torch

RTOL = 1e-5
ATOL = 1e-6
"""One tolerance for every term of every method (inputs are float64)."""

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "tests" / "parity"


@dataclass
class Release:
    """Where a port's reference code lives: the repository, and the files and line ranges
    that compute the compared terms (``{"path/in/repo.py": "120-190"}``)."""

    repo: str
    files: dict[str, str] = field(default_factory=dict)
    commit: str = ""


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``: every input of a parity run is drawn from it."""
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Standard normal float64 values of ``shape`` from ``g``."""
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def unit(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Random float64 vectors of ``shape``, L2-normalised along the last dimension."""
    return torch.nn.functional.normalize(randn(g, *shape), dim=-1)


# ----------------------------------------------------------------------------- running release code


class _Anything(types.ModuleType):
    """A stand-in module: every attribute is a permissive mock (a class to subclass, a
    decorator, a function), so a release's imports of LAVIS, transformers, weights loaders
    and the like succeed without them."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


@contextlib.contextmanager
def stubbed_modules(names: list[str], real: Mapping[str, types.ModuleType] | None = None) -> Iterator[None]:
    """Within the block, each dotted name of ``names`` (and its parents) imports as a
    permissive stand-in (or as ``real[name]`` where given); ``sys.modules`` is restored after."""
    saved = dict(sys.modules)
    try:
        for name in names:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                dotted = ".".join(parts[:i])
                if dotted not in sys.modules or i == len(parts):
                    module = (real or {}).get(dotted) or _Anything(dotted)
                    module.__path__ = []  # a package, so that submodules import
                    sys.modules[dotted] = module
                    if i > 1:
                        setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], module)
        yield
    finally:
        sys.modules.clear()
        sys.modules.update(saved)


LAVIS_STUBS = ["lavis.common.registry", "lavis.models.base_model", "lavis.models.blip2_models.blip2",
               "lavis.models.blip_models.blip_outputs"]
"""The LAVIS modules a BLIP-2 release's model file imports (ConeSep, SPRC, HABIT, INTENT)."""


def lavis_stand_ins() -> dict[str, types.ModuleType]:
    """Real stand-ins for the LAVIS names a release's model class needs to be a class: its base
    ``Blip2Base`` (a plain ``nn.Module``) and the registry decorator (the identity); pass as
    ``real=`` with :data:`LAVIS_STUBS` to :func:`load_release_module`."""
    registry = types.ModuleType("lavis.common.registry")
    registry.registry = types.SimpleNamespace(register_model=lambda name: (lambda cls: cls))
    blip2 = types.ModuleType("lavis.models.blip2_models.blip2")
    blip2.Blip2Base = torch.nn.Module
    blip2.compute_sim_matrix = blip2.disabled_train = lambda *a, **k: None
    return {"lavis.common.registry": registry, "lavis.models.blip2_models.blip2": blip2}


class Tokens:
    """What a release reads of its tokenizer's output: ``input_ids`` and ``attention_mask``,
    already where they go (``to`` is the identity)."""

    def __init__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        self.input_ids, self.attention_mask = input_ids, attention_mask

    @classmethod
    def blank(cls, count: int, length: int) -> "Tokens":
        """``count`` texts of ``length`` tokens, ids 0, every position attended: for a release
        whose text features come from a fake encoder that ignores the ids."""
        return cls(torch.zeros(count, length, dtype=torch.long), torch.ones(count, length, dtype=torch.long))

    def to(self, *args: Any, **kwargs: Any) -> "Tokens":
        return self


def _cpu(device: Any) -> Any:
    if isinstance(device, torch.device) and device.type == "cuda":
        return torch.device("cpu")
    if isinstance(device, str) and device.startswith("cuda"):
        return "cpu"
    if isinstance(device, int) and not isinstance(device, bool):
        return "cpu"
    return device


@contextlib.contextmanager
def on_cpu() -> Iterator[None]:
    """Within the block, a release's CUDA-only calls run on the CPU: ``.cuda()`` is the
    identity, ``.to("cuda")`` and ``device="cuda"`` keywords go to the CPU, and
    ``torch.cuda.is_available()`` is False."""
    original_to = torch.Tensor.to
    factories = ("zeros", "ones", "eye", "arange", "full", "rand", "randn", "randint", "randperm", "tensor",
                 "empty", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "linspace")

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        args = tuple(_cpu(a) for a in args)
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        return original_to(self, *args, **kwargs)

    def on_device(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if "device" in kwargs:
                kwargs["device"] = _cpu(kwargs["device"])
            return fn(*args, **kwargs)
        return wrapped

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch.Tensor, "cuda", lambda self, *a, **k: self))
        stack.enter_context(mock.patch.object(torch.Tensor, "to", to))
        stack.enter_context(mock.patch.object(torch.nn.Module, "cuda", lambda self, *a, **k: self))
        stack.enter_context(mock.patch("torch.cuda.is_available", lambda: False))
        for name in factories:
            stack.enter_context(mock.patch.object(torch, name, on_device(getattr(torch, name))))
        yield


def load_release_module(release_dir: Path, relative: str, stubs: list[str] = (),
                        real: Mapping[str, types.ModuleType] | None = None, name: str | None = None) -> types.ModuleType:
    """Import the file ``relative`` of the release checkout ``release_dir`` as a module, with
    the dotted imports ``stubs`` replaced by stand-ins while it loads (the module keeps the
    stand-ins it bound). FileNotFoundError names the file when the checkout lacks it."""
    path = Path(release_dir) / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not in the release checkout {release_dir} (is --release the repository's root?)")
    module_name = name or f"_release_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(release_dir))
    try:
        with stubbed_modules(list(stubs), real):
            spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(release_dir))
    return module


def release_commit(release_dir: Path) -> str:
    """The checkout's HEAD commit, or "" when it is not a git work tree."""
    try:
        out = subprocess.run(["git", "-C", str(release_dir), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.stdout.strip()


# ----------------------------------------------------------------------------- comparing and recording


def as_tensor(value: Any) -> torch.Tensor:
    """A term's value as a float64 tensor (booleans and integers become 0/1 and counts)."""
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    return tensor.detach().to("cpu").to(torch.float64)


def max_difference(a: Any, b: Any) -> float:
    """The largest absolute difference of two terms; inf when their shapes differ."""
    x, y = as_tensor(a), as_tensor(b)
    if x.shape != y.shape:
        return float("inf")
    return float((x - y).abs().max()) if x.numel() else 0.0


def within_tolerance(port: Any, release: Any) -> bool:
    """``|port - release| <= ATOL + RTOL |release|`` everywhere, shapes equal."""
    x, y = as_tensor(port), as_tensor(release)
    return x.shape == y.shape and bool(torch.isclose(x, y, rtol=RTOL, atol=ATOL).all())


def _rounded(value: Any) -> Any:
    """``value`` (a float or nested lists of them) to 12 significant digits: far inside the
    tolerance, and a re-record of an unchanged release leaves the file unchanged."""
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return float(f"{value:.12g}")


def record_path(method: str) -> Path:
    """The record of ``method``'s release values: ``tests/parity/<method>.json``."""
    return RECORDS / f"{method}.json"


def write_record(method: str, release: Release, seed: int, inputs: Mapping[str, torch.Tensor],
                 terms: Mapping[str, Any], not_comparable: Mapping[str, str]) -> Path:
    """Write the release's values of ``terms`` on ``inputs`` (recorded by seed and shape,
    not by value) to :func:`record_path`."""
    record = {
        "method": method,
        "release": asdict(release),
        "seed": seed,
        "input_shapes": {k: list(v.shape) for k, v in inputs.items()},
        "tolerance": {"rtol": RTOL, "atol": ATOL},
        "terms": {k: _rounded(as_tensor(v).tolist()) for k, v in terms.items()},
        "not_comparable": dict(not_comparable),
    }
    path = record_path(method)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def read_record(method: str) -> dict[str, Any]:
    """The record of ``method`` (:func:`write_record`)."""
    return json.loads(record_path(method).read_text())
