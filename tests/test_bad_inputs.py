"""Hostile input and bad arguments (issue 11), on the Python side.

Every public entry point either works or raises one of our typed errors
(``ArgumentError``/``ShapeError``/``NonFiniteError``/``MemoryBudgetError`` are
``ValueError``s, ``ArgumentTypeError`` is a ``TypeError``) whose message names
the argument, what was expected and what was received. Whatever a front end
sends, a widget keeps its last valid state, logs the refusal, tells the view
the kept values and raises nothing. Checkpoints are never unpickled. The
engine's ``[d_vocab, d_vocab]`` operations stay within a stated memory bound.

Single-token sequences, decided per function: a forward pass, the attention
view and the detectors work on one token (its pattern is ``[[1]]``); the path
expansion and term importance need a next token to predict, so one token is a
``ShapeError`` saying "at least 2 positions". An empty sequence is refused everywhere.
"""

from __future__ import annotations

import json
import logging
import pickle
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import traitlets
from _comm import Recorder, from_view
from conftest import make_random_model

from circuitwidgets import circuits
from circuitwidgets.circuits import MLPPathsExcludedWarning
from circuitwidgets.circuits.lowrank import LowRankMatrix
from circuitwidgets.errors import (
    ArgumentError,
    ArgumentTypeError,
    CircuitWidgetsError,
    MemoryBudgetError,
    NonFiniteError,
    ShapeError,
)
from circuitwidgets.model import CircuitModel, ModelConfig
from circuitwidgets.tokenizer import VocabTokenizer
from circuitwidgets.widgets import (
    AttentionPatterns,
    CircuitExplorer,
    CompositionMap,
    EigenScatter,
    SkipTrigramTable,
    TermImportance,
)
from circuitwidgets.widgets.core.base import TraitArgumentError
from circuitwidgets.widgets.skip_trigrams.widget import listing, skip_trigram_data

# --- models --------------------------------------------------------------------

V = 24
HOSTILE = [
    "<bos>",
    "<script>alert(1)</script>",
    "</script>",
    "&nbsp;",
    "`${x}`",
    "\u202eevil",
    "a\x00b",
    '"><img src=x>',
]
VOCAB = HOSTILE + [f"w{i}" for i in range(V - len(HOSTILE))]
TEXT = "w1 w2 w3 <script>alert(1)</script> w1 w2 w3"


@pytest.fixture(scope="module")
def model() -> CircuitModel:
    base = make_random_model(n_layers=2, n_heads=2, d_model=8, d_head=4, d_vocab=V, n_ctx=16, seed=3)
    return CircuitModel(base.cfg, base.weights(), tokenizer=VocabTokenizer(VOCAB, bos_token_id=0), name="hostile")


def mlp_model(name: str = "with-mlp") -> CircuitModel:
    base = make_random_model(n_layers=2, n_heads=2, d_model=8, d_head=4, d_vocab=V, n_ctx=16)
    cfg = ModelConfig(**{**base.cfg.to_dict(), "has_mlp": True, "d_mlp": 16, "act_fn": "relu"})
    extra = {"W_in": torch.zeros(2, 8, 16, dtype=torch.float64), "W_out": torch.zeros(2, 16, 8, dtype=torch.float64)}
    return CircuitModel(cfg, dict(base.weights()) | extra, name=name)


def big_vocab_model(d_vocab: int = 50257) -> CircuitModel:
    """A 50K-vocabulary model that is cheap to build (one head, d_model 8, float32)."""
    return make_random_model(n_layers=1, n_heads=1, d_model=8, d_head=2, d_vocab=d_vocab, n_ctx=8, dtype=torch.float32)


def raises_named(error: type[Exception], *words: str) -> Any:
    """``pytest.raises`` whose message must contain every word (the argument, the expected, the received)."""
    return pytest.raises(error, match="(?s)" + "".join(f"(?=.*{re.escape(w)})" for w in words))


# --- ranks, shapes, dtypes ----------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "error", "words"),
    [
        (torch.zeros(1, 2, 3, dtype=torch.long), ShapeError, ["tokens", "[batch, pos]", "(1, 2, 3)"]),
        (torch.zeros(0, dtype=torch.long), ShapeError, ["tokens", "at least one position", "0"]),
        ([0.5, 1.0], ArgumentTypeError, ["tokens", "integer", "float"]),
        (torch.tensor([True, False]), ArgumentTypeError, ["tokens", "integer", "bool"]),
        (None, ArgumentTypeError, ["tokens", "NoneType"]),
        (b"\x00\x01", ArgumentTypeError, ["tokens", "bytes"]),
        ([[1], [1, 2]], ArgumentTypeError, ["tokens", "list"]),
        ([2**70], ArgumentTypeError, ["tokens", "list"]),
        (object(), ArgumentTypeError, ["tokens", "object"]),
        (list(range(17)), ShapeError, ["tokens", "n_ctx=16", "17"]),
    ],
)
def test_forward_pass_names_tokens_of_the_wrong_rank_type_or_length(
    model: CircuitModel, tokens: Any, error: type, words: list[str]
) -> None:
    with raises_named(error, *words):
        model.run_with_cache(tokens)


@pytest.mark.parametrize("bad", [[0, V], [-1, 3], [3, 2**40]])
def test_token_ids_out_of_range_are_refused_with_the_range(model: CircuitModel, bad: list[int]) -> None:
    lo, hi = min(bad), max(bad)
    for call in (
        lambda: model.run_with_cache(bad),
        lambda: model.to_str_tokens(bad),
        lambda: circuits.copying_scores(model, method="diagonal", tokens=bad),
        lambda: circuits.term_importance(model, bad),
        lambda: AttentionPatterns(model, bad),
    ):
        with pytest.raises(CircuitWidgetsError, match=re.escape(f"[0, {V})")) as info:
            call()
        assert str(lo) in str(info.value) and str(hi) in str(info.value)


