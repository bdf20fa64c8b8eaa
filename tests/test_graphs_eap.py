"""Edge attribution (EAP, EAP-IG, clean-corrupted) against its definition, re-derived in float64.

hannamw/EAP-IG's score of edge ``s → r`` is ``(corrupted − clean write of s) · ∂metric/∂(input of r)``
with the gradient averaged over the method's runs. Along the edge, that product is the derivative of
``ε ↦ metric(run with ε · (corrupted − clean write of s) added to r's input only)`` at 0: these tests
measure that derivative by central differences on the split pass (itself checked against the model's
own forward pass) and compare it with the scores of the batched backward passes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from circuitwidgets.causal import logit_diff
from circuitwidgets.causal.metrics import as_metric
from circuitwidgets.errors import (
    ArgumentError,
    ArgumentTypeError,
    MemoryBudgetError,
    ShapeError,
    UnsupportedArchitectureError,
)
from circuitwidgets.graphs import edge_attribution
from circuitwidgets.graphs.components import Components, Group, components_of
from circuitwidgets.graphs.runs import bytes_per_sequence
from circuitwidgets.graphs.split import split_run
from circuitwidgets.model import CircuitModel

sys.path.insert(0, str(Path(__file__).parent))
from conftest import make_random_model

EdgeFn = Callable[[float], float]


def _pair(model: CircuitModel, n: int = 3, n_pos: int = 7, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, object]:
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(3, model.cfg.d_vocab, (n, n_pos), generator=g)
    corrupted = clean.clone()
    corrupted[:, 2:5] = torch.randint(3, model.cfg.d_vocab, (n, 3), generator=g)
    correct = torch.randint(3, model.cfg.d_vocab, (n,), generator=g).tolist()
    wrong = torch.randint(3, model.cfg.d_vocab, (n,), generator=g).tolist()
    return clean, corrupted, logit_diff(correct, wrong)


def _writes(model: CircuitModel, comps: Components, tokens: torch.Tensor) -> torch.Tensor:
    out: list[torch.Tensor] = []
    split_run(model, comps, tokens, edit_output=lambda _, v: out.append(v) or v)  # type: ignore[func-returns-value]
    return torch.cat(out, dim=2)


def _group_of(comps: Components, r: int) -> Group:
    return next(g for g in comps.groups() if g.first <= r < g.first + g.size)


def _along_edge(
    model: CircuitModel,
    comps: Components,
    tokens: torch.Tensor,
    metric: object,
    direction: torch.Tensor,
    r: int,
    edit_output: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
) -> EdgeFn:
    """``ε ↦ metric`` of the run with ``ε · direction`` added to receiver ``r``'s input only."""
    m = as_metric(metric, model.cfg.d_vocab)
    group = _group_of(comps, r)

    def f(eps: float) -> float:
        def edit(g: Group, x: torch.Tensor, _: object) -> torch.Tensor:
            if g != group:
                return x
            x = x.clone()
            x[:, :, r - g.first] += eps * direction
            return x

        with torch.no_grad():
            logits = split_run(
                model,
                comps,
                tokens,
                edit_input=edit,
                edit_output=edit_output,
                positions=m.positions_at(tokens.shape[1]),
                columns=m.columns,
            )
        return float(m.batched(logits[None], tokens.shape[0])[0])

    return f


def _derivative(f: EdgeFn, h: float = 1e-4) -> float:
    return (f(h) - f(-h)) / (2 * h)


