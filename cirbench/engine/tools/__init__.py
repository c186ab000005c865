"""The engine's tools room: commands built on the loop: ``conformance`` (``cirbench
check-plugin``: a plugin trained a few steps under the harness's rules) and ``predict``
(CIRR test-split submissions from a saved checkpoint). It may import the ``planning``,
``cell`` and ``running`` rooms."""
