"""The numerical kernels a cell computes with, fixed so that one run id names one set of bits.

Two things change a cell's floats without changing what it computes (measured: issue 77,
``docs/usage.md#what-a-run-id-guarantees``):

- **the thread count**: a reduction split over more threads adds in another order (torch's
  intra-op threads in ATen's reductions and MKL's products; OpenBLAS's threads under
  scikit-learn's GMM). Every cell computes with :data:`CELL_THREADS` intra-op thread and one
  BLAS/OpenMP thread (:func:`cell_threads`), whatever ``--jobs`` or the machine's cores; the
  cores are kept busy by running cells side by side instead (``--jobs``' default).
- **the instruction set and vendor the kernels are chosen for**: ATen's vectorised kernels,
  oneDNN's JIT kernels (convolutions, GELU), MKL's code branch (MKL picks its branch by vendor
  as well as instruction set, and honours only ``COMPATIBLE`` on a non-Intel CPU), OpenBLAS's
  core type and numpy's SIMD dispatch. :data:`PINS` sets each to AVX2, the level every
  supported x86-64 CPU has (every AMD EPYC and Intel Xeon in use), whatever the environment
  asked for. The libraries read these variables when they load or first compute, so
  :func:`pin_environment` runs on ``import cirbench``: before torch and numpy when cirbench is
  imported first, as the command line and the worker processes do. A process that loaded
  them first may compute with other kernels: :func:`kernels_used` asks each library what it
  uses, and every ``runs`` row records that (``pinned`` false when any differs from the pins).

``CIRBENCH_KERNEL_PINS=off`` leaves the environment alone (the libraries pick the fastest
kernels of the CPU; recorded as unpinned). Nothing here imports torch or numpy at import time.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import re
import sys
import tempfile
import zlib
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from typing import Iterator

CELL_THREADS = 1
"""The intra-op threads (torch) and BLAS/OpenMP threads every cell computes with."""
SWITCH = "CIRBENCH_KERNEL_PINS"
"""``off`` (or ``0``, ``no``, ``false``): leave the kernels' environment as it is."""

PINS: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",  # ATen's vectorised CPU kernels
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's JIT kernels (torch's convolutions and GELU on the CPU)
    "DNNL_MAX_CPU_ISA": "AVX2",  # the same, under oneDNN's older name
    "MKL_CBWR": "COMPATIBLE",  # MKL's conditional numerical reproducibility: the one branch MKL honours on AMD too
    "OPENBLAS_CORETYPE": "Haswell",  # OpenBLAS's AVX2 kernels (numpy's and scipy's: scikit-learn's GMM)
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",  # cuBLAS's deterministic workspace (a GPU cell; docs/scale.md)
}
"""What :func:`pin_environment` sets (numpy's dispatch: :func:`numpy_pin`)."""

EXPECTED = {"aten": "AVX2", "mkl": "COMPATIBLE", "onednn": "avx2", "openblas": "Haswell", "numpy": "X86_V3"}
"""What each library reports when the pins are in force (:func:`kernels_used`)."""

_MKL_BRANCHES = {0: "off", 1: "off", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2",
                 9: "AVX", 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}
_MKL_STRICT = 0x10000

_state: dict[str, object] = {"set": False, "loaded_before": []}


def pins_wanted() -> bool:
    """Whether cirbench pins the kernels in this process (``CIRBENCH_KERNEL_PINS`` not off)."""
    return os.environ.get(SWITCH, "").strip().lower() not in ("off", "0", "no", "false")


