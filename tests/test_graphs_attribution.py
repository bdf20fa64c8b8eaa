"""Attribution graphs against their definition: finite differences in the frozen local replacement model (float64),
and completeness of the linear decomposition (a target's incoming edges plus its constant give its value).

The reference here is independent of the engine: the model's own forward pass with hooks that freeze the
patterns and norm scales and put each MLP's output back as its transcoder's skip path plus the run's
remainder, with one node's write removed at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from _graphs import RandomTranscoder, decoder_model, mlp_model, random_transcoders

from circuitwidgets.graphs.attribution import attribution_matrix
from circuitwidgets.graphs.dense import DenseAttribution
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Hook

Built = tuple[str, CircuitModel, list[RandomTranscoder], DenseAttribution]

TOKENS = torch.tensor([[0, 5, 7, 9, 5, 7, 3, 11]])


def _mlp_input(model: CircuitModel, site: str, resid_mid: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    if site == "resid_mid":
        return resid_mid
    if model.cfg.normalization == "ln_pre":
        return (resid_mid - resid_mid.mean(-1, keepdim=True)) / scale
    return resid_mid / scale


class FrozenReference:
    """The local replacement model of ``tokens`` run by the model's forward pass (written out from the definition)."""

    def __init__(self, model: CircuitModel, tcs: Sequence[RandomTranscoder], tokens: torch.Tensor) -> None:
        self.model, self.tcs, self.tokens = model, tcs, tokens
        _, self.cache = model.run_with_cache(tokens)
        n_pos = tokens.shape[1]
        self.node_writes: list[torch.Tensor] = []  # per layer: features' decoded writes + error, [pos, d]
        self.rest: list[torch.Tensor] = []  # per layer: mlp_out minus skip path
        self.features: list[torch.Tensor] = []  # per layer [pos, d_sae] activations that are nodes
        self.errors: list[torch.Tensor] = []
        for layer, tc in enumerate(tcs):
            x = _mlp_input(model, tc.in_site, self.cache["resid_mid", layer], self.cache["scale_mlp", layer])[0]
            f = tc.encode(x)
            skip = x @ tc.W_skip if tc.W_skip is not None else torch.zeros_like(x)
            out = self.cache["mlp_out", layer][0]
            error = out - (f @ tc.W_dec + tc.b_dec + skip)
            f, error = f.clone(), error.clone()
            f[0], error[0] = 0, 0  # BOS: not nodes
            self.features.append(f)
            self.errors.append(error)
            self.rest.append(out - skip)
        self.n_pos = n_pos

    def targets(
        self, deltas: dict[int, torch.Tensor], embed_delta: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Transcoder pre-activations (minus encoder bias) per layer ``[pos, d_sae]`` and centred last logits ``[d_vocab]``."""
        model = self.model
        hooks: dict[tuple[str, int | None], Hook] = {}
        reads: dict[int, torch.Tensor] = {}
        for layer, tc in enumerate(self.tcs):
            hooks[("pattern", layer)] = self._frozen_pattern(layer)

            def read(v: torch.Tensor, layer: int = layer, tc: RandomTranscoder = tc) -> None:
                reads[layer] = _mlp_input(model, tc.in_site, v, self.cache["scale_mlp", layer])[0]

            def write(v: torch.Tensor, layer: int = layer, tc: RandomTranscoder = tc) -> torch.Tensor:
                x = reads[layer]
                skip = x @ tc.W_skip if tc.W_skip is not None else torch.zeros_like(x)
                return (skip + self.rest[layer] + deltas.get(layer, 0))[None]

            hooks[("resid_mid", layer)] = read
            hooks[("mlp_out", layer)] = write
        hooks[("embed", None)] = lambda v: v + embed_delta[None]
        for layer in range(model.cfg.n_layers):  # the attention output norm's scale (Gemma 2), frozen too
            post = self.cache.get(("scale_attn_post", layer))
            if post is not None:
                hooks[("scale_attn_post", layer)] = lambda v, post=post: post
        logits = model.run_with_hooks(self.tokens, hooks, freeze_norms=self.cache)[0, -1]
        cap = model.cfg.final_softcap
        if cap is not None:  # the targets are the logits before the final soft-cap (circuit-tracer's): undo it
            logits = cap * torch.atanh(logits / cap)
        pre = [reads[layer] @ tc.W_enc for layer, tc in enumerate(self.tcs)]
        return pre, logits - logits.mean()

    def _frozen_pattern(self, layer: int) -> Hook:
        def replay(value: torch.Tensor) -> torch.Tensor:
            return self.cache["pattern", layer]

        return replay

    def zero(self) -> torch.Tensor:
        return torch.zeros(self.n_pos, self.model.cfg.d_model, dtype=self.model.dtype)


def _target_values(graph: DenseAttribution, pre: list[torch.Tensor], logits: torch.Tensor) -> torch.Tensor:
    """Values of the graph's target nodes (feature rows, then logit rows), from the reference's outputs."""
    feats = torch.stack([pre[int(l_)][int(p), int(f)] for l_, p, f in graph.features])
    return torch.cat([feats, logits[graph.logit_tokens]])


def _source_delta(
    ref: FrozenReference, graph: DenseAttribution, s: int
) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """The change of each MLP output and of the embeddings that removes source node ``s``'s write."""
    deltas: dict[int, torch.Tensor] = {}
    embed = ref.zero()
    if s < graph.n_features:
        layer, pos, f = (int(v) for v in graph.features[s])
        d = ref.zero()
        d[pos] = -ref.features[layer][pos, f] * ref.tcs[layer].W_dec[f]
        deltas[layer] = d
    elif s < graph.token_start:
        layer, pos = divmod(s - graph.error_start, graph.n_pos)
        d = ref.zero()
        d[pos] = -ref.errors[layer][pos]
        deltas[layer] = d
    else:
        pos = s - graph.token_start
        embed[pos] = -ref.model.W_E[graph.tokens[pos]]
    return deltas, embed


def _rows(graph: DenseAttribution) -> torch.Tensor:
    return torch.cat([torch.arange(graph.n_features), torch.arange(graph.logit_start, graph.adjacency.shape[0])])


CASES: dict[str, dict[str, dict[str, Any]]] = {
    "ln-mlp_in": dict(model={}, tc={}),
    "ln-skip-jumprelu": dict(model={"seed": 3}, tc={"skip": True, "jump": True}),
    "rms-resid_mid-rotary": dict(
        model={"normalization": "rms_pre", "positions": "rotary"}, tc={"in_site": "resid_mid"}
    ),
    # three layers: a layer-2 target goes back through two whole attention layers and a skip path between them
    "ln-3-layers-skip": dict(model={"n_layers": 3, "seed": 5}, tc={"skip": True}),
    # Gemma 2: norms before and after each sublayer, GQA, soft-caps, a sliding window, gated MLPs (3 layers)
    "gemma2-sandwich-skip": dict(model={"family": "gemma2"}, tc={"skip": True}),
    # OLMo 2: norms after each sublayer only (the transcoders read the un-normalised resid_mid), QK-norm
    "olmo2-postnorm-qknorm": dict(model={"family": "olmo2"}, tc={"in_site": "resid_mid"}),
    # Llama: pre-norms, gated SiLU, GQA, rotary (two layers)
    "llama-gqa-gated": dict(model={"family": "llama", "n_layers": 2}, tc={}),
}


@pytest.fixture(scope="module", params=list(CASES))
def built(request: pytest.FixtureRequest) -> Built:
    case = request.param
    kwargs = dict(CASES[case]["model"])
    family = kwargs.pop("family", None)
    model = decoder_model(family=family, **kwargs) if family else mlp_model(**kwargs)
    tcs = random_transcoders(model, **CASES[case]["tc"])
    graph = attribution_matrix(model, tcs, TOKENS, max_feature_nodes=None, batch=7)
    return case, model, tcs, graph


def test_edges_are_the_frozen_models_finite_differences(built: Built) -> None:
    case, model, tcs, graph = built
    assert graph.n_features > 20 and graph.n_logits >= 2
    ref = FrozenReference(model, tcs, TOKENS)
    base = _target_values(graph, *ref.targets({}, ref.zero()))
    rows = _rows(graph)
    g = torch.Generator().manual_seed(0)
    n_sources = graph.logit_start
    strongest = graph.adjacency[rows][:, :n_sources].abs().sum(0).argsort(descending=True)[:8]
    sources = torch.cat([strongest, torch.randint(0, n_sources, (6,), generator=g)])
    for s in sources.tolist():
        removed = _target_values(graph, *ref.targets(*_source_delta(ref, graph, s)))
        expected = base - removed  # the source's whole write, through the linear model
        got = graph.adjacency[rows, s]
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9, msg=f"{case}: source node {s}")
    assert graph.adjacency[rows][:, :n_sources].abs().max() > 1e-3


