"""SAELens's on-disk format: a folder with ``cfg.json`` and ``sae_weights.safetensors`` (SAELens 6).

Architectures read and written, with their meaning here:

====================  ==============================  ==========================================
SAELens               here                            notes
====================  ==============================  ==========================================
``standard``          SAE, ``relu``
``topk``              SAE, ``topk``                   ``rescale_acts_by_decoder_norm`` folded in
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

from circuitwidgets.errors import ArgumentError, FileFormatError
from circuitwidgets.features._args import check_dictionary, check_float_dtype
from circuitwidgets.features._safetensors_read import read_header, read_tensors
from circuitwidgets.features._untrusted import field_of, int_field, read_json
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.files import expect_dictionary_tensors, write_safetensors

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
            if rest == suffix and head.isdigit() and len(head) <= 6:
                return site, int(head)
    raise FileFormatError(
        f"{where}: metadata.hook_name: expected one of blocks.L.{{{', '.join(_HOOKS.values())}}}, "
        f"got {str(hook)[:80]!r}"
    )


def _architecture(d: Dictionary) -> str:
    act = "jumprelu" if d.activation == "batchtopk" else d.activation
    if d.activation == "batchtopk" and d.threshold is None:
        raise ArgumentError(
            f"dictionary {d.name}: a BatchTopK dictionary is written as SAELens writes its own, as "
            f"sae_lens.{'JumpReLUSAE' if d.kind == 'sae' else 'JumpReLUTranscoder'} with the fitted inference "
            "threshold; this one has none (train it to the end, which fits one)"
        )
    if d.kind == "sae":
        return {"relu": "standard", "topk": "topk", "jumprelu": "jumprelu"}[act]
    if act == "topk":
        raise ArgumentError(
            f"dictionary {d.name}: a TopK {d.kind} needs a TopK transcoder class in SAELens, which it does not have "
            "(sae_lens 6 has Transcoder, SkipTranscoder, JumpReLUTranscoder, JumpReLUSkipTranscoder; TopK only for "
            "SAEs: TopKSAE). Save it with features.save, or train it as batchtopk: its fitted threshold exports as "
            f"sae_lens.{'JumpReLUSkipTranscoder' if d.kind == 'skip-transcoder' else 'JumpReLUTranscoder'}"
        )
    base = "skip_transcoder" if d.kind == "skip-transcoder" else "transcoder"
    return f"jumprelu_{base}" if act == "jumprelu" else base


def save_saelens(d: Dictionary, path: str | Path, dtype: torch.dtype = torch.float32) -> Path:
    """Write ``d`` as a SAELens folder ``path`` (``cfg.json`` + ``sae_weights.safetensors``); returns the folder."""
    check_dictionary("d", d)
    check_float_dtype("dtype", dtype)
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


def _cfg(folder: Path, where: str) -> dict[str, Any]:
    cfg = read_json(folder / CFG_FILENAME, "SAELens cfg.json", folder)
    if not isinstance(cfg, dict):
        raise FileFormatError(f"{where}: expected a JSON object of settings, got {type(cfg).__name__}")
    return cfg


def _checked_options(cfg: dict[str, Any], where: str) -> tuple[str, str, bool, bool]:
    """``(kind, activation, apply_b_dec_to_input, rescale_acts_by_decoder_norm)``, each field type-checked."""
    arch = field_of(cfg, "architecture", where, str, "standard")
    if arch not in _ARCH_READ:
        raise FileFormatError(f"{where}: architecture: expected one of {sorted(_ARCH_READ)}, got {arch[:60]!r}")
    kind, activation = _ARCH_READ[arch]
    normalize = field_of(cfg, "normalize_activations", where, (str, type(None)), "none")
    if normalize not in ("none", None):
        raise FileFormatError(f"{where}: normalize_activations: expected 'none', got {normalize[:60]!r}")
    apply_b_dec = field_of(cfg, "apply_b_dec_to_input", where, bool, kind == "sae")
    rescale = field_of(cfg, "rescale_acts_by_decoder_norm", where, bool, False)
    if rescale and activation != "topk":
        raise FileFormatError(
            f"{where}: rescale_acts_by_decoder_norm: expected false for architecture {arch!r} (only SAELens's TopK "
            "SAE rescales), got true"
        )
    return kind, activation, apply_b_dec, rescale


def _fold_b_dec(t: dict[str, torch.Tensor]) -> None:
    """``b_enc ← b_enc − b_dec W_enc`` in place (float64, a block of columns at a time: no float64 copy of W_enc)."""
    W_enc, b_dec = t["W_enc"], t["b_dec"].double()
    step = max(1, 2**22 // max(1, W_enc.shape[0]))
    for j in range(0, W_enc.shape[1], step):
        block = t["b_enc"][j : j + step]
        block.copy_(block.double() - b_dec @ W_enc[:, j : j + step].double())


def _fold_decoder_norm(t: dict[str, torch.Tensor]) -> None:
    """SAELens's ``fold_W_dec_norm``: with ``rescale_acts_by_decoder_norm`` its TopK ranks ``(x W_enc + b_enc) n`` and
    decodes ``(f / n) W_dec`` (``n``: decoder row norms), the same map as ``W_enc n``, ``b_enc n``, ``W_dec / n``."""
    norms = (
        torch.linalg.vector_norm(t["W_dec"].double(), dim=1)
        if t["W_dec"].numel() < 2**24
        else torch.cat(
            [
                torch.linalg.vector_norm(t["W_dec"][i : i + 4096].double(), dim=1)
                for i in range(0, len(t["W_dec"]), 4096)
            ]
        )
    )
    if bool((norms == 0).any()):
        raise FileFormatError("W_dec: rescale_acts_by_decoder_norm divides by each row's norm; a row is zero")
    n = norms.to(t["W_enc"].dtype)
    t["W_enc"].mul_(n)
    t["b_enc"].mul_(n)
    t["W_dec"].div_(n[:, None])


def load_saelens(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    memory_budget: int | None = None,
) -> Dictionary:
    """Read a SAELens folder (``cfg.json`` + ``sae_weights.safetensors``) as a :class:`Dictionary`.

    Both files are read as untrusted (regular files inside ``path``; the config's fields type-checked; ``d_in``,
    ``d_sae``, ``d_out`` checked against the weights' header before they are read; their total in ``dtype``
    against ``memory_budget`` bytes, ``None`` for this machine's memory; NaN or infinite weights refused by name).
    SAELens's TopK ``rescale_acts_by_decoder_norm`` (its TopK training's default) is folded into the weights, as
    SAELens's own ``fold_W_dec_norm`` does: the same map and the same feature activations.
    """
    check_float_dtype("dtype", dtype)
    folder = Path(path)
    if not folder.is_dir():
        raise FileFormatError(f"path: expected a SAELens folder holding {CFG_FILENAME}, got {str(folder)!r}")
    where = f"SAELens cfg.json {str(folder / CFG_FILENAME)!r}"
    cfg = _cfg(folder, where)
    kind, activation, apply_b_dec, rescale = _checked_options(cfg, where)
    meta = field_of(cfg, "metadata", where, (dict, type(None)), None) or {}
    hook = meta.get("hook_name") or cfg.get("hook_name") or cfg.get("hook_point")
    site, layer = _site(hook, where)
    d_in = int_field(cfg, "d_in", where, 1)
    d_sae = int_field(cfg, "d_sae", where, 1)
    d_out = d_in if kind == "sae" else int_field(cfg, "d_out", where, 1, default=d_in)
    k = int_field(cfg, "k", where, 1, d_sae) if activation == "topk" else None
    model_name = meta.get("model_name", cfg.get("model_name"))
    if model_name is not None and not isinstance(model_name, str):
        raise FileFormatError(f"{where}: metadata.model_name: expected a string, got {type(model_name).__name__}")
    header = read_header(folder / WEIGHTS_FILENAME, "SAELens weights", folder)
    expect_dictionary_tensors(header, d_in, d_sae, d_out, transposed=frozenset({"W_skip"}))  # W_skip [d_out, d_in]
    t = read_tensors(header, list(header.entries), dtype, memory_budget)
    if "W_skip" in t:
        t["W_skip"] = t["W_skip"].t()
    if kind == "sae" and apply_b_dec:
        _fold_b_dec(t)  # encode(x - b_dec) == encode'(x): the same map
    if rescale:
        _fold_decoder_norm(t)
    config = {"kind": kind, "activation": activation, "k": k, "layer": layer, "in_site": site,
              "out_site": None if kind == "sae" else "mlp_out", "model_name": model_name}  # fmt: skip
    t = {name: v.to(device) for name, v in t.items()}
    return Dictionary.from_tensors(config, t, source=str(folder / WEIGHTS_FILENAME))
