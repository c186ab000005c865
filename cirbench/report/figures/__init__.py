"""The report's figures room: the matplotlib figures, each written as a PNG with its title,
caption and alt text, and the palette every figure shares.

It may import the ``analysis`` room, and neither ``tables`` (a sibling) nor ``render``."""
