"""The harness's loop: feature caching, training, evaluation, purity, and the grid."""
