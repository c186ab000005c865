"""The rules of what a method gives the harness (the contract of :mod:`cirbench.method`),
checked on every training step and every epoch-level partition, before anything of it is
applied or recorded:

- ``training_step`` returns a :class:`~cirbench.method.StepOutput` whose ``loss`` is a
  finite scalar tensor that requires grad;
- ``StepOutput.selected_clean`` is None or a boolean mask of the batch's length, ``(B,)``;
- ``StepOutput.noise_score`` and each of ``extra_scores`` are None or a finite float vector
  of the batch's length (NaN and infinity refused);
- the loss, the mask and the scores are on the batch's device (never ``meta``);
- the batch is read-only: no tensor of it is changed in place (before or after the loss)
  nor replaced, nor its texts (:class:`BatchGuard`);
- an epoch's :class:`~cirbench.method.Partition` holds a boolean mask and a finite float
  vector of the training split's length (numpy, or tensors on the CPU or the batch's device);
- a method that decides keeps at least one row in every epoch (:func:`check_epoch_kept`: the
  decisions of its steps and its partition over the epoch; one step that keeps nothing, a
  small batch at a high rate, is allowed).

Nothing is cast: an integer tensor of the right length (an ``argsort``, a common slip)
would otherwise read as a mask that keeps almost every sample. A breach is one
:class:`MethodContractError` naming the method, the field, what the contract wants and
what came (type, dtype, shape) at which epoch and step: the cell stops there, and
``cirbench check-plugin`` prints the same message. The checks read shapes, dtypes, devices and
version counters, but for one finiteness test per score and the loss and a checksum of each
batch tensor before and after the step (``benchmarks/step_rules_cost.py`` measures them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from cirbench.method import Batch, Partition, StepOutput
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


def _check_device(method: str, field: str, value: Any, device: torch.device | None, where: str,
                  also_cpu: bool = False) -> None:
    """Refuse a tensor ``value`` on ``meta`` or on another device than ``device`` (the CPU
    too where ``also_cpu``); anything else is left to the field's own check."""
    if not isinstance(value, torch.Tensor) or device is None:
        return
    here = value.device
    same = here.type == device.type and (device.index is None or here.index == device.index)  # "cuda" is "cuda:0"
    if here.type != "meta" and (same or (also_cpu and here.type == "cpu")):
        return
    wants = f"on the batch's device ({device}{', or the CPU' if also_cpu else ''})"
    raise _breach(method, field, wants, f"{described(value)} on {here}", where,
                  "a meta tensor holds no values" if here.type == "meta" else "nothing is moved: create it where the "
                  "batch is, e.g. torch.zeros(..., device=batch.index.device)")


def _check_loss(method: str, loss: Any, where: str) -> None:
    wants = "a finite scalar tensor that requires grad"
    if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
        hint = "reduce the per-sample losses, e.g. .mean()" if isinstance(loss, torch.Tensor) else ""
        raise _breach(method, "StepOutput.loss", wants, described(loss), where, hint)
    if not loss.requires_grad:
        raise _breach(method, "StepOutput.loss", wants, f"{described(loss)} that does not require grad", where,
                      "was it detached, computed under torch.no_grad() or from frozen parameters only?")
    if not bool(torch.isfinite(loss.detach())):  # before the step, so a non-finite loss is never applied
        raise _breach(method, "StepOutput.loss", wants, f"{described(loss)} of value {loss.item()}", where,
                      "a log or a division of zero? the step was not applied")


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


def check_step(method: str, out: Any, batch: Batch | int, epoch: int, step: int) -> None:
    """Refuse a training step's output ``out`` on ``batch`` (or a batch of that many rows,
    on no device in particular) that breaks the contract (:class:`MethodContractError`, see
    the module docstring)."""
    n = batch if isinstance(batch, int) else len(batch)
    device = None if isinstance(batch, int) else batch.index.device
    where = f"epoch {epoch}, step {step} (a batch of {n})"
    if not isinstance(out, StepOutput):
        raise _breach(method, "training_step's result", "a StepOutput", described(out), where)
    fields = {"StepOutput.loss": out.loss, "StepOutput.selected_clean": out.selected_clean,
              "StepOutput.noise_score": out.noise_score,
              **{f"StepOutput.extra_scores[{name!r}]": values for name, values in out.extra_scores.items()}}
    for field, value in fields.items():
        _check_device(method, field, value, device, where)
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


