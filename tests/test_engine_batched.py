"""The batched engine equals the per-head engine and the dense definitions, head by head.

Models here have grouped-query attention (key/value heads shared by query heads)
and rotary layers (one of them NoPE), so every stack exercises the broadcast
key/value factors and the rotation core; float64 keeps the dense checks tight.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_random_model

import circuitwidgets.circuits as cw
from circuitwidgets import _checks
from circuitwidgets.circuits import _precision
from circuitwidgets.circuits.copying import matrix_copying_score
from circuitwidgets.circuits.lowrank import LowRankMatrix
from circuitwidgets.circuits.stack import LowRankStack
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError, NonFiniteError, ShapeError
from circuitwidgets.model import CircuitModel, ModelConfig
from circuitwidgets.model.rotary import rotation_matrix


def gqa_model(
    n_layers: int = 3, n_heads: int = 4, n_kv: int = 2, d: int = 12, dh: int = 4, V: int = 30, seed: int = 0
) -> CircuitModel:
    """Rotary, grouped-query attention; layer 0 is NoPE (zero frequencies)."""
    g = torch.Generator().manual_seed(seed)
    L = n_layers

    def r(*shape: int, std: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    freq = 1.0 / (100.0 ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
    rotary = freq[None].repeat(L, 1)
    rotary[0] = 0
    weights = {
        "W_E": r(V, d),
        "W_Q": r(L, n_heads, d, dh, std=d**-0.5),
        "W_K": r(L, n_kv, d, dh, std=d**-0.5),
        "W_V": r(L, n_kv, d, dh, std=d**-0.5),
        "W_O": r(L, n_heads, dh, d, std=(n_heads * dh) ** -0.5),
        "W_U": r(d, V, std=d**-0.5),
        "rotary_freq": rotary,
    }
    cfg = ModelConfig(L, n_heads, d, dh, V, 16, positional_embedding_type="rotary", n_kv_heads=n_kv)
    return CircuitModel(cfg, weights, name=f"gqa-rotary-{L}l")


def dense_qk(model: CircuitModel, layer: int, head: int, offset: int) -> torch.Tensor:
    """``W_Q R(Δ) W_Kᵀ`` from the definition (DESIGN.md §3a), the key head ``h // (H / G)``."""
    freq = model.rotary_freq(layer)
    R = (
        torch.eye(model.cfg.d_head, dtype=torch.float64)
        if freq is None
        else rotation_matrix(freq, offset, model.cfg.d_head)
    )
    return model.W_Q[layer, head] @ R @ model.W_K[layer, model.cfg.kv_head(head)].T


def dense_ov(model: CircuitModel, layer: int, head: int) -> torch.Tensor:
    return model.W_V[layer, model.cfg.kv_head(head)] @ model.W_O[layer, head]


def heads(model: CircuitModel) -> list[tuple[int, int]]:
    return [(lay, hd) for lay in range(model.cfg.n_layers) for hd in range(model.cfg.n_heads)]


# --- stacks of circuits ------------------------------------------------------------


def test_ov_and_qk_stacks_hold_every_heads_circuit_with_shared_key_value_heads() -> None:
    model = gqa_model()
    ov, qk = cw.OV(model), cw.QK(model, offset=3)
    assert ov.batch_shape == qk.batch_shape == (3, 4)
    assert ov.matrix_shape == (12, 12) and ov.inner_dim == 4
    assert ov._A.data_ptr() == model.W_V.data_ptr()  # the value heads themselves, not a per-query-head copy
    for layer, head in heads(model):
        torch.testing.assert_close(ov[layer, head].dense(), dense_ov(model, layer, head))
        torch.testing.assert_close(qk[layer, head].dense(), dense_qk(model, layer, head, 3))
        torch.testing.assert_close(qk[layer, head].dense(), cw.W_QK(model, layer, head, offset=3).dense())


def test_full_circuit_stacks_are_sandwiches_formed_only_per_matrix() -> None:
    model = gqa_model()
    full = model.W_E @ cw.OV(model) @ model.W_U
    assert full.shape == (3, 4, 30, 30)
    dense = full.dense()
    torch.testing.assert_close(full.A @ full.B, dense)  # TransformerLens's factors, formed
    qk = model.W_E @ cw.QK(model, offset=2) @ model.W_E.T
    torch.testing.assert_close(qk.A @ qk.B, qk.dense())
    for layer, head in heads(model):
        expected = model.W_E @ dense_ov(model, layer, head) @ model.W_U
        torch.testing.assert_close(dense[layer, head], expected)
        torch.testing.assert_close(cw.full_ov(model, layer, head).dense(), expected)


