"""The oracle: SPRC trained on the truly clean triplets only.

It reads the ground-truth noise flags (it declares ``oracle = True``, so the harness hands
them over and marks its results), drops every noisy sample from each batch, and reports the
true partition, so its purity is 1 by construction. It is the upper bound every robust
method is measured against, not a method one could run on real data.
"""

from __future__ import annotations

import torch

from cirbench.method import Batch, StepOutput
from cirbench_methods.sprc import SPRC


class Oracle(SPRC):
    """SPRC on the clean subset of every batch (see the module docstring)."""

    name = "oracle"
    version = "1"
    paper = "upper bound: SPRC trained on ground-truth clean triplets"
    partitions = True
    oracle = True

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        flags = torch.as_tensor(self.context.noise_flags, device=batch.index.device)[batch.index]
        clean = ~flags
        keep = clean.nonzero().squeeze(1)
        if len(keep) >= 2:
            sub = Batch(batch.index[keep], batch.reference[keep], batch.target[keep], batch.text.select(keep), [batch.texts[i] for i in keep.tolist()])
            out = super().training_step(sub, epoch, step)
        else:  # too few clean samples for a contrastive loss: no update from this batch
            out = StepOutput(sum(p.sum() * 0.0 for p in self.parameters() if p.requires_grad))
        out.noise_score, out.selected_clean = flags.float(), clean
        return out
