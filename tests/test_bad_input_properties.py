"""Property-based sweep of the public API with malformed arguments (issue 11).

Whatever a user passes, a public function either works or raises one of our
typed errors (subclasses of ``ValueError``/``TypeError`` whose message names
the argument). No other exception type may escape.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from circuitwidgets import circuits
from circuitwidgets.errors import CircuitWidgetsError
from circuitwidgets.widgets import AttentionPatterns
from tests.conftest import make_random_model

MODEL = make_random_model(n_layers=2, n_heads=2, d_model=8, d_head=4, d_vocab=20, n_ctx=16)

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(min_value=-5, max_value=40), max_size=5),
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _works_or_typed_error(fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except CircuitWidgetsError as exc:
        message = str(exc)
    else:
        return
    assert message, "typed errors carry a message"


@SETTINGS
@given(
    circuit=junk | st.sampled_from(["ov", "qk", "qk_kcomp"]),
    method=junk | st.sampled_from(["eigen", "diagonal", "topk"]),
    k=junk,
)
def test_copying_scores_accepts_or_names_the_bad_argument(circuit: Any, method: Any, k: Any) -> None:
    _works_or_typed_error(circuits.copying_scores, MODEL, circuit=circuit, method=method, k=k)


@SETTINGS
@given(kind=junk | st.sampled_from(["Q", "K", "V"]), baseline=junk)
def test_composition_scores_accepts_or_names_the_bad_argument(kind: Any, baseline: Any) -> None:
    _works_or_typed_error(circuits.composition_scores, MODEL, kind=kind, baseline=baseline)


@SETTINGS
@given(
    kind=junk | st.sampled_from(["previous_token", "induction", "duplicate_token"]),
    seq_len=junk,
    n_seqs=junk,
    seed=junk,
)
def test_head_scores_accepts_or_names_the_bad_argument(kind: Any, seq_len: Any, n_seqs: Any, seed: Any) -> None:
    _works_or_typed_error(circuits.head_scores, MODEL, kind=kind, seq_len=seq_len, n_seqs=n_seqs, seed=seed)


@SETTINGS
@given(layer=junk, head=junk, k=junk, source=junk)
def test_skip_trigrams_accepts_or_names_the_bad_argument(layer: Any, head: Any, k: Any, source: Any) -> None:
    _works_or_typed_error(circuits.skip_trigrams, MODEL, layer, head, k=k, source=source)


@SETTINGS
@given(tokens=junk, max_order=junk)
def test_term_importance_accepts_or_names_the_bad_argument(tokens: Any, max_order: Any) -> None:
    _works_or_typed_error(circuits.term_importance, MODEL, tokens, max_order=max_order)


@SETTINGS
@given(tokens=junk)
def test_forward_pass_accepts_or_names_the_bad_argument(tokens: Any) -> None:
    _works_or_typed_error(MODEL.run_with_cache, tokens)


shapes = st.lists(st.integers(min_value=0, max_value=6), min_size=0, max_size=5)


@SETTINGS
@given(shape=shapes, fill=st.sampled_from(["uniform", "nan", "negative", "random"]), n_tokens=st.integers(0, 7))
def test_attention_from_arrays_accepts_or_names_the_bad_argument(shape: list[int], fill: str, n_tokens: int) -> None:
    rng = np.random.default_rng(0)
    values = {
        "uniform": np.full(shape, 0.5),
        "nan": np.full(shape, np.nan),
        "negative": -np.ones(shape),
        "random": rng.random(shape),
    }[fill]
    _works_or_typed_error(AttentionPatterns.from_arrays, [f"t{i}" for i in range(n_tokens)], values)


def test_a_model_with_nan_weights_is_refused_naming_the_tensor() -> None:
    weights = {k: v.clone() for k, v in MODEL.weights().items()}
    weights["W_V"][0, 0, 0, 0] = float("nan")
    with pytest.raises(CircuitWidgetsError, match="W_V"):
        type(MODEL)(MODEL.cfg, weights)


def test_wrong_shaped_weights_are_refused_naming_the_tensor() -> None:
    weights = dict(MODEL.weights())
    weights["W_O"] = torch.zeros(2, 2, 3, 8, dtype=MODEL.dtype)
    with pytest.raises(CircuitWidgetsError, match="W_O"):
        type(MODEL)(MODEL.cfg, weights)


# --- widgets' constructors, save_html, CircuitModel.load ---------------------------


def _worded_model() -> Any:
    from circuitwidgets.model import CircuitModel
    from circuitwidgets.tokenizer import VocabTokenizer

    vocab = ["<bos>", "<script>", "&amp;", "a\x00b", *[f"w{i}" for i in range(16)]]
    return CircuitModel(MODEL.cfg, MODEL.weights(), tokenizer=VocabTokenizer(vocab, bos_token_id=0), name="worded")


WORDED = _worded_model()
WIDGET_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
texts = st.sampled_from(["w1 w2 w3 w1 w2 w3", "w1", "<script> &amp; w4", "", "not-a-word", "w1\x00", "a\x00b w1"])
heads_junk = (
    junk
    | st.lists(st.tuples(st.integers(-2, 3), st.integers(-2, 3)), max_size=3)
    | st.lists(junk, min_size=1, max_size=2)
)


def one_bad(**arguments: tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments, each ``(valid, bad)``: all valid, or exactly one drawn from its bad values.

    Corrupting one argument at a time keeps most calls deep enough to reach
    the code that uses the others (a call with many bad arguments stops at the first).
    """

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        bad = draw(st.sampled_from([None, *arguments]))
        return {name: draw(pair[1] if name == bad else pair[0]) for name, pair in arguments.items()}

    return build()


