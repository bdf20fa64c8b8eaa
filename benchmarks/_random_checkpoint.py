"""Write a random Hugging Face checkpoint of any size without building the model in memory.

``save_pretrained`` needs the whole model materialised (16 GB for an 8B model in
bfloat16). Here the model is built on the ``meta`` device (shapes only), and each
tensor is drawn, written into its shard and dropped, so writing an 8B checkpoint
holds one shard (``shard_bytes``) at a time. The directory is what
``save_pretrained`` writes: ``config.json``, ``model-0000i-of-0000n.safetensors``
and ``model.safetensors.index.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file


def _tensor_plan(config: Any) -> list[tuple[str, tuple[int, ...]]]:
    """Names and shapes of the checkpoint's tensors (tied weights once), from a meta-device model."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    seen: set[int] = set()
    plan = []
    for name, param in model.named_parameters(remove_duplicate=False):
        key = id(param)
        if key in seen:  # tied (lm_head = embed_tokens): save_pretrained stores it once
            continue
        seen.add(key)
        plan.append((name, tuple(param.shape)))
    return plan


def _random(name: str, shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """Norm weights near 1 (or near 0 for the (1 + w) families), everything else N(0, 0.02²)."""
    if len(shape) == 1 and "norm" in name:
        return (1.0 + 0.05 * torch.randn(shape, generator=generator)).to(dtype)
    # Drawn in place in the target dtype: no float32 copy, and 2x faster than randn-then-cast in bfloat16.
    return torch.empty(shape, dtype=dtype).normal_(0.0, 0.02, generator=generator)


def write_random_checkpoint(
    config: Any, out: Path, dtype: torch.dtype = torch.bfloat16, shard_bytes: int = 2 << 30, seed: int = 0
) -> int:
    """Write a random ``config``-shaped checkpoint to ``out``; return the bytes of its weights."""
    out.mkdir(parents=True, exist_ok=True)
    config.dtype = dtype
    config.save_pretrained(out)
    plan = _tensor_plan(config)
    size = torch.tensor([], dtype=dtype).element_size()
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    filled = 0
    for name, shape in plan:
        nbytes = size * int(torch.Size(shape).numel())
        if shards[-1] and filled + nbytes > shard_bytes:
            shards.append([])
            filled = 0
        shards[-1].append((name, shape))
        filled += nbytes
    generator = torch.Generator().manual_seed(seed)
    weight_map: dict[str, str] = {}
    total = 0
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {name: _random(name, shape, dtype, generator) for name, shape in shard}
        save_file(tensors, str(out / file), metadata={"format": "pt"})
        total += sum(t.numel() * size for t in tensors.values())
        weight_map.update(dict.fromkeys(tensors, file))
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return total
