"""Causal scrubbing against a treeified model written out path by path: every path from the embedding to the logits
reads its own example (chosen here by hand from the hypothesis), and every head and MLP is recomputed from its
readers' streams with hooks, with no sharing. The engine's pruned evaluation must equal it (float64)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from families import CASES_BY_ID, VOCAB

import circuitwidgets as cw
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError, UnsupportedArchitectureError
from circuitwidgets.hypotheses import Hypothesis, scrub
from circuitwidgets.hypotheses.scrub import next_token_loss
from circuitwidgets.model import CircuitModel
from circuitwidgets.sources.huggingface import from_hf

Leaf = Callable[[tuple[str, ...]], torch.Tensor]


def _explicit_logits(model: CircuitModel, tokens: torch.Tensor, leaf: Leaf) -> torch.Tensor:
    """The treeified model, written out: each full path ``('embed', ..., 'logits')`` reads example ``leaf(path)``."""
    cfg = model.cfg
    _, cache = model.run_with_cache(tokens, names=["resid_pre", "attn_out", "result"])
    bias = [cache["attn_out", l] - cache["result", l].sum(2) for l in range(cfg.n_layers)]

    def hooked(names: list[str], hooks: dict[Any, Any]) -> Any:
        return model.run_with_cache(tokens, names=names, hooks=hooks)[1]

    def stream(reader: str, suffix: tuple[str, ...]) -> torch.Tensor:
        """What ``reader`` reads, where ``suffix`` is the rest of the path from it to the logits."""
        path = (reader, *suffix)
        if reader == "logits":
            layer, mlp_too = cfg.n_layers, True
        else:
            layer = int(reader[1 : reader.index("H")]) if reader.startswith("L") else int(reader[3:])
            mlp_too = reader.startswith("MLP")
        total = cache["resid_pre", 0][leaf(("embed", *path))]
        for l in range(layer + (1 if mlp_too and reader != "logits" else 0)):
            total = total + bias[l][:1]
        for l in range(layer + (1 if mlp_too and reader != "logits" else 0)):
            for h in range(cfg.n_heads):
                if reader == "logits" or l < layer or reader.startswith("MLP"):
                    streams = [stream(f"L{l}H{h}.{s}", path) for s in "qkv"]
                    qkv = [
                        hooked([s], {("resid_pre", l): lambda _, x=x: x})[s, l]
                        for s, x in zip("qkv", streams, strict=True)
                    ]
                    hooks = {(s, l): lambda _, x=x: x for s, x in zip("qkv", qkv, strict=True)}
                    total = total + hooked(["result"], hooks)["result", l][:, :, h]
            if cfg.has_mlp and (reader == "logits" or l < layer):
                mid = stream(f"MLP{l}", path)
                total = total + hooked(["mlp_out"], {("resid_mid", l): lambda _, x=mid: x})["mlp_out", l]
        return total

    final = stream("logits", ())
    return model.run_with_hooks(tokens, {("resid_final", None): lambda _: final})


def _check(model: CircuitModel, tokens: torch.Tensor, hypothesis: Hypothesis, leaf_of: Any) -> None:
    result = scrub(model, hypothesis, tokens, resamples=2, seed=3)
    clean = next_token_loss(model(tokens), tokens).mean()
    assert result.clean == pytest.approx(float(clean), abs=1e-10)
    values = []
    for samples, rest in result.extra["assignments"]:  # type: ignore[attr-defined]
        logits = _explicit_logits(model, tokens, leaf_of(samples, rest))
        values.append(float(next_token_loss(logits, tokens).mean()))
    assert result.scrubbed == pytest.approx(sum(values) / len(values), abs=1e-10)
    assert result.runs > 0 and result.recomputed > 0


def _attention_leaf(samples: list[torch.Tensor], rest: torch.Tensor) -> Leaf:
    a, b, c = samples

    def leaf(path: tuple[str, ...]) -> torch.Tensor:
        if path == ("embed", "L1H2.q", "logits"):
            return b
        if len(path) == 4 and path[1].startswith("L0H1.") and path[2:] == ("L1H0.k", "logits"):
            return c if path[1] == "L0H1.v" else a  # the inner path (L0H1's values) wins inside the outer one
        return rest

    return leaf


def test_scrubbing_equals_the_treeified_model_written_out_on_an_attention_only_model(random_model: Any) -> None:
    model = random_model(n_layers=2, n_heads=3, biases=True)
    tokens = torch.randint(0, 50, (6, 5), generator=torch.Generator().manual_seed(0))
    hypothesis = Hypothesis(
        [
            ("L0H1 -> L1H0.k -> logits", lambda t: t[1] % 2),
            ("embed -> L1H2.q -> logits", None),
            (("L0H1.v", "L1H0.k", "logits"), lambda t: t[0] % 3),
        ]
    )
    _check(model, tokens, hypothesis, _attention_leaf)


def _mlp_leaf(samples: list[torch.Tensor], rest: torch.Tensor) -> Leaf:
    a, b, c = samples

    def leaf(path: tuple[str, ...]) -> torch.Tensor:
        if path[-2:] == ("MLP0", "logits"):
            return b if len(path) >= 3 and path[-3].startswith("L0H2.") else a
        if path[-3:] == ("MLP0", "L1H1.v", "logits"):
            return c
        return rest

    return leaf


def test_scrubbing_equals_the_treeified_model_written_out_through_mlps_on_a_llama() -> None:
    model = from_hf(CASES_BY_ID["llama-gqa2-biases-llama3rope"].build(), dtype=torch.float64)
    tokens = torch.randint(3, VOCAB, (5, 4), generator=torch.Generator().manual_seed(1))
    hypothesis = Hypothesis(
        [
            ("MLP0 -> logits", lambda t: t[-1] % 2),
            ("L0H2 -> MLP0 -> logits", None),
            ("MLP0 -> L1H1.v -> logits", lambda t: t[0] % 2),
        ]
    )
    _check(model, tokens, hypothesis, _mlp_leaf)


def test_the_full_hypothesis_recovers_all_and_the_empty_one_nothing() -> None:
    model = cw.load_pretrained("attn-only-2l")
    gen = torch.Generator().manual_seed(0)
    half = torch.randint(1, model.cfg.d_vocab, (40, 10), generator=gen)
    tokens = torch.cat([half, half], dim=1)  # repeated random tokens: induction makes the second half predictable
    full = scrub(model, Hypothesis.full(model), tokens, resamples=4)
    assert full.recovered == pytest.approx(1.0, abs=1e-9) and full.interval == pytest.approx((1.0, 1.0), abs=1e-9)
    assert full.runs == 0 and full.scrubbed == pytest.approx(full.clean, abs=1e-9)
    empty = scrub(model, Hypothesis.empty(model), tokens, resamples=4)
    lo, hi = empty.interval
    assert empty.clean < empty.random - 0.5  # the clean model is far better than fully resampled inputs
    assert lo - 0.05 <= 0.0 <= hi + 0.05 and abs(empty.recovered) < 0.1
    assert "recovers" in repr(empty) and empty.sequences == empty.examples


def test_bad_hypotheses_and_datasets_are_refused_naming_the_argument(random_model: Any) -> None:
    model = random_model(n_layers=2, n_heads=3)
    tokens = torch.randint(0, 50, (4, 5), generator=torch.Generator().manual_seed(0))
    bad: list[tuple[Any, type[Exception], str]] = [
        ([("L0H9 -> logits", None)], ArgumentError, "not a head"),
        ([("L2H0 -> logits", None)], ArgumentError, "not a head"),
        ([("MLP0 -> logits", None)], ArgumentError, "not an MLP"),
        ([("L1H0 -> L0H1.k -> logits", None)], ArgumentError, "does not write into"),
        ([("L0H1 -> L1H0.k -> logits", lambda t: t[99])], ArgumentError, "raised IndexError"),
        ([("L0H1 -> L1H0.k -> logits", lambda t: [t[0]])], ArgumentTypeError, "hashable"),
    ]
    for paths, error, match in bad:
        with pytest.raises(error, match=match):
            scrub(model, Hypothesis(paths), tokens)
    with pytest.raises(ArgumentError, match="paths\\[0\\]"):
        Hypothesis([("L0H1 -> L1H0 -> logits", None)])  # a head after the start must say q, k or v
    with pytest.raises(ArgumentError, match="logits"):
        Hypothesis([("L0H1 -> L1H0.k", None)])
    with pytest.raises(ArgumentTypeError, match="paths\\[0\\]"):
        Hypothesis([("L0H1 -> logits", 3)])
    with pytest.raises(ArgumentError, match="twice"):
        Hypothesis([("L0H1 -> logits", None), (("L0H1", "logits"), None)])
    with pytest.raises(ShapeError, match="dataset"):
        scrub(model, Hypothesis.full(model), [[1, 2, 3], [1, 2]])
    with pytest.raises(ShapeError, match="dataset"):
        scrub(model, Hypothesis.full(model), tokens[:1])
    with pytest.raises(ArgumentTypeError, match="hypothesis"):
        scrub(model, [("L0H1 -> logits", None)], tokens)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="resamples"):
        scrub(model, Hypothesis.full(model), tokens, resamples=1)
    gemma2 = from_hf(CASES_BY_ID["gemma2-softcaps-window"].build(), dtype=torch.float64)
    with pytest.raises(UnsupportedArchitectureError, match="model"):
        scrub(gemma2, Hypothesis.full(gemma2), torch.randint(3, VOCAB, (3, 4)))
