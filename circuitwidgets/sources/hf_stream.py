"""Reading a ``save_pretrained`` directory one layer at a time, without its MLPs.

An 8B model in bfloat16 is 16 GB, of which the MLPs are about 11 GB; the
weight-space analyses (``W_QK``, ``W_OV``, composition, eigenvalues) leave MLP
paths out, so they need the attention weights, the norms and ``W_E``/``W_U``
only. :class:`StreamingSource` builds the Hugging Face model on the ``meta``
device (shapes, no memory), and gives it its weights from the memory-mapped
safetensors shards as the reader asks for them: the embedding, final norm and
unembedding once, then each layer's attention and norm tensors just before
that layer is converted (:func:`~circuitwidgets.sources.hf_decoders.read_decoder`'s
``acquire`` hook), released right after. No MLP tensor is ever read.

A tensor is read from its shard's memory map (file pages, no copy); the
conversion copies what it keeps, so the mapping is dropped with the layer.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

from circuitwidgets._glibc import malloc_trim
from circuitwidgets.errors import ArgumentError, NonFiniteError, ShapeError
from circuitwidgets.model.weights import count_non_finite
from circuitwidgets.sources._local import ignored_unexpected, refuse_incomplete

#: The file ``save_pretrained`` writes next to sharded weights: which tensor is in which shard.
INDEX = "model.safetensors.index.json"


def weight_map(root: Path) -> dict[str, Path]:
    """Each stored tensor's file: from ``model.safetensors.index.json``, or the one ``*.safetensors`` file.

    Several shards without an index, an unreadable index and an index naming
    a file that is not there are refused, naming the file.
    """
    index = root / INDEX
    files = sorted(root.glob("*.safetensors"))
    if index.is_file():
        try:
            data = json.loads(index.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ArgumentError(f"model: {index} is not a readable safetensors index ({exc})") from None
        mapping = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
            raise ArgumentError(f"model: {index} must hold a 'weight_map' of tensor names to file names")
        out = {str(name): root / file for name, file in mapping.items()}
        for name, file in out.items():
            if not file.is_file():
                raise ArgumentError(f"model: shard {file} (holding {name!r}, named by {index}) is missing")
        return out
    if len(files) != 1:
        raise ArgumentError(
            f"model: {root} holds {len(files)} safetensors files {[f.name for f in files]} and no {INDEX} "
            "saying which tensor each holds; expected one model.safetensors or shards with their index"
        )
    return dict.fromkeys(_keys(files[0]), files[0])


def _keys(file: Path) -> list[str]:
    try:
        with safe_open(str(file), framework="pt") as f:
            return list(f.keys())
    except Exception as exc:  # safetensors raises its own SafetensorError and OSError
        raise ArgumentError(f"model: {file} is not a valid safetensors file ({type(exc).__name__}: {exc})") from None


#: Largest safetensors header read (the format's own limit is 100 MB).
_MAX_HEADER = 100_000_000


def _header(file: Path, arg: str = "model") -> dict[str, tuple[int, ...]]:
    """The tensor shapes in ``file``'s safetensors header: 8 bytes of length, then JSON (no tensor is read).

    A file that is not safetensors (a pickle renamed, a truncated download) is an
    :class:`ArgumentError` naming ``arg``, the caller's argument.
    """
    try:
        with file.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 2 <= size <= _MAX_HEADER:
                raise ValueError(f"header length {size}")
            header = json.loads(f.read(size))
        return {
            str(name): tuple(int(n) for n in entry["shape"]) for name, entry in header.items() if name != "__metadata__"
        }
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ArgumentError(f"{arg}: {file} is not a valid safetensors file ({type(exc).__name__}: {exc})") from None


def header_shapes(files: dict[str, Path] | list[Path], arg: str = "model") -> dict[str, tuple[int, ...]]:
    """Each stored tensor's shape, from the safetensors headers (no tensor is read).

    ``files``: a :func:`weight_map` (only the tensors it names), or files whose tensors all count;
    ``arg``: the caller's argument, named by the error for a file that is not safetensors.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(set(files.values()) if isinstance(files, dict) else files):
        shapes.update(_header(file, arg))
    return {name: shape for name, shape in shapes.items() if name in files} if isinstance(files, dict) else shapes


