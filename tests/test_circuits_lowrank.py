"""LowRankMatrix: every factored shortcut equals the dense definition."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from circuitwidgets.circuits import LowRankMatrix
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError, ShapeError

SETTINGS = settings(max_examples=25, deadline=None)
dims = st.integers(min_value=1, max_value=12)
seeds = st.integers(min_value=0, max_value=2**16)


def random_lowrank(m: int, r: int, n: int, seed: int) -> LowRankMatrix:
    g = torch.Generator().manual_seed(seed)
    return LowRankMatrix(
        torch.randn(m, r, generator=g, dtype=torch.float64), torch.randn(r, n, generator=g, dtype=torch.float64)
    )


def dense_of(m: int, r: int, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, r, generator=g, dtype=torch.float64) @ torch.randn(r, n, generator=g, dtype=torch.float64)


@SETTINGS
@given(m=dims, r=dims, n=dims, seed=seeds)
def test_factors_are_split_at_the_narrowest_dimension(m: int, r: int, n: int, seed: int) -> None:
    M = random_lowrank(m, r, n, seed)
    assert M.inner_dim == min(m, n, r)
    torch.testing.assert_close(M.dense(), dense_of(m, r, n, seed))


@SETTINGS
@given(m=dims, r=dims, n=dims, r2=dims, p=dims, seed=seeds)
def test_products_equal_dense_products(m: int, r: int, n: int, r2: int, p: int, seed: int) -> None:
    left = random_lowrank(m, r, n, seed)
    right = random_lowrank(n, r2, p, seed + 1)
    dense = torch.randn(n, p, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    torch.testing.assert_close((left @ right).dense(), left.dense() @ right.dense())
    torch.testing.assert_close((left @ dense).dense(), left.dense() @ dense)
    torch.testing.assert_close((dense.T @ left.T).dense(), (left.dense() @ dense).T)
    torch.testing.assert_close(left.T.dense(), left.dense().T)
    torch.testing.assert_close((-left * 2.0).dense(), -2.0 * left.dense())
    assert (left @ right).inner_dim <= min(left.inner_dim, right.inner_dim, m, p)


@SETTINGS
@given(n=dims, r=dims, seed=seeds)
def test_eigenvalues_of_ab_are_those_of_ba(n: int, r: int, seed: int) -> None:
    M = random_lowrank(n, r, n, seed)
    ours = M.eigenvalues().numpy()
    dense = np.linalg.eigvals(M.dense().numpy())
    # The dense matrix has the same eigenvalues plus n - r zeros.
    padded = np.concatenate([ours, np.zeros(n - ours.size)])
    np.testing.assert_allclose(np.sort_complex(np.round(padded, 8)), np.sort_complex(np.round(dense, 8)), atol=1e-6)
    assert M.trace() == pytest.approx(float(torch.trace(M.dense())), abs=1e-9)


@SETTINGS
@given(m=dims, r=dims, n=dims, seed=seeds)
def test_svd_from_the_small_middle_matrix_reconstructs_the_product(m: int, r: int, n: int, seed: int) -> None:
    M = random_lowrank(m, r, n, seed)
    U, S, Vh = M.svd()
    torch.testing.assert_close(U @ torch.diag(S) @ Vh, M.dense())
    torch.testing.assert_close(U.T @ U, torch.eye(U.shape[1], dtype=U.dtype))
    dense_s = torch.linalg.svdvals(M.dense())[: S.numel()]
    torch.testing.assert_close(S, dense_s)
    torch.testing.assert_close(M.singular_values(), dense_s)


@SETTINGS
@given(m=dims, r=dims, n=dims, seed=seeds)
def test_frobenius_norm_equals_the_dense_norm(m: int, r: int, n: int, seed: int) -> None:
    M = random_lowrank(m, r, n, seed)
    assert M.frobenius_norm() == pytest.approx(float(M.dense().norm()), rel=1e-10)


def test_frobenius_norm_is_not_the_permuted_product() -> None:
    """The paper's library bug: ‖BA‖_F ≠ ‖AB‖_F although trace and eigenvalues agree."""
    g = torch.Generator().manual_seed(3)
    A = torch.randn(8, 3, generator=g, dtype=torch.float64)
    B = torch.randn(3, 8, generator=g, dtype=torch.float64)
    M = LowRankMatrix(A, B)
    dense_norm = float((A @ B).norm())
    permuted_norm = float((B @ A).norm())
    assert torch.trace(A @ B).item() == pytest.approx(torch.trace(B @ A).item())
    assert abs(permuted_norm - dense_norm) > 0.05 * dense_norm
    assert M.frobenius_norm() == pytest.approx(dense_norm, rel=1e-12)


