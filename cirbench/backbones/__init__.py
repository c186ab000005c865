"""Backbones: a frozen image tower plus a trainable Q-Former-style composer."""