def test_frozen_pattern_overrides_must_be_tensors_of_the_right_shape_and_finite(model: CircuitModel) -> None:
    ids = torch.tensor([[1, 2, 3]])
    good = torch.full((1, 2, 3, 3), 1 / 3, dtype=model.dtype)
    with raises_named(ArgumentTypeError, "patterns", "one tensor"):
        model.run_with_cache(ids, patterns=good)  # type: ignore[arg-type]
    with raises_named(ShapeError, "patterns", "one entry per layer", "1"):
        model.run_with_cache(ids, patterns=[good])
    with raises_named(ShapeError, "patterns[1]", "(1, 2, 3, 3)", "(1, 2, 2, 2)"):
        model.run_with_cache(ids, patterns=[None, good[..., :2, :2]])
    with raises_named(ArgumentTypeError, "patterns[0]", "floating-point", "list"):
        model.run_with_cache(ids, patterns=[[[0.5]], None])  # type: ignore[list-item]
    nan = good.clone()
    nan[0, 1, 2, 0] = float("nan")
    with raises_named(NonFiniteError, "patterns[0]", "finite"):
        model.run_with_cache(ids, patterns=[nan, None])


def test_low_rank_factors_are_checked_for_rank_dtype_and_finiteness() -> None:
    with raises_named(ShapeError, "A", "2-D", "(3,)"):
        LowRankMatrix(torch.zeros(3), torch.zeros(1, 3))
    with raises_named(ArgumentTypeError, "A", "floating-point", "int64"):
        LowRankMatrix(torch.zeros(3, 1, dtype=torch.long), torch.zeros(1, 3))
    with raises_named(ShapeError, "B", "1 rows", "(2, 3)"):
        LowRankMatrix(torch.zeros(3, 1), torch.zeros(2, 3))
    with raises_named(NonFiniteError, "B", "finite", "1 NaN/Inf"):
        LowRankMatrix(torch.zeros(3, 1), torch.tensor([[0.0, float("inf"), 0.0]]))
    m = LowRankMatrix(torch.ones(3, 1), torch.ones(1, 3))
    with raises_named(ArgumentTypeError, "rows", "sequence of ints", "str"):
        m["0", :]
    with raises_named(ArgumentError, "rows", "[-3, 3)", "5"):
        m[[0, 5], :]


# --- non-finite values ----------------------------------------------------------


@pytest.mark.parametrize(("name", "value"), [("W_U", float("inf")), ("W_Q", float("nan")), ("W_E", -float("inf"))])
def test_a_model_with_non_finite_weights_is_refused_naming_the_tensor(
    model: CircuitModel, name: str, value: float
) -> None:
    weights = {k: v.clone() for k, v in model.weights().items()}
    weights[name].view(-1)[0] = value
    with raises_named(NonFiniteError, f"weights['{name}']", "finite", "1 NaN/Inf"):
        CircuitModel(model.cfg, weights)


def test_attention_arrays_with_nan_or_negative_norms_are_refused() -> None:
    a = np.tril(np.ones((3, 3)))
    a = (a / a.sum(-1, keepdims=True))[None]
    with raises_named(NonFiniteError, "attention", "finite"):
        AttentionPatterns.from_arrays(["a", "b", "c"], np.where(a > 0.4, np.nan, a))
    with raises_named(NonFiniteError, "value_norms", "finite"):
        AttentionPatterns.from_arrays(["a", "b", "c"], a, value_norms=np.array([[1.0, np.inf, 1.0]]))
    with raises_named(ArgumentError, "value_norms", "≥ 0", "-1"):
        AttentionPatterns.from_arrays(["a", "b", "c"], a, value_norms=np.array([[1.0, -1.0, 1.0]]))


# --- patterns that are not probabilities, or not causal --------------------------


def test_patterns_whose_rows_do_not_sum_to_one_are_refused_naming_the_row() -> None:
    a = np.tril(np.ones((1, 3, 3))) * 0.5
    with raises_named(ArgumentError, "attention", "summing to 1", "destination 0"):
        AttentionPatterns.from_arrays(["a", "b", "c"], a)


def test_scores_passed_as_patterns_are_refused_as_not_probabilities() -> None:
    scores = np.random.default_rng(0).normal(size=(1, 3, 3)) * 4
    with raises_named(ArgumentError, "attention", "[0, 1]", "not scores"):
        AttentionPatterns.from_arrays(["a", "b", "c"], scores)


def test_causal_claim_is_checked_against_weight_above_the_diagonal() -> None:
    uniform = np.full((1, 3, 3), 1 / 3)
    with raises_named(ArgumentError, "causal=True", "above the diagonal", "destination 0"):
        AttentionPatterns.from_arrays(["a", "b", "c"], uniform, causal=True)
    assert AttentionPatterns.from_arrays(["a", "b", "c"], uniform).causal is False  # detected, not claimed


def test_patterns_must_match_the_number_of_tokens_and_have_a_head() -> None:
    with raises_named(ShapeError, "attention", "3", "(1, 1, 2, 2)"):
        AttentionPatterns.from_arrays(["a", "b", "c"], np.ones((1, 2, 2)) / 2)
    with raises_named(ShapeError, "attention", "at least one layer and one head"):
        AttentionPatterns.from_arrays(["a"], np.ones((1, 0, 1, 1)))
    with raises_named(ShapeError, "tokens", "at least one token"):
        AttentionPatterns.from_arrays([], np.ones((1, 1, 0, 0)))


# --- empty and single-token sequences ------------------------------------------


def test_empty_sequences_are_refused_everywhere(model: CircuitModel) -> None:
    for call in (
        lambda: model.run_with_cache([]),
        lambda: model.to_tokens("", prepend_bos=False),
        lambda: circuits.term_importance(model, []),
        lambda: circuits.path_expansion(model, []),
        lambda: circuits.copying_scores(model, method="topk", tokens=[]),
        lambda: AttentionPatterns(model, []),
        lambda: AttentionPatterns(model, ""),
        lambda: CircuitExplorer(model, ""),
    ):
        with pytest.raises((ShapeError, ArgumentError)):
            call()


