"""Datasets (the embedded ``shapes`` benchmark, FashionIQ, CIRR) and the noise layer."""
