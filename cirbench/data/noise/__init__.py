"""The data layer's noise room: what a noise protocol sees and proposes (``proposal``), the
rules its output keeps (``rules``), the injection with its ground-truth manifest and the
protocol registry (``injection``), the ``hard`` and ``release`` protocols, the held-out noisy
split (``holdout``) and a noise instance as a file (``instance_file``). It imports no other
room of the data layer."""