def test_single_token_sequences_work_where_attention_is_defined(model: CircuitModel) -> None:
    logits, cache = model.run_with_cache([5])
    assert logits.shape == (1, 1, V)
    assert torch.equal(cache["pattern", 1], torch.ones(1, 2, 1, 1, dtype=model.dtype))
    w = AttentionPatterns(model, [5])
    assert w.n_tokens == 1 and w.attention.shape == (2, 2, 1, 1)
    assert AttentionPatterns.from_arrays(["only"], np.ones((1, 1, 1))).n_tokens == 1
    assert circuits.head_scores(model, seq_len=1).shape == (2, 2)


def test_single_token_sequences_are_refused_where_a_next_token_is_predicted(model: CircuitModel) -> None:
    for call in (
        lambda: circuits.term_importance(model, [5]),
        lambda: circuits.path_expansion(model, [5]),
        lambda: TermImportance(model, [5]),
    ):
        with raises_named(ShapeError, "tokens", "at least 2 positions", "got 1"):
            call()


# --- vocabulary and tokenizer mismatch -----------------------------------------


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(model: CircuitModel) -> None:
    with raises_named(ShapeError, "tokenizer", f"{V + 1} tokens", f"d_vocab={V}"):
        CircuitModel(model.cfg, model.weights(), tokenizer=VocabTokenizer([*VOCAB, "extra"]))


def test_a_tokenizer_whose_bos_is_outside_the_vocabulary_is_refused(model: CircuitModel) -> None:
    with raises_named(ArgumentError, "tokenizer", "bos_token_id", str(V + 3)):
        CircuitModel(model.cfg, model.weights(), tokenizer=VocabTokenizer(VOCAB, bos_token_id=V + 3))


def test_something_that_is_not_a_tokenizer_is_a_type_error(model: CircuitModel) -> None:
    with raises_named(ArgumentTypeError, "tokenizer", "TokenizerLike", "dict"):
        CircuitModel(model.cfg, model.weights(), tokenizer={"a": 0})  # type: ignore[arg-type]


def test_a_padded_vocabulary_larger_than_the_tokenizer_shows_padding_ids_as_numbers(model: CircuitModel) -> None:
    padded = CircuitModel(model.cfg, model.weights(), tokenizer=VocabTokenizer(VOCAB[:20]), name="padded")
    assert padded.to_str_tokens([1, 21, 23]) == [VOCAB[1], "<21>", "<23>"]
    rows = circuits.skip_trigrams(padded, 0, 0, k=V)  # every entry: padding ids appear
    assert any(r.out_str == "<22>" for r in rows)
    assert SkipTrigramTable(padded, k=3, profile_k=2).n_rows > 0


def test_strings_that_are_not_exactly_one_token_are_refused_as_sources(model: CircuitModel) -> None:
    with raises_named(ArgumentError, "source", "exactly one token", "w1 w2", "2 tokens"):
        circuits.source_profile(model, 0, 0, "w1 w2")
    with raises_named(ArgumentError, "text", "not in this model's vocabulary"):
        circuits.skip_trigrams(model, 0, 0, source="nope")
    with raises_named(ArgumentError, "sources", f"[0, {V})", "nope"):
        skip_trigram_data(model, sources=["nope"])


# --- layer and head out of range (bools are not ints) --------------------------

HEAD_FUNCTIONS: list[Callable[[CircuitModel, Any, Any], Any]] = [
    circuits.W_QK,
    circuits.W_OV,
    circuits.full_qk,
    circuits.full_ov,
    circuits.positional_qk,
    lambda m, layer, head: circuits.skip_trigrams(m, layer, head, k=2),
    lambda m, layer, head: circuits.source_profile(m, layer, head, 3, k=2),
    lambda m, layer, head: circuits.full_qk_kcomp(m, 1, 1, layer, head),
]


@pytest.mark.parametrize("fn", HEAD_FUNCTIONS)
@pytest.mark.parametrize(
    ("layer", "head", "error", "words"),
    [
        (2, 0, ArgumentError, ["layer", "[0, 2)", "2"]),
        (-1, 0, ArgumentError, ["layer", "[0, 2)", "-1"]),
        (0, 2, ArgumentError, ["head", "[0, 2)", "2"]),
        (True, 0, ArgumentTypeError, ["layer", "int", "bool"]),
        (0, False, ArgumentTypeError, ["head", "int", "bool"]),
        (np.bool_(True), 0, ArgumentTypeError, ["layer", "int", "bool"]),
        (0.0, 0, ArgumentTypeError, ["layer", "int", "float"]),
        ("0", 0, ArgumentTypeError, ["layer", "int", "str"]),
        (None, 0, ArgumentTypeError, ["layer", "int", "NoneType"]),
        (torch.tensor(0.0), 0, ArgumentTypeError, ["layer", "int", "Tensor"]),
    ],
)
def test_layer_and_head_out_of_range_or_of_the_wrong_type_are_named(
    model: CircuitModel, fn: Callable[..., Any], layer: Any, head: Any, error: type, words: list[str]
) -> None:
    with raises_named(error, *words):
        fn(model, layer, head)


@pytest.mark.parametrize("fn", HEAD_FUNCTIONS)
def test_numpy_and_0d_tensor_integers_are_accepted_as_layer_and_head(
    model: CircuitModel, fn: Callable[..., Any]
) -> None:
    fn(model, np.int64(0), torch.tensor(1))


# --- a model with MLPs in an attention-only analysis ----------------------------


def test_a_model_with_mlps_warns_once_per_analysis_naming_the_excluded_paths() -> None:
    m = mlp_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        circuits.copying_scores(m)  # computes eigenvalues inside: one warning, from the analysis called
        circuits.copying_scores(m, method="diagonal")
        circuits.full_ov(m, 0, 0)
        circuits.full_ov(m, 1, 1)
        circuits.composition_scores(m)
    mlp = [str(w.message) for w in caught if issubclass(w.category, MLPPathsExcludedWarning)]
    assert [msg.split(":")[0] for msg in mlp] == ["copying_scores", "full_ov", "composition_scores"]
    assert all("'with-mlp' has MLPs" in msg and "every path through an MLP" in msg for msg in mlp)
    assert all("MLP → head" in msg and "token → MLP → logits" in msg for msg in mlp)
    assert all(w.filename == __file__ for w in caught if issubclass(w.category, MLPPathsExcludedWarning))


