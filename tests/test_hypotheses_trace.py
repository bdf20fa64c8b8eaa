"""Causal tracing against its definition: one hooked run per cell (noise on the embeddings, the clean state restored
in the cell's window of layers), on gelu-2l, an attention-only model and every family's tiny random model (float64)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from families import CASES, VOCAB

import circuitwidgets as cw
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.hypotheses.trace import TRACE_SITES, embedding_noise, window_layers
from circuitwidgets.model import CircuitModel
from circuitwidgets.sources.huggingface import from_hf


def _slow_cell(model: CircuitModel, tokens: torch.Tensor, result: Any, site: str, layer: int, pos: int) -> float:
    """The definition of one cell: ``samples`` noised runs with the clean ``site`` restored at ``pos`` in every layer
    of the window around ``layer``; the mean over the samples of ``p(answer)`` at the last position."""
    extra = result.extra
    samples, corrupt = extra["samples"], extra["corrupt"]
    std = float(model.W_E.double().std()) * extra["noise"]
    offsets = embedding_noise(samples, len(corrupt), model.cfg.d_model, std, extra["seed"])
    _, clean = model.run_with_cache(tokens, names=[site])

    def noise(value: torch.Tensor) -> torch.Tensor:
        out = value.clone()
        for j, p in enumerate(corrupt):
            out[:, p] += offsets[:, j].to(value.dtype)
        return out

    def restore(j: int) -> Any:
        def hook(value: torch.Tensor) -> torch.Tensor:
            out = value.clone()
            out[:, pos] = clean[site, j][0, pos]
            return out

        return hook

    hooks: dict[Any, Any] = {("embed", None): noise}
    for j in window_layers(layer, extra["window"], model.cfg.n_layers):
        hooks[(site, j)] = restore(j)
    logits = model.run_with_hooks(tokens.repeat(samples, 1), hooks)
    return float(torch.softmax(logits[:, -1].double(), -1)[:, extra["answer"]].mean())


def _check_cells(model: CircuitModel, tokens: torch.Tensor, sites: list[str], windows: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    for site in sites:
        for window in windows:
            result = cw.causal_trace(
                model, tokens, corrupt=[1, 2], answer=int(tokens[0, -1]), site=site, samples=3, window=window, seed=4
            )
            assert result.dims == ("layer", "pos") and result.shape == (model.cfg.n_layers, tokens.shape[1])
            assert not np.isnan(result.values).any()
            name = TRACE_SITES[site]
            cells = [(model.cfg.n_layers - 1, tokens.shape[1] - 1), (0, 1)]
            cells += [(int(rng.integers(model.cfg.n_layers)), int(rng.integers(tokens.shape[1])))]
            for layer, pos in cells:
                expected = _slow_cell(model, tokens, result, name, layer, pos)
                assert result.values[layer, pos] == pytest.approx(expected, abs=1e-10), (site, window, layer, pos)


def test_a_trace_equals_one_hooked_run_per_cell_on_gelu_2l(gelu: CircuitModel) -> None:
    tokens = torch.randint(1, 2048, (1, 8), generator=torch.Generator().manual_seed(3))
    _check_cells(gelu, tokens, ["resid", "mlp_out", "attn_out"], (1, 2))


def test_a_trace_equals_its_definition_on_an_attention_only_model(random_model: Any) -> None:
    model = random_model(n_layers=3, positional_embedding_type="standard")
    tokens = torch.randint(0, 50, (1, 7), generator=torch.Generator().manual_seed(1))
    _check_cells(model, tokens, ["resid", "attn_out"], (1, 3))


#: One family per feature the trace passes through (grouped-query rotary attention with biases, sliding windows,
#: soft-caps and sandwich norms, output norms, layers sharing keys and values with per-layer inputs): each family's
#: model costs seconds to build, and the engine underneath is checked on every family by tests/test_causal.py.
FAMILIES = ("llama-gqa2-biases-llama3rope", "qwen2-biases-window", "gemma2-softcaps-window", "olmo2-postnorm",
            "gemma4-e2b-shaped")  # fmt: skip


@pytest.mark.parametrize("case", [c for c in CASES if c.id in FAMILIES], ids=lambda c: c.id)
def test_a_trace_equals_its_definition_on_each_family(case: Any) -> None:
    model = from_hf(case.build(), dtype=torch.float64)
    tokens = torch.randint(3, VOCAB, (1, 6), generator=torch.Generator().manual_seed(2))
    sites = ["resid", "attn_out"] + (["mlp_out"] if model.cfg.has_mlp else [])
    _check_cells(model, tokens, sites, (1, 2))


def test_restoring_the_last_stream_everywhere_gives_the_clean_probability(gelu: CircuitModel) -> None:
    tokens = torch.randint(1, 2048, (1, 8), generator=torch.Generator().manual_seed(5))
    result = cw.causal_trace(gelu, tokens, corrupt=[0, 1, 2], answer=7, samples=5)
    # The last layer's stream at the last position is what the logits read: restoring it restores the clean run.
    assert result.values[-1, -1] == pytest.approx(result.clean_value, abs=1e-12)
    # Positions before the first noised one never saw the noise: restoring them changes nothing.
    later = cw.causal_trace(gelu, tokens, corrupt=[3], answer=7, samples=5)
    np.testing.assert_allclose(later.values[:, :3], later.corrupted_value, atol=1e-12)
    assert "causal tracing" in repr(result) and result.extra["window"] == 1
    assert cw.PatchingMap(result).values.shape[1:] == (2, 8)


def test_bad_input_is_refused_naming_the_argument(gelu: CircuitModel) -> None:
    tokens = torch.randint(1, 2048, (1, 6), generator=torch.Generator().manual_seed(5))
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"noise": 0.0}, ArgumentError, "noise"),
        ({"noise": -1}, ArgumentError, "noise"),
        ({"noise": float("nan")}, ArgumentError, "noise"),
        ({"corrupt": [9]}, ArgumentError, "corrupt"),
        ({"corrupt": []}, ArgumentTypeError, "corrupt"),
        ({"corrupt": ["a"]}, ArgumentTypeError, "corrupt"),
        ({"site": "z"}, ArgumentError, "site"),
        ({"samples": 0}, ArgumentError, "samples"),
        ({"window": 3}, ArgumentError, "window"),
        ({"answer": 10**6}, ArgumentError, "answer"),
        ({"answer": " the cat"}, ArgumentError, "answer"),
    ]
    for kwargs, error, name in cases:
        args: dict[str, Any] = {"corrupt": [1], "answer": 5, **kwargs}
        with pytest.raises(error, match=name):
            cw.causal_trace(gelu, tokens, **args)
    with pytest.raises(ShapeError, match="tokens"):
        cw.causal_trace(gelu, tokens.repeat(2, 1), corrupt=[1], answer=5)
    with pytest.raises(ArgumentError, match="site"):
        cw.causal_trace(cw.load_pretrained("attn-only-1l"), tokens % 48, corrupt=[1], answer=5, site="mlp_out")
