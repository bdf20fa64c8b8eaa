"""A text longer than the model's context, analysed in overlapping windows (``AttentionPatterns(..., window=W)``).

Windows
-------
The text's ``N`` tokens ``t_0 … t_{N-1}`` (``t_0`` the BOS when the model
prepends one, ``b = 1``; else ``b = 0``) are cut into windows, each a context
the model could have seen: the BOS (when ``b = 1``) followed by ``m = W - b``
consecutive tokens of the text. Window ``k`` holds positions ``a_k … a_k + m - 1``
with ``a_k = min(b + k·S, N - m)`` (stride ``S``; the last window is moved back
to end at the text's end), so ``K = 1 + ceil((N - b - m) / S)`` forward passes.

What is shown
-------------
Each query row ``i`` comes from the **earliest window that contains** ``i``: the
one that gives it the most left context (at least ``m - S`` tokens before it,
except near the start of the text). Its weights are put at their positions in
the text, the window's BOS at position 0 (the text's BOS); sources before the
window's start were not in its context and get weight 0, so every row still
sums to 1. The BOS row comes from the first window. Value-weighted rows use the
norms ``‖v_j W_O‖`` of the row's own window, logit effects its own window's
mixed values against the text's next token (NaN at the text's last position),
and the per-token loss its own window's logits at that row against the text's
next token (a window's last row predicts the token just past the window).
``value_norms`` themselves are not sent: a source's norm differs from window
to window.

Cost: ``K`` forward passes of ``W`` tokens; memory one window's cache and
``128 · n_heads · N`` floats of rows at a time, beside the encoded result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets.activations.loss import target_losses
from circuitwidgets.activations.value_paths import value_norms, value_weighted
from circuitwidgets.activations.writes import final_read, written_by_heads
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.attention.codec import _quantise, check_state_bytes
from circuitwidgets.widgets.attention.source import build_bar, default_diagonals
from circuitwidgets.widgets.core.context import context_limited

__all__ = ["Windows", "check_window", "windowed_data"]

#: Rows placed at a time (bounds the scratch memory to ``ROWS · n_heads · N`` floats).
_ROWS = 128


@dataclass(frozen=True)
class Windows:
    """Where the windows over ``n`` tokens start, and which window each row is read from."""

    n: int
    size: int
    stride: int
    bos: int

    @property
    def body(self) -> int:
        """Text tokens per window, ``m = size - bos``."""
        return self.size - self.bos

    @property
    def starts(self) -> list[int]:
        """``a_k``: the first text position of each window (after its BOS)."""
        m, b = self.body, self.bos
        count = 1 + max(0, math.ceil((self.n - b - m) / self.stride))
        return [min(b + k * self.stride, self.n - m) for k in range(count)]

    def owners(self) -> NDArray[np.int64]:
        """For each position ``i``, the earliest window containing it (the BOS: window 0)."""
        ends = np.asarray(self.starts, dtype=np.int64) + self.body  # exclusive
        owner = np.searchsorted(ends, np.arange(self.n), side="right")
        owner[: self.bos] = 0
        return owner.astype(np.int64)

    def positions(self, k: int) -> NDArray[np.int64]:
        """The text position of each of window ``k``'s tokens (its BOS at 0)."""
        a = self.starts[k]
        return np.concatenate([np.zeros(self.bos, dtype=np.int64), np.arange(a, a + self.body, dtype=np.int64)])


