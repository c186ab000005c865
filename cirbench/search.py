"""Deprecated path, kept so that plugins written against it still import: moved to
:mod:`cirbench.method.search` (issue 78); import it from there."""

from cirbench._moved import alias

alias(__name__, "cirbench.method.search")
