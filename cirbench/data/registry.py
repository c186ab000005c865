"""Deprecated path, kept so that plugins written against it still import: moved to
:mod:`cirbench.data.datasets.registry` (issue 78); import it from there."""

from cirbench._moved import alias

alias(__name__, "cirbench.data.datasets.registry")
