"""Where a site of :mod:`circuitwidgets.causal.sites` is in a Hugging Face model run through nnsight: read, write, check.

Each covered site is one value the model hands between modules, so reading it
and replacing it are an envoy's ``.input``/``.output`` (or the attention
function's inputs), with the native engine's meaning:

- ``resid_pre``/``resid_post``: a block's input/output; ``attn_out``/``mlp_out``:
  what the sublayer adds to the stream (after Gemma 2's output norms);
- ``resid_mid``: the stream between attention and MLP, the input of the MLP's norm. The
  block keeps its own copy for the residual connection, so a patch writes the norm's
  input and adds its change ``new − old`` to the block's output (exact where nothing
  changes, and the norm sees exactly ``new``: zeroing the stream is not left to
  rounding); its gradient is ``attn_out``'s (the stream there is ``resid_pre + attn_out``);
- ``z``: the input of ``o_proj``, per head; ``result`` (head ``h``'s ``z[h] · W_O[h]``)
  is patched as ``z``: the map is linear and nothing else reads a head's result, so
  replacing, zeroing or averaging one is doing it to the other (``o_proj``'s bias is
  added once, whatever the heads write);
- ``pattern``: the probabilities eager attention multiplies the values by (the first
  input of its last ``torch.matmul``, after soft-caps, masks and dropout); other
  attention implementations compute none: refused by name;
- ``q``, ``k``, ``v``: the attention function's inputs (queries and keys after
  rotary, as the native engine keeps them). Under grouped-query attention the
  native ``k``/``v`` of a query head is its copy of the group's; a sweep over
  ``pos`` patches every copy, which is the group's own value here, but a cell of one
  query head's copy has no value of its own in the model: refused by name;
- ``mlp_pre``: the first MLP projection's output (the gate's, in a gated MLP);
  ``mlp_post``: the down projection's input (the activation, times the up
  projection in a gated MLP).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch

from circuitwidgets.causal.sites import SITE_AXES, Cells, site_error
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NotCoveredError
from circuitwidgets.sources.nnsight_handle import NNsightModel

#: Sites a sweep through nnsight patches (others: :class:`~circuitwidgets.errors.NotCoveredError`).
SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "z", "result", "pattern", "q", "k", "v",
         "mlp_pre", "mlp_post")  # fmt: skip
#: The attention function's positional inputs ``(module, q, k, v, mask)``: where each of q, k, v is.
_ATTENTION_ARG = {"q": 1, "k": 2, "v": 3}


def check_cells(h: NNsightModel, site: object, by: object, n_pos: int) -> Cells:
    """The cells of ``site`` by ``by`` that a sweep through nnsight runs, or a typed error naming the argument."""
    if not isinstance(site, str) or site not in SITE_AXES:
        raise site_error(site)
    if site not in SITES:
        raise NotCoveredError(f"site: {site!r} is not patched through nnsight; covered sites: {SITES}")
    if isinstance(by, str):
        by = (by,)
    if not isinstance(by, (tuple, list)) or not all(isinstance(d, str) for d in by):
        raise ArgumentTypeError(f"by: expected a tuple of dim names such as ('layer', 'pos'), got {by!r}")
    if "src" in by or "dest" in by:
        raise NotCoveredError("by: pattern cells by source position run natively only; sweep ('layer', 'head', 'pos')")
    allowed = {"layer", *(a for a in SITE_AXES[site] if a is not None)}
    if any(d not in allowed for d in by) or "layer" not in by or len(set(by)) != len(by):
        raise ArgumentError(
            f"by: site {site!r} sweeps over 'layer' and any of {sorted(allowed - {'layer'})} (each once), got {tuple(by)!r}"
        )
    implementation = getattr(h.lm._module.config, "_attn_implementation", None)
    if site == "pattern" and implementation != "eager":
        raise NotCoveredError(
            f"site: 'pattern' needs the probabilities eager attention computes; attention {implementation!r} computes "
            "none to patch: load the model with attn_implementation='eager'"
        )
    if site in ("k", "v") and "head" in by and h.n_kv_heads != h.n_heads:
        raise NotCoveredError(
            f"by: {site!r} by 'head' under grouped-query attention ({h.n_heads} query heads share {h.n_kv_heads} "
            f"{site} heads) patches one query head's copy, which has no value of its own in the model run through "
            f"nnsight; sweep {site!r} by ('layer', 'pos'), or 'q'/'z' by head"
        )
    sizes = {"layer": h.n_layers, "pos": n_pos, "head": h.n_heads, "neuron": h.d_mlp}
    return Cells(site, tuple(by), {d: sizes[d] for d in by})


def raw(h: NNsightModel, layer: int, site: str) -> torch.Tensor:
    """The site's value at ``layer`` inside a trace, as the model holds it (``z``, ``result``: the ``o_proj`` input
    ``[batch, pos, H · d_head]``; ``q, k, v``: ``[batch, heads, pos, d_head]``): the tensor whose ``.grad`` autograd
    fills (``resid_mid``: ``attn_out``, whose gradient is the stream's there; its value is :func:`read`'s)."""
    lay = h.layout
    if site == "resid_mid":
        return raw(h, layer, "attn_out")
    if site == "pattern":
        args, _ = _pattern_call(h, layer).inputs
        return cast(torch.Tensor, args[0])
    if site == "resid_pre":
        return cast(torch.Tensor, h.block(layer).input)
    if site == "resid_post":
        return cast(torch.Tensor, h.block(layer).output)
    if site == "attn_out":
        if lay.attn_out_norm is not None:
            return cast(torch.Tensor, h.module(layer, lay.attn_out_norm).output)
        return cast(torch.Tensor, h.module(layer, lay.attn).output[0])
    if site == "mlp_out":
        return cast(torch.Tensor, h.module(layer, lay.mlp_out_norm or lay.mlp).output)
    if site in _ATTENTION_ARG:
        args, _ = h.attention_call(layer).inputs
        return cast(torch.Tensor, args[_ATTENTION_ARG[site]])
    if site == "mlp_pre":
        return cast(torch.Tensor, h.module(layer, f"{lay.mlp}.{lay.up}").output)
    if site == "mlp_post":
        return cast(torch.Tensor, h.module(layer, f"{lay.mlp}.{lay.down}").input)
    return cast(torch.Tensor, h.module(layer, f"{lay.attn}.{lay.o_proj}").input)


def _pattern_call(h: NNsightModel, layer: int) -> Any:
    """The eager attention function's last ``torch.matmul`` in block ``layer``: ``(pattern, values)`` in, ``z`` out."""
    source = h.attention_call(layer).source
    return getattr(source, [n for n in source.names if n.startswith("torch_matmul_")][-1])


