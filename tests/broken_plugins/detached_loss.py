"""Broken on purpose (issue 58): the loss is detached, so it does not require grad."""

from cirbench_methods.sprc import SPRC


class DetachedLoss(SPRC):
    """SPRC's loss, detached from the graph."""

    name = "detached_loss"

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        out.loss = out.loss.detach()
        return out
