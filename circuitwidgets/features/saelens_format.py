"""SAELens's on-disk format: a folder with ``cfg.json`` and ``sae_weights.safetensors`` (SAELens 6).

Architectures read and written, with their meaning here:

====================  ==============================  ==========================================
SAELens               here                            notes
====================  ==============================  ==========================================
``standard``          SAE, ``relu``
``topk``              SAE, ``topk``                   ``rescale_acts_by_decoder_norm`` refused
``jumprelu``          SAE, ``jumprelu``               also how a BatchTopK SAE is written: SAELens
                                                      saves its trained BatchTopK SAEs as JumpReLU
                                                      with the fitted threshold
``transcoder``        transcoder, ``relu``
``skip_transcoder``   skip-transcoder, ``relu``       SAELens's ``W_skip`` is ``[d_out, d_in]``
``jumprelu_transcoder`` / ``jumprelu_skip_transcoder``  transcoders, ``jumprelu`` (and BatchTopK ones)
====================  ==============================  ==========================================

SAELens has no TopK transcoder, so a TopK transcoder is refused by name when written.
``apply_b_dec_to_input`` (SAEs) is folded into ``b_enc`` on reading (``b_enc − b_dec W_enc``);
``normalize_activations`` other than ``"none"`` is refused. Sites map to TransformerLens hook names
(``mlp_in`` is ``blocks.L.ln2.hook_normalized``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.files import read_safetensors, write_safetensors

#: The SAELens version whose folder layout is written (cfg.json with ``metadata``, SAELens >= 6).
SAELENS_FORMAT_VERSION = "6.0.0"
CFG_FILENAME = "cfg.json"
WEIGHTS_FILENAME = "sae_weights.safetensors"

_HOOKS = {
    "resid_pre": "hook_resid_pre",
    "resid_mid": "hook_resid_mid",
    "resid_post": "hook_resid_post",
    "attn_out": "hook_attn_out",
    "mlp_out": "hook_mlp_out",
    "mlp_post": "mlp.hook_post",
    "mlp_in": "ln2.hook_normalized",
}
_ARCH_READ = {
    "standard": ("sae", "relu"),
    "topk": ("sae", "topk"),
    "jumprelu": ("sae", "jumprelu"),
    "transcoder": ("transcoder", "relu"),
    "skip_transcoder": ("skip-transcoder", "relu"),
    "jumprelu_transcoder": ("transcoder", "jumprelu"),
    "jumprelu_skip_transcoder": ("skip-transcoder", "jumprelu"),
}


def hook_name(site: str, layer: int) -> str:
    """TransformerLens's hook name of ``site`` at ``layer``."""
    return f"blocks.{layer}.{_HOOKS[site]}"


def _site(hook: object, where: str) -> tuple[str, int]:
    """``(site, layer)`` of a TransformerLens hook name."""
    if isinstance(hook, str) and hook.startswith("blocks."):
        head, _, rest = hook[len("blocks.") :].partition(".")
        for site, suffix in _HOOKS.items():
            if rest == suffix and head.isdigit():
                return site, int(head)
    raise ArgumentError(
        f"{where}: metadata.hook_name: expected one of blocks.L.{{{', '.join(_HOOKS.values())}}}, got {hook!r}"
    )


def _architecture(d: Dictionary) -> str:
    act = "jumprelu" if d.activation == "batchtopk" else d.activation
    if d.activation == "batchtopk" and d.threshold is None:
        raise ArgumentError(
            f"dictionary {d.name}: a BatchTopK dictionary is written with its inference threshold; it has none"
        )
    if d.kind == "sae":
        return {"relu": "standard", "topk": "topk", "jumprelu": "jumprelu"}[act]
    if act == "topk":
        raise ArgumentError(
            f"dictionary {d.name}: SAELens has no TopK transcoder architecture; save it with features.save"
        )
    base = "skip_transcoder" if d.kind == "skip-transcoder" else "transcoder"
    return f"jumprelu_{base}" if act == "jumprelu" else base


