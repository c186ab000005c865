"""The engine's running room: a grid of cells run somewhere. ``grid`` turns a spec into its
cells with the resources they share and says which are pending; ``grid_checks`` and ``reuse``
are the pre-flight checks (data files, noise, the start, the evaluation) before any cell runs;
``calibrate`` is the calibration grid; ``runner`` runs cells here or in a pool of processes
(``worker``), ``launch`` on a scheduler. It imports the ``planning`` and ``cell`` rooms."""