def shaped(h: NNsightModel, site: str, x: torch.Tensor) -> torch.Tensor:
    """A value :func:`raw` read, with the site's named axes (``z, q, k, v``: ``[batch, pos, head, d_head]``)."""
    if site in ("z", "result"):
        return x.view(*x.shape[:-1], h.n_heads, h.d_head)
    if site in _ATTENTION_ARG:
        return x.transpose(1, 2)
    return x


def read(h: NNsightModel, layer: int, site: str) -> torch.Tensor:
    """The site's value at ``layer`` inside a trace, with its named axes."""
    return with_grad(h, layer, site)[1]


def with_grad(h: NNsightModel, layer: int, site: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Inside a trace: the tensor whose ``.grad`` is the site's gradient (as :func:`raw` gives it) and the site's
    value with its named axes (``resid_mid``: ``attn_out`` and ``resid_pre + attn_out``)."""
    if site == "resid_mid":
        out = raw(h, layer, "attn_out")
        return out, cast(torch.Tensor, h.module(layer, h.layout.mlp_norm).input)
    x = raw(h, layer, site)
    return x, shaped(h, site, x)


def write(
    h: NNsightModel, layer: int, site: str, value: torch.Tensor, was: torch.Tensor | None = None,
    mlp_norm: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> None:  # fmt: skip
    """Replace the site's value at ``layer`` inside a trace by ``value`` (with the site's named axes); ``was``: what
    :func:`read` gave (``resid_mid``'s change ``value − was`` is added to the block's output); ``mlp_norm``: for
    ``resid_mid``, the MLP norm's output as a function of its input (frozen norm scales), else the norm runs."""
    lay = h.layout
    if site == "resid_mid":
        assert was is not None, "resid_mid's residual copy is changed by value − was: pass what read gave"
        if mlp_norm is None:
            h.module(layer, lay.mlp_norm).input = value
        else:
            h.module(layer, lay.mlp_norm).output = mlp_norm(value)
        h.block(layer).output = h.block(layer).output + (value - was)
    elif site == "pattern":
        call = _pattern_call(h, layer)
        args, kwargs = call.inputs
        call.inputs = ((value, *args[1:]), kwargs)
    elif site == "resid_pre":
        h.block(layer).input = value
    elif site == "resid_post":
        h.block(layer).output = value
    elif site == "attn_out" and lay.attn_out_norm is None:
        attn = h.module(layer, lay.attn)
        attn.output = (value, *attn.output[1:])
    elif site in ("attn_out", "mlp_out"):
        norm = lay.attn_out_norm if site == "attn_out" else lay.mlp_out_norm
        h.module(layer, norm or lay.mlp).output = value
    elif site in _ATTENTION_ARG:
        call = h.attention_call(layer)
        args, kwargs = call.inputs
        new: list[Any] = list(args)
        new[_ATTENTION_ARG[site]] = value.transpose(1, 2)
        call.inputs = (tuple(new), kwargs)
    elif site == "mlp_pre":
        h.module(layer, f"{lay.mlp}.{lay.up}").output = value
    elif site == "mlp_post":
        h.module(layer, f"{lay.mlp}.{lay.down}").input = value
    else:
        h.module(layer, f"{lay.attn}.{lay.o_proj}").input = value.reshape(*value.shape[:-2], -1)


__all__ = ["SITES", "check_cells", "raw", "read", "shaped", "with_grad", "write"]
