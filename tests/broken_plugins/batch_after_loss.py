"""Broken on purpose (issue 66): the step scales ``batch.target`` in place after its loss is
built, which would break the loss's backward pass with autograd's own words."""

from cirbench_methods.sprc import SPRC


class BatchAfterLoss(SPRC):
    """SPRC's loss, then the batch's target tokens changed under it."""

    name = "batch_after_loss"

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        batch.target.mul_(0.5)
        return out