def _reference(
    model: CircuitModel,
    method: str,
    steps: int,
    clean: torch.Tensor,
    corrupted: torch.Tensor,
    metric: object,
    s: int,
    r: int,
) -> float:
    """The re-derived score of edge ``s → r`` (module docstring), one derivative per run of the method."""
    comps = components_of(model)
    wc, wk = _writes(model, comps, clean), _writes(model, comps, corrupted)
    direction = wk[:, :, s] - wc[:, :, s]
    runs: list[tuple[torch.Tensor, Callable[[int, torch.Tensor], torch.Tensor] | None]] = []
    if method == "eap":
        runs = [(clean, None)]
    elif method == "clean-corrupted":
        runs = [(clean, None), (corrupted, None)]
    elif method == "eap-ig-inputs":
        for k in range(steps):

            def blend(first: int, v: torch.Tensor, a: float = k / steps) -> torch.Tensor:
                return wk[:, :, :1] + a * (wc[:, :, :1] - wk[:, :, :1]) if first == 0 else v

            runs.append((clean, blend))
    else:
        firsts = [0] + [
            f
            for layer in range(comps.n_layers)
            for f in ([comps.head_sender(layer, 0)] + ([comps.mlp_sender(layer)] if comps.has_mlp else []))
        ]
        for target in firsts:
            for k in range(1, steps + 1):
                a = k / steps

                def interp(first: int, v: torch.Tensor, a: float = a, target: int = target) -> torch.Tensor:
                    if first != target:
                        return v
                    w = v.shape[2]
                    return a * wc[:, :, first : first + w] + (1 - a) * wk[:, :, first : first + w]

                runs.append((clean, interp))
    return float(np.mean([_derivative(_along_edge(model, comps, t, metric, direction, r, e)) for t, e in runs]))


