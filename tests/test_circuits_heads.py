"""Head detectors on repeated random tokens: definitions, determinism, and heads built to match."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from conftest import make_random_model

from circuitwidgets.circuits import (
    HEAD_KINDS,
    copying_scores,
    head_scores,
    repeated_random_tokens,
    same_matching_scores,
)
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.tokenizer import VocabTokenizer


def test_repeated_tokens_are_seeded_bos_prefixed_and_never_bos_inside() -> None:
    base = make_random_model(d_vocab=20, n_ctx=32)
    model = CircuitModel(
        base.cfg, dict(base.weights()), tokenizer=VocabTokenizer([f"t{i}" for i in range(20)], bos_token_id=7)
    )
    tokens = repeated_random_tokens(model, seq_len=10, n_seqs=30, seed=3)
    assert tokens.shape == (30, 21)
    assert (tokens[:, 0] == 7).all() and not (tokens[:, 1:] == 7).any()
    torch.testing.assert_close(tokens[:, 1:11], tokens[:, 11:])
    torch.testing.assert_close(tokens, repeated_random_tokens(model, seq_len=10, n_seqs=30, seed=3))
    assert not torch.equal(tokens, repeated_random_tokens(model, seq_len=10, n_seqs=30, seed=4))
    assert set(tokens[:, 1:].unique().tolist()) == set(range(20)) - {7}


@pytest.mark.parametrize("kind", ["previous_token", "duplicate_token", "induction"])
def test_scores_are_mean_attention_to_the_detectors_source(kind: str) -> None:
    model = make_random_model(n_layers=2, n_heads=3, n_ctx=32)
    n = 6
    scores = head_scores(model, kind, seq_len=n, n_seqs=4, seed=1)  # type: ignore[arg-type]
    tokens = repeated_random_tokens(model, n, 4, seed=1)  # this model has no BOS: r_1..r_n r_1..r_n
    _, cache = model.run_with_cache(tokens)
    for l in range(2):
        pattern = cache["pattern", l]
        if kind == "previous_token":
            expected = np.mean([pattern[:, :, i, i - 1].numpy() for i in range(1, 2 * n)], axis=0).mean(0)
        else:
            shift = n if kind == "duplicate_token" else n - 1
            expected = np.mean([pattern[:, :, i, i - shift].numpy() for i in range(n, 2 * n)], axis=0).mean(0)
        np.testing.assert_allclose(scores[l], expected)


def _previous_token_model() -> CircuitModel:
    """One head whose positional QK term is large exactly for key = query − 1 (shortformer positions)."""
    base = make_random_model(n_layers=1, n_heads=1, d_model=32, d_head=32, n_ctx=32, d_vocab=10, seed=0)
    weights = dict(base.weights())
    weights["W_E"] = torch.zeros(10, 32, dtype=torch.float64)
    weights["W_pos"] = torch.eye(32, dtype=torch.float64)
    weights["W_Q"] = (torch.diag(torch.ones(31, dtype=torch.float64), -1) * 60.0).reshape(1, 1, 32, 32)
    weights["W_K"] = torch.eye(32, dtype=torch.float64).reshape(1, 1, 32, 32)
    return CircuitModel(base.cfg, weights)


def test_a_head_that_attends_to_the_previous_position_is_a_previous_token_head() -> None:
    model = _previous_token_model()
    assert head_scores(model, "previous_token", seq_len=10)[0, 0] > 0.99
    assert head_scores(model, "induction", seq_len=10)[0, 0] < 0.01


def test_seq_len_must_fit_the_context() -> None:
    with pytest.raises(ArgumentError, match="seq_len: expected at most 16"):
        head_scores(make_random_model(n_ctx=32), "induction", seq_len=17)
    with pytest.raises(ArgumentError, match="kind: expected one of"):
        head_scores(make_random_model(), "copying")  # type: ignore[arg-type]


def test_shipped_two_layer_model_has_induction_heads_that_copy_and_match() -> None:
    """The paper's claim on our own 2-layer model: induction heads K-compose with a previous-token head."""
    from circuitwidgets.sources.pretrained import list_pretrained, load_pretrained

    if "attn-only-2l" not in list_pretrained():
        pytest.skip("the shipped attn-only-2l model is not built in this checkout")
    model = load_pretrained("attn-only-2l")
    induction = head_scores(model, "induction", seq_len=40, n_seqs=4)
    previous = head_scores(model, "previous_token", seq_len=40, n_seqs=4)
    h2 = int(np.argmax(induction[1]))
    h1 = int(np.argmax(previous[0]))
    assert induction[1, h2] > 0.3 and previous[0, h1] > 0.3
    assert copying_scores(model, "ov")[1, h2] > 0.5
    assert same_matching_scores(model)[0, h1, 1, h2] > 0.5


