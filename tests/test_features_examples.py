"""Max-activating examples (features.max_activating) against their slow definition on small random models in float64.

The slow definition: one run of the whole corpus with every activation cached,
each unit's activations sorted, counted and binned with numpy.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import make_random_model

from circuitwidgets import features
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.features import units as units_module
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.examples import Examples
from circuitwidgets.model import CircuitModel, ModelConfig


def mlp_model(seed: int = 0, act_fn: str = "gelu") -> CircuitModel:
    """Two layers, LayerNorm (pre), MLPs of 24 neurons, random float64 weights."""
    base = make_random_model(n_layers=2, n_heads=3, d_model=12, d_head=4, d_vocab=40, n_ctx=32, seed=seed)
    cfg = ModelConfig(
        **{**base.cfg.to_dict(), "has_mlp": True, "d_mlp": 24, "act_fn": act_fn, "normalization": "ln_pre"}
    )
    g = torch.Generator().manual_seed(seed + 1)
    extra = {
        "W_in": torch.randn(2, 12, 24, generator=g, dtype=torch.float64) / 12**0.5,
        "b_in": torch.randn(2, 24, generator=g, dtype=torch.float64) * 0.3,
        "W_out": torch.randn(2, 24, 12, generator=g, dtype=torch.float64) / 24**0.5,
    }
    return CircuitModel(cfg, dict(base.weights()) | extra, name=f"mlp-{seed}")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model() -> CircuitModel:
    return mlp_model()


@pytest.fixture(scope="module")
def corpus() -> torch.Tensor:
    tokens = torch.randint(0, 40, (23, 17), generator=torch.Generator().manual_seed(5))
    tokens[:, 0] = torch.arange(23)  # (distinct first tokens: no two rows start alike, so no tied activations)
    return tokens


def slow_activations(model: CircuitModel, tokens: torch.Tensor, kind: str, layer: int) -> torch.Tensor:
    """``[n_tokens, n_units]`` from one cached run: mlp_post, or each head's ‖z_h W_O^h‖ from the cached result."""
    _, cache = model.run_with_cache(tokens)
    # heads: [batch, pos, head, d_model] -> [batch, pos, head]
    acts = cache["mlp_post", layer] if kind == "neuron" else cache["result", layer].norm(dim=-1)
    return acts.flatten(0, 1)


@pytest.mark.parametrize(("kind", "layer"), [("neuron", 0), ("neuron", 1), ("head", 1)])
@pytest.mark.parametrize("batch_size", [1, 4, 23])
def test_one_streaming_pass_equals_sorting_every_activation(
    model: CircuitModel, corpus: torch.Tensor, kind: str, layer: int, batch_size: int
) -> None:
    units = features.neurons(model, layer) if kind == "neuron" else features.head_outputs(model, layer)
    ex = features.max_activating(
        model, corpus, units, k=6, samples=5, before=3, after=2, batch_size=batch_size, progress=False
    )
    acts = slow_activations(model, corpus, kind, layer).numpy()  # [n_tokens, n_units]
    n_units = acts.shape[1]
    assert ex.n_tokens == corpus.numel() and ex.n_units == n_units
    order = np.argsort(-acts, axis=0, kind="stable")[:6].T  # [unit, k]
    best = np.take_along_axis(acts.T, order, axis=1)
    positive_best = best > 0  # (only positive activations count: NaN and -1 past a unit's positive ones)
    np.testing.assert_allclose(ex.top_value, np.where(positive_best, best, np.nan), rtol=1e-12, atol=1e-12)
    # the indices are the slow ones up to ties (none in random float64 activations)
    np.testing.assert_array_equal(ex.top_index, np.where(positive_best, order, -1))
    # contexts: the unit's activation over the window, NaN beyond the row
    n_ctx = corpus.shape[1]
    for unit in (0, n_units - 1):
        for slot in range(int(positive_best[unit].sum())):
            row, pos = divmod(int(ex.top_index[unit, slot]), n_ctx)
            for j, offset in enumerate(range(-3, 3)):
                at = pos + offset
                got = float(ex.top_context[unit, slot, j])
                if 0 <= at < n_ctx:
                    assert got == pytest.approx(acts[row * n_ctx + at, unit], rel=2e-3, abs=2e-3)  # float16
                else:
                    assert np.isnan(got)
    ids = ex.window_tokens(ex.top_index[:, :1])
    row, pos = divmod(int(ex.top_index[0, 0]), n_ctx)
    expect = [int(corpus[row, p]) if 0 <= p < n_ctx else -1 for p in range(pos - 3, pos + 3)]
    assert ids[0, 0].tolist() == expect
    # counts and the histogram of positive activations
    positive = acts > 0
    np.testing.assert_array_equal(ex.n_active, positive.sum(0))
    for unit in range(n_units):
        values = acts[positive[:, unit], unit]
        bins = np.clip(np.floor((np.log10(values) + 3) * 12), 0, 71).astype(int)
        np.testing.assert_array_equal(ex.hist_counts[unit], np.bincount(bins, minlength=72))
    # the sample: distinct positive entries, their activations, largest first
    for unit in range(n_units):
        kept = ex.sample_index[unit][ex.sample_index[unit] >= 0]
        assert len(kept) == min(5, int(positive[:, unit].sum())) == len(set(kept.tolist()))
        assert positive[kept, unit].all()
        np.testing.assert_allclose(ex.sample_value[unit, : len(kept)], acts[kept, unit], rtol=1e-12)
        assert (np.diff(ex.sample_value[unit, : len(kept)]) <= 0).all()


