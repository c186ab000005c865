"""Broken on purpose (issue 66): ``selected_clean`` has the batch's length at steps 0 and 1
and is one short from step 2 on: a check that trains two steps never sees it."""

from cirbench_methods.sprc import SPRC


class LaterShortMask(SPRC):
    """SPRC's loss; a mask that is right twice, then a sample short."""

    name = "later_short_mask"
    partitions = True

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        clean = out.noise_score <= out.noise_score.median()
        out.selected_clean = clean if step < 2 else clean[:-1]
        return out
