"""Broken on purpose (issue 66): the step edits ``batch.reference`` through ``.data``, behind
autograd's version counter, before the loss."""

from cirbench_methods.sprc import SPRC


class BatchDataEdit(SPRC):
    """SPRC's loss on reference tokens it halved through ``.data``."""

    name = "batch_data_edit"

    def training_step(self, batch, epoch, step):
        batch.reference.data.mul_(0.5)
        return self.sprc_step(batch)