def _model_with_mlp() -> CircuitModel:
    """A tiny LayerNorm + GELU model with biases and standard positions (float64), built from the shipped gelu-2l
    config shape scaled down."""
    from circuitwidgets.model import ModelConfig

    g = torch.Generator().manual_seed(3)
    L, H, d, e, V, M = 2, 2, 8, 4, 20, 16

    def r(*shape: int, std: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    w = {
        "W_E": r(V, d), "W_pos": r(16, d), "W_Q": r(L, H, d, e, std=d**-0.5), "W_K": r(L, H, d, e, std=d**-0.5),
        "W_V": r(L, H, d, e, std=d**-0.5), "W_O": r(L, H, e, d, std=(H * e) ** -0.5), "b_Q": r(L, H, e, std=0.1),
        "b_K": r(L, H, e, std=0.1), "b_V": r(L, H, e, std=0.1), "b_O": r(L, d, std=0.1), "W_in": r(L, d, M, std=d**-0.5),
        "b_in": r(L, M, std=0.1), "W_out": r(L, M, d, std=M**-0.5), "b_out": r(L, d, std=0.1), "W_U": r(d, V, std=d**-0.5),
        "b_U": r(V, std=0.1),
    }  # fmt: skip
    cfg = ModelConfig(L, H, d, e, V, 16, positional_embedding_type="standard", normalization="ln_pre", has_mlp=True,
                      d_mlp=M, act_fn="gelu")  # fmt: skip
    return CircuitModel(cfg, w, name="tiny-gelu")


MODELS = {
    "attn-only": lambda: make_random_model(biases=True),
    "ln-gelu": _model_with_mlp,
}


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_split_pass_is_the_models_forward_pass(kind: str) -> None:
    model = MODELS[kind]()
    tokens = _pair(model)[0]
    torch.testing.assert_close(split_run(model, components_of(model), tokens), model(tokens), rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["eap", "clean-corrupted", "eap-ig-inputs", "eap-ig-activations"])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_scores_are_the_rederived_definition(kind: str, method: str) -> None:
    model = MODELS[kind]()
    clean, corrupted, metric = _pair(model)
    steps = 2
    graph = edge_attribution(model, clean, corrupted, metric, method=method, steps=steps)  # type: ignore[arg-type]
    comps = components_of(model)
    senders, receivers = comps.sender_labels(), comps.receiver_labels()
    # the edges of every kind: embed → q, head → k of a later layer, head → v, MLP → MLP, anything → logits
    # edges of every kind (embed → q, head → k and v of a later layer, to the logits; MLP → MLP, head → MLP)
    chosen = [("embed", "L0H1.q"), ("L0H0", "L1H1.k"), ("L0H1", "L1H0.v"), ("L1H0", "logits")]
    if comps.has_mlp:
        chosen = [chosen[0], chosen[1], ("MLP0", "MLP1"), ("L1H1", "MLP1"), ("MLP1", "logits")]
    if method == "eap-ig-activations":  # one derivative per (group, step): the costliest reference
        chosen = chosen[1:4]
    for sender, receiver in chosen:
        want = _reference(
            model, method, steps, clean, corrupted, metric, senders.index(sender), receivers.index(receiver)
        )
        got = graph.edges.weight[graph.edge_index(sender, receiver)]
        assert got == pytest.approx(want, rel=1e-6, abs=1e-8), (sender, receiver)


def test_gqa_keys_are_per_query_head_without_ungrouped_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    transformers = pytest.importorskip("transformers")  # noqa: F841
    from families import CASES_BY_ID

    from circuitwidgets.sources.huggingface import from_hf

    model = from_hf(CASES_BY_ID["llama-gqa2-biases-llama3rope"].build()).double()
    assert model.cfg.group_size == 2
    clean, corrupted, metric = _pair(model, n_pos=6)

    def refuse(*_: object) -> None:
        raise AssertionError("ungrouped weights were formed")

    monkeypatch.setattr(CircuitModel, "per_query_head", refuse)
    torch.testing.assert_close(split_run(model, components_of(model), clean), model(clean), rtol=0, atol=1e-12)
    graph = edge_attribution(model, clean, corrupted, metric)
    comps = components_of(model)
    receivers = comps.receiver_labels()
    for receiver in ("L1H0.k", "L1H1.k", "L1H2.v"):  # heads 0 and 1 share key group 0: two receivers, two scores
        want = _reference(model, "eap", 1, clean, corrupted, metric, comps.head_sender(0, 3), receivers.index(receiver))
        assert graph.edges.weight[graph.edge_index("L0H3", receiver)] == pytest.approx(want, rel=1e-6, abs=1e-9)
    assert (
        graph.edges.weight[graph.edge_index("L0H3", "L1H0.k")] != graph.edges.weight[graph.edge_index("L0H3", "L1H1.k")]
    )


def test_graph_names_and_edge_count() -> None:
    model = make_random_model()
    clean, corrupted, metric = _pair(model)
    graph = edge_attribution(model, clean, corrupted, metric)
    comps = components_of(model)
    assert len(graph.edges) == comps.edge_mask().sum() == 3 * 3 * 1 + 3 * 3 * 4 + 7  # L0 inputs, L1 inputs, logits
    assert {"embed", "L0H2", "L1H0.k", "logits"} <= set(graph.nodes.label)
    assert graph.method == "eap" and "EAP-IG's sign" in graph.convention
    assert graph.extra["clean_value"] != graph.extra["corrupted_value"]


def test_prompt_chunks_give_the_same_scores() -> None:
    model = make_random_model(biases=True)
    clean, corrupted, metric = _pair(model, n=5)
    whole = edge_attribution(model, clean, corrupted, metric, method="eap-ig-inputs", steps=2)
    one_prompt = 2 * bytes_per_sequence(model, clean.shape[1], components_of(model))  # 2 variants (steps) of one prompt
    tiny = edge_attribution(model, clean, corrupted, metric, method="eap-ig-inputs", steps=2, memory_budget=one_prompt)
    np.testing.assert_allclose(tiny.edges.weight, whole.edges.weight, rtol=1e-10, atol=1e-12)
    with pytest.raises(
        MemoryBudgetError, match=r"memory_budget: edge_attribution .* needs about"
    ):  # not even one prompt
        edge_attribution(model, clean, corrupted, metric, method="eap-ig-inputs", steps=2, memory_budget=one_prompt - 1)


def test_bad_input_is_typed() -> None:
    model = make_random_model()
    clean, corrupted, metric = _pair(model)
    with pytest.raises(ShapeError, match="corrupted"):
        edge_attribution(model, clean, corrupted[:, :-1], metric)
    with pytest.raises(ArgumentError, match="steps"):
        edge_attribution(model, clean, corrupted, metric, method="eap-ig-inputs", steps=0)
    with pytest.raises(ArgumentTypeError, match="steps"):
        edge_attribution(model, clean, corrupted, metric, steps=2.5)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="method"):
        edge_attribution(model, clean, corrupted, metric, method="acdc")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="metric"):
        edge_attribution(model, clean, corrupted, lambda logits: logits[:, -1, :2])
    with pytest.raises(ArgumentTypeError, match="metric"):
        edge_attribution(model, clean, corrupted, 3)


def test_unsplittable_architectures_are_refused_by_name() -> None:
    pytest.importorskip("transformers")
    from families import CASES_BY_ID

    from circuitwidgets.sources.huggingface import from_hf

    model = from_hf(CASES_BY_ID["gemma2-softcaps-window"].build())
    with pytest.raises(UnsupportedArchitectureError, match="post_norm"):
        edge_attribution(model, *_pair(model))
