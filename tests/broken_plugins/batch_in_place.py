"""Broken on purpose (issue 66): the step zeroes ``batch.reference`` in place before the loss,
so it trains on blank reference images while the harness records the batch it gave."""

from cirbench_methods.sprc import SPRC


class BatchInPlace(SPRC):
    """SPRC's loss on a batch whose reference tokens it erased."""

    name = "batch_in_place"

    def training_step(self, batch, epoch, step):
        batch.reference.zero_()
        return self.sprc_step(batch)
