"""circuit-tracer's per-layer transcoder files (``circuit_tracer/transcoder/single_layer_transcoder.py``).

One ``layer_<L>.safetensors`` per layer with ``W_enc [d_transcoder, d_model]`` (rows are
features: circuit-tracer applies ``F.linear``), ``W_dec [d_transcoder, d_model]``, ``b_enc``,
``b_dec``, and optionally ``activation_function.threshold`` (JumpReLU) and
``W_skip [d_model, d_model]`` (applied as ``x W_skipᵀ``). No threshold means ReLU. circuit-tracer 0.5's
``load_transcoder_set`` reads ReLU and JumpReLU transcoders only, so a TopK transcoder is refused when written
(a BatchTopK one is written with its inference threshold, as JumpReLU), and a file's ``k`` (older circuitwidgets
files) or ``load_circuit_tracer(..., k=)`` reads one back as TopK: circuit-tracer's own TopK transcoders save no ``k``. A set's folder also holds ``config.yaml`` naming the hooks
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

from circuitwidgets._checks import check_int
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, FileFormatError
from circuitwidgets.features._args import check_dictionary, check_float_dtype
from circuitwidgets.features._safetensors_read import Header, read_header, read_tensors
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.files import expect_dictionary_tensors, write_safetensors

_THRESHOLD = "activation_function.threshold"


def _tensors(d: Dictionary, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    if d.kind == "sae":
        raise ArgumentError(f"dictionary {d.name}: circuit-tracer's format holds transcoders, got an SAE")
    if d.activation == "topk":
        raise ArgumentError(
            f"dictionary {d.name}: kind 'transcoder' with activation 'topk': circuit-tracer 0.5's load_transcoder_set "
            "reads ReLU and JumpReLU transcoders only (its files have no k). Save it with features.save, or train it "
            "as batchtopk, whose inference threshold circuit-tracer reads as JumpReLU"
        )
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
    return {k: v.to(dtype) for k, v in t.items()}


def save_circuit_tracer(
    transcoders: Sequence[Dictionary],
    folder: str | Path,
    scan_name: str = "circuitwidgets",
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Write one transcoder per layer ``0 .. n-1`` (in order) as a circuit-tracer set in ``folder``."""
    check_float_dtype("dtype", dtype)
    if isinstance(transcoders, (str, bytes)) or not isinstance(transcoders, Sequence) or not transcoders:
        raise ArgumentTypeError(
            f"transcoders: expected a non-empty list of Dictionary, got {type(transcoders).__name__}"
        )
    for i, d in enumerate(transcoders):
        check_dictionary(f"transcoders[{i}]", d)
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
    path: str | Path,
    layer: int | None = None,
    dtype: torch.dtype = torch.float32,
    *,
    k: int | None = None,
    memory_budget: int | None = None,
) -> Dictionary | dict[int, Dictionary]:
    """Read one ``layer_<L>.safetensors`` file (its layer from ``layer`` or the name), or every one in a folder.

    Files are read as untrusted: regular files inside the folder only, each tensor's shape checked against
    ``W_enc``'s from the header before reading, the total in ``dtype`` against ``memory_budget`` (bytes; ``None``:
    this machine's memory), NaN or infinite weights refused by name, two files of one layer (``layer_1`` and
    ``layer_01``) refused. ``k``: read the transcoders as TopK with ``k`` active features, since circuit-tracer's
    TopK transcoders are saved without their ``k`` and look like ReLU ones (a file that holds a ``k`` keeps it).
    """
    if k is not None:
        k = check_int("k", k, 1)
    check_float_dtype("dtype", dtype)
    p = Path(path)
    if p.is_dir():
        files = _layer_files(p)
        if layer is not None:
            raise ArgumentError(f"layer: a folder's files name their layers; expected None, got {layer!r}")
        loaded = {lyr: _load_file(f, lyr, dtype, k, memory_budget, p) for lyr, f in sorted(files.items())}
        return loaded
    if layer is not None:
        layer = check_int("layer", layer, 0)
    return _load_file(p, layer, dtype, k, memory_budget, None)