def test_batched_spectra_norms_and_traces_equal_each_matrix_and_the_dense_definition() -> None:
    model = gqa_model()
    for stack in (model.W_E @ cw.QK(model, offset=2) @ model.W_E.T, model.W_E @ cw.OV(model) @ model.W_U):
        eigs, norms, traces = stack.eigenvalues(), stack.frobenius_norm(), stack.trace()
        singular = stack.singular_values()
        for layer, head in heads(model):
            matrix = stack[layer, head]
            assert isinstance(matrix, LowRankMatrix)
            dense = matrix.dense()
            np.testing.assert_allclose(
                np.sort_complex(eigs[layer, head].numpy()), np.sort_complex(matrix.eigenvalues().numpy()), atol=1e-9
            )
            assert float(norms[layer, head]) == pytest.approx(float(dense.norm()), rel=1e-10)
            assert float(traces[layer, head]) == pytest.approx(float(torch.trace(dense)), abs=1e-9)
            np.testing.assert_allclose(
                singular[layer, head].numpy(), torch.linalg.svdvals(dense)[:4].numpy(), rtol=1e-6, atol=1e-9
            )


def test_batched_diagonal_and_in_row_ranks_equal_the_dense_matrices() -> None:
    model = gqa_model()
    stack = model.W_E @ cw.QK(model, offset=1) @ model.W_E.T
    cols = torch.randint(0, 30, (30,), generator=torch.Generator().manual_seed(1))
    diagonal, ranks = stack.diagonal(memory_budget=500), stack.rank_in_rows(cols, memory_budget=700)
    for layer, head in heads(model):
        dense = stack[layer, head].dense()
        torch.testing.assert_close(diagonal[layer, head], torch.diagonal(dense))
        expected = (dense > dense[torch.arange(30), cols][:, None]).sum(1)
        assert torch.equal(ranks[layer, head], expected)


def test_top_k_membership_counts_ties_for_the_token_as_ranks_do() -> None:
    """``rank < k`` from counting and from the running k-th largest value agree, ties included (integer entries)."""
    from circuitwidgets.circuits._rows import count_above, within_top

    g = torch.Generator().manual_seed(3)
    left = torch.randint(-2, 3, (3, 40, 2), generator=g).double()
    right = torch.randint(-2, 3, (3, 2, 50), generator=g).double()
    cols = torch.randint(0, 50, (40,), generator=g)
    ranks = count_above(left, right, cols, 7)
    assert torch.equal(ranks, ((left @ right) > (left @ right)[:, torch.arange(40), cols][..., None]).sum(-1))
    for k in (1, 3, 49, 60):
        assert torch.equal(within_top(left, right, cols, k, 7), ranks < k)


def test_batched_topk_equals_each_heads_dense_topk() -> None:
    model = gqa_model(n_layers=2)
    top = (model.W_E @ cw.OV(model) @ model.W_U).topk(5, memory_budget=3000)
    assert top.values.shape == (2, 4, 5)
    for layer, head in heads(model):
        dense = cw.full_ov(model, layer, head).dense().flatten()
        best = torch.topk(dense, 5)
        torch.testing.assert_close(top.values[layer, head], best.values)
        torch.testing.assert_close(top.rows[layer, head] * 30 + top.cols[layer, head], best.indices)


def test_stack_indexing_gives_stacks_and_matrices() -> None:
    model = gqa_model()
    ov = cw.OV(model)
    layer = ov[1]
    assert isinstance(layer, LowRankStack) and layer.batch_shape == (4,)
    assert isinstance(layer[-1], LowRankMatrix)
    torch.testing.assert_close(layer[-1].dense(), dense_ov(model, 1, 3))  # type: ignore[union-attr]
    column = ov[:, 2]
    assert isinstance(column, LowRankStack) and column.batch_shape == (3,)
    torch.testing.assert_close(column.dense()[2], dense_ov(model, 2, 2))
    some = ov[0, 1:3]
    assert isinstance(some, LowRankStack) and some.batch_shape == (2,)
    torch.testing.assert_close(some.dense()[1], dense_ov(model, 0, 2))
    with pytest.raises(ShapeError, match=r"key: expected at most 2 indices"):
        ov[0, 0, 0]  # type: ignore[index]
    with pytest.raises(ArgumentError, match=r"key\[1\]: expected an int in \[-4, 4\), got 4"):
        ov[0, 4]


