"""The analysis's verdicts room: the claims and their files (``claims``, ``claim_files``,
``claims.toml``), the published tables (``published``), the room to win (``room``) and the
calibration targets (``calibration``). It imports the ``loading`` and ``statistics`` rooms."""