def test_a_widget_on_a_model_with_mlps_warns_once_in_its_own_name() -> None:
    m = mlp_model("widget-mlp")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        EigenScatter(m, max_tokens=4)
        EigenScatter(m, max_tokens=4)
        CircuitExplorer(m, "<1> <2> <3>", k=2, profile_k=2, max_tokens=4)
    mlp = [str(w.message).split(":")[0] for w in caught if issubclass(w.category, MLPPathsExcludedWarning)]
    assert mlp == ["EigenScatter", "CircuitExplorer"]


def test_each_model_with_mlps_gets_its_own_warning() -> None:
    with pytest.warns(MLPPathsExcludedWarning, match="'first'"):
        circuits.full_qk(mlp_model("first"), 0, 0)
    with pytest.warns(MLPPathsExcludedWarning, match="'second'"):
        circuits.full_qk(mlp_model("second"), 0, 0)


def test_attention_only_models_and_forward_analyses_do_not_warn(model: CircuitModel) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", MLPPathsExcludedWarning)
        circuits.copying_scores(model)
        circuits.head_scores(mlp_model("runs-its-mlps"))  # a forward pass runs the MLPs: nothing is excluded


# --- memory: refuse with the estimate ------------------------------------------


def test_a_dense_full_circuit_of_a_50k_vocabulary_is_refused_with_its_bytes() -> None:
    big = big_vocab_model()
    with raises_named(
        MemoryBudgetError, "max_entries", "[50257, 50257]", "2,525,766,049 entries", "10,103,064,196 bytes"
    ):
        circuits.full_ov(big, 0, 0).dense()
    assert circuits.full_ov(big, 0, 0)[:3, :5].dense().shape == (3, 5)  # a slice is fine


def test_top_k_results_too_large_to_return_are_refused_with_their_bytes() -> None:
    ov = circuits.full_ov(big_vocab_model(), 0, 0)
    with raises_named(MemoryBudgetError, "k", "1,000,000,000 best entries", "20,000,000,000 bytes"):
        ov.topk(10**9)
    with raises_named(MemoryBudgetError, "k", "50,000 entries for each of 50,257 rows"):
        ov.topk_rows(50_000)


def test_a_forward_pass_whose_cache_would_exceed_the_budget_is_refused_before_running() -> None:
    m = make_random_model(n_layers=2, n_heads=3, d_model=16, d_head=4, d_vocab=50, n_ctx=1024)
    tokens = torch.zeros(256, 1024, dtype=torch.long)
    needed = m.forward_bytes(256, 1024)
    assert needed > 8 * 2**30
    with raises_named(MemoryBudgetError, "[batch=256, pos=1024]", f"{needed:,} bytes", "names=[...]", "memory_budget"):
        m.run_with_cache(tokens)
    with raises_named(MemoryBudgetError, "memory_budget=1,000"):
        m.run_with_cache(tokens[:1, :4], memory_budget=1000)
    logits, _ = m.run_with_cache(tokens[:1, :4], memory_budget=10**6)
    assert logits.shape == (1, 4, 50)


def test_the_forward_estimate_covers_the_activations_kept_and_the_logits(model: CircuitModel) -> None:
    logits, cache = model.run_with_cache(torch.arange(1, 13).reshape(2, 6))
    kept = sum(cache[k].numel() * cache[k].element_size() for k in cache) + logits.numel() * logits.element_size()
    assert kept <= model.forward_bytes(2, 6) <= 3 * kept
    assert model.forward_bytes(2, 6, names={"pattern"}) < model.forward_bytes(2, 6)


def test_a_skip_trigram_table_whose_state_would_be_huge_is_refused_before_computing() -> None:
    big = big_vocab_model()
    with raises_named(MemoryBudgetError, "k, profile_k", "k=50257", "bytes of widget state"):
        skip_trigram_data(big, k=50257, profile_k=50257)


def test_attention_arrays_far_beyond_a_sensible_size_are_refused_from_their_shape() -> None:
    # A broadcast view costs nothing to pass; converting or packing it into the dense view's state would
    # take ~15 GB. (By default an array this long takes the long-context path, which reads it in slices.)
    huge = np.broadcast_to(np.float32(1e-5), (1, 1, 100_000, 100_000))
    with raises_named(MemoryBudgetError, "attention", "100000 tokens", "5,000,050,000 bytes"):
        AttentionPatterns.from_arrays([f"t{i}" for i in range(100_000)], huge, long=False)


#: The stated bound of benchmarks/bench_memory.py: extra peak RSS of one V×V operation.
VXV_BOUND_BYTES = 2**30

_RSS_CHILD = """
import json, resource, sys
sys.path.insert(0, "tests")
import torch
from conftest import make_random_model
from circuitwidgets.circuits import full_ov
model = make_random_model(n_layers=1, n_heads=1, d_model=64, d_head=8, d_vocab=50257, n_ctx=8, dtype=torch.float32)
ov = full_ov(model, 0, 0)
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
base = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # reset the peak to the current RSS
top = ov.topk(20, progress_bar=False)
print(json.dumps({"base": base, "peak": status("VmHWM"), "best": float(top.values[0])}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to reset the peak RSS")
def test_top_k_of_a_50k_full_circuit_stays_within_the_memory_bound() -> None:
    # One dense [50257, 50257] float32 matrix would be 10.1 GB; the chunked top-k holds one 32 MiB tile.
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD], capture_output=True, text=True, cwd=root, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    m = json.loads(done.stdout.strip().splitlines()[-1])
    extra = m["peak"] - m["base"]
    assert extra <= VXV_BOUND_BYTES, f"top-k took {extra / 2**20:.0f} MiB above the model's RSS"
    assert np.isfinite(m["best"])


# --- checkpoints: never unpickled ----------------------------------------------


class _Payload:
    """Unpickling this runs code: it would create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Path.touch, (self.marker,))