def test_products_of_stacks_are_the_per_head_products() -> None:
    """``OV[l1] @ QK[l2]``: each head's W_OV^{h1} W_QK^{h2}, the matrix whose norm is Q-composition."""
    model = gqa_model()
    product = cw.OV(model)[0] @ cw.QK(model, offset=1)[1]
    for head in range(4):
        expected = dense_ov(model, 0, head) @ dense_qk(model, 1, head, 1)
        torch.testing.assert_close(product[head].dense(), expected)  # type: ignore[union-attr]
    torch.testing.assert_close(product.T.dense(), product.dense().mT)


def test_a_user_stack_checks_its_factors_naming_them() -> None:
    A, B = torch.randn(3, 5, 2), torch.randn(3, 2, 4)
    torch.testing.assert_close(LowRankStack(A, B).dense(), A @ B)
    with pytest.raises(ShapeError, match=r"B: expected \[\.\.\., 2, n\]"):
        LowRankStack(A, torch.randn(3, 3, 4))
    with pytest.raises(NonFiniteError, match="A: expected finite values, got 1 NaN/Inf"):
        LowRankStack(torch.where(A == A[0, 0, 0], torch.inf, A), B)
    with pytest.raises(
        ArgumentTypeError, match=r"B: expected dtype torch\.float32 on cpu like A, got torch\.float32 on meta"
    ):
        LowRankStack(A, B.to("meta"))
    with pytest.raises(ShapeError, match="one matrix is a LowRankMatrix"):
        LowRankStack(A[0], B[0])


# --- analyses: batched equals per head --------------------------------------------


@pytest.mark.parametrize("method", ["eigen", "diagonal", "topk"])
def test_copying_scores_equal_the_per_head_scores_of_each_circuit(method: str) -> None:
    model = gqa_model()
    tokens = torch.tensor([0, 3, 7, 11, 29])
    for circuit in ("ov", "qk", "qk_kcomp"):
        batched = cw.copying_scores(model, circuit, method, k=3, tokens=tokens, offset=1)  # type: ignore[arg-type]
        sources = cw.composition_scores(model, "K", offset=1)
        for layer, head in heads(model):
            if circuit == "qk_kcomp":
                if layer == 0:
                    assert np.isnan(batched[layer, head])
                    continue
                column = np.nan_to_num(sources[:layer, :, layer, head], nan=-np.inf)
                l1, h1 = np.unravel_index(int(np.argmax(column)), column.shape)
                matrix = cw.full_qk_kcomp(model, layer, head, int(l1), int(h1), offset=1)
            else:
                matrix = cw.full_ov(model, layer, head) if circuit == "ov" else cw.full_qk(model, layer, head, offset=1)
            expected = matrix_copying_score(matrix, method, k=3, tokens=tokens)  # type: ignore[arg-type]
            assert batched[layer, head] == pytest.approx(expected, abs=1e-9)


def test_composition_of_all_kinds_equals_the_dense_definition_under_gqa_and_rotation() -> None:
    model = gqa_model()
    scores = cw.all_composition_scores(model, offset=2, memory_budget=3000)  # many small tiles
    for k, kind in enumerate(("Q", "K", "V")):
        np.testing.assert_array_equal(np.isnan(scores[k]), np.isnan(cw.composition_scores(model, kind, offset=2)))  # type: ignore[arg-type]
        for l1 in range(3):
            for l2 in range(3):
                for h1 in range(4):
                    for h2 in range(4):
                        if l1 >= l2:
                            assert np.isnan(scores[k, l1, h1, l2, h2])
                            continue
                        W_A = dense_ov(model, l1, h1)
                        W_B = {
                            "Q": dense_qk(model, l2, h2, 2),
                            "K": dense_qk(model, l2, h2, 2).T,
                            "V": dense_ov(model, l2, h2),
                        }[kind]
                        expected = float((W_A @ W_B).norm() / (W_A.norm() * W_B.norm()))
                        assert scores[k, l1, h1, l2, h2] == pytest.approx(expected, rel=1e-9)


