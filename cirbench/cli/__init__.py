"""The ``cirbench`` command line: the app and its commands (:mod:`cirbench.cli.main`), the
options they share (:mod:`cirbench.cli.options`), a grid built and run from them
(:mod:`cirbench.cli.grid`), ``study`` (:mod:`cirbench.cli.study`), the tools around a grid
(:mod:`cirbench.cli.tools`, ``start rebuild`` among them) and what is printed
(:mod:`cirbench.cli.show`)."""

from cirbench.cli.main import app

__all__ = ["app"]