# --- detectors on the user's own tokens or cache -----------------------------------


def _targets(kind: str, seq: list[int], i: int) -> list[int]:
    """The detector's target positions for destination ``i`` of one sequence, from the documented definitions."""
    if i == 0:
        return []
    if kind == "previous_token":
        return [i - 1]
    if kind == "current_token":
        return [i]
    if kind == "first_token":
        return [0]
    earlier = [j for j in range(i) if seq[j] == seq[i]]
    return earlier if kind == "duplicate_token" else [j + 1 for j in earlier]


def _reference(cache: ActivationCache, tokens: torch.Tensor, kind: str, n_layers: int) -> np.ndarray:
    """Loops over sequences, destinations and targets: mean over destinations with a target of the summed attention."""
    rows = []
    for l in range(n_layers):
        pattern = cache["pattern", l].double().numpy()  # [batch, head, dest, src]
        total, count = np.zeros(pattern.shape[1]), 0
        for b, seq in enumerate(tokens.tolist()):
            for i in range(len(seq)):
                targets = _targets(kind, seq, i)
                if targets:
                    total += sum(pattern[b, :, i, j] for j in targets)
                    count += 1
        rows.append(total / count)
    return np.stack(rows)


def _repetitive_tokens(batch: int, n_pos: int, n_distinct: int, seed: int) -> torch.Tensor:
    return torch.randint(0, n_distinct, (batch, n_pos), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_scores_on_own_tokens_and_cache_equal_a_dense_reference(kind: str) -> None:
    model = make_random_model(n_layers=2, n_heads=3, n_ctx=32)
    tokens = _repetitive_tokens(3, 14, 4, seed=2)  # four distinct ids: many repeats, adjacent ones too
    assert bool((tokens[:, 1:] == tokens[:, :-1]).any())
    _, cache = model.run_with_cache(tokens, names=["pattern"])
    expected = _reference(cache, tokens, kind, 2)
    assert expected.shape == (2, 3) and np.isfinite(expected).all()
    np.testing.assert_allclose(head_scores(model, kind, tokens=tokens), expected, rtol=1e-12)  # type: ignore[arg-type]
    np.testing.assert_allclose(head_scores(model, kind, tokens=tokens, cache=cache), expected, rtol=1e-12)  # type: ignore[arg-type]
    np.testing.assert_allclose(
        head_scores(model, kind, tokens=tokens[0].tolist()), _reference(cache, tokens[:1], kind, 2), rtol=1e-12
    )  # type: ignore[arg-type]
    if kind not in ("duplicate_token", "induction"):  # positions alone define the targets
        np.testing.assert_allclose(head_scores(model, kind, cache=cache), expected, rtol=1e-12)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "tl_name"),
    [("previous_token", "previous_token"), ("duplicate_token", "duplicate_token"), ("induction", "induction")],
)
def test_scores_on_one_sequence_are_detect_heads_mul_score_rescaled(kind: str, tl_name: str) -> None:
    """TransformerLens's detection patterns and "mul" score, divided by destinations with a target instead of seq_len."""
    detector = pytest.importorskip("transformer_lens.head_detector")
    model = make_random_model(n_layers=2, n_heads=3, n_ctx=32)
    tokens = _repetitive_tokens(1, 16, 5, seed=7)
    assert bool((tokens[0, 1:] == tokens[0, :-1]).any())  # induction's i → i target (t_{i-1} = t_i) is exercised
    detection = getattr(detector, f"get_{tl_name}_head_detection_pattern")(tokens).double()
    n_dest = int((detection.sum(dim=1) > 0).sum())
    _, cache = model.run_with_cache(tokens, names=["pattern"])
    theirs = np.array(
        [
            [
                detector.compute_head_attention_similarity_score(
                    cache["pattern", l][0, h],
                    detection,
                    exclude_bos=False,
                    exclude_current_token=False,
                    error_measure="mul",
                )
                for h in range(3)
            ]
            for l in range(2)
        ]
    )
    np.testing.assert_allclose(head_scores(model, kind, tokens=tokens) * n_dest / tokens.shape[1], theirs, rtol=1e-10)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_repeated_random_tokens_passed_as_tokens_score_as_the_default(kind: str) -> None:
    """Without accidental repeats within a half, the general definitions reduce to DESIGN.md §3's offsets."""
    model = make_random_model(n_layers=2, n_heads=3, d_vocab=500, n_ctx=32)
    tokens = repeated_random_tokens(model, 8, 4, seed=5)
    assert all(len(set(row[:8])) == 8 for row in tokens.tolist())
    default = head_scores(model, kind, seq_len=8, n_seqs=4, seed=5)  # type: ignore[arg-type]
    np.testing.assert_allclose(head_scores(model, kind, tokens=tokens), default, rtol=1e-12)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "source"), [("current_token", lambda i: i), ("first_token", lambda i: 0)])
