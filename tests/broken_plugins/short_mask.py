"""Broken on purpose (issue 58): ``selected_clean`` is one sample short of the batch."""

from cirbench_methods.sprc import SPRC


class ShortMask(SPRC):
    """SPRC's loss; a mask that leaves out the batch's last sample."""

    name = "short_mask"
    partitions = True

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        out.selected_clean = (out.noise_score <= out.noise_score.median())[:-1]
        return out
