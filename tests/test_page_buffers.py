"""A page's buffers: large ones deflated at the faster level, every one inflating to the widget's exact bytes."""

from __future__ import annotations

import base64
import zlib
from typing import Any

import numpy as np

from circuitwidgets import AttentionPatterns
from circuitwidgets.widgets.core.page import LARGE_BUFFER_BYTES, LARGE_BUFFER_LEVEL, _encode_buffer, widget_state


def _causal_patterns(heads: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    s = rng.standard_normal((heads, n, n)).astype(np.float32)
    s[:, ~np.tri(n, dtype=bool)] = -np.inf
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)).astype(np.float32)


def _buffers(value: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], bytes]:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {path: bytes(value)}
    if isinstance(value, dict) and set(value) <= {"__b64__", "__b64z__"} and value:
        ((encoding, data),) = value.items()
        raw = base64.b64decode(data)
        return {path: zlib.decompress(raw) if encoding == "__b64z__" else raw}
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    out: dict[tuple[str, ...], bytes] = {}
    for k, v in items:
        out.update(_buffers(v, (*path, str(k))))
    return out


def test_large_buffers_use_the_faster_level_and_small_ones_level_6() -> None:
    a = _causal_patterns(12, 512)
    big = (a * 255).astype(np.uint8).tobytes()
    small = big[: LARGE_BUFFER_BYTES // 4]
    assert len(big) >= LARGE_BUFFER_BYTES > len(small)
    for data, level in ((big, LARGE_BUFFER_LEVEL), (small, 6)):
        ((encoding, text),) = _encode_buffer(data).items()
        assert encoding == "__b64z__"
        packed = base64.b64decode(text)
        assert packed == zlib.compress(data, level)
        assert zlib.decompress(packed) == data


def test_an_attention_pages_buffers_inflate_to_the_widgets_own_bytes() -> None:
    n = 512  # 12 heads' packed lower triangles: 1.5 MB, over LARGE_BUFFER_BYTES
    widget = AttentionPatterns.from_arrays([f"t{i}" for i in range(n)], _causal_patterns(12, n)[None])
    live = _buffers(widget.get_state())
    saved = _buffers(widget_state(widget))
    assert max(len(b) for b in live.values()) >= LARGE_BUFFER_BYTES
    assert saved.keys() == live.keys() and all(saved[k] == live[k] for k in live)