def _call(fn: Any, kwargs: dict[str, Any], *positional: str) -> None:
    args = [kwargs.pop(name) for name in positional]
    _works_or_typed_error(fn, *args, **kwargs)


@WIDGET_SETTINGS
@given(
    one_bad(
        model=(st.just(WORDED), junk),
        k=(st.integers(1, 6), junk | st.integers(-3, 0) | st.integers(21, 2**70)),
        max_tokens=(st.integers(1, 30), junk | st.integers(-3, 0)),
        seed=(st.integers(0, 3), junk | st.integers(-3, -1) | st.integers(2**64, 2**70)),
    )
)
def test_eigen_scatter_constructor_accepts_or_names_the_bad_argument(kwargs: dict[str, Any]) -> None:
    from circuitwidgets.widgets import EigenScatter

    _call(EigenScatter, kwargs, "model")


@WIDGET_SETTINGS
@given(
    one_bad(
        model=(st.just(WORDED), junk),
        layer=(st.integers(0, 1), junk),
        head=(st.integers(0, 1), junk),
        k=(st.integers(1, 5), junk | st.integers(21, 2**40)),
        profile_k=(st.integers(1, 5), junk),
        heads=(st.none() | st.just([(0, 1), (1, 0)]), heads_junk),
        sources=(
            st.lists(st.integers(0, 19) | st.sampled_from(["w1", "<script>", "a\x00b"]), max_size=3),
            junk | st.lists(junk | st.sampled_from(["w1 w2", "nope", "\x00"]), min_size=1, max_size=2),
        ),
        memory_budget=(st.integers(1, 2**20), junk),
    )
)
def test_skip_trigram_table_constructor_accepts_or_names_the_bad_argument(kwargs: dict[str, Any]) -> None:
    from circuitwidgets.widgets import SkipTrigramTable

    _call(SkipTrigramTable, kwargs, "model")


@WIDGET_SETTINGS
@given(one_bad(model=(st.just(WORDED), junk), n_samples=(st.integers(1, 20), junk), seed=(st.integers(0, 3), junk)))
def test_composition_map_constructor_accepts_or_names_the_bad_argument(kwargs: dict[str, Any]) -> None:
    from circuitwidgets.widgets import CompositionMap

    _call(CompositionMap, kwargs, "model")


@WIDGET_SETTINGS
@given(
    one_bad(
        model=(st.just(WORDED), junk),
        tokens=(
            texts | st.lists(st.integers(0, 19), min_size=2, max_size=8),
            junk | st.lists(st.lists(st.integers(-1, 25), max_size=3), max_size=3),
        ),
        max_order=(st.none() | st.integers(0, 3), junk),
    )
)
def test_term_importance_constructor_accepts_or_names_the_bad_argument(kwargs: dict[str, Any]) -> None:
    from circuitwidgets.widgets import TermImportance

    _call(TermImportance, kwargs, "model", "tokens")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    one_bad(
        model=(st.just(WORDED), junk),
        text=(texts, junk),
        k=(st.integers(1, 4), junk),
        profile_k=(st.integers(1, 3), junk),
        trigram_heads=(st.none() | st.just([(1, 1)]), heads_junk),
        max_tokens=(st.integers(1, 30), junk),
        seed=(st.integers(0, 3), junk),
    )
)
def test_circuit_explorer_constructor_accepts_or_names_the_bad_argument(kwargs: dict[str, Any]) -> None:
    from circuitwidgets.widgets import CircuitExplorer

    _call(CircuitExplorer, kwargs, "model", "text")


