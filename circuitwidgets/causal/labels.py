"""What a causal result says about itself: its dims' labels, its prompts as text, and its norm convention."""

from __future__ import annotations

import torch

from circuitwidgets.causal.sites import Cells
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel


def dim_labels(model: CircuitModel, cells: Cells, tokens: torch.Tensor) -> dict[str, list[str]]:
    """Display labels of each dim of ``cells`` (positions: ``"3 ' the'"`` from the first prompt); only the dims
    swept are built (a neuron axis has ``d_mlp`` labels)."""
    makers = {
        "layer": lambda: [f"L{i}" for i in range(model.cfg.n_layers)],
        "head": lambda: [f"H{i}" for i in range(model.cfg.n_heads)],
        "pos": lambda: [f"{i} {s!r}" for i, s in enumerate(model.to_str_tokens(tokens[0]))],
        "neuron": lambda: [f"N{i}" for i in range(model.cfg.d_mlp or 0)],
    }
    makers["src"] = makers["pos"]
    return {d: makers[d]() for d in cells.by}


def prompts_of(model: CircuitModel, **tokens: torch.Tensor) -> dict[str, list[list[str]]]:
    """Each prompt's token strings (untrusted text), by role: ``[batch, pos]`` ids each, range-checked once."""
    out = {}
    for role, t in tokens.items():
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= model.cfg.d_vocab):
            raise ArgumentError(
                f"{role}: expected ids in [0, {model.cfg.d_vocab}), got range [{int(t.min())}, {int(t.max())}]"
            )
        out[role] = [[model.tokenizer.token_str(i) for i in row] for row in t.tolist()]
    return out


def convention(freeze_norms: bool, model: CircuitModel) -> str:
    """How the norms were treated in the patched runs, in words (a result states its convention)."""
    if model.cfg.normalization == "none":
        return "model has no norms"
    return "norm scales frozen from the base run" if freeze_norms else "norms recomputed on each patched run"


def path_dims(
    sender: tuple[int, int] | None, n_layers: int, n_heads: int
) -> tuple[tuple[str, ...], dict[str, list[str]]]:
    """A path-patching result's dims and labels: receivers ``[layer, head]`` for one ``sender``, or
    ``[sender_layer, sender_head, layer, head]`` for every sender (``sender`` ``None``)."""
    layers, heads = [f"L{i}" for i in range(n_layers)], [f"H{i}" for i in range(n_heads)]
    if sender is not None:
        return ("layer", "head"), {"layer": layers, "head": heads}
    dims = ("sender_layer", "sender_head", "layer", "head")
    return dims, {"sender_layer": layers, "sender_head": heads, "layer": layers, "head": heads}
