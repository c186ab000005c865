"""The report's tables room: the table models (``TableModel``, its cells already worded) built
from what the analysis computed; nothing is drawn or rendered here.

It may import the ``analysis`` room, and neither ``figures`` (a sibling) nor ``render``."""
