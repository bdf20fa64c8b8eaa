"""``ModelConfig``: the shape and architecture of a :class:`~circuitwidgets.CircuitModel`.

Every architectural feature the canonical model represents is a field here,
so a saved ``config.json`` says exactly what the forward pass does:

- positions: ``"shortformer"`` (the paper's: ``W_pos`` added only to the
  query and key inputs), ``"standard"`` (added to the residual stream),
  ``"rotary"`` (rotate-half on the first ``rotary_dim`` dimensions of queries
  and keys, frequencies per layer; a layer whose frequencies are all zero has
  no positional encoding, as SmolLM3's NoPE layers) or ``"none"``;
- normalisation (DESIGN.md §3a): ``"ln_pre"`` (layer norm on every sublayer
  input and the final output), ``"rms_pre"`` (RMS norm there; with
  ``post_norm`` also on every sublayer output, Gemma 2/3's sandwich),
  ``"rms_post"`` (RMS norm on sublayer outputs and the final output only,
  OLMo 2/3) or ``"none"``; every norm's weight is folded into the weights
  around it, and only the per-token ``1/rms(x)`` is computed in the forward pass;
- grouped-query attention (``n_kv_heads`` key/value heads shared by
  ``n_heads / n_kv_heads`` query heads each), QK-norm (``qk_norm``: an RMS
  norm over each head's query and key, ``"head"``, or over all heads at once,
  ``"all"``), attention-logit and final-logit soft-caps, sliding windows per layer;
- MLPs, plain or gated (``act(x W_gate) · (x W_in)``).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, UnsupportedArchitectureError

POSITIONAL_SCHEMES = ("shortformer", "standard", "rotary", "none")
NORMALIZATIONS = ("none", "ln_pre", "rms_pre", "rms_post")
QK_NORMS = ("head", "all")
ACTIVATIONS = ("gelu_new", "gelu", "gelu_fast", "gelu_tanh", "relu", "silu")


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_number(name: str, value: object, optional: bool) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ArgumentError(f"cfg.{name}: expected a positive finite number{' or None' if optional else ''}, got {value!r}")


@dataclass(frozen=True)
class ModelConfig:
    """Shape and architecture of a :class:`CircuitModel` (see the module docstring for each feature)."""

    n_layers: int
    n_heads: int
    d_model: int
    d_head: int
    d_vocab: int
    n_ctx: int
    positional_embedding_type: str = "shortformer"
    normalization: str = "none"
    has_mlp: bool = False
    d_mlp: int | None = None
    act_fn: str | None = None
    parallel_attn_mlp: bool = False
    rotary_dim: int | None = None
    rotary_base: float = 10_000.0
    attn_scale: float | None = None
    ln_eps: float = 1e-5
    architecture: str = "attn-only"
    bos_token_id: int | None = None
    n_kv_heads: int | None = None
    post_norm: bool = False
    qk_norm: str | None = None
    gated_mlp: bool = False
    attn_softcap: float | None = None
    final_softcap: float | None = None
    sliding_windows: tuple[int | None, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("n_heads", "d_model", "d_head", "d_vocab", "n_ctx"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ArgumentError(f"cfg.{name}: expected a positive int, got {value!r}")
        if not is_int(self.n_layers) or self.n_layers < 0:
            raise ArgumentError(f"cfg.n_layers: expected an int >= 0, got {self.n_layers!r}")
        if self.positional_embedding_type not in POSITIONAL_SCHEMES:
            raise UnsupportedArchitectureError(
                f"cfg.positional_embedding_type: expected one of {POSITIONAL_SCHEMES}, got {self.positional_embedding_type!r}"
            )
        if self.normalization not in NORMALIZATIONS:
            raise UnsupportedArchitectureError(
                f"cfg.normalization: expected one of {NORMALIZATIONS}, got {self.normalization!r}"
            )
        for name in ("has_mlp", "parallel_attn_mlp", "post_norm", "gated_mlp"):
            if not isinstance(getattr(self, name), bool):
                raise ArgumentError(f"cfg.{name}: expected a bool, got {getattr(self, name)!r}")
        if self.post_norm and self.normalization != "rms_pre":
            raise UnsupportedArchitectureError(
                f"cfg.post_norm: sublayer-output norms go with normalization='rms_pre', got {self.normalization!r}"
            )
        if self.has_mlp and (not is_int(self.d_mlp) or self.d_mlp < 1 or self.act_fn not in ACTIVATIONS):  # type: ignore[operator]
            raise UnsupportedArchitectureError(
                f"cfg: a model with MLPs needs d_mlp (a positive int) and act_fn in {ACTIVATIONS}, "
                f"got d_mlp={self.d_mlp!r}, act_fn={self.act_fn!r}"
            )
        if self.rotary_dim is not None and (
            not is_int(self.rotary_dim) or not 2 <= self.rotary_dim <= self.d_head or self.rotary_dim % 2
        ):
            raise ArgumentError(f"cfg.rotary_dim: expected None or an even int in [2, d_head={self.d_head}], got {self.rotary_dim!r}")
        _positive_number("rotary_base", self.rotary_base, False)
        _positive_number("attn_scale", self.attn_scale, True)
        _positive_number("ln_eps", self.ln_eps, False)
        _positive_number("attn_softcap", self.attn_softcap, True)
        _positive_number("final_softcap", self.final_softcap, True)
        if self.bos_token_id is not None and (not is_int(self.bos_token_id) or not 0 <= self.bos_token_id < self.d_vocab):
            raise ArgumentError(f"cfg.bos_token_id: expected None or an int in [0, {self.d_vocab}), got {self.bos_token_id!r}")
        if not isinstance(self.architecture, str):
            raise ArgumentError(f"cfg.architecture: expected a str, got {self.architecture!r}")
        if self.n_kv_heads is not None and (
            not is_int(self.n_kv_heads) or self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads
        ):
            raise ArgumentError(
                f"cfg.n_kv_heads: expected None or a positive divisor of n_heads={self.n_heads}, got {self.n_kv_heads!r}"
            )
        if self.qk_norm is not None and self.qk_norm not in QK_NORMS:
            raise UnsupportedArchitectureError(f"cfg.qk_norm: expected None or one of {QK_NORMS}, got {self.qk_norm!r}")
        self._check_windows()

    def _check_windows(self) -> None:
        windows = self.sliding_windows
        if windows is None:
            return
        if isinstance(windows, (str, bytes)) or not isinstance(windows, (list, tuple)):
            raise ArgumentTypeError(f"cfg.sliding_windows: expected None or one window (int or None) per layer, got {windows!r:.80}")
        windows = tuple(windows)
        object.__setattr__(self, "sliding_windows", windows)  # JSON gives a list; keep the frozen form
        if len(windows) != self.n_layers:
            raise ArgumentError(f"cfg.sliding_windows: expected {self.n_layers} entries (one per layer), got {len(windows)}")
        for layer, w in enumerate(windows):
            if w is not None and (not is_int(w) or w < 1):
                raise ArgumentError(f"cfg.sliding_windows[{layer}]: expected None or a positive int, got {w!r}")

    @property
    def scale(self) -> float:
        """Divisor of attention scores (``sqrt(d_head)`` unless the source says otherwise)."""
        return self.attn_scale if self.attn_scale is not None else math.sqrt(self.d_head)

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads (``n_heads`` without grouped-query attention)."""
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.kv_heads

    def kv_head(self, head: int) -> int:
        """The key/value head that query head ``head`` reads (``head // group_size``)."""
        return head // self.group_size

    def window(self, layer: int) -> int | None:
        """Sliding window of ``layer`` (each query sees itself and ``window - 1`` earlier keys), or ``None``."""
        return self.sliding_windows[layer] if self.sliding_windows is not None else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary."""
        data = asdict(self)
        if self.sliding_windows is not None:
            data["sliding_windows"] = list(self.sliding_windows)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Build from a dictionary, ignoring keys this version does not know."""
        if not isinstance(data, dict):
            raise ArgumentTypeError(f"data: expected a dict of config values, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        missing = sorted(f.name for f in fields(cls) if f.name not in data and f.default is MISSING)
        if missing:
            raise ArgumentError(f"data: expected config values for {missing}, got keys {sorted(map(str, data))}")
        return cls(**{k: v for k, v in data.items() if k in known})
