"""Where a dictionary reads and writes in a :class:`~circuitwidgets.CircuitModel`, and how it is spliced in.

Sites are the model's cache names (``resid_pre``, ``resid_mid``, ``resid_post``,
``attn_out``, ``mlp_out``, ``mlp_post``) plus one that the cache does not keep:

- ``mlp_in``: the MLP's normalised input, the vector ``W_in`` reads. For a
  LayerNorm model it is ``resid_mid`` centred and divided by
  ``sqrt(var + eps)`` (the norm's own weight and bias are folded into
  ``W_in``/``b_in`` by the loader, so through the real MLP it gives ``mlp_out``
  exactly); for an RMSNorm model ``resid_mid / rms``; without a norm ``resid_mid``.
  It is TransformerLens's ``blocks.L.ln2.hook_normalized`` and circuit-tracer's
  transcoder input (its ``feature_input_hook``) on a folded model.

A transcoder reads ``mlp_in`` and predicts ``mlp_out``; an SAE reads and writes one site.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from circuitwidgets.errors import ArgumentError, UnsupportedArchitectureError
from circuitwidgets.model import CircuitModel, ModelConfig

#: Sites a dictionary may read or write, each with the model config field giving its width.
SITE_WIDTHS = {
    "mlp_in": "d_model",
    "resid_pre": "d_model",
    "resid_mid": "d_model",
    "resid_post": "d_model",
    "attn_out": "d_model",
    "mlp_out": "d_model",
    "mlp_post": "d_mlp",
}

#: What the cache must keep to rebuild each site.
_NEEDS = {"mlp_in": ("resid_mid", "scale_mlp")}

Hook = Callable[[torch.Tensor], "torch.Tensor | None"]


def site_width(cfg: ModelConfig, site: str, argument: str = "site") -> int:
    """Width of ``site`` in a model of config ``cfg`` (an :class:`ArgumentError` naming ``argument`` if unknown)."""
    if site not in SITE_WIDTHS:
        raise ArgumentError(f"{argument}: expected one of {sorted(SITE_WIDTHS)}, got {site!r}")
    if SITE_WIDTHS[site] == "d_mlp" or site in ("mlp_in", "resid_mid", "mlp_out"):
        if not cfg.has_mlp:
            raise UnsupportedArchitectureError(f"{argument}: site {site!r} needs a model with MLPs; this one has none")
        if cfg.parallel_attn_mlp and site in ("mlp_in", "resid_mid"):
            raise UnsupportedArchitectureError(
                f"{argument}: site {site!r} needs attention then MLP in sequence; this model runs them in parallel"
            )
    width = getattr(cfg, SITE_WIDTHS[site])
    assert isinstance(width, int)
    return width


def mlp_input(cfg: ModelConfig, resid_mid: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The MLP's normalised input from ``resid_mid`` and the norm's per-token ``scale`` (as the forward pass computes it)."""
    if cfg.normalization == "ln_pre":
        return (resid_mid - resid_mid.mean(-1, keepdim=True)) / scale
    if cfg.normalization in ("none", "rms_post"):
        return resid_mid
    work = resid_mid if resid_mid.dtype == torch.float64 else resid_mid.float()
    return (work / scale.to(work.dtype)).to(resid_mid.dtype)


def read_sites(model: CircuitModel, tokens: torch.Tensor, layer: int, sites: Sequence[str]) -> dict[str, torch.Tensor]:
    """``{site: [batch, pos, width]}`` for each of ``sites`` at ``layer``, from one run of ``model`` on ``tokens``."""
    names = sorted({n for s in sites for n in _NEEDS.get(s, (s,))})
    _, cache = model.run_with_cache(tokens, names=names)
    out: dict[str, torch.Tensor] = {}
    for site in sites:
        if site == "mlp_in":
            out[site] = mlp_input(model.cfg, cache["resid_mid", layer], cache["scale_mlp", layer])
        else:
            out[site] = cache[site, layer]
    return out


def splice_hooks(
    cfg: ModelConfig, layer: int, in_site: str, out_site: str, replace: Callable[[torch.Tensor], torch.Tensor]
) -> dict[tuple[str, int | None], Hook]:
    """Hooks that write ``replace(input)`` at ``(out_site, layer)``, ``input`` being what ``in_site`` holds in the same pass.

    An SAE (``in_site == out_site``) replaces the site's activation by its
    reconstruction; a transcoder (``mlp_in`` → ``mlp_out``) replaces the MLP's
    output by its prediction from the MLP's input, read earlier in the same pass.
    """
    if in_site == out_site:
        return {(out_site, layer): replace}
    if in_site != "mlp_in":
        raise ArgumentError(
            f"in_site: a dictionary reading one site and writing another must read 'mlp_in', got {in_site!r}"
        )
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Hook:
        def hook(value: torch.Tensor) -> None:
            seen[name] = value

        return hook

    def write(value: torch.Tensor) -> torch.Tensor:
        return replace(mlp_input(cfg, seen["resid_mid"], seen["scale_mlp"]))

    return {("resid_mid", layer): keep("resid_mid"), ("scale_mlp", layer): keep("scale_mlp"), (out_site, layer): write}


def zero_hooks(layer: int, out_site: str) -> dict[tuple[str, int | None], Hook]:
    """Hooks that zero-ablate ``(out_site, layer)``: SAELens's baseline for the CE-loss score."""
    return {(out_site, layer): torch.zeros_like}