def numpy_pin() -> dict[str, str]:
    """numpy's SIMD dispatch held at AVX2 (``X86_V3``): the variable and the names of the
    installed numpy (2.4 named its levels ``X86_V3``/``X86_V4``; an older numpy is left alone)."""
    try:
        major, minor = (int(part) for part in re.findall(r"\d+", version("numpy"))[:2])
    except (PackageNotFoundError, ValueError):
        return {}
    return {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"} if (major, minor) >= (2, 4) else {}


def pin_environment() -> None:
    """Set :data:`PINS` (and :func:`numpy_pin`) in this process's environment, whatever it
    held, unless ``CIRBENCH_KERNEL_PINS`` is off; note which libraries were loaded before."""
    if not pins_wanted():
        return
    os.environ.update({**PINS, **numpy_pin()})
    _state.update(set=True, loaded_before=[name for name in ("torch", "numpy") if name in sys.modules])


def _mkl_branch() -> str:
    """MKL's code branch as MKL reports it (``mkl_cbwr_get`` inside torch's CPU library)."""
    import torch

    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        setting = int(lib.mkl_serv_cbwr_get(ctypes.c_int(-1)))
    except (OSError, AttributeError):
        return "unknown"
    name = _MKL_BRANCHES.get(setting & ~_MKL_STRICT, str(setting))
    return name + (",STRICT" if setting & _MKL_STRICT else "")


@contextlib.contextmanager
def _stdout_to(path: str) -> Iterator[None]:
    """File descriptor 1 (where oneDNN's C code prints) redirected to ``path``."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "wb") as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def _onednn_isa() -> str:
    """The instruction set of oneDNN's convolution kernel, from oneDNN's verbose line of one
    small convolution (``jit:avx2``, ``brgconv:avx512_core``: the part after the colon)."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return "none"
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "onednn.txt")
        try:
            with _stdout_to(path), torch.no_grad(), torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                torch.nn.functional.conv2d(torch.ones(2, 8, 16, 16), torch.ones(8, 8, 3, 3))
        except (AssertionError, RuntimeError, OSError):  # a build whose oneDNN cannot print
            return "unknown"
        with open(path, encoding="utf-8", errors="replace") as printed:
            text = printed.read()
    found = re.search(r"exec,cpu,convolution,([\w:]+)", text) or re.search(r"isa:([^\n,]+)", text)
    return found.group(1).split(":")[-1] if found else "unknown"


def _openblas_types() -> str:
    """The core types of the OpenBLAS libraries loaded (numpy's, scipy's), ``,``-joined."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown"
    found = sorted({str(i.get("architecture")) for i in threadpool_info() if i.get("internal_api") == "openblas"})
    return ",".join(found) or "none"


def _numpy_dispatch() -> str:
    """numpy's SIMD levels in use (the dispatched ones the CPU has and numpy enabled)."""
    import numpy

    core = getattr(numpy, "_core", None) or numpy.core
    umath = core._multiarray_umath
    on = [name for name in getattr(umath, "__cpu_dispatch__", []) if umath.__cpu_features__.get(name)]
    return " ".join(on) or "baseline"


@lru_cache(maxsize=1)
def _probed() -> dict[str, str]:
    import torch

    return {"aten": torch.backends.cpu.get_cpu_capability(), "mkl": _mkl_branch(), "onednn": _onednn_isa(),
            "openblas": _openblas_types(), "numpy": _numpy_dispatch()}


def kernels_used() -> dict[str, object]:
    """What each library computes with in this process (asked once: a library fixes its
    kernels when it first computes), whether that is :data:`EXPECTED` (``pinned``), and
    whether deterministic algorithms are on."""
    import torch

    used: dict[str, object] = dict(_probed())
    used["pinned"] = bool(_state["set"]) and all(used[k] == v for k, v in EXPECTED.items())
    used["deterministic"] = torch.are_deterministic_algorithms_enabled()
    return used


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s first ``model name``; else the platform's)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cell_record() -> dict[str, object]:
    """The ``runs`` columns that say which kernels computed a cell: ``cpu_model``,
    ``cpu_isa`` (ATen's capability, what torch reports), ``threads`` (torch's intra-op
    threads now) and ``kernels`` (JSON of :func:`kernels_used`)."""
    import torch

    used = kernels_used()
    return {"cpu_model": cpu_model(), "cpu_isa": str(used["aten"]), "threads": torch.get_num_threads(),
            "kernels": json.dumps(used, sort_keys=True)}


def signature(device: str = "cpu") -> str:
    """A short name of the kernels that compute here now (for a cache of their output): the
    pins and the thread count, plus the CPU model when not pinned; the GPU's name on one."""
    import torch

    if str(device).startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device)) if torch.cuda.is_available() else "cuda"
        text = f"cuda {name}"
    else:
        used = kernels_used()
        text = json.dumps({**used, "threads": torch.get_num_threads(),
                           "cpu": "" if used["pinned"] else cpu_model()}, sort_keys=True)
    return f"k{zlib.crc32(text.encode()):08x}"


@contextlib.contextmanager
def cell_threads() -> Iterator[None]:
    """The body on :data:`CELL_THREADS` torch and BLAS/OpenMP threads, with deterministic
    algorithms on unless the pins are off (``warn_only``: an op without a deterministic
    version warns instead of failing), then the caller's settings back."""
    import torch
    from threadpoolctl import threadpool_limits

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(CELL_THREADS)
    torch.use_deterministic_algorithms(pins_wanted() or deterministic, warn_only=True)
    try:
        with threadpool_limits(limits=CELL_THREADS):
            yield
    finally:
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_num_threads(threads)
