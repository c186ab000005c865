"""Broken on purpose (issue 58): the loss is the per-sample losses (B,), never reduced."""

from cirbench_methods.sprc import SPRC


class VectorLoss(SPRC):
    """SPRC's per-sample itc losses as the loss."""

    name = "vector_loss"

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        out.loss = self.per_sample_losses(batch)["itc"]
        return out
