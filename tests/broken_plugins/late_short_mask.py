"""Broken on purpose (issue 58): ``selected_clean`` has the batch's length at step 0 and is
one short from step 1 on, so the cell stops mid-way, at step 1."""

from cirbench_methods.sprc import SPRC


class LateShortMask(SPRC):
    """SPRC's loss; a mask that is right once, then a sample short."""

    name = "late_short_mask"
    partitions = True

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        clean = out.noise_score <= out.noise_score.median()
        out.selected_clean = clean if step == 0 else clean[:-1]
        return out
