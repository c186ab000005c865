"""Broken on purpose (issue 66): the comparison is reversed past every score, so the mask
keeps no row of any batch: every step trains on nothing (a loss of 0), purity reads "-"."""

from cirbench_methods.sprc import SPRC


class EmptyKeptSet(SPRC):
    """SPRC's loss over the kept rows, of which there are none."""

    name = "empty_kept_set"
    partitions = True

    def training_step(self, batch, epoch, step):
        score = self.per_sample_losses(batch)["itc"].detach()
        clean = score < score.min()  # meant: score <= threshold
        out = self.sprc_step(batch, rows=clean)
        out.selected_clean = clean
        return out
