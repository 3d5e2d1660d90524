"""Masked reductions against hand values; a fully masked row gives 0 and no NaN anywhere."""

from __future__ import annotations

import math

import pytest
import torch

from seqrl.core.masking import masked_mean, masked_sum, masked_var, masked_whiten

F64 = torch.float64
X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=F64)
M = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=F64)  # kept: 1, 2 | 4


def close(a, b):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=F64), atol=1e-12, rtol=0)


def test_masked_sum_and_mean():
    close(masked_sum(X, M), 7.0)  # 1 + 2 + 4
    close(masked_sum(X, M, dim=1), [3.0, 4.0])
    close(masked_mean(X, M), 7.0 / 3)
    close(masked_mean(X, M, dim=1), [1.5, 4.0])
    close(masked_mean(X, M.bool(), dim=0), [2.5, 2.0, 0.0])  # (1+4)/2, 2/1, nothing → 0


def test_masked_var_unbiased_and_biased():
    # kept 1, 2, 4: mean 7/3, squared deviations (16 + 1 + 25)/9 = 42/9
    close(masked_var(X, M), 42 / 9 / 2)
    close(masked_var(X, M, unbiased=False), 42 / 9 / 3)


def test_masked_whiten():
    x = torch.tensor([[1.0, 3.0, 100.0]], dtype=F64)
    m = torch.tensor([[1, 1, 0]], dtype=F64)
    # mean 2, unbiased var (1 + 1)/1 = 2 → (x − 2)/sqrt(2 + eps); masked-out position → 0
    s = math.sqrt(2 + 1e-8)
    close(masked_whiten(x, m), [[-1 / s, 1 / s, 0.0]])
    close(masked_whiten(x, m, shift_mean=False), [[2 - 1 / s, 2 + 1 / s, 0.0]])


def test_fully_masked_row_is_zero_without_nan_in_value_or_gradient():
    x = torch.tensor([[1.0, 2.0], [float("nan"), float("inf")]], dtype=F64, requires_grad=True)
    m = torch.tensor([[1, 0], [0, 0]], dtype=F64)
    per_row = masked_mean(x, m, dim=1)
    close(per_row.detach(), [1.0, 0.0])
    total = per_row.sum() + masked_var(x, m) + masked_whiten(x, m).sum() + masked_sum(x, m)
    assert torch.isfinite(total)
    total.backward()
    assert torch.isfinite(x.grad).all()
    assert (x.grad[1] == 0).all()

    empty = torch.zeros(2, 3, dtype=F64)
    close(masked_mean(X, empty), 0.0)
    close(masked_var(X, empty), 0.0)
    close(masked_whiten(X, empty), torch.zeros(2, 3))


def test_single_kept_entry_has_zero_variance():
    close(masked_var(X, torch.tensor([[0, 1, 0], [0, 0, 0]])), 0.0)


def test_mask_shape_mismatch_is_named():
    with pytest.raises(ValueError, match="masked_mean: mask shape"):
        masked_mean(X, torch.ones(2, 2))
