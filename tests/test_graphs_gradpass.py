"""Edge attribution's one-pass gradients against the split pass's, every edge, in float64.

:func:`~circuitwidgets.graphs.edge_attribution` takes each receiver's gradient from one pass of
the model's own computation (:mod:`circuitwidgets.graphs.gradpass`: the chain rule through each
head's projection and the layer's norm). Its slow definition is the split pass
(:func:`~circuitwidgets.graphs.split.split_run`, itself checked against the model's forward pass):
every receiver reads its own copy of the stream, and a zero leaf added to each copy has exactly
that receiver's gradient. Here the scores are recomputed that way, for every method and edge, on
architectures that exercise each branch of the pass (no norm, LayerNorm, RMSNorm, shortformer
and standard positions, rotary, grouped keys and values, QK-norm, parallel attention and MLP), with
metrics that read one position (the last layer runs there only), several, or every position.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from circuitwidgets.causal import logit_diff
from circuitwidgets.causal.declared import reads
from circuitwidgets.causal.metrics import as_metric
from circuitwidgets.graphs import edge_attribution
from circuitwidgets.graphs.components import Components, Group, components_of
from circuitwidgets.graphs.gradpass import norm_jvp
from circuitwidgets.graphs.split import split_run
from circuitwidgets.model import CircuitModel

sys.path.insert(0, str(Path(__file__).parent))
from conftest import make_random_model
from test_graphs_eap import _model_with_mlp, _pair

Edit = Callable[[int, torch.Tensor], torch.Tensor]


def _writes(model: CircuitModel, comps: Components, tokens: torch.Tensor) -> torch.Tensor:
    out: list[torch.Tensor] = []
    split_run(model, comps, tokens, edit_output=lambda _, v: out.append(v) or v)  # type: ignore[func-returns-value]
    return torch.cat(out, dim=2)


def _runs(
    model: CircuitModel, method: str, steps: int, wc: torch.Tensor, wk: torch.Tensor
) -> list[tuple[int, Edit | None]]:
    """The method's runs: ``(0, edit)`` runs the clean prompts, ``(1, None)`` the corrupted ones."""
    comps = components_of(model)
    if method == "eap":
        return [(0, None)]
    if method == "clean-corrupted":
        return [(0, None), (1, None)]
    if method == "eap-ig-inputs":
        return [(0, _blend(wc, wk, k / steps)) for k in range(steps)]
    firsts = [0] + [f for layer in range(comps.n_layers)
                    for f in [comps.head_sender(layer, 0)] + ([comps.mlp_sender(layer)] if comps.has_mlp else [])]  # fmt: skip

    def mix(target: int, a: float) -> Edit:
        def edit(f: int, v: torch.Tensor) -> torch.Tensor:
            w = v.shape[2]
            return a * wc[:, :, f : f + w] + (1 - a) * wk[:, :, f : f + w] if f == target else v

        return edit

    return [(0, mix(t, k / steps)) for t in firsts for k in range(1, steps + 1)]


def _blend(wc: torch.Tensor, wk: torch.Tensor, a: float) -> Edit:
    def edit(f: int, v: torch.Tensor) -> torch.Tensor:
        return wk[:, :, :1] + a * (wc[:, :, :1] - wk[:, :, :1]) if f == 0 else v

    return edit


def _split_scores(
    model: CircuitModel, clean: torch.Tensor, corrupted: torch.Tensor, metric: object, method: str, steps: int
) -> np.ndarray:
    """``[senders, receivers]`` scores from zero leaves on every receiver's own copy of the stream (split pass)."""
    comps = components_of(model)
    m = as_metric(metric, model.cfg.d_vocab)
    wc, wk = _writes(model, comps, clean), _writes(model, comps, corrupted)
    runs = _runs(model, method, steps, wc, wk)
    scores = np.zeros((comps.n_senders, comps.n_receivers))
    for which, edit in runs:
        leaves: list[tuple[Group, torch.Tensor]] = []

        def add_leaf(
            group: Group, x: torch.Tensor, _: object, leaves: list[tuple[Group, torch.Tensor]] = leaves
        ) -> torch.Tensor:
            leaf = torch.zeros_like(x, requires_grad=True)
            leaves.append((group, leaf))
            return x + leaf

        with torch.enable_grad():
            tokens = (clean, corrupted)[which]
            logits = split_run(model, comps, tokens, edit_input=add_leaf, edit_output=edit,
                               positions=m.positions_at(tokens.shape[1]), columns=m.columns)  # fmt: skip
            m.batched(logits[None], tokens.shape[0]).sum().backward()  # type: ignore[no-untyped-call]
        for group, leaf in leaves:
            grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)  # (a run that replaced what it reads)
            block = torch.einsum("bpud,bprd->ur", (wk - wc)[:, :, : group.upstream], grad)
            scores[: group.upstream, group.first : group.first + group.size] += block.numpy() / len(runs)
    return scores


def _hf(case: str) -> Callable[[], CircuitModel]:
    def make() -> CircuitModel:
        pytest.importorskip("transformers")
        from families import CASES_BY_ID

        from circuitwidgets.sources.huggingface import from_hf

        return from_hf(CASES_BY_ID[case].build()).double()

    return make


def _parallel_rms() -> CircuitModel:
    base = _model_with_mlp()
    cfg = dataclasses.replace(base.cfg, parallel_attn_mlp=True, normalization="rms_pre")
    return CircuitModel(cfg, {k: v for k, v in base._buffers.items() if v is not None}, name="tiny-parallel-rms")


