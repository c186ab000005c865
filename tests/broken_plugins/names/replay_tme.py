"""Broken on purpose (issue 66): a method named ``replay:tme`` holds ``:``, the harness's
separator of a label's parts (``replay:<method>`` is a replay's label), so it is refused at
registration, naming the rule."""

from cirbench_methods.sprc import SPRC


class ReplayTme(SPRC):
    """SPRC under a name a grid could never select."""

    name = "replay:tme"