def _layer_files(folder: Path) -> dict[int, Path]:
    """``{layer: file}`` of a folder's ``layer_<L>.safetensors`` files; one layer named twice is refused."""
    files: dict[int, Path] = {}
    for entry in sorted(folder.iterdir()):
        match = re.fullmatch(r"layer_(\d{1,6})\.safetensors", entry.name)
        if match is None:
            continue
        lyr = int(match.group(1))
        if lyr in files:
            raise FileFormatError(
                f"path: {str(folder)!r}: expected one file per layer, got {files[lyr].name!r} and {entry.name!r} "
                f"for layer {lyr}"
            )
        files[lyr] = entry
    if not files:
        raise FileFormatError(f"path: expected layer_<L>.safetensors files in {str(folder)!r}, found none")
    return files


def _file_k(header: Header, tensors_k: torch.Tensor | None, d_sae: int, k: int | None) -> int | None:
    """The TopK ``k``: the file's (a 0-d integer tensor in ``[1, d_sae]``), else the argument's."""
    if tensors_k is None:
        if k is not None and k > d_sae:
            raise ArgumentError(f"k: expected an int in [1, {d_sae}] (the file's d_transcoder), got {k}")
        return k
    if tensors_k.numel() != 1 or tensors_k.dtype.is_floating_point or tensors_k.dtype == torch.bool:
        raise FileFormatError(
            f"{header.where('k')}: expected one integer, got {tensors_k.dtype} of shape {tuple(tensors_k.shape)}"
        )
    value = int(tensors_k.reshape(()))
    if not 1 <= value <= d_sae:
        raise FileFormatError(f"{header.where('k')}: expected an int in [1, {d_sae}], got {value}")
    if k is not None and k != value:
        raise ArgumentError(f"k: the file holds k = {value}, got k={k}")
    return value


def _load_file(
    p: Path, layer: int | None, dtype: torch.dtype, k: int | None, memory_budget: int | None, folder: Path | None
) -> Dictionary:
    if layer is None:
        match = re.fullmatch(r"layer_(\d{1,6})", p.stem)
        if match is None:
            raise ArgumentError(f"layer: {str(p)!r} is not named layer_<L>.safetensors; pass layer=")
        layer = int(match.group(1))
    header = read_header(p, "circuit-tracer transcoder", folder)
    if "W_enc" not in header.entries or len(header.entries["W_enc"].shape) != 2:
        raise FileFormatError(f"{header.where('W_enc')}: expected a [d_transcoder, d_model] tensor")
    d_sae, d_in = header.entries["W_enc"].shape
    d_out = header.entries["b_dec"].shape[0] if "b_dec" in header.entries and header.entries["b_dec"].shape else d_in
    names = {"threshold": _THRESHOLD}
    expect_dictionary_tensors(header, d_in, d_sae, d_out, names, frozenset({"W_enc", "W_skip"}), extra=("k",))
    floats = [n for n in header.entries if n != "k"]
    t = read_tensors(header, floats, dtype, memory_budget)
    stored_k = read_tensors(header, ["k"], None)["k"] if "k" in header.entries else None
    k = _file_k(header, stored_k, d_sae, k)
    t["W_enc"] = t["W_enc"].t()  # a view: circuit-tracer's rows are our columns, no copy of the largest tensor
    if "W_skip" in t:
        t["W_skip"] = t["W_skip"].t().contiguous()
    if _THRESHOLD in t:
        t["threshold"] = t.pop(_THRESHOLD)
    if k is not None and "threshold" in t:
        raise FileFormatError(f"{header.where('k')}: a TopK transcoder has no threshold; the file holds both")
    activation = "topk" if k is not None else "jumprelu" if "threshold" in t else "relu"
    kind = "skip-transcoder" if "W_skip" in t else "transcoder"
    config = {"kind": kind, "activation": activation, "k": k, "layer": layer}
    return Dictionary.from_tensors(config, t, source=str(p))
