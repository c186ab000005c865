"""Broken on purpose (issue 66): ``selected_clean`` is built on the ``meta`` device (a shape
without values), which the recorder could only fail to copy."""

import torch

from cirbench_methods.sprc import SPRC


class MetaMask(SPRC):
    """SPRC's loss; a mask of the right shape and dtype on ``meta``."""

    name = "meta_mask"
    partitions = True

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        out.selected_clean = torch.ones(len(batch), dtype=torch.bool, device="meta")
        return out
