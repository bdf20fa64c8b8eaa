"""Units whose examples a corpus pass collects: a layer's neurons, its heads, or a dictionary's features.

A :class:`Units` names one activation of the forward pass (``site`` at
``layer``) and how to turn it into one number per unit and token
(``read``: ``[batch, pos, ...] -> [batch, pos, n_units]``). The pass hooks
that activation and stops there, so a layer-0 unit never pays for layer 1
or the unembedding.

Definitions:

- **neuron** ``i`` of layer ``l``: ``mlp_post[l][..., i]``, the MLP's hidden
  activation after its nonlinearity;
- **head** ``h`` of layer ``l``: the norm of what it writes into the residual
  stream at each destination position, ``‖z_h W_O^h‖₂`` (``b_O``, shared by
  the heads, left out), computed as ``sqrt(z_h G_h z_hᵀ)`` with the Gram
  matrix ``G_h = W_O^h W_O^hᵀ`` ``[d_head, d_head]``;
- **feature** ``i`` of a dictionary: ``dictionary.encode(x)[..., i]`` of the
  activation ``x`` the dictionary reads (its ``in_site``: a cache name, or
  ``mlp_in``, the MLP's normalised input, rebuilt from ``resid_mid`` and the
  norm's scale in the same pass).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from circuitwidgets._checks import check_int
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.features.activation import topk_entries
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.model import CircuitModel

__all__ = ["Units", "dictionary_features", "head_outputs", "neurons"]

Kind = Literal["neuron", "head", "feature"]

#: Pre-activations a TopK dictionary's ``read_top`` holds at once (bytes of one chunk of rows).
TOP_CHUNK_BYTES = 16 * 2**20


@dataclass(frozen=True)
class Units:
    """One layer's units, read from one activation of the forward pass.

    Attributes
    ----------
    kind
        ``"neuron"``, ``"head"`` or ``"feature"``.
    layer
        The layer whose activation is read.
    site
        The activation's name in the cache (``mlp_post``, ``z``, ...), or ``mlp_in``
        (the MLP's normalised input, :mod:`circuitwidgets.features.sites`).
    n_units
        How many units.
    prefix
        Label prefix: unit ``i`` is ``f"{prefix}{i}"`` (``L1N317``, ``L1H5``, ``L1.tc/12``).
    read
        The activation ``[batch, pos, ...]`` to ``[batch, pos, n_units]``.
    read_top
        ``None``, or for units of which at most ``k`` per token are nonzero (a TopK
        dictionary's features): the activation to ``(values, units)`` ``[batch, pos, k]``,
        each token's only possibly nonzero activations (``>= 0``) and which units they are,
        every other unit exactly 0; the same numbers as ``read`` (to the last bit where
        ``read`` ran on the same rows at once: the encoder runs on chunks of rows), without
        the ``n_units``-wide tensor (the pass then never builds one).
    """

    kind: Kind
    layer: int
    site: str
    n_units: int
    prefix: str
    read: Callable[[torch.Tensor], torch.Tensor]
    read_top: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None

    def label(self, index: int) -> str:
        """Display name of unit ``index``."""
        return f"{self.prefix}{index}"


def neurons(model: CircuitModel, layer: int) -> Units:
    """The MLP neurons of ``layer`` (``mlp_post``)."""
    if not isinstance(model, CircuitModel):
        raise ArgumentTypeError(f"model: expected a CircuitModel, got {type(model).__name__}")
    if not model.cfg.has_mlp or not model.cfg.d_mlp:
        raise ArgumentError(f"model: neurons need a model with MLPs; {model.name!r} has none")
    layer = check_int("layer", layer, 0, model.cfg.n_layers)
    return Units("neuron", layer, "mlp_post", int(model.cfg.d_mlp), f"L{layer}N", lambda x: x)


def head_outputs(model: CircuitModel, layer: int) -> Units:
    """The heads of ``layer``: each head's output norm ``‖z_h W_O^h‖₂`` at each position (module docstring)."""
    if not isinstance(model, CircuitModel):
        raise ArgumentTypeError(f"model: expected a CircuitModel, got {type(model).__name__}")
    layer = check_int("layer", layer, 0, model.cfg.n_layers)
    W_O = model.W_O[layer]  # [n_heads, d_head, d_model]
    gram = W_O @ W_O.transpose(-1, -2)  # [n_heads, d_head, d_head]

    def read(z: torch.Tensor) -> torch.Tensor:  # [batch, pos, n_heads, d_head]
        squared = torch.einsum("bphd,hde,bphe->bph", z, gram.to(z.dtype), z)
        return squared.clamp_min(0).sqrt()  # (rounding can leave a tiny negative)

    return Units("head", layer, "z", model.cfg.n_heads, f"L{layer}H", read)


def dictionary_features(model: CircuitModel, dictionary: Dictionary) -> Units:
    """The features of ``dictionary`` on ``model``'s runs, read where the dictionary reads (its ``in_site``).

    Labels are the dictionary's (``L1.tc/123``).
    """
    if not isinstance(dictionary, Dictionary):
        raise ArgumentTypeError(
            f"dictionary: expected a circuitwidgets.features.Dictionary, got {type(dictionary).__name__}"
        )
    dictionary.check_model(model)

    def encode(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out = dictionary.encode(x.to(dictionary.W_enc.dtype))
        return out if out.dtype == torch.float64 else out.float()

    def encode_top(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        assert dictionary.k is not None  # (a topk dictionary has its k)
        rows = x.to(dictionary.W_enc.dtype).reshape(-1, dictionary.d_in)
        step = max(1, TOP_CHUNK_BYTES // (rows.element_size() * dictionary.d_sae))
        with torch.no_grad():  # (rows a chunk at a time: only a chunk's [rows, d_sae] pre-activations exist at once)
            parts = [
                topk_entries(dictionary.pre_activations(rows[i : i + step]), dictionary.k)
                for i in range(0, len(rows), step)
            ]
        values = torch.cat([v for v, _ in parts]).view(*x.shape[:-1], -1)
        indices = torch.cat([i for _, i in parts]).view(*x.shape[:-1], -1)
        return (values if values.dtype == torch.float64 else values.float()), indices

    top = encode_top if dictionary.activation == "topk" else None  # (the others' active count varies per token)
    return Units("feature", dictionary.layer, dictionary.in_site, dictionary.d_sae, f"{dictionary.name}/", encode, top)
