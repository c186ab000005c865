"""The training loop's events, for a profiler or a benchmark: what ``benchmarks/`` measures
it measures through these, never by patching the engine's functions.

:func:`cirbench.engine.cell.train.train_cell` calls its :class:`TrainingHooks` at each event
(a cell run by :func:`cirbench.engine.cell.life.run_cell` gets its grid's
``CellResources.hooks``). Every event does nothing by default; a subclass overrides the
ones it needs. The events, in the loop's order:

- ``epoch_batches(epoch, batches)``: the batches (sample indices) of an epoch, before the
  first; returns those to train on (a profiler may keep the first few);
- ``epoch_pass_start(epoch)`` / ``epoch_pass_end(epoch)``: around the method's epoch-level
  passes (``Method.on_epoch_start``, e.g. TME's per-sample losses);
- ``batch_start(epoch, step)`` / ``batch_end(epoch, step)``: around building a batch;
- ``step_start(epoch, step)`` / ``step_end(epoch, step, out)``: around a training step (the
  method's forward, the finite-loss check, backward, clipping and the optimiser's update);
- ``evaluation_start(epoch, split)`` / ``evaluation_end(epoch, split, evaluation)``: around
  an epoch's evaluation of ``split``, :data:`HELD_OUT` (the held-out queries against the
  training gallery) then :data:`VALIDATION`.
"""

from __future__ import annotations

import numpy as np

from cirbench.engine.cell.evaluate import Evaluation
from cirbench.method import StepOutput

VALIDATION, HELD_OUT = "validation", "held-out"


class TrainingHooks:
    """The training loop's events (see the module docstring); each does nothing here."""

    def epoch_batches(self, epoch: int, batches: list[np.ndarray]) -> list[np.ndarray]:
        """The batches to train on in ``epoch``: here all of them."""
        return batches

    def epoch_pass_start(self, epoch: int) -> None:
        """Before the method's epoch-level passes."""

    def epoch_pass_end(self, epoch: int) -> None:
        """After the method's epoch-level passes."""

    def batch_start(self, epoch: int, step: int) -> None:
        """Before a batch is built."""

    def batch_end(self, epoch: int, step: int) -> None:
        """After a batch is built."""

    def step_start(self, epoch: int, step: int) -> None:
        """Before a training step."""

    def step_end(self, epoch: int, step: int, out: StepOutput) -> None:
        """After a training step, with what the method returned."""

    def evaluation_start(self, epoch: int, split: str) -> None:
        """Before an epoch's evaluation of ``split``."""

    def evaluation_end(self, epoch: int, split: str, evaluation: Evaluation) -> None:
        """After an epoch's evaluation of ``split``."""
