"""Broken on purpose (issue 58): the epoch-level partition (``on_epoch_start``) covers one
sample fewer than the training split."""

import numpy as np

from cirbench.method import Partition
from cirbench_methods.sprc import SPRC


class ShortPartition(SPRC):
    """SPRC's loss; an epoch-level partition a sample short."""

    name = "short_partition"
    partitions = True

    def on_epoch_start(self, epoch):
        n = self.context.num_train - 1
        return Partition(noise_score=np.zeros(n), selected_clean=np.ones(n, dtype=bool))