def _tiny_training_setup(tmp_path: Path) -> tuple[Any, Path, Path, Any]:
    """A cache (tokenizer, token arrays) and a resumable checkpoint for a one-head model."""
    from safetensors.torch import save_file

    from circuitwidgets.training.tokenizer import train_bpe
    from circuitwidgets.training.train import TrainConfig
    from circuitwidgets.training.transformer import ToyConfig, ToyTransformer

    cache = tmp_path / "cache"
    cache.mkdir()
    tokenizer = train_bpe(["def f(x):\n    return x + 1\n"] * 20, vocab_size=300)
    tokenizer.save(str(cache / "tokenizer.json"))
    rng = np.random.default_rng(0)
    vocab = tokenizer.get_vocab_size()
    np.save(cache / "train_tokens.npy", rng.integers(0, vocab, 4096).astype(np.uint16))
    np.save(cache / "val_tokens.npy", rng.integers(0, vocab, 4096).astype(np.uint16))
    cfg = TrainConfig(
        n_layers=1, n_heads=1, d_model=8, d_head=4, n_ctx=16, batch_size=2, steps=2, eval_every=1, checkpoint_every=1
    )
    net = ToyTransformer(ToyConfig(1, 1, 8, 4, vocab, 16), generator=torch.Generator().manual_seed(0))
    ckpt = tmp_path / "out" / "checkpoint"
    ckpt.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(ckpt / "model.safetensors"))
    (ckpt / "state.json").write_text(json.dumps({"step": 1}))
    return cfg, cache, ckpt, net


def test_resuming_training_refuses_an_optimizer_checkpoint_that_would_run_code(tmp_path: Path) -> None:
    from circuitwidgets.training.train import train

    cfg, cache, ckpt, _ = _tiny_training_setup(tmp_path)
    marker = tmp_path / "pwned"
    torch.save({"state": {}, "param_groups": [], "x": _Payload(marker)}, ckpt / "optim.pt")
    with raises_named(ArgumentError, "checkpoint", "optim.pt", "weights_only=True", "nothing was run"):
        train(cfg, tmp_path / "out", cache_dir=cache, progress=False)
    assert not marker.exists()


def test_resuming_training_reads_the_optimizer_checkpoint_it_wrote(tmp_path: Path) -> None:
    import dataclasses

    from circuitwidgets.training.train import train

    cfg, cache, ckpt, _ = _tiny_training_setup(tmp_path)
    for name in ("state.json", "model.safetensors"):
        (ckpt / name).unlink()
    train(dataclasses.replace(cfg, steps=1), tmp_path / "out", cache_dir=cache, progress=False)  # writes optim.pt
    assert (ckpt / "optim.pt").is_file()
    train(cfg, tmp_path / "out", cache_dir=cache, progress=False)  # resumes from it with weights_only=True
    assert json.loads((ckpt / "state.json").read_text())["step"] == 2


def test_cached_token_arrays_holding_pickled_objects_are_refused(tmp_path: Path) -> None:
    from circuitwidgets.training.train import _cached_corpus_tokens

    _tiny_training_setup(tmp_path)
    marker = tmp_path / "pwned"
    np.save(tmp_path / "cache" / "train_tokens.npy", np.array([_Payload(marker)], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_pickle"):
        _cached_corpus_tokens(tmp_path / "cache", 300)
    assert not marker.exists()


def test_a_pickle_named_like_a_hugging_face_safetensors_checkpoint_is_refused(tmp_path: Path) -> None:
    from circuitwidgets.sources.safetensors_file import load_safetensors

    marker = tmp_path / "pwned"
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8, "vocab_size": 10})
    )
    (tmp_path / "model.safetensors").write_bytes(pickle.dumps({"wte.weight": _Payload(marker)}))
    with raises_named(ArgumentError, "path", "model.safetensors", "not a valid safetensors file"):
        load_safetensors(tmp_path)
    assert not marker.exists()


def test_the_package_never_unpickles() -> None:
    package = Path(__file__).resolve().parent.parent / "circuitwidgets"
    for path in package.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        for call in re.findall(r"torch\.load\([^)]*\)", source):
            assert "weights_only=True" in call, f"{path}: {call}"
        for banned in (
            "pickle.load(",
            "pickle.loads(",
            "allow_pickle=True",
            "import joblib",
            "import dill",
            "Unpickler(",
        ):
            assert banned not in source, f"{path} uses {banned}"


# --- widgets: constructor arguments ----------------------------------------------


def test_invalid_initial_traits_are_both_argument_and_trait_errors(model: CircuitModel) -> None:
    with pytest.raises(TraitArgumentError, match=r"selected_head.*expected 0\.\.1, got 5") as info:
        CompositionMap(model, selected_head=5)
    assert isinstance(info.value, ArgumentError) and isinstance(info.value, traitlets.TraitError)
    with pytest.raises(TraitArgumentError, match="layer"):
        SkipTrigramTable(model, layer=True, k=2, profile_k=2)


