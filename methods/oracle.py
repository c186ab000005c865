"""The oracle: a perfect filter. SPRC's loss on the truly clean triplets of each batch.

It reads the ground-truth noise flags (it declares ``oracle = True``, so the harness hands
them over and marks its results) and reports the true partition, so its purity is 1 by
construction. It filters the way filtering methods do (TME's ``lrm``, ConeSep's clean
rows): the loss is averaged over the clean rows only, and every target of the batch, the
noisy rows' included, stays a negative. It is what a method that finds every noisy triplet
and drops it would reach; it is *not* an upper bound on robust training (a method may learn
something from the noisy triplets too). The bound of any method is the same model on the
uncorrupted data: the noise-0 cell.
"""

from __future__ import annotations

import torch

from cirbench.method import Batch, StepOutput
from cirbench_methods.sprc import SPRC


class Oracle(SPRC):
    """SPRC's loss on the clean rows of every batch, all targets as negatives (see the module docstring)."""

    name = "oracle"
    version = "2"
    paper = "perfect filter: SPRC trained on the ground-truth clean triplets"
    partitions = True
    scores_noise = False
    oracle = True
    role = "perfect_filter"  # the report's room to win and calibration read it (cirbench.results.roles)
    same_at_no_noise = "sprc"  # with no noisy triplet every row is clean: the cell is sprc's
    ablations = {}  # sprc's temperature variant is sprc's question, not the perfect filter's

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        flags = torch.as_tensor(self.context.noise_flags, device=batch.index.device)[batch.index]
        out = self.sprc_step(batch, rows=~flags)
        out.noise_score, out.selected_clean = flags.float(), ~flags
        return out
