"""Broken on purpose (issue 58): ``noise_score`` is one value short of the batch."""

from cirbench_methods.sprc import SPRC


class ShortScore(SPRC):
    """SPRC's loss; a noise score that leaves out the batch's last sample."""

    name = "short_score"

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        out.noise_score = out.noise_score[:-1]
        return out