@pytest.mark.parametrize(
    ("build", "error", "words"),
    [
        (lambda m: EigenScatter(m, k=0), ArgumentError, ["k", "[1, 25)", "0"]),
        (lambda m: EigenScatter(m, max_tokens="all"), ArgumentTypeError, ["max_tokens", "int", "str"]),
        (lambda m: EigenScatter(m, seed=-1), ArgumentError, ["seed", "-1"]),
        (lambda m: SkipTrigramTable(m, heads=[(0, 5)]), ArgumentError, ["heads", "2 × 2", "(0, 5)"]),
        (lambda m: SkipTrigramTable(m, heads=[(True, 0)]), ArgumentTypeError, ["heads", "pairs of ints", "True"]),
        (lambda m: SkipTrigramTable(m, heads=7), ArgumentTypeError, ["heads", "pairs", "int"]),
        (lambda m: SkipTrigramTable(m, sources=[1.5]), ArgumentError, ["sources", f"[0, {V})", "1.5"]),
        (lambda m: SkipTrigramTable(m, sources=None), ArgumentTypeError, ["sources", "NoneType"]),
        (lambda m: SkipTrigramTable(m, memory_budget=0), ArgumentError, ["memory_budget", "0"]),
        (lambda m: CompositionMap(m, n_samples=0), ArgumentError, ["n_samples", "0"]),
        (lambda m: TermImportance(m, "w1 w2", max_order=-1), ArgumentError, ["max_order", "-1"]),
        (lambda m: TermImportance(m), ArgumentError, ["tokens_or_text", "None"]),
        (lambda m: CircuitExplorer(m, "w1 w2", k=0), ArgumentError, ["k", "0"]),
        (lambda m: CircuitExplorer(m, b"w1"), ArgumentError, ["text", "non-empty str", "b'w1'"]),
        (lambda m: EigenScatter("model"), ArgumentTypeError, ["model", "CircuitModel", "str"]),
    ],
)
def test_widget_constructors_name_the_bad_argument(
    model: CircuitModel, build: Callable[[CircuitModel], Any], error: type, words: list[str]
) -> None:
    with raises_named(error, *words):
        build(model)


def test_save_html_names_a_bad_path_title_or_widget(tmp_path: Path) -> None:
    from circuitwidgets import save_html

    w = AttentionPatterns.from_arrays(["<script>", "b"], np.array([[[1.0, 0.0], [0.5, 0.5]]]))
    with raises_named(ArgumentError, "path", ".html", "out.txt"):
        save_html(w, tmp_path / "out.txt")
    with raises_named(ArgumentTypeError, "path", "file path", "None"):
        save_html(w, None)
    with raises_named(ArgumentTypeError, "path", "file path"):
        save_html(w, str(tmp_path / "a\x00.html"))
    with raises_named(ArgumentTypeError, "title", "str", "int"):
        save_html(w, tmp_path / "out.html", title=3)
    with raises_named(ArgumentTypeError, "widgets", "circuitwidgets widget", "NoneType"):
        save_html([w, None], tmp_path / "out.html")
    with raises_named(ArgumentError, "widgets", "at least one widget"):
        save_html([], tmp_path / "out.html")
    (tmp_path / "file").write_text("")
    with raises_named(ArgumentError, "path", "cannot write"):
        save_html(w, tmp_path / "file" / "out.html")


def test_loading_a_model_names_bad_arguments_and_bad_files(model: CircuitModel, tmp_path: Path) -> None:
    root = tmp_path / "m"
    model.save(root)
    with raises_named(ArgumentTypeError, "dtype", "floating-point", "int64"):
        CircuitModel.load(root, dtype=torch.int64)
    with raises_named(ArgumentError, "device", "nonsense"):
        CircuitModel.load(root, device="nonsense")
    with raises_named(ArgumentTypeError, "path", "directory path", "3"):
        CircuitModel.load(3)  # type: ignore[arg-type]
    assert CircuitModel.load(root, dtype=torch.float64).to_str_tokens([1]) == [VOCAB[1]]
    config = json.loads((root / "config.json").read_text())
    for key, value, words in [
        ("n_heads", True, ["cfg.n_heads", "positive int", "True"]),
        ("attn_scale", -1.0, ["cfg.attn_scale", "positive finite", "-1.0"]),
        ("bos_token_id", V, ["cfg.bos_token_id", f"[0, {V})", str(V)]),
        ("rotary_dim", 3, ["cfg.rotary_dim", "even int", "3"]),
        ("has_mlp", "yes", ["cfg.has_mlp", "bool", "'yes'"]),
    ]:
        (root / "config.json").write_text(json.dumps({**config, key: value}))
        with raises_named(ArgumentError, "config.json", *words):
            CircuitModel.load(root)
    (root / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "d_head"}))
    with raises_named(ArgumentError, "config.json", "['d_head']"):
        CircuitModel.load(root)
    (root / "config.json").write_text(json.dumps(config))
    (root / "vocab.json").write_text('{"not": "a list"}')
    with raises_named(ArgumentError, "vocab.json", "list of token strings", "dict"):
        CircuitModel.load(root)


# --- widgets: everything the front end can set ---------------------------------


@pytest.fixture(scope="module")
def widgets(model: CircuitModel) -> dict[str, Any]:
    return {
        "EigenScatter": EigenScatter(model),
        "SkipTrigramTable": SkipTrigramTable(model, k=2, profile_k=2),
        "CompositionMap": CompositionMap(model, n_samples=4),
        "TermImportance": TermImportance(model, TEXT),
        "CircuitExplorer": CircuitExplorer(model, TEXT, k=2, profile_k=2, max_tokens=8),
        "AttentionPatterns": AttentionPatterns(model, TEXT),
    }


HUGE = [2**31, 2**63, 2**200, -(2**70)]
NOT_INTS = [True, False, 1.5, float("nan"), float("inf"), "1", "\x00", None, [0], {}, {"view": b""}]
SELECTION_BAD = [99, -2, *HUGE, *NOT_INTS]
CHOICE_BAD = ["nope", "eigen\x00", "\x00", "<script>", "a" * 10_000, 3, None, True, ["eigen"], {}]
BOOL_BAD = ["true", "", 2, 2**63, None, [], {}, 0.5]
COUNT_BAD = [0, 201, -1, True, 1.5, "12", *HUGE, None, [12]]
EDGE_BAD = [
    [0, 0, 0, 1],  # not earlier
    [1, 0, 0, 0],  # backwards
    [0, 0, 2, 0],  # layer out of range
    [0, 2, 1, 0],  # head out of range
    [0, 0, 1],
    [0, 0, 1, 0, 0],
    ["0", 0, 1, 0],
    [True, 0, 1, 0],
    [0.5, 0, 1, 0],  # (an integral float is the same JSON number as the int, and is accepted as it)
    [2**70, 0, 1, 0],
    [[0], [0], [1], [0]],
    "0,0,1,0",
    None,
    {"l1": 0},
]
QUERY_BAD = ["a" * 1001, None, 5, ["w1"], {}]