def test_new_kinds_on_repeated_random_tokens_average_every_destination_after_the_first(kind: str, source: Any) -> None:
    model = make_random_model(n_layers=2, n_heads=3, n_ctx=32)
    scores = head_scores(model, kind, seq_len=6, n_seqs=4, seed=1)  # type: ignore[arg-type]
    _, cache = model.run_with_cache(repeated_random_tokens(model, 6, 4, seed=1))
    for l in range(2):
        pattern = cache["pattern", l]
        expected = np.mean([pattern[:, :, i, source(i)].numpy() for i in range(1, 12)], axis=0).mean(0)
        np.testing.assert_allclose(scores[l], expected)


def _positional_head(query: torch.Tensor) -> CircuitModel:
    """One head whose QK is 60 · query[i, j] between positions i (query) and j (key); tokens do not matter."""
    base = make_random_model(n_layers=1, n_heads=1, d_model=32, d_head=32, n_ctx=32, d_vocab=10, seed=0)
    weights = dict(base.weights())
    weights["W_E"] = torch.zeros(10, 32, dtype=torch.float64)
    weights["W_pos"] = torch.eye(32, dtype=torch.float64)
    weights["W_Q"] = (query.double() * 60.0).reshape(1, 1, 32, 32)
    weights["W_K"] = torch.eye(32, dtype=torch.float64).reshape(1, 1, 32, 32)
    return CircuitModel(base.cfg, weights)


def test_heads_built_to_attend_to_themselves_or_to_position_zero_are_found() -> None:
    to_position_zero = torch.zeros(32, 32)
    to_position_zero[:, 0] = 1.0
    current, first = _positional_head(torch.eye(32)), _positional_head(to_position_zero)
    tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    for kind_of, model in (("current_token", current), ("first_token", first)):
        other = "first_token" if kind_of == "current_token" else "current_token"
        assert head_scores(model, kind_of, seq_len=10)[0, 0] > 0.99  # type: ignore[arg-type]
        assert head_scores(model, kind_of, tokens=tokens)[0, 0] > 0.99  # type: ignore[arg-type]
        assert head_scores(model, other, tokens=tokens)[0, 0] < 0.01  # type: ignore[arg-type]
        previous = head_scores(model, "previous_token", tokens=tokens)[0, 0]
        # Only destination 1's previous position is position 0: 1 of the 9 destinations.
        assert previous < 0.01 if kind_of == "current_token" else previous == pytest.approx(1 / 9, abs=0.01)


def test_texts_are_tokenised_with_the_models_bos() -> None:
    base = make_random_model(d_vocab=20, n_ctx=32)
    model = CircuitModel(
        base.cfg, dict(base.weights()), tokenizer=VocabTokenizer([f"t{i}" for i in range(20)], bos_token_id=0)
    )
    text = "t3 t5 t7 t3 t5 t7 t9"
    ids = model.to_tokens(text)
    assert ids[0, 0] == 0 and ids.shape == (1, 8)
    for kind in HEAD_KINDS:
        np.testing.assert_allclose(head_scores(model, kind, tokens=text), head_scores(model, kind, tokens=ids))  # type: ignore[arg-type]
    both = head_scores(model, "induction", tokens=[text, "t1 t2 t1 t2 t1 t2 t1"])
    _, cache = model.run_with_cache(model.to_tokens([text, "t1 t2 t1 t2 t1 t2 t1"]), names=["pattern"])
    np.testing.assert_allclose(both, _reference(cache, model.to_tokens([text, "t1 t2 t1 t2 t1 t2 t1"]), "induction", 2))