def save_saelens(d: Dictionary, path: str | Path, dtype: torch.dtype = torch.float32) -> Path:
    """Write ``d`` as a SAELens folder ``path`` (``cfg.json`` + ``sae_weights.safetensors``); returns the folder."""
    arch = _architecture(d)
    folder = Path(path)
    tensors = {k: v.to(dtype) for k, v in d.tensors().items()}
    if "W_skip" in tensors:
        tensors["W_skip"] = tensors["W_skip"].t().contiguous()
    metadata: dict[str, Any] = {
        "hook_name": hook_name(d.in_site, d.layer),
        "model_name": d.model_name,
        "sae_lens_version": SAELENS_FORMAT_VERSION,  # SAELens reads a file without it as its pre-6 layout
    }
    cfg: dict[str, Any] = {
        "architecture": arch,
        "d_in": d.d_in,
        "d_sae": d.d_sae,
        "dtype": str(dtype).removeprefix("torch."),
        "device": "cpu",
        "apply_b_dec_to_input": False,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "metadata": metadata,
    }
    if d.kind != "sae":
        cfg["d_out"] = d.d_out
        metadata["hook_name_out"] = hook_name(d.out_site, d.layer)
    if d.activation == "topk":
        cfg["k"] = d.k
        cfg["rescale_acts_by_decoder_norm"] = False
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / WEIGHTS_FILENAME, tensors)
    tmp = folder / f".{CFG_FILENAME}.tmp"
    tmp.write_text(json.dumps(cfg, indent=2))
    tmp.replace(folder / CFG_FILENAME)
    return folder


def load_saelens(
    path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> Dictionary:
    """Read a SAELens folder (``cfg.json`` + ``sae_weights.safetensors``) as a :class:`Dictionary`."""
    folder = Path(path)
    cfg_path = folder / CFG_FILENAME
    if not cfg_path.is_file():
        raise ArgumentError(f"path: expected a SAELens folder holding {CFG_FILENAME}, got {str(folder)!r}")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArgumentError(f"{cfg_path}: not JSON ({exc})") from None
    where = str(cfg_path)
    arch = cfg.get("architecture", "standard")
    if arch not in _ARCH_READ:
        raise ArgumentError(f"{where}: architecture: expected one of {sorted(_ARCH_READ)}, got {arch!r}")
    kind, activation = _ARCH_READ[arch]
    if cfg.get("normalize_activations", "none") != "none":
        raise ArgumentError(f"{where}: normalize_activations: expected 'none', got {cfg['normalize_activations']!r}")
    if cfg.get("rescale_acts_by_decoder_norm"):
        raise ArgumentError(f"{where}: rescale_acts_by_decoder_norm: expected false, got true")
    meta = cfg.get("metadata") or {}
    site, layer = _site(meta.get("hook_name") or cfg.get("hook_name") or cfg.get("hook_point"), where)
    tensors, _ = read_safetensors(folder / WEIGHTS_FILENAME, "SAELens weights")
    t = {k: v.to(device=device, dtype=torch.float64) for k, v in tensors.items()}
    if "W_skip" in t:
        t["W_skip"] = t["W_skip"].t().contiguous()
    if kind == "sae" and cfg.get("apply_b_dec_to_input", True) and {"W_enc", "b_enc", "b_dec"} <= t.keys():
        t["b_enc"] = t["b_enc"] - t["b_dec"] @ t["W_enc"]  # encode(x - b_dec) == encode'(x): the same map
    config = {
        "kind": kind,
        "activation": activation,
        "k": cfg.get("k") if activation == "topk" else None,
        "layer": layer,
        "in_site": site,
        "out_site": None if kind == "sae" else "mlp_out",
        "model_name": meta.get("model_name"),
    }
    return Dictionary.from_tensors(
        config, {k: v.to(dtype) for k, v in t.items()}, source=str(folder / WEIGHTS_FILENAME)
    )
