"""Parity of every hosted port with its authors' release, term by term (docs/parity.md).

``harness`` holds what every method's adapter shares (seeded float64 inputs, the tolerance,
stubs for a release's heavy imports, the record files); ``<method>.py`` is one adapter per
hosted method; ``run.py`` is the command line."""