def test_the_sample_is_uniform_over_the_active_tokens(model: CircuitModel, corpus: torch.Tensor) -> None:
    # every unit, 10 seeds: a sampled token's rank among the unit's active tokens (in corpus order), divided by
    # their number, is uniform on [0, 1): Kolmogorov-Smirnov distance under its 0.1 % critical value
    units = features.neurons(model, 1)
    acts = slow_activations(model, corpus, "neuron", 1).numpy()
    ranks = []
    for seed in range(10):
        ex = features.max_activating(model, corpus, units, k=1, samples=4, batch_size=5, seed=seed, progress=False)
        for unit in range(units.n_units):
            active = np.flatnonzero(acts[:, unit] > 0)
            kept = ex.sample_index[unit][ex.sample_index[unit] >= 0]
            ranks.extend((np.searchsorted(active, kept) + 0.5) / len(active))
    ranks = np.sort(ranks)
    n = len(ranks)
    distance = np.max(np.abs(np.arange(1, n + 1) / n - ranks))
    assert n > 900 and distance < 1.95 / np.sqrt(n)


def test_head_output_norm_is_the_norm_of_the_heads_write(model: CircuitModel, corpus: torch.Tensor) -> None:
    units = features.head_outputs(model, 0)
    _, cache = model.run_with_cache(corpus[:3])
    fast = units.read(cache["z", 0])
    slow = torch.einsum("bphd,hdm->bphm", cache["z", 0], model.W_O[0]).norm(dim=-1)
    torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)
    assert units.label(2) == "L0H2" and features.neurons(model, 1).label(7) == "L1N7"


def test_progress_is_plain_lines(model: CircuitModel, corpus: torch.Tensor) -> None:
    lines: list[str] = []
    features.max_activating(model, corpus, features.neurons(model, 0), k=2, samples=0, progress=lines.append)
    assert lines and lines[-1].startswith("max_activating L0N*: 391 / 391 tokens (100%)")


def test_quantiles_come_from_the_histogram(model: CircuitModel, corpus: torch.Tensor) -> None:
    ex = features.max_activating(model, corpus, features.neurons(model, 1), k=2, samples=8, progress=False)
    q = ex.quantiles(3)
    ok = ~np.isnan(ex.sample_value[3])
    assert ((q[ok] >= 0) & (q[ok] <= 1)).all() and (np.diff(q[ok]) <= 0).all()
    assert isinstance(ex, Examples) and ex.density[3] == ex.n_active[3] / corpus.numel()


def test_bad_arguments_are_named(model: CircuitModel, corpus: torch.Tensor) -> None:
    units = features.neurons(model, 0)
    with pytest.raises(ArgumentTypeError, match="units"):
        features.max_activating(model, corpus, "L0N3")  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="tokens"):
        features.max_activating(model, corpus[0], units)
    with pytest.raises(ArgumentError, match=r"tokens: expected ids in \[0, 40\)"):
        features.max_activating(model, corpus + 40, units)
    with pytest.raises(ArgumentError, match="k: expected an int in"):
        features.max_activating(model, corpus, units, k=0)
    with pytest.raises(ArgumentError, match="layer"):
        features.neurons(model, 2)
    with pytest.raises(ArgumentError, match="MLPs"):
        features.neurons(make_random_model(), 0)