@WIDGET_SETTINGS
@given(
    one_bad(model=(st.just(WORDED), junk), tokens=(texts | st.lists(st.integers(0, 19), min_size=1, max_size=8), junk))
)
def test_attention_patterns_constructor_accepts_or_names_the_bad_argument(kwargs: dict[str, Any]) -> None:
    _call(AttentionPatterns, kwargs, "model", "tokens")


@WIDGET_SETTINGS
@given(
    one_bad(
        widgets=(st.sampled_from(["widget", "widgets"]), junk | st.lists(junk, max_size=2) | st.just(["widget", None])),
        path=(
            st.sampled_from(["out.html", "sub/out.HTM"]),
            junk | st.sampled_from(["out.txt", "", ".", "a\x00.html", "out.html/x.html"]),
        ),
        title=(st.text(max_size=8), junk),
    )
)
def test_save_html_accepts_or_names_the_bad_argument(kwargs: dict[str, Any]) -> None:
    import os
    import tempfile

    from circuitwidgets.export import save_html

    real = AttentionPatterns.from_arrays(["a", "<b>"], np.array([[[1.0, 0.0], [0.5, 0.5]]]))
    named = {"widget": real, "widgets": [real, real]}
    w = kwargs["widgets"]
    kwargs["widgets"] = named.get(w, w) if isinstance(w, str) else ([real, None] if w == ["widget", None] else w)
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)
        if kwargs["path"] == "out.html/x.html":
            with open("out.html", "w") as f:  # a file where a directory must be made
                f.write("")
        try:
            _call(save_html, kwargs, "widgets", "path")
        finally:
            os.chdir(cwd)


config_keys = st.sampled_from(
    [
        "n_layers",
        "n_heads",
        "d_model",
        "d_head",
        "d_vocab",
        "n_ctx",
        "positional_embedding_type",
        "normalization",
        "has_mlp",
        "d_mlp",
        "act_fn",
        "rotary_dim",
        "rotary_base",
        "attn_scale",
        "ln_eps",
        "bos_token_id",
        "name",
        "parallel_attn_mlp",
        "architecture",
    ]
)
config_values = (
    junk
    | st.sampled_from(["rotary", "ln_pre", "gelu", -1, 0, 1, 2, 3, 1e300])
    | st.dictionaries(st.text(max_size=3), junk, max_size=2)
)
CORRUPTIONS = [
    "none",
    "config_not_json",
    "config_list",
    "config_missing",
    "weights_garbage",
    "weights_missing",
    "weights_pickle",
    "vocab_garbage",
    "tokenizer_garbage",
]


@WIDGET_SETTINGS
@given(
    one_bad(
        key=(config_keys, config_keys),
        value=(st.just(None), config_values),
        dtype=(
            st.sampled_from([torch.float32, torch.float64]),
            junk | st.sampled_from([torch.int64, "float32", torch.complex64]),
        ),
        device=(st.just("cpu"), junk | st.sampled_from(["nonsense", "cuda:99", "meta"])),
        corrupt=(st.just("none"), st.sampled_from(CORRUPTIONS)),
        path=(st.just("dir"), junk | st.sampled_from(["missing", "file", "a\x00b"])),
    )
)
def test_model_load_accepts_or_names_the_bad_argument(kwargs: dict[str, Any]) -> None:
    import json
    import pickle
    import tempfile
    from pathlib import Path

    from circuitwidgets.model import CircuitModel

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "m"
        WORDED.save(root)
        config = json.loads((root / "config.json").read_text())
        if kwargs["value"] is not None:
            config[kwargs["key"]] = kwargs["value"]
        (root / "config.json").write_text(json.dumps(config))
        corrupt = kwargs["corrupt"]
        if corrupt == "config_not_json":
            (root / "config.json").write_bytes(b"\xff{")
        elif corrupt == "config_list":
            (root / "config.json").write_text("[1, 2]")
        elif corrupt == "config_missing":
            (root / "config.json").unlink()
        elif corrupt == "weights_garbage":
            (root / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad json")
        elif corrupt == "weights_missing":
            (root / "model.safetensors").unlink()
        elif corrupt == "weights_pickle":
            (root / "model.safetensors").unlink()
            (root / "pytorch_model.bin").write_bytes(pickle.dumps({"W_E": [1.0]}))
        elif corrupt == "vocab_garbage":
            (root / "vocab.json").write_text('{"not": "a list"}')
        elif corrupt == "tokenizer_garbage":
            (root / "tokenizer.json").write_text("{}")
        path = (
            {"dir": root, "missing": Path(tmp) / "nope", "file": root / "config.json"}.get(
                kwargs["path"], kwargs["path"]
            )
            if isinstance(kwargs["path"], str)
            else kwargs["path"]
        )
        _works_or_typed_error(CircuitModel.load, path, dtype=kwargs["dtype"], device=kwargs["device"])