def test_a_cache_from_another_model_is_refused_naming_cache() -> None:
    model = make_random_model(n_layers=2, n_heads=3, n_ctx=32)
    tokens = _repetitive_tokens(2, 10, 4, seed=0)
    _, deeper = make_random_model(n_layers=3, n_heads=3).run_with_cache(tokens, names=["pattern"])
    _, shallower = make_random_model(n_layers=1, n_heads=3).run_with_cache(tokens, names=["pattern"])
    _, wider = make_random_model(n_layers=2, n_heads=4).run_with_cache(tokens, names=["pattern"])
    _, no_patterns = model.run_with_cache(tokens, names=["attn_scores"])
    with pytest.raises(ShapeError, match="cache: holds patterns for more layers than the model's n_layers=2"):
        head_scores(model, "previous_token", cache=deeper)
    with pytest.raises(
        ArgumentError, match=r"cache: expected 'pattern' for each of the model's 2 layers, missing layers \[1\]"
    ):
        head_scores(model, "previous_token", cache=shallower)
    with pytest.raises(
        ShapeError, match=r"cache\['pattern', 0\]: expected \[batch, n_heads=3, pos, pos\].*\(2, 4, 10, 10\)"
    ):
        head_scores(model, "previous_token", cache=wider)
    with pytest.raises(ArgumentError, match=r"cache: expected 'pattern'.*missing layers \[0, 1\].*names=\['pattern'\]"):
        head_scores(model, "first_token", cache=no_patterns)
    with pytest.raises(ArgumentTypeError, match=r"cache: expected a circuitwidgets ActivationCache.*got dict"):
        head_scores(model, "previous_token", cache={"pattern.0": torch.ones(1, 3, 2, 2)})  # type: ignore[arg-type]


def test_a_cache_must_match_the_tokens_and_be_finite() -> None:
    model = make_random_model(n_layers=2, n_heads=3, n_ctx=32)
    tokens = _repetitive_tokens(2, 10, 4, seed=0)
    _, cache = model.run_with_cache(tokens, names=["pattern"])
    with pytest.raises(ShapeError, match=r"cache: its patterns cover \[batch=2, pos=10\], but tokens are \[2, 9\]"):
        head_scores(model, "induction", tokens=tokens[:, :9], cache=cache)
    with pytest.raises(ShapeError, match=r"cache: its patterns cover \[batch=2, pos=10\], but tokens are \[1, 10\]"):
        head_scores(model, "induction", tokens=tokens[0], cache=cache)
    with pytest.raises(ArgumentError, match="tokens: 'induction' needs the token ids the patterns were computed on"):
        head_scores(model, "induction", cache=cache)
    broken = {key: cache[key].clone() for key in cache}
    broken["pattern.1"][0, 2, 3, 1] = float("nan")
    with pytest.raises(NonFiniteError, match=r"cache\['pattern', 1\]: expected finite values"):
        head_scores(model, "previous_token", cache=ActivationCache(broken))


def test_bad_kinds_tokens_and_random_token_options_are_named() -> None:
    model = make_random_model(n_layers=2, n_heads=3, n_ctx=32)
    with pytest.raises(ArgumentError, match="kind: expected one of") as info:
        head_scores(model, "bos", tokens=[1, 2, 3])  # type: ignore[arg-type]
    assert all(kind in str(info.value) for kind in HEAD_KINDS)
    with pytest.raises(
        ArgumentError, match=r"tokens: expected at least one destination with a 'induction' target.*no token repeats"
    ):
        head_scores(model, "induction", tokens=[1, 2, 3, 4])
    with pytest.raises(ArgumentError, match="tokens: expected at least one destination with a 'previous_token' target"):
        head_scores(model, "previous_token", tokens=[1])
    with pytest.raises(ArgumentError, match=r"seq_len: only used for repeated random tokens.*got 5 with tokens"):
        head_scores(model, "induction", tokens=[1, 2, 1, 2], seq_len=5)
    with pytest.raises(ArgumentError, match=r"seed: only used for repeated random tokens.*with tokens"):
        head_scores(model, "induction", tokens=[1, 2, 1, 2], seed=0)
    with pytest.raises(ShapeError, match=r"tokens: expected integer token ids \[pos\] or \[batch, pos\].*float"):
        head_scores(model, "induction", tokens=[1.0, 2.0])
    with pytest.raises(ShapeError, match=r"tokens: expected integer token ids.*shape \(1, 2, 2\)"):
        head_scores(model, "induction", tokens=[[[1, 2], [1, 2]]])
    with pytest.raises(ArgumentError, match=r"tokens: expected ids in \[0, 50\), got range \[1, 50\]"):
        head_scores(model, "induction", tokens=[1, 50])
    with pytest.raises(ArgumentTypeError, match="tokens: expected a text, texts or token ids, got object"):
        head_scores(model, "induction", tokens=object())  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="tokens: expected at most n_ctx=32 positions, got 40"):
        head_scores(model, "previous_token", tokens=list(range(40)))
