"""cirbench: one harness for composed image retrieval under noisy triplet correspondence."""

from cirbench.settings.kernels import pin_environment

pin_environment()  # before torch and numpy load, when cirbench is imported first (cirbench/settings/kernels.py)

__version__ = "0.1.0"