@pytest.mark.parametrize(("kind", "site"), [("transcoder", "mlp_in"), ("sae", "resid_post")])
def test_dictionary_features_are_its_encodings_of_what_it_reads(
    model: CircuitModel, corpus: torch.Tensor, kind: str, site: str
) -> None:
    # (48 features, 4 active per token: the sparse path, whose candidates are the positive entries)
    d = Dictionary.random(kind, "topk", 12, 48, layer=1, in_site=site, k=4, dtype=torch.float64, seed=2)
    ex = features.max_activating(model, corpus, features.dictionary_features(model, d), k=3, samples=2, progress=False)
    slow = d.features(model, corpus).flatten(0, 1).numpy()  # [n_tokens, d_sae]
    best = -np.sort(-slow, axis=0)[:3].T
    np.testing.assert_allclose(ex.top_value, np.where(best > 0, best, np.nan), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(ex.n_active, (slow > 0).sum(0))
    assert ex.labels[5] == d.label(5)


def test_a_sampled_quantile_interpolates_inside_its_histogram_bin(model: CircuitModel, corpus: torch.Tensor) -> None:
    ex = features.max_activating(model, corpus, features.neurons(model, 1), k=2, samples=8, progress=False)
    unit = 3
    acts = slow_activations(model, corpus, "neuron", 1)[:, unit].numpy()
    positive = np.sort(acts[acts > 0])
    for value, q in zip(ex.sample_value[unit], ex.quantiles(unit), strict=True):
        if np.isnan(value):
            continue
        exact = np.searchsorted(positive, value) / len(positive)  # (the fraction of positive activations below it)
        assert abs(q - exact) <= 1.5 * ex.hist_counts[unit].max() / len(positive)  # (within about one bin's mass)


def brute_force(acts: np.ndarray, n_ctx: int, k: int, before: int, after: int) -> dict[str, np.ndarray]:
    """The slow definition with Python loops over units and tokens: top ``k`` positive entries (ties: earlier
    first), their windows, counts and histograms, from ``acts`` ``[n_tokens, n_units]``."""
    n_tokens, n_units = acts.shape
    width = before + 1 + after
    top_value = np.full((n_units, k), np.nan)
    top_index = np.full((n_units, k), -1)
    top_context = np.zeros((n_units, k, width))
    hist = np.zeros((n_units, 72), dtype=np.int64)
    for unit in range(n_units):
        entries = sorted((-acts[t, unit], t) for t in range(n_tokens) if acts[t, unit] > 0)
        for slot, (negative, t) in enumerate(entries[:k]):
            top_value[unit, slot], top_index[unit, slot] = -negative, t
            row, pos = divmod(t, n_ctx)
            for j, at in enumerate(range(pos - before, pos + after + 1)):
                top_context[unit, slot, j] = acts[row * n_ctx + at, unit] if 0 <= at < n_ctx else np.nan
        for negative, _ in entries:
            hist[unit, min(71, max(0, int(np.floor((np.log10(-negative) + 3) * 12))))] += 1
    return {"top_value": top_value, "top_index": top_index, "top_context": top_context, "hist": hist}


@pytest.mark.parametrize("width", [48, 20])
def test_topk_features_equal_a_brute_force_loop(model: CircuitModel, corpus: torch.Tensor, width: int) -> None:
    # (TopK 4 of 48 features: the pass holds each token's 4 entries, never the [tokens, 48] matrix; of 20: its
    # candidates come from the dense branch, built from those entries)
    d = Dictionary.random("transcoder", "topk", 12, width, layer=1, k=4, dtype=torch.float64, seed=3)
    units = features.dictionary_features(model, d)
    assert units.read_top is not None
    ex = features.max_activating(model, corpus, units, k=5, samples=3, before=3, after=2, batch_size=6, progress=False)
    slow = brute_force(d.features(model, corpus).flatten(0, 1).numpy(), corpus.shape[1], 5, 3, 2)
    np.testing.assert_allclose(ex.top_value, slow["top_value"], rtol=1e-12, atol=0)
    np.testing.assert_array_equal(ex.top_index, slow["top_index"])
    found = ex.top_index >= 0
    np.testing.assert_allclose(ex.top_context[found], slow["top_context"][found], rtol=2e-3, atol=2e-3)  # (float16)
    np.testing.assert_array_equal(ex.hist_counts, slow["hist"])
    np.testing.assert_array_equal(ex.n_active, slow["hist"].sum(1))


@pytest.mark.parametrize(("width", "k", "samples", "batch_size"), [(48, 4, 2, 4), (48, 4, 30, 23), (20, 6, 1, 9)])
def test_topk_entries_give_exactly_the_dense_pass(
    model: CircuitModel, corpus: torch.Tensor, width: int, k: int, samples: int, batch_size: int
) -> None:
    # every field, the random sample included, equals the pass over the dense [tokens, width] encodings, on both
    # branches for the top candidates and for the sample's keys (dense keys when actives outnumber 8 x samples)
    d = Dictionary.random("sae", "topk", 12, width, layer=0, in_site="resid_post", k=k, dtype=torch.float64, seed=4)
    units = features.dictionary_features(model, d)
    options = {"k": 4, "samples": samples, "before": 4, "after": 1, "batch_size": batch_size, "progress": False}
    fast = features.max_activating(model, corpus, units, **options)  # type: ignore[arg-type]
    dense = features.max_activating(model, corpus, dataclasses.replace(units, read_top=None), **options)  # type: ignore[arg-type]
    for name in ("top_value", "top_index", "top_context", "sample_value", "sample_index", "sample_context"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(dense, name), err_msg=name)
    np.testing.assert_array_equal(fast.hist_counts, dense.hist_counts)
    np.testing.assert_array_equal(fast.n_active, dense.n_active)
    assert (fast.sample_index >= 0).sum() > 0 and np.isnan(fast.top_context).any()  # (windows cross row ends)


def test_the_encoder_run_a_few_rows_at_a_time_finds_the_same(
    model: CircuitModel, corpus: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (7 rows of pre-activations at a time: a product over fewer rows may round its last bit otherwise, so values
    # agree to 1e-14, and the sampled tokens as sets: two near-equal activations may swap places)
    d = Dictionary.random("sae", "topk", 12, 48, layer=0, in_site="resid_post", k=4, dtype=torch.float64, seed=4)
    options = {"k": 4, "samples": 30, "before": 4, "after": 1, "batch_size": 23, "progress": False}
    whole = features.max_activating(model, corpus, features.dictionary_features(model, d), **options)  # type: ignore[arg-type]
    monkeypatch.setattr(units_module, "TOP_CHUNK_BYTES", 7 * 8 * 48)
    chunked = features.max_activating(model, corpus, features.dictionary_features(model, d), **options)  # type: ignore[arg-type]
    np.testing.assert_allclose(chunked.top_value, whole.top_value, rtol=1e-14, atol=0)
    np.testing.assert_array_equal(chunked.top_index, whole.top_index)
    np.testing.assert_array_equal(np.sort(chunked.sample_index), np.sort(whole.sample_index))
    np.testing.assert_array_equal(chunked.hist_counts, whole.hist_counts)


@pytest.mark.parametrize("kind", ["neuron", "feature"])
def test_batches_read_by_several_threads_give_the_same_result(
    model: CircuitModel, corpus: torch.Tensor, kind: str
) -> None:
    d = Dictionary.random("transcoder", "topk", 12, 48, layer=1, k=4, dtype=torch.float64, seed=5)
    units = features.neurons(model, 1) if kind == "neuron" else features.dictionary_features(model, d)
    options = {"k": 3, "samples": 4, "before": 2, "after": 1, "batch_size": 2, "progress": False}
    one = features.max_activating(model, corpus, units, **options)  # type: ignore[arg-type]
    threads = torch.get_num_threads()
    three = features.max_activating(model, corpus, units, workers=3, **options)  # type: ignore[arg-type]
    assert torch.get_num_threads() == threads  # (restored)
    for name in ("top_value", "top_index", "top_context", "sample_value", "sample_index", "sample_context"):
        np.testing.assert_array_equal(getattr(three, name), getattr(one, name), err_msg=name)
    np.testing.assert_array_equal(three.hist_counts, one.hist_counts)
    with pytest.raises(ArgumentError, match="workers"):
        features.max_activating(model, corpus, units, workers=0)