def check_window(model: CircuitModel, window: Any, stride: Any, n: int, bos: bool) -> Windows:
    """Checked windows over ``n`` tokens, or a typed error naming ``window`` or ``stride``."""
    b = 1 if bos else 0
    if isinstance(window, bool) or not isinstance(window, int):
        raise ArgumentTypeError(
            f"window: expected an int (tokens per window, BOS included), got {type(window).__name__}"
        )
    n_ctx = int(model.cfg.n_ctx)
    if window < b + 1 or (context_limited(model) and window > n_ctx):
        limit = f"{b + 1}..{n_ctx} (the model's context, n_ctx)" if context_limited(model) else f"at least {b + 1}"
        raise ArgumentError(f"window: expected {limit} tokens, got {window}")
    m = window - b
    if stride is None:
        stride = max(1, m // 2)
    if isinstance(stride, bool) or not isinstance(stride, int):
        raise ArgumentTypeError(f"stride: expected an int, got {type(stride).__name__}")
    if not 1 <= stride <= m:
        raise ArgumentError(
            f"stride: expected 1..{m} (windows of {m} text tokens must overlap or touch, so every token is in one), got {stride}"
        )
    return Windows(n, window, stride, b)


def _next_token_effects(model: CircuitModel, cache: Any, layer: int, targets: torch.Tensor) -> NDArray[np.float32]:
    """Each head's exact direct effect on ``targets_i``'s logit per row of one window (NaN where ``targets_i < 0``):
    ``[n_heads, w]``.

    The quantity of :func:`~circuitwidgets.activations.value_paths.logit_effects` (the head's write
    read through the final norm with the window run's scale frozen and centred), with each row's
    next token taken from the text (a window's last row has one beyond the window).
    """
    z = cache["z", layer][0]  # [w, H, dh]
    W_O = model.weight("W_O")
    assert W_O is not None
    keep = targets >= 0
    out = np.full((model.cfg.n_heads, z.shape[0]), np.nan, dtype=np.float32)
    if bool(keep.any()):
        rows = keep.to(z.device)
        heads, _ = written_by_heads(model, torch.einsum("phe,hed->phd", z[rows], W_O[layer]), layer)
        scale = cache["scale_final"][0][rows] if "scale_final" in cache else torch.ones(int(rows.sum()), 1)
        read = final_read(model, heads, scale[:, None])
        unembed = model.W_U[:, targets[keep].to(model.W_U.device)].double()  # [d_model, rows]
        effect = torch.einsum("phd,dp->hp", read, unembed)
        out[:, keep.cpu().numpy()] = effect.to("cpu", torch.float32).numpy()
    return out


def _place_losses(
    out: NDArray[np.float32], logits: torch.Tensor, targets: torch.Tensor, positions: NDArray[np.int64]
) -> None:
    """Each owned row's loss on the text's next token (``targets_i < 0``: the text's end, left NaN) at its position."""
    keep = targets >= 0
    if bool(keep.any()):
        with torch.no_grad():
            loss = target_losses(logits[keep.to(logits.device)], targets[keep])
        out[positions[keep.numpy()]] = loss.to("cpu", torch.float32).numpy()


def _place_rows(out: NDArray[np.uint8], rows: NDArray[np.float32], first: int, cols: NDArray[np.int64], n: int) -> None:
    """Quantise window rows ``[H, r, w]`` (text rows ``first..``) into ``out`` ``[H, n(n+1)/2]``, at text columns ``cols``."""
    for lo in range(0, rows.shape[1], _ROWS):
        block = rows[:, lo : lo + _ROWS]
        g0, g1 = first + lo, first + lo + block.shape[1]
        dense = np.zeros((block.shape[0], block.shape[1], g1), dtype=np.float32)
        dense[:, :, cols[cols < g1]] = block[:, :, : int((cols < g1).sum())]
        keep = np.arange(g1)[None, :] <= np.arange(g0, g1)[:, None]  # each row's causal part, row by row
        out[:, g0 * (g0 + 1) // 2 : g1 * (g1 + 1) // 2] = _quantise(dense[:, keep])


def windowed_data(
    model: CircuitModel, ids: torch.Tensor, windows: Windows, progress_bar: bool | None
) -> dict[str, Any]:
    """The widget's data traits for ``ids [N]`` analysed in ``windows`` (module docs: what is shown)."""
    cfg, n = model.cfg, windows.n
    check_state_bytes(cfg.n_layers, cfg.n_heads, n, value_weighted=True)
    size = n * (n + 1) // 2
    patterns = np.zeros((cfg.n_layers, cfg.n_heads, size), dtype=np.uint8)
    weighted = np.zeros_like(patterns)
    effects = np.full((cfg.n_layers, cfg.n_heads, n), np.nan, dtype=np.float32)
    losses = np.full(n, np.nan, dtype=np.float32)
    owners = windows.owners()
    ids = ids.to(model.device)
    bar = build_bar(len(windows.starts), "AttentionPatterns windows", progress_bar)
    try:
        for k in range(len(windows.starts)):
            where = windows.positions(k)
            rows = np.nonzero(owners[where] == k)[0]  # local rows this window gives (contiguous)
            logits, cache = model.run_with_cache(
                ids[torch.as_tensor(where)][None], names=["pattern", "v", "z", "scale_final"]
            )
            norms = value_norms(model, cache)
            nxt = torch.as_tensor(where[rows] + 1)
            targets = torch.where(nxt < n, ids.cpu()[nxt.clamp(max=n - 1)], torch.full_like(nxt, -1))
            _place_losses(losses, logits[0, torch.as_tensor(rows)], targets, where[rows])
            for layer in range(cfg.n_layers):
                pattern = cache["pattern", layer][0].to("cpu", torch.float32).numpy()  # [H, w, w]
                mine = pattern[:, rows]
                value = np.stack([value_weighted(pattern[h], norms[layer, h])[rows] for h in range(cfg.n_heads)])
                first = int(where[rows[0]])
                _place_rows(patterns[layer], mine, first, where, n)
                _place_rows(weighted[layer], value, first, where, n)
                full_targets = torch.full((len(where),), -1, dtype=torch.long)
                full_targets[torch.as_tensor(rows)] = targets
                effects[layer][:, where[rows]] = _next_token_effects(model, cache, layer, full_targets)[:, rows]
            bar.update(1)
    finally:
        bar.close()
    tokens = model.to_str_tokens(ids)
    return {
        "prompts": [],
        "tokens": tokens,
        "causal": True,
        "patterns": patterns,
        "value_patterns": weighted,
        "value_norms": None,
        "logit_effect": effects,
        "per_token_loss": losses,
        "diagonals": default_diagonals(tokens),
        "windows": {"size": windows.size, "stride": windows.stride, "starts": windows.starts},
    }
