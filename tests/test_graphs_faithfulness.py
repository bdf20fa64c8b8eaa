"""Exact edge patching and faithfulness, against the causal engine's ablations and the model's own runs."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import torch

from circuitwidgets.causal import ablate
from circuitwidgets.causal.metrics import as_metric
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.graphs import edge_attribution, edge_patch, faithfulness, faithfulness_curve, prune
from circuitwidgets.graphs.components import components_of
from circuitwidgets.graphs.patching import masked_values
from circuitwidgets.graphs.runs import setup
from circuitwidgets.graphs.split import split_run
from circuitwidgets.model import CircuitModel

sys.path.insert(0, str(Path(__file__).parent))
from conftest import make_random_model
from test_graphs_eap import _along_edge, _model_with_mlp, _pair, _writes


def _metric_of(model: CircuitModel, metric: object, tokens: torch.Tensor) -> float:
    m = as_metric(metric, model.cfg.d_vocab)
    return float(
        m.batched(model(tokens)[None][:, :, m.positions_at(tokens.shape[1])][..., m.columns], tokens.shape[0])[0]
    )


@pytest.mark.parametrize("make", [make_random_model, _model_with_mlp])
def test_edge_patch_is_the_receiver_reading_the_corrupted_write(make: object) -> None:
    model = make()  # type: ignore[operator]
    clean, corrupted, metric = _pair(model)
    comps = components_of(model)
    wc, wk = _writes(model, comps, clean), _writes(model, comps, corrupted)
    senders, receivers = comps.sender_labels(), comps.receiver_labels()
    edges = [("embed", "L0H2.q" if comps.n_heads > 2 else "L0H1.q"), ("L0H0", "L1H1.k"), ("L0H1", "logits")]
    graph = edge_patch(model, clean, corrupted, metric, edges)
    for sender, receiver in edges:
        s, r = senders.index(sender), receivers.index(receiver)
        f = _along_edge(model, comps, clean, metric, wk[:, :, s] - wc[:, :, s], r)
        want = f(1.0) - f(0.0)
        assert graph.edges.weight[graph.edge_index(sender, receiver)] == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert edge_patch(model, clean, corrupted, metric, (sender, receiver)) == pytest.approx(want, rel=1e-9)


def test_eap_is_exact_on_edges_into_the_logits_of_a_model_without_norms() -> None:
    # no final norm: the metric is linear in the logits' input, so the gradient estimate is the exact effect
    model = make_random_model(biases=True)
    clean, corrupted, metric = _pair(model)
    estimate = edge_attribution(model, clean, corrupted, metric)
    exact = edge_patch(model, clean, corrupted, metric, [(s, "logits") for s in components_of(model).sender_labels()])
    for s, r, w in exact.top(100):
        assert estimate.edges.weight[estimate.edge_index(s, r)] == pytest.approx(w, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("ablation", ["patch", "mean"])
def test_removing_every_edge_out_of_a_head_is_ablating_the_head(ablation: str) -> None:
    model = _model_with_mlp()
    clean, corrupted, metric = _pair(model, n=4)
    full = edge_attribution(model, clean, corrupted, metric)
    kind: Literal["resample", "mean"] = "resample" if ablation == "patch" else "mean"
    swept = ablate(model, clean, metric, site="result", by=("layer", "head"), kind=kind, reference=corrupted)
    full_value, empty_value = _metric_of(model, metric, clean), None
    for layer, head in [(0, 1), (1, 0)]:
        name = f"L{layer}H{head}"
        kept = full.with_edges(np.flatnonzero(np.array(full.nodes.label)[full.edges.src] != name))
        f = faithfulness(model, kept, clean, corrupted, metric, ablation=ablation)
        curve = faithfulness_curve(model, full, clean, corrupted, metric, [0.5, 1.0], ablation=ablation)
        empty_value = curve.empty
        want = (swept.values[layer, head] - empty_value) / (full_value - empty_value)
        assert f == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert empty_value is not None


def test_full_and_empty_circuits_score_one_and_zero_exactly() -> None:
    model = _model_with_mlp()
    clean, corrupted, metric = _pair(model)
    graph = edge_attribution(model, clean, corrupted, metric, method="eap-ig-inputs", steps=3)
    assert faithfulness(model, graph, clean, corrupted, metric) == 1.0
    assert faithfulness(model, prune(graph, edges=0), clean, corrupted, metric) == 0.0
    assert faithfulness(model, graph, clean, corrupted, metric, ablation="mean") == 1.0
    curve = faithfulness_curve(model, graph, clean, corrupted, metric, 6)
    assert curve.values[-1] == 1.0 and curve.edges[-1] == len(graph.edges)
    # the whole model and the empty circuit are the model's own clean and corrupted runs
    assert curve.clean == pytest.approx(_metric_of(model, metric, clean), rel=1e-12)
    assert curve.empty == pytest.approx(_metric_of(model, metric, corrupted), rel=1e-9)
    fr, v = curve.fractions, curve.values
    area = sum((fr[i + 1] - fr[i]) * (v[i] + v[i + 1]) / 2 for i in range(len(fr) - 1))
    assert curve.cpr == pytest.approx(area) and 0 <= curve.cmd
    assert curve.edges == sorted(curve.edges)


def test_bad_circuits_and_options_are_typed() -> None:
    model = make_random_model()
    clean, corrupted, metric = _pair(model)
    graph = edge_attribution(model, clean, corrupted, metric)
    other = edge_attribution(_model_with_mlp(), *_pair(_model_with_mlp()))
    with pytest.raises(ArgumentError, match=re.escape("circuit: the model has no edge 'embed' → 'MLP0'")):
        faithfulness(model, other, clean, corrupted, metric)
    with pytest.raises(ArgumentTypeError, match="circuit"):
        faithfulness(model, [("embed", "logits")], clean, corrupted, metric)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="ablation"):
        faithfulness(model, graph, clean, corrupted, metric, ablation="zero")
    with pytest.raises(ArgumentError, match="fractions"):
        faithfulness_curve(model, graph, clean, corrupted, metric, [0.5, 0.1])
    with pytest.raises(ArgumentError, match=re.escape("edges: the model has no edge 'L1H0' → 'L0H0.q'")):
        edge_patch(model, clean, corrupted, metric, ("L1H0", "L0H0.q"))
    with pytest.raises(ArgumentError, match="corrupted"):
        faithfulness(model, graph, clean, clean, metric)


def _parallel_model() -> CircuitModel:
    """The LayerNorm + GELU test model with each layer's MLP reading the stream before its attention (GPT-J)."""
    from dataclasses import replace

    model = _model_with_mlp()
    weights = {name: t for name, t in model.named_buffers() if t is not None}
    return CircuitModel(replace(model.cfg, parallel_attn_mlp=True), weights, name="tiny-parallel")


