"""The FLOP formulas the profiling scripts add for the CPU's attention operators
(``benchmarks/_profiling.py``): the fused inference path and the training path of
``nn.MultiheadAttention`` count what the attention's matrix products do."""

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _profiling  # noqa: E402,F401 - registers the formulas


def attention_flops(batch: int, queries: int, keys: int, width: int) -> int:
    """Projections of queries (1), keys and values (2) and output (1), and the two attention products."""
    return 2 * batch * width * width * (2 * queries + 2 * keys) + 2 * 2 * batch * queries * keys * width


@pytest.mark.parametrize("queries, keys", [(40, 40), (8, 16)])
def test_both_attention_paths_count_the_attention_products(queries: int, keys: int) -> None:
    """Self-attention (one tensor for queries, keys and values) takes the fused inference
    operator, cross-attention the unfused one; both count the same."""
    attention = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    kv = torch.randn(3, keys, 32)
    q = kv if queries == keys else torch.randn(3, queries, 32)
    padding = torch.zeros(3, keys, dtype=torch.bool)
    padding[:, keys // 2:] = True
    training, inference = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with training:
        attention.train()(q, kv, kv, key_padding_mask=padding, need_weights=False)[0].sum().backward()
    with torch.inference_mode(), inference:
        attention.eval()(q, kv, kv, key_padding_mask=padding, need_weights=False)
    forward = attention_flops(3, queries, keys, 32)
    assert inference.get_total_flops() == forward
    fused = "aten._native_multi_head_attention" in {str(op) for op in inference.get_flop_counts()["Global"]}
    assert fused == (q is kv)
    assert training.get_total_flops() > 2 * forward  # backward counted too, its attention part included
    counted = {str(op) for op in training.get_flop_counts()["Global"]}
    assert {"aten._scaled_dot_product_flash_attention_for_cpu",
            "aten._scaled_dot_product_flash_attention_for_cpu_backward"} <= counted
