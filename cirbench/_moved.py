"""Old module paths kept after a move: the old name made an alias of the module's new home,
with a :class:`DeprecationWarning` naming it (docs/architecture.md#moved-paths)."""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Make ``old`` (the module being imported) the module ``new``, warning once that it moved."""
    warnings.warn(f"{old} moved to {new}: import it from there (the old path will be removed in a later release)",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
