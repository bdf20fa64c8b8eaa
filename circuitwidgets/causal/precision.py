"""Half-precision models in the causal engine: computed in float32, and said so in the result.

A bfloat16 model patched in bfloat16 drifts (0.018 off on values up to 0.157,
an attribution 0.009 off its logit): each patched variant rounds differently
from the base run, and a sweep's numbers are differences of such runs. So a
causal call on float16/bfloat16 weights runs on a float32 copy of them (made
for the call and dropped after it), and the result's convention states it.
"""

from __future__ import annotations

import torch

from circuitwidgets.model import CircuitModel

#: Weight dtypes a causal call upcasts to float32.
HALF_DTYPES = (torch.float16, torch.bfloat16)


def full_precision(model: CircuitModel) -> tuple[CircuitModel, str]:
    """``(model, "")``, or for half-precision weights ``(a float32 copy, the note the result's convention adds)``."""
    dtype = model.dtype
    if dtype not in HALF_DTYPES:
        return model, ""
    weights = {name: w.float() for name, w in model.weights().items()}
    upcast = type(model)(model.cfg, weights, tokenizer=model.tokenizer, name=model.name)
    return upcast, f"; {str(dtype).removeprefix('torch.')} weights computed in float32 (an upcast copy for this call)"


__all__ = ["HALF_DTYPES", "full_precision"]
