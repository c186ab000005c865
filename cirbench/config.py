"""Deprecated path, kept so that plugins written against it still import: moved to
:mod:`cirbench.settings.config` (issue 78); import it from there."""

from cirbench._moved import alias

alias(__name__, "cirbench.settings.config")
