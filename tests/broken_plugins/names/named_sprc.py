"""Broken on purpose (issue 58): a user's method named ``sprc``, the built-in baseline's
name. ``check-plugin`` and ``run --plugin`` refuse it, naming both files; it once trained
the built-in instead and exited 0."""

from cirbench.method import Method, StepOutput


class MySprc(Method):
    """A method whose name is taken."""

    name = "sprc"

    def training_step(self, batch, epoch, step):
        return StepOutput(self.backbone.composed_feature(batch.reference, batch.text).sum() * 0)
