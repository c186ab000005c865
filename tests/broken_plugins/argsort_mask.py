"""Broken on purpose (issue 58): ``selected_clean`` is an ``argsort`` of the scores, an
integer tensor of the batch's length, not a boolean mask. The harness once cast it with
``astype(bool)`` and recorded almost every sample as kept; now the cell stops at step 0."""

from cirbench_methods.sprc import SPRC


class ArgsortMask(SPRC):
    """SPRC's loss; its "kept" samples an argsort."""

    name = "argsort_mask"
    partitions = True

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        out.selected_clean = out.noise_score.argsort()
        return out