@SETTINGS
@given(m=dims, r=dims, n=dims, seed=seeds, data=st.data())
def test_slices_equal_dense_slices(m: int, r: int, n: int, seed: int, data: st.DataObject) -> None:
    M = random_lowrank(m, r, n, seed)
    D = M.dense()
    rows = data.draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=6))
    cols = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=6))
    i, j = data.draw(st.integers(-m, m - 1)), data.draw(st.integers(-n, n - 1))
    sub = M[rows, cols]
    assert isinstance(sub, LowRankMatrix)
    torch.testing.assert_close(sub.dense(), D[rows][:, cols])
    torch.testing.assert_close(M[i, :], D[i])
    torch.testing.assert_close(M[:, j], D[:, j])
    torch.testing.assert_close(M[i, j], D[i, j])
    half = M[: max(1, m // 2)]
    assert isinstance(half, LowRankMatrix)
    torch.testing.assert_close(half.dense(), D[: max(1, m // 2)])


@SETTINGS
@given(m=dims, r=dims, n=dims, seed=seeds)
def test_diagonal_is_chunked_and_exact(m: int, r: int, n: int, seed: int) -> None:
    M = random_lowrank(m, r, n, seed)
    torch.testing.assert_close(M.diagonal(memory_budget=16), torch.diagonal(M.dense()))


@SETTINGS
@given(m=dims, r=dims, n=dims, seed=seeds, data=st.data())
def test_global_topk_over_row_blocks_equals_dense_topk(m: int, r: int, n: int, seed: int, data: st.DataObject) -> None:
    M = random_lowrank(m, r, n, seed)
    D = M.dense()
    k = data.draw(st.integers(1, m * n))
    budget = data.draw(st.sampled_from([8, 8 * n, 10**6]))  # one row per block, some, all
    for largest in (True, False):
        top = M.topk(k, largest=largest, memory_budget=budget)
        expected = torch.topk(D.flatten(), k, largest=largest).values
        torch.testing.assert_close(top.values, expected)
        torch.testing.assert_close(D[top.rows, top.cols], top.values)


@SETTINGS
@given(m=dims, r=dims, n=dims, seed=seeds, data=st.data())
def test_row_and_column_topk_equal_dense_topk(m: int, r: int, n: int, seed: int, data: st.DataObject) -> None:
    M = random_lowrank(m, r, n, seed)
    D = M.dense()
    k_row, k_col = data.draw(st.integers(1, n)), data.draw(st.integers(1, m))
    rows = M.topk_rows(k_row, memory_budget=8 * n)
    torch.testing.assert_close(rows.values, torch.topk(D, k_row, dim=1).values)
    torch.testing.assert_close(D.gather(1, rows.indices), rows.values)
    cols = M.topk_cols(k_col, largest=False, memory_budget=8)
    torch.testing.assert_close(cols.values, torch.topk(D.T, k_col, dim=1, largest=False).values)
    torch.testing.assert_close(D.T.gather(1, cols.indices), cols.values)


@SETTINGS
@given(m=dims, r=dims, n=dims, seed=seeds, data=st.data())
def test_rank_in_rows_counts_strictly_larger_entries(m: int, r: int, n: int, seed: int, data: st.DataObject) -> None:
    M = random_lowrank(m, r, n, seed)
    D = M.dense()
    cols = torch.tensor(data.draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m)))
    expected = (D > D.gather(1, cols[:, None])).sum(1)
    torch.testing.assert_close(M.rank_in_rows(cols, memory_budget=8 * n), expected)


def test_chunk_size_follows_the_memory_budget() -> None:
    M = random_lowrank(1000, 4, 500, 0)
    assert M.block_rows(8 * 500 * 10) == 10
    assert M.block_rows(1) == 1
    assert M.block_rows(10**12) == 1000


def test_dense_refuses_large_products() -> None:
    M = LowRankMatrix(torch.zeros(2000, 2), torch.zeros(2, 2000))
    with pytest.raises(MemoryBudgetError, match="max_entries"):
        M.dense(max_entries=1000)


def test_errors_name_the_argument_and_what_was_received() -> None:
    with pytest.raises(ShapeError, match=r"B: expected 3 rows"):
        LowRankMatrix(torch.zeros(4, 3), torch.zeros(2, 4))
    with pytest.raises(ArgumentTypeError, match="A: expected a floating-point"):
        LowRankMatrix(torch.zeros(4, 3, dtype=torch.long), torch.zeros(3, 4, dtype=torch.long))
    M = random_lowrank(4, 2, 5, 0)
    with pytest.raises(ShapeError, match="eigenvalues: expected a square matrix, got shape"):
        M.eigenvalues()
    with pytest.raises(ArgumentError, match=r"rows: expected an index in \[-4, 4\), got 7"):
        M[7, :]
    with pytest.raises(ArgumentError, match=r"k: expected an int in \[1, 21\), got 0"):
        M.topk(0)
    with pytest.raises(ShapeError, match="other: expected a"):
        M @ torch.zeros(3, 3, dtype=torch.float64)


# --- sums and TransformerLens aliases ---------------------------------------------


@SETTINGS
@given(m=dims, n=dims, r1=dims, r2=dims, seed=seeds)
def test_sum_of_two_factored_matrices_equals_the_dense_sum(m: int, n: int, r1: int, r2: int, seed: int) -> None:
    left, right = random_lowrank(m, r1, n, seed), random_lowrank(m, r2, n, seed + 1)
    total = left + right
    torch.testing.assert_close(total.dense(), left.dense() + right.dense())
    torch.testing.assert_close((left - right).dense(), left.dense() - right.dense())
    torch.testing.assert_close(sum([left, right, left]).dense(), 2 * left.dense() + right.dense())  # type: ignore[union-attr]
    assert total.inner_dim == min(left.inner_dim + right.inner_dim, m, n)
    assert total.frobenius_norm() == pytest.approx(float((left.dense() + right.dense()).norm()), rel=1e-9, abs=1e-12)


@SETTINGS
@given(n=dims, r1=dims, r2=dims, seed=seeds)
def test_eigenvalues_of_a_sum_are_those_of_the_dense_sum(n: int, r1: int, r2: int, seed: int) -> None:
    """An "effective circuit" of two heads: λ([A1 A2][B1; B2]) from the small [B1; B2][A1 A2]."""
    total = random_lowrank(n, r1, n, seed) + random_lowrank(n, r2, n, seed + 1)
    ours = total.eigenvalues().numpy()
    dense = np.linalg.eigvals(total.dense().numpy())
    padded = np.concatenate([ours, np.zeros(n - ours.size)])
    np.testing.assert_allclose(np.sort_complex(np.round(padded, 7)), np.sort_complex(np.round(dense, 7)), atol=1e-5)
    assert total.trace() == pytest.approx(float(torch.trace(total.dense())), abs=1e-9)


def test_a_sum_of_rank_one_matrices_keeps_the_added_rank_and_not_more() -> None:
    g = torch.Generator().manual_seed(5)
    parts = [
        LowRankMatrix(
            torch.randn(30, 1, generator=g, dtype=torch.float64), torch.randn(1, 20, generator=g, dtype=torch.float64)
        )
        for _ in range(3)
    ]
    total = parts[0] + parts[1] + parts[2]
    assert total.inner_dim == 3
    assert int(torch.linalg.matrix_rank(total.dense())) == 3
    assert (total.singular_values()[:3] > 1e-6).all()


def test_ab_and_norm_are_aliases_of_dense_and_frobenius_norm() -> None:
    M = random_lowrank(7, 3, 5, 11)
    torch.testing.assert_close(M.AB, M.dense(), rtol=0, atol=0)
    assert M.norm() == M.frobenius_norm()
    assert isinstance(M.norm(), float)


def test_ab_refuses_what_dense_refuses_by_default() -> None:
    M = LowRankMatrix(torch.zeros(9000, 1), torch.zeros(1, 9000))  # 81M entries > DEFAULT_DENSE_LIMIT
    with pytest.raises(MemoryBudgetError, match=r"AB: forming a \[9000, 9000\].*dense\(max_entries=") as info:
        _ = M.AB
    with pytest.raises(MemoryBudgetError, match="max_entries"):
        M.dense()
    assert "81,000,000 entries" in str(info.value)


def test_adding_anything_but_a_matching_low_rank_matrix_is_refused_naming_other() -> None:
    M = random_lowrank(4, 2, 5, 0)
    with pytest.raises(ShapeError, match=r"other: expected shape \(4, 5\).*got shape \(5, 4\)"):
        M + M.T
    with pytest.raises(ShapeError, match=r"other: expected shape \(4, 5\)"):
        M - random_lowrank(4, 2, 6, 0)
    with pytest.raises(ArgumentTypeError, match=r"other: expected dtype torch.float64.*got torch.float32"):
        M + LowRankMatrix(M.A.float(), M.B.float())
    with pytest.raises(ArgumentTypeError, match=r"other: expected a LowRankMatrix.*M\.dense\(\).*got Tensor"):
        M + M.dense()
    with pytest.raises(ArgumentTypeError, match=r"other: expected a LowRankMatrix.*got Tensor"):
        M.dense() + M
    with pytest.raises(ArgumentTypeError, match="other: expected a LowRankMatrix to add, got float"):
        M + 1.0  # type: ignore[operator]
    with pytest.raises(ArgumentTypeError, match="other: expected a LowRankMatrix to add, got int"):
        1 + M  # type: ignore[operator]
    with pytest.raises(ArgumentTypeError, match="other: expected a LowRankMatrix to add, got bool"):
        False + M  # type: ignore[operator]
    assert (0 + M) is M


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device")
def test_adding_a_matrix_on_another_device_is_refused_naming_other() -> None:
    M = random_lowrank(4, 2, 5, 0)
    with pytest.raises(ArgumentTypeError, match=r"other: expected dtype torch.float64 on cpu.*on cuda"):
        M + LowRankMatrix(M.A.cuda(), M.B.cuda())