def test_composition_in_one_layer_blocks_and_small_tiles_equals_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    from circuitwidgets.circuits import composition

    model = gqa_model(n_layers=4)
    whole = cw.all_composition_scores(model, offset=1)  # one block of later layers, one tile
    monkeypatch.setattr(composition, "_RIGHT_BLOCK_HEADS", 4)  # every later layer a block of its own
    split = cw.all_composition_scores(model, offset=1, memory_budget=3000)
    np.testing.assert_array_equal(np.isnan(split), np.isnan(whole))
    np.testing.assert_allclose(split, whole, rtol=1e-9)
    W_A, W_B = dense_ov(model, 0, 3), dense_qk(model, 3, 1, 1).T
    assert split[1, 0, 3, 3, 1] == pytest.approx(float((W_A @ W_B).norm() / (W_A.norm() * W_B.norm())), rel=1e-9)


def test_same_matching_eigenvalues_of_the_strongest_source_equal_the_all_pairs_ones() -> None:
    from circuitwidgets.circuits.kcomp import best_earlier_heads, kcomp_stack

    model = gqa_model()
    every = cw.kcomp_eigenvalues(model, offset=1)
    sources = best_earlier_heads(model, 1)
    chosen = kcomp_stack(model, sources, 1).eigenvalues().numpy()
    for layer in range(1, 3):
        for head in range(4):
            l1, h1 = sources[layer, head]
            np.testing.assert_allclose(
                np.sort_complex(chosen[layer - 1, head]), np.sort_complex(every[l1, h1, layer, head]), atol=1e-9
            )


def test_the_baseline_is_the_same_however_its_draws_are_grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    from circuitwidgets.circuits import composition

    grouped = composition._baseline.__wrapped__(24, 3, 40, 5)  # one group: all 40 samples at once
    monkeypatch.setattr(composition, "BASELINE_BLOCK_BYTES", 4 * 24 * 3 * 8 * 7)  # 7 samples per group
    assert composition._baseline.__wrapped__(24, 3, 40, 5) == pytest.approx(grouped, rel=1e-12)


# --- precision and devices ----------------------------------------------------------


def test_half_precision_models_are_analysed_in_float32_blocks() -> None:
    exact = make_random_model(n_layers=2, n_heads=2, d_model=16, d_head=4, d_vocab=300, dtype=torch.float32)
    half = exact.to(torch.bfloat16)
    rounded = half.to(torch.float32)  # the same (rounded) weights, in float32
    np.testing.assert_allclose(cw.eigenvalues(half), cw.eigenvalues(rounded), rtol=2e-4, atol=1e-5)
    np.testing.assert_allclose(cw.composition_scores(half, "K"), cw.composition_scores(rounded, "K"), rtol=1e-4)
    top = cw.full_qk(half, 1, 1).topk(4)
    assert top.values.dtype == torch.float32
    torch.testing.assert_close(top.values, cw.full_qk(rounded, 1, 1).topk(4).values, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("m", "k", "n"), [(4, 500, 3), (500, 4, 3), (3, 4, 500)])
