"""circuit-tracer's per-layer transcoder files (``circuit_tracer/transcoder/single_layer_transcoder.py``).

One ``layer_<L>.safetensors`` per layer with ``W_enc [d_transcoder, d_model]`` (rows are
features: circuit-tracer applies ``F.linear``), ``W_dec [d_transcoder, d_model]``, ``b_enc``,
``b_dec``, and optionally ``activation_function.threshold`` (JumpReLU), ``k`` (a 0-d
tensor: TopK) and ``W_skip [d_model, d_model]`` (applied as ``x W_skipᵀ``). No threshold
and no ``k`` means ReLU. A set's folder also holds ``config.yaml`` naming the hooks
(``feature_input_hook: ln2.hook_normalized``, ``feature_output_hook: hook_mlp_out``: our
``mlp_in`` and ``mlp_out``) and the files, which circuit-tracer's ``load_transcoder_set`` reads.

One difference: circuit-tracer's TopK keeps the ``k`` largest pre-activations even when
negative; ours applies a ReLU to them (as SAELens does). They agree wherever a row has at
least ``k`` positive pre-activations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import torch

from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.files import read_safetensors, write_safetensors

_THRESHOLD = "activation_function.threshold"


def _tensors(d: Dictionary, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    if d.kind == "sae":
        raise ArgumentError(f"dictionary {d.name}: circuit-tracer's format holds transcoders, got an SAE")
    if d.activation == "batchtopk" and d.threshold is None:
        raise ArgumentError(
            f"dictionary {d.name}: a BatchTopK transcoder is written with its inference threshold; it has none"
        )
    t = {
        "W_enc": d.W_enc.detach().t().contiguous(),
        "W_dec": d.W_dec.detach(),
        "b_enc": d.b_enc.detach(),
        "b_dec": d.b_dec.detach(),
    }
    if d.threshold is not None:
        t[_THRESHOLD] = d.threshold
    if d.W_skip is not None:
        t["W_skip"] = d.W_skip.detach().t().contiguous()
    out = {k: v.to(dtype) for k, v in t.items()}
    if d.activation == "topk":
        out["k"] = torch.tensor(d.k)
    return out


def save_circuit_tracer(
    transcoders: Sequence[Dictionary],
    folder: str | Path,
    scan_name: str = "circuitwidgets",
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Write one transcoder per layer ``0 .. n-1`` (in order) as a circuit-tracer set in ``folder``."""
    out = Path(folder)
    layers = [d.layer for d in transcoders]
    if layers != list(range(len(transcoders))):
        raise ArgumentError(f"transcoders: circuit-tracer needs one per layer 0 .. n-1 in order, got layers {layers}")
    for d in transcoders:
        write_safetensors(out / f"layer_{d.layer}.safetensors", _tensors(d, dtype))
    lines = [
        f"model_name: {json.dumps(transcoders[0].model_name or '')}",
        f"scan: {json.dumps(scan_name)}",
        "model_kind: transcoder_set",
        "feature_input_hook: ln2.hook_normalized",
        "feature_output_hook: hook_mlp_out",
        "transcoders:",
        *(f"  - {json.dumps(f'layer_{d.layer}.safetensors')}" for d in transcoders),
    ]
    (out / "config.yaml").write_text("\n".join(lines) + "\n")
    return out


def load_circuit_tracer(
    path: str | Path, layer: int | None = None, dtype: torch.dtype = torch.float32
) -> Dictionary | dict[int, Dictionary]:
    """Read one ``layer_<L>.safetensors`` file (its layer from ``layer`` or the name), or every one in a folder."""
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("layer_*.safetensors"), key=lambda f: int(re.sub(r"\D", "", f.stem) or 0))
        if not files:
            raise ArgumentError(f"path: expected layer_<L>.safetensors files in {str(p)!r}, found none")
        loaded = [_load_file(f, None, dtype) for f in files]
        return {d.layer: d for d in loaded}
    return _load_file(p, layer, dtype)


def _load_file(p: Path, layer: int | None, dtype: torch.dtype) -> Dictionary:
    if layer is None:
        match = re.fullmatch(r"layer_(\d+)", p.stem)
        if match is None:
            raise ArgumentError(f"layer: {str(p)!r} is not named layer_<L>.safetensors; pass layer=")
        layer = int(match.group(1))
    tensors, _ = read_safetensors(p, "circuit-tracer transcoder")
    for name in ("W_enc", "W_dec", "b_enc", "b_dec"):
        if name not in tensors:
            raise ArgumentError(f"{p}: expected tensors W_enc, W_dec, b_enc, b_dec; {name} is missing")
    t = {k: v.to(dtype) for k, v in tensors.items() if k != "k"}
    t["W_enc"] = t["W_enc"].t().contiguous()
    if "W_skip" in t:
        t["W_skip"] = t["W_skip"].t().contiguous()
    if _THRESHOLD in t:
        t["threshold"] = t.pop(_THRESHOLD)
    k = int(tensors["k"]) if "k" in tensors else None
    activation = "topk" if k is not None else "jumprelu" if "threshold" in t else "relu"
    kind = "skip-transcoder" if "W_skip" in t else "transcoder"
    config = {"kind": kind, "activation": activation, "k": k, "layer": layer}
    return Dictionary.from_tensors(config, t, source=str(p))