def test_incoming_edges_plus_constant_give_each_target(built: Built) -> None:
    _, model, tcs, graph = built
    ref = FrozenReference(model, tcs, TOKENS)
    full = _target_values(graph, *ref.targets({}, ref.zero()))
    all_nodes = {
        layer: -(ref.features[layer] @ ref.tcs[layer].W_dec + ref.errors[layer]) for layer in range(model.cfg.n_layers)
    }
    empty = _target_values(graph, *ref.targets(all_nodes, -model.W_E[TOKENS[0]]))
    rows = _rows(graph)
    torch.testing.assert_close(graph.adjacency[rows].sum(1), full - empty, rtol=1e-9, atol=1e-9)
    # the pre-activations themselves: the engine's feature values are the model's
    values = ref.targets({}, ref.zero())[0]
    pre = torch.stack([values[int(l_)][int(p), int(f)] for l_, p, f in graph.features])
    acts = torch.stack([ref.features[int(l_)][int(p), int(f)] for l_, p, f in graph.features])
    torch.testing.assert_close(graph.activations, acts)
    assert bool((pre + torch.stack([tcs[int(l_)].b_enc[int(f)] for l_, _, f in graph.features]) > 0).all())


def test_batching_and_splitting_change_no_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of one layer sorted by position, split to bound memory: the same rows whatever the sizes."""
    import circuitwidgets.graphs.rows as rows_module

    model = mlp_model(n_layers=3, seed=2)
    tcs = random_transcoders(model, skip=True)
    whole = attribution_matrix(model, tcs, TOKENS, max_feature_nodes=None, batch=64)
    chosen = attribution_matrix(model, tcs, TOKENS, max_feature_nodes=30, batch=5, update_interval=1)
    # passes of 3 targets (more where the batch's last position is earlier)
    monkeypatch.setattr(rows_module, "GRAD_ELEMENTS", 3 * TOKENS.shape[1] * model.cfg.d_model)
    split = attribution_matrix(model, tcs, TOKENS, max_feature_nodes=None, batch=5)
    torch.testing.assert_close(split.adjacency, whole.adjacency, rtol=1e-12, atol=1e-12)
    split_chosen = attribution_matrix(model, tcs, TOKENS, max_feature_nodes=30, batch=5, update_interval=1)
    assert split_chosen.features.tolist() == chosen.features.tolist()
    torch.testing.assert_close(split_chosen.adjacency, chosen.adjacency, rtol=1e-12, atol=1e-12)
    # rows computed apart and copied in (an accelerator's or another dtype's path), not written in place
    fill = rows_module.RowStore.fill
    monkeypatch.setattr(rows_module.RowStore, "fill", lambda self, c, n, k, like: fill(self, c, n, k, like[:0].half()))
    copied = attribution_matrix(model, tcs, TOKENS, max_feature_nodes=30, batch=5, update_interval=1)
    assert copied.features.tolist() == chosen.features.tolist()
    torch.testing.assert_close(copied.adjacency, chosen.adjacency, rtol=1e-12, atol=1e-12)