def check_partition(method: str, partition: Any, n: int, epoch: int, device: torch.device | None = None) -> None:
    """Refuse an epoch-level partition (``on_epoch_start``'s result, or None) of a training
    split of ``n`` samples that breaks the contract (:class:`MethodContractError`); its
    tensors may be on the CPU or on ``device`` (the batches')."""
    if partition is None:
        return
    where = f"epoch {epoch} (on_epoch_start, a training split of {n})"
    if not isinstance(partition, Partition):
        raise _breach(method, "on_epoch_start's result", "None or a Partition", described(partition), where)
    of = "the training split's length"
    listed = lambda values: np.asarray(values) if isinstance(values, (list, tuple)) else values  # noqa: E731
    for field in ("selected_clean", "noise_score"):
        _check_device(method, f"Partition.{field}", getattr(partition, field), device or torch.device("cpu"), where,
                      also_cpu=True)
    _check_mask(method, "Partition.selected_clean", listed(partition.selected_clean), n, where, of)
    _check_score(method, "Partition.noise_score", listed(partition.noise_score), n, where, of)


def check_epoch_kept(method: str, n_decided: int, n_kept: int, epoch: int) -> None:
    """Refuse an epoch in which the method decided on ``n_decided`` rows (its steps' masks and
    its partition over the epoch, each row's last decision) and kept none of them: its steps
    trained on nothing. A single step that keeps nothing is allowed; an epoch without
    decisions (a warm-up, a method that only scores) is not judged."""
    if n_decided and not n_kept:
        raise MethodContractError(
            f"method {method!r}: the epoch's kept set (StepOutput.selected_clean over the epoch, or Partition."
            f"selected_clean) must hold at least one row; got 0 of {n_decided} rows kept at the end of epoch {epoch} "
            "(every step trained on nothing: is the comparison reversed, or the threshold below every score?)")


def _fingerprint(tensor: torch.Tensor) -> torch.Tensor:
    """A checksum of ``tensor``'s bits (its elements read as integers, summed): a change made
    behind autograd's version counter (``.data``, ``.numpy()``) shows in it."""
    flat = tensor.detach().reshape(-1)
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    return flat.view(as_int).sum(dtype=torch.int64)


class BatchGuard:
    """What a step may not change of its :class:`~cirbench.method.Batch`, noted before the
    step: each tensor (``index``, ``reference``, ``target``, ``text.ids``, ``text.mask``), its
    version counter and checksum, and the texts. :meth:`check` after the step refuses a
    tensor changed in place or replaced, naming the field (the batch is read-only: a method
    that edits it trains on other data than the harness records, and a change after the loss
    breaks its backward pass)."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self.tensors = {name: (t, t._version, _fingerprint(t)) for name, t in self._tensors(batch).items()}
        self.texts, self.text_values = batch.texts, list(batch.texts)

    @staticmethod
    def _tensors(batch: Batch) -> dict[str, torch.Tensor]:
        return {"index": batch.index, "reference": batch.reference, "target": batch.target,
                "text.ids": batch.text.ids, "text.mask": batch.text.mask}

    def check(self, method: str, epoch: int, step: int) -> None:
        """Refuse (:class:`MethodContractError`) any change the step made to the batch."""
        where = f"epoch {epoch}, step {step} (a batch of {len(self.batch)})"
        now = self._tensors(self.batch)
        for name, (tensor, version, fingerprint) in self.tensors.items():
            if now[name] is not tensor:
                raise _breach(method, f"Batch.{name}", "left as the harness gave it (the batch is read-only)",
                              f"another tensor in its place ({described(now[name])})", where,
                              f"compute on a copy: x = batch.{name}.clone()")
            if tensor._version != version or not torch.equal(_fingerprint(tensor), fingerprint):
                raise _breach(method, f"Batch.{name}", "left as the harness gave it (the batch is read-only)",
                              f"{described(tensor)} changed in place", where,
                              "an in-place operation (x.zero_(), x[...] = ..., x += ...) on the batch; "
                              f"compute on a copy: x = batch.{name}.clone()")
        if self.batch.texts is not self.texts or list(self.batch.texts) != self.text_values:
            raise _breach(method, "Batch.texts", "left as the harness gave it (the batch is read-only)",
                          "a changed list of texts", where, "copy it first: texts = list(batch.texts)")
