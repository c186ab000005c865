"""Broken on purpose (issue 58): ``noise_score`` is each sample's rank, an integer tensor,
not a float score."""

from cirbench_methods.sprc import SPRC


class RankScore(SPRC):
    """SPRC's loss; the ranks of its scores as the score."""

    name = "rank_score"

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        out.noise_score = out.noise_score.argsort().argsort()
        return out
