"""The step rules of issue 66 one by one, beside the broken plugins of
``tests/test_method_contract.py``: the batch is read-only (a tensor replaced, the texts
changed), tensors on the batch's device (a loss on ``meta``; a partition on the CPU is
fine), an epoch's kept set not empty while one step that keeps nothing is allowed, and what
the recorder counts as an epoch's decisions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from cirbench.backbones.base import TextBatch
from cirbench.cli import app
from cirbench.engine.cell.step_rules import BatchGuard, MethodContractError, check_epoch_kept, check_partition, check_step
from cirbench.method import Batch, Partition, StepOutput

ONE_EMPTY_STEP = '''
from cirbench_methods.sprc import SPRC


class OneEmptyStep(SPRC):
    """Keeps nothing at step 0 only (a small batch at a high rate), the lower half after."""

    name = "one_empty_step"
    partitions = True

    def training_step(self, batch, epoch, step):
        score = self.per_sample_losses(batch)["itc"].detach()
        clean = score < score.min() if step == 0 else score <= score.median()
        out = self.sprc_step(batch, rows=clean)
        out.selected_clean = clean
        return out
'''


def _batch(n: int = 4) -> Batch:
    return Batch(torch.arange(n), torch.ones(n, 2, 3), torch.ones(n, 2, 3),
                 TextBatch(torch.ones(n, 5, dtype=torch.long), torch.ones(n, 5, dtype=torch.bool)), [f"t{i}" for i in range(n)])


def test_a_batch_tensor_replaced_or_its_texts_changed_is_refused_naming_the_field() -> None:
    batch = _batch()
    guard = BatchGuard(batch)
    guard.check("m", 0, 0)  # nothing changed: nothing said
    batch.target = batch.target.clone()
    with pytest.raises(MethodContractError, match=r"method 'm': Batch.target must be left as the harness gave it .*"
                                                  r"another tensor in its place .* at epoch 0, step 0"):
        guard.check("m", 0, 0)
    batch = _batch()
    guard = BatchGuard(batch)
    batch.texts[1] = "changed"
    with pytest.raises(MethodContractError, match="Batch.texts must be left as the harness gave it"):
        guard.check("m", 0, 1)
    batch = _batch()
    guard = BatchGuard(batch)
    batch.text.mask.numpy()[0, 0] = False  # behind the version counter: the checksum sees it
    with pytest.raises(MethodContractError, match="Batch.text.mask must be left .* changed in place"):
        guard.check("m", 0, 2)


def test_a_loss_or_score_off_the_batchs_device_is_refused_and_a_cpu_partition_is_not() -> None:
    batch = _batch()
    loss = torch.zeros((), device="meta", requires_grad=True)
    with pytest.raises(MethodContractError, match=r"StepOutput.loss must be on the batch's device \(cpu\); got a "
                                                  r"torch.float32 tensor of shape \(\) on meta"):
        check_step("m", StepOutput(loss), batch, 0, 0)
    ok = torch.ones((), requires_grad=True) * 2
    with pytest.raises(MethodContractError, match=r"StepOutput.extra_scores\['u'\] must be on the batch's device"):
        check_step("m", StepOutput(ok, extra_scores={"u": torch.zeros(4, device="meta")}), batch, 0, 0)
    check_step("m", StepOutput(ok, noise_score=torch.zeros(4), selected_clean=torch.ones(4, dtype=torch.bool)), batch, 0, 0)
    check_partition("m", Partition(torch.zeros(6), torch.ones(6, dtype=torch.bool)), 6, 0, torch.device("cpu"))
    with pytest.raises(MethodContractError, match="Partition.selected_clean must be on the batch's device"):
        check_partition("m", Partition(np.zeros(6), torch.ones(6, dtype=torch.bool, device="meta")), 6, 0)


def test_an_epoch_that_keeps_nothing_is_refused_and_a_step_that_keeps_nothing_is_not(cache_dir: Path,
                                                                                      tmp_path: Path) -> None:
    check_epoch_kept("m", 0, 0, 0)  # no decision this epoch (a warm-up, a method that only scores)
    check_epoch_kept("m", 60, 1, 0)
    with pytest.raises(MethodContractError, match="got 0 of 60 rows kept at the end of epoch 1"):
        check_epoch_kept("m", 60, 0, 1)
    plugin = tmp_path / "one_empty_step.py"
    plugin.write_text(ONE_EMPTY_STEP)
    result = CliRunner().invoke(app, ["check-plugin", str(plugin), "--cache-dir", str(cache_dir)])
    assert result.exit_code == 0 and "method one_empty_step: conforms" in result.output, result.output
    assert "trained 2 epochs of 7 steps (batches of 9, the last three of 8)" in " ".join(result.output.split())
