"""The rules of what a method gives the harness (the contract of :mod:`cirbench.method`),
checked on every training step and every epoch-level partition, before anything of it is
applied or recorded:

- ``training_step`` returns a :class:`~cirbench.method.StepOutput` whose ``loss`` is a
  scalar tensor that requires grad (its finiteness is checked by the training loop);
- ``StepOutput.selected_clean`` is None or a boolean mask of the batch's length, ``(B,)``;
- ``StepOutput.noise_score`` and each of ``extra_scores`` are None or a finite float vector
  of the batch's length (NaN and infinity refused);
- an epoch's :class:`~cirbench.method.Partition` holds a boolean mask and a finite float
  vector of the training split's length.

Nothing is cast: an integer tensor of the right length (an ``argsort``, a common slip)
would otherwise read as a mask that keeps almost every sample. A breach is one
:class:`MethodContractError` naming the method, the field, what the contract wants and
what came (type, dtype, shape) at which epoch and step: the cell stops there, and
``cirbench check-plugin`` prints the same message. The checks read only shapes and dtypes,
but for one finiteness test per score (``benchmarks/step_rules_cost.py`` measures them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from cirbench.method import Partition, StepOutput
from cirbench.results.store import MAIN_SCORE


class MethodContractError(ValueError):
    """What a method returned breaks the contract (see the module docstring); the message
    names the method, the field, the rule, what came and where."""


def described(value: Any) -> str:
    """What came, as a breach names it: ``a torch.int64 tensor of shape (64,)``, ``a float``."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"a numpy {value.dtype} array of shape {value.shape}"
    return f"a {type(value).__name__}"


def _breach(method: str, field: str, wants: str, came: str, where: str, hint: str = "") -> MethodContractError:
    """The breach of ``field`` by what ``came`` (in words: :func:`described`)."""
    return MethodContractError(f"method {method!r}: {field} must be {wants}; got {came} at {where}"
                               + (f" ({hint})" if hint else ""))


def _nonfinite(values: np.ndarray | torch.Tensor) -> str:
    """How many of ``values`` are NaN and infinite, e.g. ``3 NaN``; ``""`` when all are finite."""
    if isinstance(values, torch.Tensor):
        if bool(torch.isfinite(values).all()):
            return ""
        nan, inf = int(torch.isnan(values).sum()), int(torch.isinf(values).sum())
    else:
        if np.isfinite(values).all():
            return ""
        nan, inf = int(np.isnan(values).sum()), int(np.isinf(values).sum())
    return " and ".join(f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "infinite")) if n) + " value(s)"


def _check_loss(method: str, loss: Any, where: str) -> None:
    wants = "a scalar tensor that requires grad"
    if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
        hint = "reduce the per-sample losses, e.g. .mean()" if isinstance(loss, torch.Tensor) else ""
        raise _breach(method, "StepOutput.loss", wants, described(loss), where, hint)
    if not loss.requires_grad:
        raise _breach(method, "StepOutput.loss", wants, f"{described(loss)} that does not require grad", where,
                      "was it detached, computed under torch.no_grad() or from frozen parameters only?")


def _check_mask(method: str, field: str, mask: Any, n: int, where: str, of: str) -> None:
    wants = f"{'None or ' * field.startswith('StepOutput')}a boolean mask of {of} ({n},)"
    dtype = mask.dtype if isinstance(mask, (torch.Tensor, np.ndarray)) else None
    if dtype not in (torch.bool, np.dtype(bool)):
        raise _breach(method, field, wants, described(mask), where, "nothing is cast: an integer or float tensor is not a mask; "
                      "compare instead, e.g. losses <= threshold")
    if tuple(mask.shape) != (n,):
        raise _breach(method, field, wants, described(mask), where)


def _check_score(method: str, field: str, score: Any, n: int, where: str, of: str) -> None:
    wants = f"{'None or ' * field.startswith('StepOutput')}a finite float vector of {of} ({n},)"
    floating = (score.is_floating_point() if isinstance(score, torch.Tensor)
                else isinstance(score, np.ndarray) and score.dtype.kind == "f")
    if not floating or tuple(score.shape) != (n,):
        raise _breach(method, field, wants, described(score), where)
    bad = _nonfinite(score.detach() if isinstance(score, torch.Tensor) else score)
    if bad:
        raise _breach(method, field, wants, described(score), where, f"{bad}: a score must rank every sample")


def check_step(method: str, out: Any, n: int, epoch: int, step: int) -> None:
    """Refuse a training step's output ``out`` of a batch of ``n`` that breaks the contract
    (:class:`MethodContractError`, see the module docstring)."""
    where = f"epoch {epoch}, step {step} (a batch of {n})"
    if not isinstance(out, StepOutput):
        raise _breach(method, "training_step's result", "a StepOutput", described(out), where)
    _check_loss(method, out.loss, where)
    of = "the batch's length"
    if out.selected_clean is not None:
        _check_mask(method, "StepOutput.selected_clean", out.selected_clean, n, where, of)
    if out.noise_score is not None:
        _check_score(method, "StepOutput.noise_score", out.noise_score, n, where, of)
    for name, values in out.extra_scores.items():
        if name == MAIN_SCORE:
            raise MethodContractError(f"method {method!r}: StepOutput.extra_scores may not be named {MAIN_SCORE!r} "
                                      f"(that is StepOutput.noise_score), at {where}")
        _check_score(method, f"StepOutput.extra_scores[{name!r}]", values, n, where, of)


def check_partition(method: str, partition: Any, n: int, epoch: int) -> None:
    """Refuse an epoch-level partition (``on_epoch_start``'s result, or None) of a training
    split of ``n`` samples that breaks the contract (:class:`MethodContractError`)."""
    if partition is None:
        return
    where = f"epoch {epoch} (on_epoch_start, a training split of {n})"
    if not isinstance(partition, Partition):
        raise _breach(method, "on_epoch_start's result", "None or a Partition", described(partition), where)
    of = "the training split's length"
    listed = lambda values: np.asarray(values) if isinstance(values, (list, tuple)) else values  # noqa: E731
    _check_mask(method, "Partition.selected_clean", listed(partition.selected_clean), n, where, of)
    _check_score(method, "Partition.noise_score", listed(partition.noise_score), n, where, of)
