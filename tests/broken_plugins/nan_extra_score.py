"""Broken on purpose (issue 58): an extra score (``extra_scores``) holds a NaN; it is held
to the rule of ``noise_score``."""

import torch

from cirbench_methods.sprc import SPRC


class NanExtraScore(SPRC):
    """SPRC's loss and score; an extra score with a NaN in it."""

    name = "nan_extra_score"

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        out.extra_scores["uncertainty"] = torch.cat([out.noise_score[1:], torch.full((1,), float("nan"))])
        return out
