"""The defaults of a grid, read by the engine, the Python API (:mod:`cirbench.api`) and the
CLI (which must not import torch to print its help): a cell's training schedule, the methods
and noise rates of a grid that names none, a sweep's trials, the default held-out share, and
the calibration grid's methods and noise rates, shared by the grid
(:mod:`cirbench.engine.running.calibrate`) and its checks (:mod:`cirbench.report.analysis.verdicts.calibration`).

Chosen by calibrating the embedded benchmark with the ordinary baseline, the perfect filter
and the reference rows only (``docs/benchmark.md``); 128 is also the papers' batch size.
"""

EPOCHS = 2
BATCH_SIZE = 128
HOLDOUT = 0.1
"""The share of the training triplets a generated dataset's grid holds out for selection by
default (``docs/selection.md``); a dataset read from the user's files holds none out unless
``--holdout`` is given, so that its training set is the papers'."""
METHODS = ("sprc", "oracle")
"""The rows of a grid that names no method: the ordinary baseline and the perfect filter."""
NOISE_RATES = (0.0, 0.5, 0.8)
"""The noise rates of a grid that names none (an ablation's default instead: its methods' own)."""
TRIALS = 4
"""A sweep's trials per method (trial 0 is the defaults: :mod:`cirbench.engine.planning.sweep`)."""
CALIBRATION_METHODS = METHODS
CALIBRATION_RATES = NOISE_RATES
HOSTED_RATE = 0.0
"""The one noise rate at which ``cirbench calibrate`` runs the hosted methods (every built-in
method without a role): clean data, where "every hosted method learns" is read. No method's
noisy cell is ever part of a calibration (``docs/benchmark.md``)."""
REPRODUCE_METHODS = ("sprc",)
REPRODUCE_RATES = (0.0, 0.8)
REPRODUCE_SPREAD = 2.0
"""What ``cirbench reproduce`` re-runs by default (the baseline, clean and at 80% noise) and
how far, in the reference seeds' std, a re-run cell may fall from its seed's value."""
FRONTIER_PURITIES = [0.8, 0.6, 0.4]
"""The purities of the kept sets of the frontier's cells (``--frontier``, docs/kept-sets.md), each
made only at a noise rate whose clean share (1 - rate) it lies above."""