def test_blocked_products_of_half_precision_operands_are_exact_float32_products(m: int, k: int, n: int) -> None:
    g = torch.Generator().manual_seed(0)
    left, right = torch.randn(m, k, generator=g).bfloat16(), torch.randn(k, n, generator=g).bfloat16()
    product = _precision.matmul(left, right, block_bytes=256)  # a few rows, columns or terms at a time
    assert product.dtype == torch.float32
    torch.testing.assert_close(product, left.float() @ right.float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_small_eigenproblems_split_among_threads_give_the_same_eigenvalues(threads: int) -> None:
    batch = torch.randn(2, 7, 9, 9, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = _precision.small_eigvals(batch)
        assert torch.get_num_threads() == threads  # the caller's setting is back
    finally:
        torch.set_num_threads(before)
    assert got.shape == (2, 7, 9) and got.dtype == torch.complex128
    assert torch.equal(got, torch.linalg.eigvals(batch))  # the same LAPACK call on each matrix
    assert torch.equal(_precision.small_eigvals(batch[0, 0]), torch.linalg.eigvals(batch[0, 0]))  # a single matrix


def test_weights_that_overflow_in_a_cast_are_refused_naming_the_tensor() -> None:
    model = make_random_model(dtype=torch.float32)
    weights = dict(model.weights())
    weights["W_U"] = weights["W_U"].clone()
    weights["W_U"][0, 0] = 1e6  # beyond float16's 65,504
    narrow = CircuitModel(model.cfg, weights).to(torch.float16)
    with pytest.raises(
        NonFiniteError, match=r"model\.W_U: expected finite values, got 1 NaN/Inf entries in torch.float16"
    ):
        cw.eigenvalues(narrow)


def test_a_model_half_moved_to_another_device_is_refused_naming_the_tensor() -> None:
    model = make_random_model()
    model._buffers["W_O"] = model.W_O.to("meta")
    with pytest.raises(ArgumentTypeError, match=r"model\.W_O: expected a tensor on cpu like W_E, got one on meta"):
        cw.copying_scores(model)
    with pytest.raises(ArgumentTypeError, match="other: expected a tensor on cpu like the stack, got one on meta"):
        torch.zeros(3, 16, dtype=torch.float64, device="meta") @ cw.OV(make_random_model())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the accelerator machine)")
def test_computations_run_on_the_gpu_where_the_weights_are() -> None:
    model = gqa_model()
    on_gpu = model.to("cuda")
    eigs = (on_gpu.W_E @ cw.OV(on_gpu) @ on_gpu.W_U).eigenvalues()
    assert eigs.device.type == "cuda"
    np.testing.assert_allclose(cw.eigenvalues(on_gpu), cw.eigenvalues(model), atol=1e-9)
    np.testing.assert_allclose(
        cw.all_composition_scores(on_gpu, offset=1), cw.all_composition_scores(model, offset=1), rtol=1e-9
    )


# --- validation once, at the public edge ----------------------------------------------


def test_an_analysis_checks_the_model_once_and_builds_no_checked_factors(monkeypatch: pytest.MonkeyPatch) -> None:
    from circuitwidgets.circuits import lowrank

    model = gqa_model()
    checks: list[str] = []
    scans: list[int] = []
    real_check, real_factors = _checks._check_weights, lowrank._check_factors
    monkeypatch.setattr(_checks, "_check_weights", lambda m: (checks.append(m.name), real_check(m))[1])
    monkeypatch.setattr(lowrank, "_check_factors", lambda A, B: (scans.append(1), real_factors(A, B))[1])
    cw.copying_scores(model, "qk_kcomp", "topk", tokens=[1, 2, 3], offset=1)
    cw.skip_trigrams(model, 1, 2, k=3, offset=0)
    assert checks == [model.name, model.name] and scans == []


def test_each_weight_is_scanned_for_nan_once_per_version(monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_random_model()
    scanned: list[int] = []
    real = _checks.count_non_finite
    monkeypatch.setattr(_checks, "count_non_finite", lambda t: (scanned.append(t.numel()), real(t))[1])
    cw.eigenvalues(model)
    first = len(scanned)
    cw.eigenvalues(model)
    cw.composition_scores(model)
    assert first == len(model.weights()) and len(scanned) == first
    with torch.no_grad():
        model.W_U.mul_(2.0)  # in place: a new version of one tensor
    cw.eigenvalues(model)
    assert scanned[first:] == [model.W_U.numel()]


# --- budgets ---------------------------------------------------------------------------


def test_an_over_large_top_k_or_budget_is_refused_before_any_work() -> None:
    model = make_random_model(d_vocab=50)
    matrix = cw.full_qk(model, 0, 0)
    with pytest.raises(
        MemoryBudgetError, match=r"memory_budget: expected at most the [\d,]+ bytes of memory on cpu, got"
    ):
        matrix.topk(5, memory_budget=2**60)
    with pytest.raises(ArgumentError, match=r"k: expected an int in \[1, 2501\), got 2501"):
        matrix.topk(2501)
    with pytest.raises(MemoryBudgetError, match="memory_budget"):
        cw.composition_scores(model, memory_budget=2**60)


def test_detector_kinds_from_one_forward_pass_equal_each_kinds_head_scores() -> None:
    from circuitwidgets.activations.detectors import random_token_scores

    model = gqa_model()
    kinds = ("previous_token", "induction", "duplicate_token")
    together = random_token_scores(model, kinds, 5, 3, 7)
    for i, kind in enumerate(kinds):
        np.testing.assert_array_equal(together[i], cw.head_scores(model, kind, seq_len=5, n_seqs=3, seed=7))  # type: ignore[arg-type]