#: widget → trait the view may set → values the kernel must refuse
# The shipped models have no rotary layer: their only valid qk_offset is -1.
OFFSET_BAD: list[Any] = [1, 0, -2, "1", 1.5, None, True]

VIEW_TRAITS: dict[str, dict[str, list[Any]]] = {
    "EigenScatter": {
        "selected_layer": SELECTION_BAD,
        "selected_head": SELECTION_BAD,
        "method": CHOICE_BAD,
        "qk_circuit": CHOICE_BAD,
        "qk_offset": OFFSET_BAD,
    },
    "SkipTrigramTable": {
        "selected_layer": SELECTION_BAD,
        "selected_head": SELECTION_BAD,
        "source_token": [V, *SELECTION_BAD],
        "selected_row": SELECTION_BAD,
        "source_query": QUERY_BAD,
        "qk_offset": OFFSET_BAD,
    },
    "CompositionMap": {
        "selected_layer": SELECTION_BAD,
        "selected_head": SELECTION_BAD,
        "kind": CHOICE_BAD,
        "edge_kind": CHOICE_BAD,
        "n_edges": COUNT_BAD,
        "subtract_baseline": BOOL_BAD,
        "selected_edge": EDGE_BAD,
        "qk_offset": OFFSET_BAD,
    },
    "TermImportance": {"selected_order": SELECTION_BAD, "selected_layer": SELECTION_BAD},
    "CircuitExplorer": {
        "selected_layer": SELECTION_BAD,
        "selected_head": SELECTION_BAD,
        "eigen_method": CHOICE_BAD,
        "eigen_qk_circuit": CHOICE_BAD,
        "eigen_qk_offset": OFFSET_BAD,
        "trigram_qk_offset": OFFSET_BAD,
        "composition_qk_offset": OFFSET_BAD,
        "heads_selected_map": SELECTION_BAD,
        "trigram_source_token": [V, *SELECTION_BAD],
        "trigram_selected_row": SELECTION_BAD,
        "trigram_source_query": QUERY_BAD,
        "composition_kind": CHOICE_BAD,
        "composition_edge_kind": CHOICE_BAD,
        "composition_n_edges": COUNT_BAD,
        "composition_subtract_baseline": BOOL_BAD,
        "composition_selected_edge": EDGE_BAD,
        "terms_selected_order": SELECTION_BAD,
        "attention_selected_prompt": SELECTION_BAD,
        "attention_selected_dest": SELECTION_BAD,
        "attention_selected_src": SELECTION_BAD,
        "attention_pattern_kind": CHOICE_BAD,
        "attention_strip": CHOICE_BAD,
        "attention_show_diagonals": BOOL_BAD,
    },
    "AttentionPatterns": {
        "selected_layer": SELECTION_BAD,
        "selected_head": SELECTION_BAD,
        "selected_prompt": SELECTION_BAD,
        "selected_dest": SELECTION_BAD,
        "selected_src": SELECTION_BAD,
        "pattern_kind": CHOICE_BAD,
        "strip": CHOICE_BAD,
        "show_diagonals": BOOL_BAD,
    },
}
CASES = [
    (name, trait, value) for name, traits in VIEW_TRAITS.items() for trait, values in traits.items() for value in values
]


def _snapshot(widget: Any) -> dict[str, Any]:
    """Every synced trait's value (arrays by identity, containers copied)."""
    out = {}
    for key in widget.keys:
        value = getattr(widget, key)
        out[key] = value if isinstance(value, np.ndarray) else json.loads(json.dumps(value, default=repr))
    return out


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all((a[k] is b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k] for k in a)


def assert_refused(
    widget: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, state: dict[str, Any]
) -> None:
    """The update raises nothing, changes nothing, fires no observer, is logged, and the view is told the kept values."""
    before = _snapshot(widget)
    rec = Recorder()
    monkeypatch.setattr(widget, "_send", rec)
    fired: list[Any] = []
    synced = sorted(set(widget.keys))
    widget.observe(fired.append, names=synced)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="circuitwidgets.widgets.core.base"):
        from_view(widget, **state)  # must not raise
    widget.unobserve(fired.append, names=synced)
    assert _same(_snapshot(widget), before), "the previous valid state is kept"
    assert fired == [], "no observer sees a refused value"
    assert any(type(widget).__name__ in r.getMessage() and "rejected" in r.getMessage() for r in caplog.records)
    resent = rec.updates()
    assert resent, "the view must be resynchronised"
    for key in state:
        assert key in resent[-1]
        if not isinstance(before[key], np.ndarray) and not isinstance(resent[-1][key], dict):
            assert json.loads(json.dumps(resent[-1][key])) == before[key]


@pytest.mark.parametrize(("name", "trait", "value"), CASES, ids=[f"{n}.{t}={v!r:.20}" for n, t, v in CASES])
def test_invalid_values_from_the_view_are_refused_and_the_view_resynchronised(
    widgets: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    name: str,
    trait: str,
    value: Any,
) -> None:
    assert_refused(widgets[name], monkeypatch, caplog, {trait: value})


