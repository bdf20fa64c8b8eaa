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
- MLPs, plain or gated (``act(x W_gate) · (x W_in)``);
- Gemma 4's per-layer features: heads of different widths per layer
  (``head_dims``: a layer of width ``w`` keeps its rotate-half halves at columns
  ``[0, w/2)`` and ``[d_head/2, d_head/2 + w/2)`` of the ``d_head`` columns, the
  rest zero, so its QK and OV products are exact; QK-norm and value-norm RMS
  are taken over ``w``), a parameter-free RMS norm of values (``v_norm``),
  layers reusing an earlier layer's keys and values (``kv_sources``) and
  per-layer input embeddings (``d_per_layer``: a second, per-layer input
  stream gated into the residual stream after each MLP).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, UnsupportedArchitectureError

POSITIONAL_SCHEMES = ("shortformer", "standard", "rotary", "none")
NORMALIZATIONS = ("none", "ln_pre", "rms_pre", "rms_post")
QK_NORMS = ("head", "all")
#: ``solu_ln`` is SoLU + LN: ``LN(x · softmax(x))`` over the neurons, with its own gain and bias (``ln_mlp_w, ln_mlp_b``).
ACTIVATIONS = ("gelu_new", "gelu", "gelu_fast", "gelu_tanh", "relu", "silu", "solu_ln")


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_number(name: str, value: object, optional: bool) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ArgumentError(
            f"cfg.{name}: expected a positive finite number{' or None' if optional else ''}, got {value!r}"
        )


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
    head_dims: tuple[int, ...] | None = None
    v_norm: bool = False
    kv_sources: tuple[int, ...] | None = None
    d_per_layer: int | None = None
    mlp_weights_absent: bool = False

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
        for name in ("has_mlp", "parallel_attn_mlp", "post_norm", "gated_mlp", "v_norm", "mlp_weights_absent"):
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
        if self.mlp_weights_absent and not self.has_mlp:
            raise ArgumentError(
                "cfg.mlp_weights_absent: expected False for a model without MLPs (has_mlp=False), got True"
            )
        if self.rotary_dim is not None and (
            not is_int(self.rotary_dim) or not 2 <= self.rotary_dim <= self.d_head or self.rotary_dim % 2
        ):
            raise ArgumentError(
                f"cfg.rotary_dim: expected None or an even int in [2, d_head={self.d_head}], got {self.rotary_dim!r}"
            )
        _positive_number("rotary_base", self.rotary_base, False)
        _positive_number("attn_scale", self.attn_scale, True)
        _positive_number("ln_eps", self.ln_eps, False)
        _positive_number("attn_softcap", self.attn_softcap, True)
        _positive_number("final_softcap", self.final_softcap, True)
        if self.bos_token_id is not None and (
            not is_int(self.bos_token_id) or not 0 <= self.bos_token_id < self.d_vocab
        ):
            raise ArgumentError(
                f"cfg.bos_token_id: expected None or an int in [0, {self.d_vocab}), got {self.bos_token_id!r}"
            )
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
        self._check_per_layer_features()

    def _per_layer(self, name: str, what: str) -> tuple[Any, ...] | None:
        """Field ``name`` as a tuple of one entry per layer (JSON gives a list; keep the frozen form), or ``None``."""
        values = getattr(self, name)
        if values is None:
            return None
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
            raise ArgumentTypeError(f"cfg.{name}: expected None or one {what} per layer, got {values!r:.80}")
        values = tuple(values)
        object.__setattr__(self, name, values)
        if len(values) != self.n_layers:
            raise ArgumentError(f"cfg.{name}: expected {self.n_layers} entries (one per layer), got {len(values)}")
        return values

    def _check_windows(self) -> None:
        for layer, w in enumerate(self._per_layer("sliding_windows", "window (int or None)") or ()):
            if w is not None and (not is_int(w) or w < 1):
                raise ArgumentError(f"cfg.sliding_windows[{layer}]: expected None or a positive int, got {w!r}")

    def _check_per_layer_features(self) -> None:
        widths = self._per_layer("head_dims", "head width (int)")
        if widths is not None and self.rotary_dim not in (None, self.d_head):
            raise ArgumentError(
                f"cfg.rotary_dim: heads of several widths (cfg.head_dims) keep their rotate-half halves at 0 and "
                f"d_head/2, so rotary_dim must be None or d_head={self.d_head}, got {self.rotary_dim!r}"
            )
        for layer, w in enumerate(widths or ()):
            if not is_int(w) or not 2 <= w <= self.d_head or w % 2:
                raise ArgumentError(
                    f"cfg.head_dims[{layer}]: expected an even int in [2, d_head={self.d_head}], got {w!r}"
                )
        sources = self._per_layer("kv_sources", "layer index (int)") or ()
        for layer, source in enumerate(sources):
            if not is_int(source) or not 0 <= source <= layer or sources[source] != source:
                raise ArgumentError(
                    f"cfg.kv_sources[{layer}]: expected the index of a layer ≤ {layer} that computes its own keys "
                    f"and values, got {source!r}"
                )
        if self.d_per_layer is not None and (
            not is_int(self.d_per_layer) or self.d_per_layer < 1 or self.act_fn not in ACTIVATIONS
        ):
            raise ArgumentError(
                f"cfg.d_per_layer: expected None or a positive int with act_fn in {ACTIVATIONS} (the gate of the "
                f"per-layer input), got d_per_layer={self.d_per_layer!r}, act_fn={self.act_fn!r}"
            )

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

    def head_width(self, layer: int) -> int:
        """Width of ``layer``'s heads (``d_head`` unless ``head_dims`` says otherwise; the rest is zero padding)."""
        return self.head_dims[layer] if self.head_dims is not None else self.d_head

    def kv_source(self, layer: int) -> int:
        """The layer whose keys and values ``layer`` attends with (itself unless it shares an earlier layer's)."""
        return self.kv_sources[layer] if self.kv_sources is not None else layer

    def weight_space_exclusions(self) -> tuple[str, ...]:
        """What weight-space analyses (``W_QK``, ``W_OV``, composition, eigenvalues) leave out, one phrase each.

        The forward pass computes all of it; these are the parts of the model
        that are not a product of its weight matrices.
        """
        out = []
        if self.normalization != "none" or self.qk_norm is not None or self.v_norm:
            norms = [
                "input" if self.normalization != "none" else "",
                "output" if self.post_norm or self.normalization == "rms_post" else "",
                "query/key" if self.qk_norm is not None else "",
                "value" if self.v_norm else "",
            ]
            out.append(
                f"the per-token scalars of the {', '.join(n for n in norms if n)} norms (their multipliers are folded in)"
            )
        if self.has_mlp:
            out.append("every path through an MLP")
        if self.d_per_layer is not None:
            out.append("the per-layer input embeddings, gated into the residual stream after each MLP")
        shared = [(layer, source) for layer, source in enumerate(self.kv_sources or ()) if source != layer]
        if shared:
            pairs = ", ".join(f"layer {layer} reads layer {source}'s" for layer, source in shared)
            out.append(
                f"K- and V-composition into a layer that reuses an earlier layer's keys and values ({pairs}) from the "
                "layers between the two, which those keys and values never saw"
            )
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary."""
        data = asdict(self)
        for name in ("sliding_windows", "head_dims", "kv_sources"):
            if data[name] is not None:
                data[name] = list(data[name])
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