def _aliases(model: Any) -> dict[str, list[str]]:
    """Each parameter's names (tied parameters have several)."""
    by_id: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(param), []).append(name)
    return {name: names for names in by_id.values() for name in names}


def _elements(shape: tuple[int, ...]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


def check_checkpoint(
    root: Path,
    model: Any,
    shapes: dict[str, tuple[int, ...]],
    argument: str = "model",
    exact: bool = True,
    files: dict[str, Path] | None = None,
) -> None:
    """Refuse a checkpoint whose stored tensors are not ``model``'s, before anything is allocated or read.

    ``model`` is built from ``config.json`` on the ``meta`` device
    (:func:`meta_model`); ``shapes`` are the stored tensors' shapes under the
    model's names (:func:`header_shapes`). With ``exact``, a shape that
    differs is a :class:`~circuitwidgets.errors.ShapeError`, and a parameter
    missing (MLPs included; tied parameters are satisfied by any of their
    names) or a tensor stored that the model has no place for is an
    :class:`~circuitwidgets.errors.IncompleteCheckpointError`. Without it (for
    transformers' loader, which renames legacy names and reports what it
    missed itself), only a model declaring more weights than are stored is
    refused, so a config over tiny weights never allocates its size.
    """
    aliases = _aliases(model)
    params = {name: tuple(p.shape) for name, p in model.named_parameters()}
    missing = [name for name in params if not any(alias in shapes for alias in aliases.get(name, [name]))]
    if not exact:
        declared, stored = sum(map(_elements, params.values())), sum(map(_elements, shapes.values()))
        if declared > stored:
            refuse_incomplete(root, missing or [f"{declared - stored} weights in all"], [], argument)
        return
    for name, shape in shapes.items():
        want = params.get(name)
        if want is not None and want != shape:
            where = files[name] if files and name in files else root
            raise ShapeError(f"{argument}: {name!r} in {where}: expected shape {want} (from config.json), got {shape}")
    known = set(model.state_dict()) | set(aliases) | {name for name, _ in model.named_buffers()}
    ignored = ignored_unexpected(model)
    refuse_incomplete(root, missing, [n for n in shapes if n not in known and not ignored.search(n)], argument)


def read_tensor(file: Path, name: str) -> torch.Tensor:
    """Tensor ``name`` of ``file``, backed by the file's memory map until dropped."""
    try:
        with safe_open(str(file), framework="pt") as f:
            tensor: torch.Tensor = f.get_tensor(name)
            return tensor
    except Exception as exc:  # a truncated or corrupt shard, or a name the index got wrong
        raise ArgumentError(f"model: cannot read {name!r} from {file} ({type(exc).__name__}: {exc})") from None


def meta_model(root: Path, config: Any) -> Any:
    """The causal LM of ``config`` with its parameters on the ``meta`` device, rotary frequencies real.

    Rotary inverse frequencies are buffers computed from the config, not
    stored in the checkpoint; the rotary module is rebuilt on the CPU so the
    reader finds them.
    """
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", trust_remote_code=False)  # type: ignore[no-untyped-call]
    except Exception as exc:  # transformers' own errors: an unknown or inconsistent config
        raise ArgumentError(
            f"model: cannot build the model of {root / 'config.json'} ({type(exc).__name__}: {exc})"
        ) from None
    core: Any = getattr(model, "model", None)
    rotary = getattr(core, "rotary_emb", None)
    if core is not None and rotary is not None:
        with torch.device("cpu"):
            core.rotary_emb = type(rotary)(core.config)
    return model.eval()


def return_freed_memory() -> None:
    """Collect garbage and give the heap's free memory back to the operating system.

    A converted layer's scratch is freed into glibc's heap, which keeps it: an
    8B model's load ended 0.03–0.9 GiB above its live memory from run to run
    (3.77–4.64 GiB anonymous against 3.74 after a trim), enough to cross a
    6 GB budget. Trimming after each layer keeps the peak near what is live.
    """
    gc.collect()
    malloc_trim()


def _is_mlp(relative: str) -> bool:
    """Whether a parameter name within a layer belongs to its MLP."""
    return relative.split(".", 1)[0] == "mlp"


class StreamingSource:
    """A meta-device Hugging Face model whose weights are read from its shards when asked.

    Parameters
    ----------
    model
        The model on the ``meta`` device (:func:`meta_model`).
    files
        Each stored tensor's file (:func:`weight_map`).
    verify
        Check every tensor read is finite (a typed error names it and its file).
    progress
        Show a tqdm bar over the layers (``None``: only when interactive).
    """

    def __init__(self, model: Any, files: dict[str, Path], verify: bool, progress: bool | None = None) -> None:
        self.model, self.files, self.verify = model, files, verify
        # Tied parameters (lm_head = embed_tokens) are one tensor under several names: read once, set on each.
        self.aliases: dict[str, list[str]] = {}
        by_id: dict[int, list[str]] = {}
        for name, param in model.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(param), []).append(name)
        for names in by_id.values():
            for name in names:
                self.aliases[name] = names
        self.prefixes = {id(module): name for name, module in model.named_modules()}
        from tqdm import tqdm

        layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
        self.bar = tqdm(
            total=layers, desc="reading layers", unit="layer", disable=None if progress is None else not progress
        )

    def _stored(self, name: str) -> str:
        """The name under which the parameter ``name`` (or a tied alias of it) is stored."""
        for alias in self.aliases.get(name, [name]):
            if alias in self.files:
                return alias
        where = sorted({str(f.parent) for f in self.files.values()})
        raise ArgumentError(f"model: {', '.join(where)} holds no tensor {name!r} (nor a tied alias of it)")

    def load(self, names: Iterable[str]) -> None:
        """Read the parameters ``names`` from their shards and set them (and their tied aliases) on the model."""
        for name in names:
            stored = self._stored(name)
            file = self.files[stored]
            target = self.model.get_parameter(name)
            tensor = read_tensor(file, stored)
            if tuple(tensor.shape) != tuple(target.shape):
                raise ShapeError(
                    f"model: {stored!r} in {file}: expected shape {tuple(target.shape)} (from config.json), "
                    f"got {tuple(tensor.shape)}"
                )
            if self.verify:
                bad = count_non_finite(tensor)
                if bad:
                    raise NonFiniteError(
                        f"model: {stored!r} in {file}: expected finite values, got {bad} NaN/Inf entries"
                    )
            param = nn.Parameter(tensor, requires_grad=False)
            for alias in self.aliases.get(name, [name]):
                parent, _, leaf = alias.rpartition(".")
                setattr(self.model.get_submodule(parent), leaf, param)

    def load_outside_layers(self) -> None:
        """Read every parameter outside the decoder layers: embedding, final norm, unembedding."""
        layers = self._layers_prefix()
        self.load(n for n, _ in self.model.named_parameters() if not n.startswith(layers))

    def _layers_prefix(self) -> str:
        core = getattr(self.model, "model", None)
        return f"{self.prefixes[id(core)]}.layers." if core is not None else "model.layers."

    def acquire(self, block: Any, layer: int) -> None:
        """Read one decoder layer's attention and norm parameters (never its MLP's)."""
        prefix = self.prefixes[id(block)]
        self.load(f"{prefix}.{n}" for n, _ in block.named_parameters() if not _is_mlp(n))
        self.bar.update(1)

    def release(self, block: Any) -> None:
        """Drop a converted module's tensors (a layer, the unembedding), and so its shards' memory maps."""
        _to_meta(block)
        return_freed_memory()

    def close(self) -> None:
        """Drop every tensor the source still holds (the canonical ``W_E`` keeps its own reference) and close the bar."""
        _to_meta(self.model)
        self.bar.close()
        return_freed_memory()


def _to_meta(module: nn.Module) -> None:
    """Put every parameter of ``module`` back on the ``meta`` device (its data dropped)."""
    for name, param in list(module.named_parameters(remove_duplicate=False)):
        if not param.is_meta:
            parent, _, leaf = name.rpartition(".")
            empty = nn.Parameter(torch.empty(param.shape, dtype=param.dtype, device="meta"), requires_grad=False)
            setattr(module.get_submodule(parent), leaf, empty)
