"""Tests for the batched log-domain Sinkhorn solver with blocked paths (cirbench.method.ot)."""

from __future__ import annotations

import numpy as np
import ot as pot
import pytest
import torch

from cirbench.method.ot import sinkhorn_log


def _pot_plan(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float) -> np.ndarray:
    return pot.sinkhorn(a.numpy(), b.numpy(), cost.numpy(), epsilon, method="sinkhorn_log", numItermax=5000, stopThr=1e-13)


@pytest.mark.parametrize("epsilon", [0.05, 0.5])
def test_agrees_with_pot_on_finite_costs(epsilon: float) -> None:
    gen = torch.Generator().manual_seed(0)
    cost = torch.rand(6, 9, generator=gen, dtype=torch.float64)
    a = torch.rand(6, generator=gen, dtype=torch.float64) + 0.1
    b = torch.rand(9, generator=gen, dtype=torch.float64) + 0.1
    a, b = a / a.sum(), b / b.sum()
    plan = sinkhorn_log(cost, epsilon, iterations=5000, a=a, b=b)
    np.testing.assert_allclose(plan.numpy(), _pot_plan(cost, a, b, epsilon), atol=1e-9)


def test_uniform_marginals_hold() -> None:
    cost = torch.rand(8, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    plan = sinkhorn_log(cost, 0.03, iterations=150)
    torch.testing.assert_close(plan.sum(1), torch.full((8,), 1 / 8, dtype=torch.float64), atol=1e-8, rtol=0)
    torch.testing.assert_close(plan.sum(0), torch.full((16,), 1 / 16, dtype=torch.float64), atol=1e-12, rtol=0)


def test_blocked_paths_carry_no_mass_and_force_the_plan() -> None:
    # Two sources, two sinks, each source barred from its cheap sink: the only feasible plan
    # is the anti-diagonal, whatever the costs say.
    cost = torch.tensor([[0.0, 5.0], [5.0, 0.0]], dtype=torch.float64)
    blocked = torch.tensor([[True, False], [False, True]])
    plan = sinkhorn_log(cost, 0.1, iterations=50, blocked=blocked)
    torch.testing.assert_close(plan, torch.tensor([[0.0, 0.5], [0.5, 0.0]], dtype=torch.float64))


def test_blocked_paths_match_pot_with_a_huge_cost() -> None:
    gen = torch.Generator().manual_seed(2)
    cost = torch.rand(5, 10, generator=gen, dtype=torch.float64)
    blocked = torch.zeros(5, 10, dtype=torch.bool)
    blocked[torch.arange(5), torch.arange(5)] = True
    blocked[1, 7] = True
    plan = sinkhorn_log(cost, 0.1, iterations=5000, blocked=blocked)
    assert (plan[blocked] == 0).all()
    torch.testing.assert_close(plan.sum(1), torch.full((5,), 0.2, dtype=torch.float64), atol=1e-9, rtol=0)
    a, b = torch.full((5,), 0.2, dtype=torch.float64), torch.full((10,), 0.1, dtype=torch.float64)
    reference = _pot_plan(cost + 1e3 * blocked, a, b, 0.1)
    np.testing.assert_allclose(plan.numpy(), reference, atol=1e-9)


def test_batched_equals_one_by_one() -> None:
    gen = torch.Generator().manual_seed(3)
    cost = torch.rand(3, 4, 8, generator=gen)
    blocked = torch.rand(3, 4, 8, generator=gen) < 0.2
    blocked[..., 0] = False  # keep every row feasible
    batched = sinkhorn_log(cost, 0.05, iterations=200, blocked=blocked)
    for k in range(3):
        torch.testing.assert_close(batched[k], sinkhorn_log(cost[k], 0.05, iterations=200, blocked=blocked[k]))


def test_early_stop_reaches_the_tolerance() -> None:
    cost = torch.rand(6, 12, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    plan = sinkhorn_log(cost, 0.1, iterations=10_000, tol=1e-9)
    assert ((plan.sum(1) - 1 / 6).abs() * 6).max() < 1e-9


def test_bad_input_is_named() -> None:
    cost = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="non-finite"):
        sinkhorn_log(torch.tensor([[0.0, float("inf")], [0.0, 0.0]]), 0.1)
    with pytest.raises(ValueError, match="epsilon"):
        sinkhorn_log(cost, 0.0)
    with pytest.raises(ValueError, match="every path blocked"):
        sinkhorn_log(cost, 0.1, blocked=torch.tensor([[True, True, True], [False, False, False]]))
    with pytest.raises(ValueError, match="do not fit"):
        sinkhorn_log(cost, 0.1, a=torch.full((3,), 1 / 3))


def test_low_precision_costs_are_solved_in_float32() -> None:
    cost = torch.rand(4, 8, generator=torch.Generator().manual_seed(5))
    plan = sinkhorn_log(cost.bfloat16(), 0.05, iterations=300)
    assert plan.dtype == torch.float32
    torch.testing.assert_close(plan.sum(0), torch.full((8,), 1 / 8), atol=1e-6, rtol=0)
