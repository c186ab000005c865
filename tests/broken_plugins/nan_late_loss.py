"""Broken on purpose (issue 66): the loss is finite for three steps, then NaN from step 3
on (a log of zero once the model fits), so the cell stops at step 3, not before."""

import torch

from cirbench_methods.sprc import SPRC


class NanLateLoss(SPRC):
    """SPRC's loss, NaN from the fourth step on."""

    name = "nan_late_loss"

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        if step >= 3:
            out.loss = out.loss * torch.tensor(float("nan"))
        return out
