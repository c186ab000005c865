"""What describes a run, before and beside it: typed ``--set`` overrides
(:mod:`~cirbench.settings.config`), a grid's defaults (:mod:`~cirbench.settings.defaults`), a study
file (:mod:`~cirbench.settings.study`), the pinned numerical kernels (:mod:`~cirbench.settings.kernels`)
and the provenance recorded with every result (:mod:`~cirbench.settings.provenance`). The lowest
layer: it imports nothing of cirbench (nor torch, except the kernels' checks), so the CLI's help
and every layer above may read it."""