MODELS: dict[str, Callable[[], CircuitModel]] = {  # (sorted: the small ones first)
    "a-attn-only-shortformer": lambda: make_random_model(biases=True),
    "b-ln-gelu-standard": _model_with_mlp,
    "c-parallel-rms": _parallel_rms,
    "d-llama-gqa-rotary": _hf("llama-gqa2-biases-llama3rope"),
    "e-qwen3-qk-norm": _hf("qwen3-qknorm-wide-heads"),
}


def _metric(model: CircuitModel, kind: str, n: int) -> object:
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, model.cfg.d_vocab, (2, n), generator=g).tolist()
    if kind == "last":
        return logit_diff(ids[0], ids[1])
    if kind == "two-positions":  # unsorted, the last layer runs at both
        return reads(lambda logits: (logits[:, 4, ids[0][0]] - 0.5 * logits[:, 1, ids[1][0]]).mean(), pos=[4, 1])
    return lambda logits: logits[:, :, ids[0][0]].mean() - logits[:, 2:, ids[1][0]].mean()  # every position


METHODS = ("eap", "clean-corrupted", "eap-ig-inputs", "eap-ig-activations")
#: Every method and metric on the small models; on the Hugging Face ones (rotary, grouped keys, QK-norm: the same
#: code for every method) one method of each kind, reading two positions.
CASES = [(name, kind, METHODS) for name in sorted(MODELS)[:3] for kind in ("last", "two-positions", "all")] + [
    (name, "two-positions", ("eap", "eap-ig-inputs")) for name in sorted(MODELS)[3:]
]


@pytest.mark.parametrize(("name", "metric_kind", "methods"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_one_pass_scores_are_the_split_pass_scores(name: str, metric_kind: str, methods: tuple[str, ...]) -> None:
    model = MODELS[name]()
    clean, corrupted, _ = _pair(model, n_pos=6)
    metric = _metric(model, metric_kind, clean.shape[0])
    for method in methods:
        got = edge_attribution(model, clean, corrupted, metric, method=method, steps=2)  # type: ignore[arg-type]
        want = _split_scores(model, clean, corrupted, metric, method, 2)
        exists = components_of(model).edge_mask()
        scale = np.abs(want[exists]).max()
        assert scale > 0
        np.testing.assert_allclose(got.edges.weight, want[exists], rtol=0, atol=1e-12 * scale, err_msg=method)


@pytest.mark.parametrize("normalization", ["none", "ln_pre", "rms_pre"])
def test_norm_jvp_is_the_norms_jacobian(normalization: str) -> None:
    base = _model_with_mlp()
    model = CircuitModel(dataclasses.replace(base.cfg, normalization=normalization),
                         {k: v for k, v in base._buffers.items() if v is not None})  # fmt: skip
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 8, generator=g, dtype=torch.float64) * 3 + 1
    t = torch.randn(4, 2, 3, 8, generator=g, dtype=torch.float64)
    from circuitwidgets.model.cache import Recorder

    def norm(v: torch.Tensor) -> torch.Tensor:
        return model._normalize(v, Recorder({}, set()), "scale", 0)

    want = torch.stack([torch.func.jvp(norm, (x,), (ti,))[1] for ti in t])
    vjp = torch.stack([torch.func.vjp(norm, x)[1](ti)[0] for ti in t])
    got = norm_jvp(model, x, t)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(got, vjp, rtol=0, atol=1e-12)  # symmetric: the same map takes gradients back


#: (test_graphs_faithfulness checks the LayerNorm models, sequential and parallel, with both ablations)
PATCH_CASES = [("a-attn-only-shortformer", "mean")] + [(name, "patch") for name in sorted(MODELS) if name[0] != "b"]


@pytest.mark.parametrize(("name", "ablation"), PATCH_CASES)
def test_patching_pass_is_the_per_edge_definition(name: str, ablation: str) -> None:
    """Circuits of every density through :mod:`~circuitwidgets.graphs.patchpass` against the split pass with each
    dropped edge added to its receiver's own copy (``test_graphs_faithfulness``'s definition), reading two positions."""
    from test_graphs_faithfulness import _slow_masked_values

    from circuitwidgets.graphs.patching import masked_values
    from circuitwidgets.graphs.runs import setup

    model = MODELS[name]()
    clean, corrupted, _ = _pair(model, n_pos=6)
    metric = _metric(model, "two-positions", clean.shape[0])
    comps = components_of(model)
    exists = comps.edge_mask()
    rng = np.random.default_rng(1)
    densities = (0.1, 0.5, 0.9, 0.98)  # (a receiver keeping a few senders reads the reference stream minus theirs)
    last = comps.groups()[-3 if comps.has_mlp else -2]  # every receiver before the last layer's drops everything:
    lower = exists & (np.arange(exists.shape[1]) < last.first)[None]  # one input for all their q, k, v (fused)
    drop = np.stack(
        [exists & (rng.random(exists.shape) < p) for p in densities] + [lower, exists, np.zeros_like(exists)]
    )
    wk = _writes(model, comps, corrupted)
    reference = wk if ablation == "patch" else wk.mean(0, keepdim=True).expand_as(wk)
    want = _slow_masked_values(model, clean, reference, metric, drop)
    got = masked_values(setup(model, clean, corrupted, metric, None), drop, ablation)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
