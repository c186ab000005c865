"""Broken on purpose (issue 58): ``training_step`` returns the loss tensor, not a StepOutput."""

from cirbench_methods.sprc import SPRC


class TensorResult(SPRC):
    """SPRC's loss, returned bare."""

    name = "tensor_result"

    def training_step(self, batch, epoch, step):
        return self.sprc_step(batch).loss
