"""cirbench: one harness for composed image retrieval under noisy triplet correspondence."""

__version__ = "0.1.0"