@pytest.mark.parametrize("name", list(VIEW_TRAITS))
def test_data_traits_cannot_be_set_from_the_view(
    widgets: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    w = widgets[name]
    writable = type(w)._from_view
    assert writable is not None and set(writable) == set(VIEW_TRAITS[name])
    for key in sorted(set(w.keys) - set(writable) - {"comm", "layout", "log"}):
        current = getattr(w, key)
        plausible = "x\x00" if isinstance(current, str) else [] if isinstance(current, (list, dict)) else 0
        assert_refused(w, monkeypatch, caplog, {key: plausible})


def test_the_view_cannot_rewrite_the_tokens_or_the_layout_of_the_patterns(
    widgets: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    w = widgets["AttentionPatterns"]
    for state in (
        {"tokens": []},
        {"tokens": ["x\x00"]},
        {"causal": False},
        {"value_patterns": None},
        {"diagonals": [{}]},
    ):
        assert_refused(w, monkeypatch, caplog, state)


def test_an_update_with_one_bad_value_is_refused_as_a_whole(
    widgets: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert_refused(widgets["CompositionMap"], monkeypatch, caplog, {"selected_head": 1, "kind": "Q", "n_edges": 0})
    assert_refused(widgets["CircuitExplorer"], monkeypatch, caplog, {"selected_layer": 1, "eigen_data": {}})


def test_valid_values_from_the_view_still_reach_the_kernel(
    widgets: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    w = widgets["CompositionMap"]
    monkeypatch.setattr(w, "_send", Recorder())
    from_view(w, **{"selected_edge": [0, 1, 1, 0], "edge_kind": "K", "n_edges": 200, "subtract_baseline": False})
    assert (w.selected_edge, w.edge_kind, w.n_edges, w.subtract_baseline) == ([0, 1, 1, 0], "K", 200, False)
    from_view(w, **{"selected_edge": [], "edge_kind": "", "n_edges": 12, "subtract_baseline": True})


@pytest.mark.parametrize("query", ["w1\x00", "\x00", "<script>alert(1)</script> w1", "\u202e", "a" * 1000, "${x}"])
def test_hostile_search_text_is_answered_with_a_message_not_an_error(
    widgets: dict[str, Any], monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    w = widgets["SkipTrigramTable"]
    monkeypatch.setattr(w, "_send", Recorder())
    from_view(w, **{"source_query": query})
    assert w.source_token == -1 and w.source_query == ""
    assert "not" in w.source_message and "token of this model" in w.source_message


def test_a_search_for_a_hostile_token_finds_it_as_text(
    widgets: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    w = widgets["SkipTrigramTable"]
    monkeypatch.setattr(w, "_send", Recorder())
    from_view(w, **{"source_query": "<script>alert(1)</script>"})
    assert w.source_token == VOCAB.index("<script>alert(1)</script>") and w.source_message == ""
    from_view(w, **{"source_token": -1})


@pytest.mark.parametrize(("typed", "token"), [("\\u202eevil", "\u202eevil"), ("a\\x00b", "a\x00b")])
def test_a_token_is_found_by_typing_what_the_view_shows(
    typed: str, token: str, widgets: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view shows control and bidi characters as escapes; typing the escape finds the token."""
    w = widgets["SkipTrigramTable"]
    monkeypatch.setattr(w, "_send", Recorder())
    from_view(w, **{"source_query": typed})
    assert w.source_token == VOCAB.index(token) and w.source_message == ""
    from_view(w, **{"source_token": -1})


def test_a_failure_while_applying_a_view_update_rolls_it_back(
    model: CircuitModel, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    w = SkipTrigramTable(model, k=1, profile_k=2)
    data = {
        "token_ids": w.token_ids,
        "token_strs": w.token_strs,
        "rows": w.rows,
        "row_values": w.row_values,
        "profile_sources": w.profile_sources,
        "profile_tokens": w.profile_tokens,
        "profile_values": w.profile_values,
        "ready": w.ready,
    }
    live = next(t for t in range(V) if listing(data, 0, 0, t, None) is None)  # needs the kernel

    def boom(*args: Any) -> Any:
        raise RuntimeError("engine failure")

    assert w._source is not None
    monkeypatch.setattr(w._source, "live_profile", boom)
    rec = Recorder()
    monkeypatch.setattr(w, "_send", rec)
    with caplog.at_level(logging.WARNING, logger="circuitwidgets.widgets.core.base"):
        from_view(w, **{"source_token": live})
    assert w.source_token == -1
    assert any("failed" in r.getMessage() and r.exc_info for r in caplog.records)
    assert rec.updates()[-1]["source_token"] == -1


def test_messages_that_are_not_updates_of_known_traits_are_ignored(
    widgets: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    w = widgets["EigenScatter"]
    before = _snapshot(w)
    monkeypatch.setattr(w, "_send", Recorder())
    w.set_state(["not", "a", "dict"])  # type: ignore[arg-type]
    from_view(w, **{"no_such_trait": 1, "": None})
    assert _same(_snapshot(w), before)


def test_selections_set_from_python_accept_numpy_integers_but_not_bools(
    widgets: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    w = widgets["EigenScatter"]
    monkeypatch.setattr(w, "_send", Recorder())
    layer = w.selected_layer
    w.selected_layer = np.int64(1)
    assert w.selected_layer == 1 and type(w.selected_layer) is int
    with pytest.raises(traitlets.TraitError, match="expected an int"):
        w.selected_layer = np.bool_(True)
    w.selected_layer = layer


@pytest.mark.parametrize(
    ("token", "shown"),
    [
        (" def", "·def"),
        ("a\nb\tc", "a⏎b→c"),
        ("nul\x00\x7f", "nul\\x00\\x7f"),
        ("abc\u202edef", "abc\\u202edef"),
        ("\u2066x\u2069\u200b\ufeff", "\\u2066x\\u2069\\u200b\\ufeff"),
        ("\u05e9\u05dc\u05d5\u05dd e\u0301 🦀", "\u05e9\u05dc\u05d5\u05dd·e\u0301·🦀"),
    ],
)
def test_report_tables_show_invisible_characters_the_same_way_as_the_views(token: str, shown: str) -> None:
    from circuitwidgets._text import visible_token

    assert visible_token(token) == shown


def test_a_huge_baseline_sample_count_is_refused_at_once_naming_it() -> None:
    """A hypothesis example (n_samples = 2**40) once ran for hours instead of being refused."""
    from circuitwidgets.circuits import composition_baseline
    from circuitwidgets.circuits.composition import MAX_BASELINE_SAMPLES
    from circuitwidgets.errors import MemoryBudgetError

    with pytest.raises(ArgumentError, match=r"n_samples: expected an int in \[1, 100001\), got 1099511627776"):
        composition_baseline(8, 4, n_samples=2**40)
    assert composition_baseline(8, 4, n_samples=MAX_BASELINE_SAMPLES // 1000) > 0
    with pytest.raises(MemoryBudgetError, match=r"d_model, d_head: .*\[1048576, 65536\]"):
        composition_baseline(2**20, 2**16)