def _slow_masked_values(model: CircuitModel, clean: torch.Tensor, reference: torch.Tensor, metric: object,
                        drop: np.ndarray) -> list[float]:  # fmt: skip
    """The definition, one variant, receiver and sender at a time: receiver ``r`` reads its run's input plus
    ``reference_s − actual_s`` for every dropped edge ``s → r``."""
    comps = components_of(model)
    m = as_metric(metric, model.cfg.d_vocab)
    out = []
    for mask in drop:

        def edit(
            group: object, x: torch.Tensor, senders: Callable[[], torch.Tensor], mask: np.ndarray = mask
        ) -> torch.Tensor:
            actual = senders()
            x = x.clone()
            for r in range(group.size):  # type: ignore[attr-defined]
                for s in range(group.upstream):  # type: ignore[attr-defined]
                    if mask[s, group.first + r]:  # type: ignore[attr-defined]
                        x[:, :, r] += reference[:, :, s] - actual[:, :, s]
            return x

        with torch.no_grad():
            logits = split_run(
                model, comps, clean, edit_input=edit, positions=m.positions_at(clean.shape[1]), columns=m.columns
            )
        out.append(float(m.batched(logits[None], clean.shape[0])[0]))
    return out


@pytest.mark.parametrize("make", [_model_with_mlp, _parallel_model], ids=["sequential", "parallel"])
@pytest.mark.parametrize("ablation", ["patch", "mean"])
def test_circuits_of_many_edges_are_the_per_edge_definition(make: Callable[[], CircuitModel], ablation: str) -> None:
    model = make()
    clean, corrupted, metric = _pair(model, n=3)
    comps = components_of(model)
    exists = comps.edge_mask()
    rng = np.random.default_rng(0)
    # random circuits of every density (so buffers fill over several receiver groups), the empty and the whole one
    drop = np.stack(
        [exists & (rng.random(exists.shape) < p) for p in (0.05, 0.2, 0.5, 0.8, 0.95)] + [exists, np.zeros_like(exists)]
    )
    wk = _writes(model, comps, corrupted)
    reference = wk if ablation == "patch" else wk.mean(0, keepdim=True).expand_as(wk)
    want = _slow_masked_values(model, clean, reference, metric, drop)
    s = setup(model, clean, corrupted, metric, None)
    got = masked_values(s, drop, ablation)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    tiny = masked_values(setup(model, clean, corrupted, metric, 1), drop, ablation)  # one prompt, one variant a pass
    np.testing.assert_allclose(tiny, want, rtol=1e-10, atol=1e-12)
