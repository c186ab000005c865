"""Broken on purpose (issue 58): ``noise_score`` holds a NaN (a 0/0 in a normalisation)."""

import torch

from cirbench_methods.sprc import SPRC


class NanScore(SPRC):
    """SPRC's loss; a noise score with a NaN in it."""

    name = "nan_score"

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        out.noise_score = torch.cat([out.noise_score[:-1], torch.full((1,), float("nan"))])
        return out
