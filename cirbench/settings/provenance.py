"""What is recorded with every run so that two results can be compared: the git commit
of the harness, and the versions of the packages that shape the numbers."""

from __future__ import annotations

import json
import subprocess
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

TRACKED_PACKAGES = ("cirbench", "torch", "numpy", "scikit-learn", "pot", "transformers", "open_clip_torch", "pandas", "pyarrow")


@lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of the harness's checkout (with ``-dirty`` if modified), or ``unknown``."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=here, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


@lru_cache(maxsize=1)
def package_versions() -> str:
    """JSON text of ``{package: version}`` for the packages that affect results."""
    found = {}
    for name in TRACKED_PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return json.dumps(found, sort_keys=True)
