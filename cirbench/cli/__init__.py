"""The ``cirbench`` command line: the app and its commands (:mod:`cirbench.cli.main`), the
options they share (:mod:`cirbench.cli.options`), a grid's options parsed into the calls of
:mod:`cirbench.api` and what they return shown (:mod:`cirbench.cli.grid`, ``study``: :mod:`cirbench.cli.study`), the tools around a grid
(:mod:`cirbench.cli.tools`, ``start rebuild`` among them) and what is printed
(:mod:`cirbench.cli.show`)."""

from cirbench.cli.main import app

__all__ = ["app"]
