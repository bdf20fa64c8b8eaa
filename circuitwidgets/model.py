"""CircuitModel: one canonical transformer for every analysis and view.

Conventions (DESIGN.md §3, as TransformerLens): row vectors, residual
``[batch, pos, d_model]``, per-head weights

``W_E [d_vocab, d_model]``, ``W_pos [n_ctx, d_model]``, ``W_Q, W_K, W_V
[n_layers, n_heads, d_model, d_head]``, ``W_O [n_layers, n_heads, d_head, d_model]``,
``W_U [d_model, d_vocab]``; optional biases ``b_Q, b_K, b_V [n_layers, n_heads,
d_head]``, ``b_O [n_layers, d_model]``, ``b_U [d_vocab]``; optional MLPs ``W_in
[n_layers, d_model, d_mlp]``, ``b_in [n_layers, d_mlp]``, ``W_out [n_layers, d_mlp,
d_model]``, ``b_out [n_layers, d_model]``.

Layer norm is folded: each layer norm's weight and bias live inside the weights
that read its output (``W_Q, W_K, W_V``, ``W_in``, ``W_U`` and their biases). What
is left in the forward pass, when ``cfg.normalization == "ln_pre"``, is the
per-token normalisation ``(x - mean(x)) / sqrt(var(x) + eps)``; weight-space
analyses leave that scalar out, as the paper's appendix does.

Positional schemes: ``"shortformer"`` (the paper's: ``W_pos`` added only to the
inputs of queries and keys), ``"standard"`` (``W_pos`` added to the residual
stream, GPT-2), ``"rotary"`` (GPT-NeoX rotate-half rotary on the first
``rotary_dim`` dimensions of queries and keys) and ``"none"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from circuitwidgets.errors import (
    ArgumentError,
    ArgumentTypeError,
    MemoryBudgetError,
    NonFiniteError,
    ShapeError,
    UnsupportedArchitectureError,
)
from circuitwidgets.tokenizer import FastTokenizer, HFTokenizer, TokenizerLike, VocabTokenizer

POSITIONAL_SCHEMES = ("shortformer", "standard", "rotary", "none")
NORMALIZATIONS = ("none", "ln_pre")
ACTIVATIONS = ("gelu_new", "gelu", "gelu_fast", "relu", "silu")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
#: Default bytes one :meth:`CircuitModel.run_with_cache` may hold (logits, kept activations, one layer's work).
FORWARD_MEMORY_BUDGET = 8 * 2**30


def _is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ModelConfig:
    """Shape and architecture of a :class:`CircuitModel`."""

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

    def __post_init__(self) -> None:
        for name in ("n_heads", "d_model", "d_head", "d_vocab", "n_ctx"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ArgumentError(f"cfg.{name}: expected a positive int, got {value!r}")
        if not _is_int(self.n_layers) or self.n_layers < 0:
            raise ArgumentError(f"cfg.n_layers: expected an int >= 0, got {self.n_layers!r}")
        if self.positional_embedding_type not in POSITIONAL_SCHEMES:
            raise UnsupportedArchitectureError(
                f"cfg.positional_embedding_type: expected one of {POSITIONAL_SCHEMES}, got {self.positional_embedding_type!r}"
            )
        if self.normalization not in NORMALIZATIONS:
            raise UnsupportedArchitectureError(
                f"cfg.normalization: expected one of {NORMALIZATIONS}, got {self.normalization!r}"
            )
        for name in ("has_mlp", "parallel_attn_mlp"):
            if not isinstance(getattr(self, name), bool):
                raise ArgumentError(f"cfg.{name}: expected a bool, got {getattr(self, name)!r}")
        if self.has_mlp and (not _is_int(self.d_mlp) or self.d_mlp < 1 or self.act_fn not in ACTIVATIONS):  # type: ignore[operator]
            raise UnsupportedArchitectureError(
                f"cfg: a model with MLPs needs d_mlp (a positive int) and act_fn in {ACTIVATIONS}, "
                f"got d_mlp={self.d_mlp!r}, act_fn={self.act_fn!r}"
            )
        if self.rotary_dim is not None and (
            not _is_int(self.rotary_dim) or not 2 <= self.rotary_dim <= self.d_head or self.rotary_dim % 2
        ):
            raise ArgumentError(f"cfg.rotary_dim: expected None or an even int in [2, d_head={self.d_head}], got {self.rotary_dim!r}")
        for name, value, optional in (
            ("rotary_base", self.rotary_base, False),
            ("attn_scale", self.attn_scale, True),
            ("ln_eps", self.ln_eps, False),
        ):
            if optional and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ArgumentError(f"cfg.{name}: expected a positive finite number{' or None' if optional else ''}, got {value!r}")
        if self.bos_token_id is not None and (not _is_int(self.bos_token_id) or not 0 <= self.bos_token_id < self.d_vocab):
            raise ArgumentError(f"cfg.bos_token_id: expected None or an int in [0, {self.d_vocab}), got {self.bos_token_id!r}")
        if not isinstance(self.architecture, str):
            raise ArgumentError(f"cfg.architecture: expected a str, got {self.architecture!r}")

    @property
    def scale(self) -> float:
        """Divisor of attention scores (``sqrt(d_head)`` unless the source says otherwise)."""
        return self.attn_scale if self.attn_scale is not None else math.sqrt(self.d_head)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary."""
        return asdict(self)

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


def _expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    L, H, d, dh, V = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_head, cfg.d_vocab
    shapes: dict[str, tuple[int, ...]] = {
        "W_E": (V, d), "W_pos": (cfg.n_ctx, d),
        "W_Q": (L, H, d, dh), "W_K": (L, H, d, dh), "W_V": (L, H, d, dh), "W_O": (L, H, dh, d),
        "b_Q": (L, H, dh), "b_K": (L, H, dh), "b_V": (L, H, dh), "b_O": (L, d),
        "W_U": (d, V), "b_U": (V,),
    }
    if cfg.has_mlp:
        assert cfg.d_mlp is not None
        shapes |= {"W_in": (L, d, cfg.d_mlp), "b_in": (L, cfg.d_mlp), "W_out": (L, cfg.d_mlp, d), "b_out": (L, d)}
    return shapes


REQUIRED_WEIGHTS = ("W_E", "W_Q", "W_K", "W_V", "W_O", "W_U")


def validate_weights(cfg: ModelConfig, weights: dict[str, torch.Tensor]) -> None:
    """Check names, shapes and finiteness; raise a typed error naming the tensor."""
    shapes = _expected_shapes(cfg)
    for name in REQUIRED_WEIGHTS + (("W_pos",) if cfg.positional_embedding_type in ("shortformer", "standard") else ()):
        if name not in weights:
            raise ShapeError(f"weights: missing tensor {name!r} (expected shape {shapes[name]})")
    if cfg.has_mlp:
        for name in ("W_in", "W_out"):
            if name not in weights:
                raise ShapeError(f"weights: missing tensor {name!r} (expected shape {shapes[name]}) for a model with MLPs")
    reference = weights["W_E"]
    if not isinstance(reference, torch.Tensor) or not reference.is_floating_point():
        raise ArgumentTypeError(f"weights['W_E']: expected a floating-point torch.Tensor, got {type(reference).__name__}")
    for name, tensor in weights.items():
        if name not in shapes:
            raise ShapeError(f"weights: unknown tensor {name!r}; known names are {sorted(shapes)}")
        if not isinstance(tensor, torch.Tensor):
            raise ArgumentTypeError(f"weights[{name!r}]: expected a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype != reference.dtype or tensor.device != reference.device:
            raise ArgumentTypeError(
                f"weights[{name!r}]: expected dtype {reference.dtype} on {reference.device} (those of W_E), "
                f"got {tensor.dtype} on {tensor.device}"
            )
        if tuple(tensor.shape) != shapes[name]:
            raise ShapeError(f"weights[{name!r}]: expected shape {shapes[name]}, got {tuple(tensor.shape)}")
        if tensor.is_meta:
            raise ArgumentError(f"weights[{name!r}]: expected a tensor with data, got one on the meta device")
        if not torch.isfinite(tensor).all():
            bad = int((~torch.isfinite(tensor)).sum())
            raise NonFiniteError(f"weights[{name!r}]: expected finite values, got {bad} NaN/Inf entries")


class ActivationCache:
    """Activations of one forward pass, read as ``cache["pattern", layer]``.

    Names (TransformerLens's): ``q, k, v, z [batch, pos, head, d_head]``;
    ``attn_scores, pattern [batch, head, dest, src]``; ``result [batch, pos, head,
    d_model]`` (each head's output ``z W_O`` as computed); ``attn_out, mlp_out,
    resid_pre, resid_mid, resid_post [batch, pos, d_model]``; ``scale [batch, pos,
    1]`` (layer-norm divisor of the attention input, when normalised); and,
    without a layer, ``embed``, ``pos_embed``, ``resid_final``.
    """

    def __init__(self, store: dict[str, torch.Tensor]) -> None:
        self._store = store

    @staticmethod
    def key(name: str, layer: int | None = None) -> str:
        """Storage key of an activation."""
        return name if layer is None else f"{name}.{layer}"

    def __getitem__(self, item: str | tuple[str, int]) -> torch.Tensor:
        key = self.key(*item) if isinstance(item, tuple) else item
        if key not in self._store:
            raise KeyError(f"cache: no activation {item!r}; available: {sorted(self._store)}")
        return self._store[key]

    def __contains__(self, item: object) -> bool:
        key = self.key(*item) if isinstance(item, tuple) else item
        return key in self._store

    def __iter__(self) -> Iterator[str]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def keys(self) -> list[str]:
        """Stored keys."""
        return list(self._store)


def _as_ids(name: str, tokens: object, device: torch.device | None) -> torch.Tensor:
    """``tokens`` as an integer tensor, or a typed error naming ``name``."""
    if isinstance(tokens, (bytes, bytearray)) or tokens is None:
        raise ArgumentTypeError(f"{name}: expected token ids or a text, got {type(tokens).__name__}")
    try:
        t = torch.as_tensor(tokens, device=device)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise ArgumentTypeError(f"{name}: expected token ids (ints) or a text, got {type(tokens).__name__} ({exc})") from None
    if t.numel() == 0 and not isinstance(tokens, torch.Tensor):
        t = t.long()  # an empty list has no dtype of its own
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ArgumentTypeError(f"{name}: expected integer token ids, got dtype {t.dtype}")
    return t


def _load_tokenizer(root: Path, cfg: ModelConfig) -> TokenizerLike | None:
    """The tokenizer saved beside a model (``tokenizer.json`` or ``vocab.json``), or ``None``."""
    if (root / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            raw = Tokenizer.from_file(str(root / "tokenizer.json"))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed files
            raise ArgumentError(f"path: {root / 'tokenizer.json'} is not a valid tokenizers file ({exc})") from None
        bos = raw.id_to_token(cfg.bos_token_id) if cfg.bos_token_id is not None else None
        return FastTokenizer(raw, bos_token=bos)
    if (root / "vocab.json").is_file():
        try:
            vocab = json.loads((root / "vocab.json").read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ArgumentError(f"path: {root / 'vocab.json'} is not valid JSON ({exc})") from None
        if not isinstance(vocab, list) or not all(isinstance(v, str) for v in vocab):
            raise ArgumentError(f"path: {root / 'vocab.json'} must hold a JSON list of token strings, got {type(vocab).__name__}")
        return VocabTokenizer(vocab, bos_token_id=cfg.bos_token_id)
    return None


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _activation(name: str, x: torch.Tensor) -> torch.Tensor:
    if name == "gelu_new" or name == "gelu_fast":
        return _gelu_new(x)
    if name == "gelu":
        return nn.functional.gelu(x)
    if name == "relu":
        return torch.relu(x)
    if name == "silu":
        return nn.functional.silu(x)
    raise UnsupportedArchitectureError(f"cfg.act_fn: unsupported activation {name!r}")


def _rotary(x: torch.Tensor, rotary_dim: int, base: float) -> torch.Tensor:
    """GPT-NeoX rotate-half rotary embedding of ``x [batch, pos, head, d_head]``."""
    n_pos = x.shape[1]
    # float32 angles, as Hugging Face and TransformerLens compute them; float64 for float64 models.
    angle_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, device=x.device, dtype=angle_dtype) / rotary_dim))
    angles = torch.arange(n_pos, device=x.device, dtype=angle_dtype)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos()[None, :, None, :].to(x.dtype), angles.sin()[None, :, None, :].to(x.dtype)
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    half = rotary_dim // 2
    rotated = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    return torch.cat([rot * cos + rotated * sin, rest], dim=-1)


class CircuitModel(nn.Module):
    """A transformer in the canonical form of the paper (row vectors, per-head weights).

    Parameters
    ----------
    cfg
        Shape and architecture.
    weights
        Tensors named as in the module docstring; validated for presence, shape
        and finiteness (a typed error names the offending tensor).
    tokenizer
        Anything satisfying :class:`~circuitwidgets.tokenizer.TokenizerLike`;
        ``None`` gives tokens named ``<id>``.
    name
        Display name (used in views and reports).
    """

    cfg: ModelConfig

    def __init__(
        self,
        cfg: ModelConfig,
        weights: dict[str, torch.Tensor],
        tokenizer: TokenizerLike | None = None,
        name: str = "model",
    ) -> None:
        super().__init__()
        if not isinstance(cfg, ModelConfig):
            raise ArgumentTypeError(f"cfg: expected a ModelConfig, got {type(cfg).__name__}")
        validate_weights(cfg, weights)
        self.cfg = cfg
        self.name = name
        for key, tensor in weights.items():
            # Direct assignment: the typed properties below shadow these names,
            # which register_buffer would refuse.
            self._buffers[key] = tensor.detach()
        if tokenizer is not None and not isinstance(tokenizer, TokenizerLike):
            raise ArgumentTypeError(
                f"tokenizer: expected an object with vocab_size, bos_token_id, encode and token_str "
                f"(circuitwidgets.tokenizer.TokenizerLike), got {type(tokenizer).__name__}"
            )
        if not isinstance(name, str):
            raise ArgumentTypeError(f"name: expected a str, got {type(name).__name__}")
        self.tokenizer: TokenizerLike = tokenizer if tokenizer is not None else VocabTokenizer.numbered(cfg.d_vocab)
        vocab_size = self.tokenizer.vocab_size
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise ArgumentTypeError(f"tokenizer: expected an int vocab_size, got {vocab_size!r}")
        bos = self.tokenizer.bos_token_id
        if bos is not None and (isinstance(bos, bool) or not isinstance(bos, int) or not 0 <= bos < cfg.d_vocab):
            raise ArgumentError(f"tokenizer: expected bos_token_id None or an int in [0, {cfg.d_vocab}), got {bos!r}")
        if self.tokenizer.vocab_size > cfg.d_vocab:
            raise ShapeError(
                f"tokenizer: vocabulary of {self.tokenizer.vocab_size} tokens does not fit the model's d_vocab={cfg.d_vocab}"
            )

    # ------------------------------------------------------------------ weights
    def weight(self, name: str) -> torch.Tensor | None:
        """The tensor ``name`` or ``None`` when the model does not have it (e.g. biases)."""
        value = self._buffers.get(name)
        return value

    def weights(self) -> dict[str, torch.Tensor]:
        """All canonical tensors by name."""
        return {k: v for k, v in self._buffers.items() if v is not None}

    @property
    def W_E(self) -> torch.Tensor:  # noqa: N802 — the paper's name
        """Token embedding ``[d_vocab, d_model]``."""
        return self._buffers["W_E"]  # type: ignore[return-value]

    @property
    def W_U(self) -> torch.Tensor:  # noqa: N802
        """Unembedding ``[d_model, d_vocab]``."""
        return self._buffers["W_U"]  # type: ignore[return-value]

    @property
    def W_Q(self) -> torch.Tensor:  # noqa: N802
        """Queries ``[n_layers, n_heads, d_model, d_head]``."""
        return self._buffers["W_Q"]  # type: ignore[return-value]

    @property
    def W_K(self) -> torch.Tensor:  # noqa: N802
        """Keys ``[n_layers, n_heads, d_model, d_head]``."""
        return self._buffers["W_K"]  # type: ignore[return-value]

    @property
    def W_V(self) -> torch.Tensor:  # noqa: N802
        """Values ``[n_layers, n_heads, d_model, d_head]``."""
        return self._buffers["W_V"]  # type: ignore[return-value]

    @property
    def W_O(self) -> torch.Tensor:  # noqa: N802
        """Outputs ``[n_layers, n_heads, d_head, d_model]``."""
        return self._buffers["W_O"]  # type: ignore[return-value]

    @property
    def W_pos(self) -> torch.Tensor | None:  # noqa: N802
        """Positions ``[n_ctx, d_model]`` (``None`` for rotary or no positions)."""
        return self._buffers.get("W_pos")

    @property
    def device(self) -> torch.device:
        """Device of the weights."""
        return self.W_E.device

    @property
    def dtype(self) -> torch.dtype:
        """Dtype of the weights."""
        return self.W_E.dtype

    # ----------------------------------------------------------------- tokens
    def to_tokens(self, text: str | Sequence[str], prepend_bos: bool = True) -> torch.Tensor:
        """Token ids ``[batch, pos]`` of one text or a list of equal-length texts."""
        if not isinstance(text, (str, list, tuple)):
            raise ArgumentTypeError(f"text: expected a str or a non-empty list of str, got {type(text).__name__}")
        texts = [text] if isinstance(text, str) else list(text)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ArgumentTypeError(f"text: expected a str or a non-empty list of str, got {type(text).__name__}")
        rows = [self.tokenizer.encode(t) for t in texts]
        bos = self.tokenizer.bos_token_id
        if prepend_bos and bos is not None:
            rows = [[bos, *r] for r in rows]
        if len({len(r) for r in rows}) != 1:
            raise ShapeError(f"text: texts tokenise to different lengths {[len(r) for r in rows]}; pass them one at a time")
        if not rows[0]:
            raise ArgumentError("text: expected at least one token, got an empty text")
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def to_str_tokens(self, text_or_tokens: str | torch.Tensor | Sequence[int], prepend_bos: bool = True) -> list[str]:
        """Display strings of each token (untrusted text: render it as text)."""
        if isinstance(text_or_tokens, str):
            ids = self.to_tokens(text_or_tokens, prepend_bos=prepend_bos)[0].tolist()
        else:
            t = _as_ids("text_or_tokens", text_or_tokens, None)
            if t.ndim == 2 and t.shape[0] == 1:
                t = t[0]
            if t.ndim != 1:
                raise ShapeError(f"text_or_tokens: expected [pos] or [1, pos] token ids, got shape {tuple(t.shape)}")
            if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.cfg.d_vocab):
                raise ArgumentError(
                    f"text_or_tokens: expected ids in [0, {self.cfg.d_vocab}), got range [{int(t.min())}, {int(t.max())}]"
                )
            ids = t.tolist()
        return [self.tokenizer.token_str(int(i)) for i in ids]

    def _check_tokens(self, tokens: torch.Tensor | Sequence[int] | str) -> torch.Tensor:
        if isinstance(tokens, str):
            return self.to_tokens(tokens)
        t = _as_ids("tokens", tokens, self.device)
        if t.ndim == 1:
            t = t[None]
        if t.ndim != 2:
            raise ShapeError(f"tokens: expected [batch, pos] token ids, got shape {tuple(t.shape)}")
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            raise ArgumentTypeError(f"tokens: expected integer token ids, got dtype {t.dtype}")
        if t.shape[1] == 0:
            raise ShapeError("tokens: expected at least one position, got 0")
        if t.shape[1] > self.cfg.n_ctx and self.cfg.positional_embedding_type in ("shortformer", "standard"):
            raise ShapeError(f"tokens: expected at most n_ctx={self.cfg.n_ctx} positions, got {t.shape[1]}")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.cfg.d_vocab):
            raise ArgumentError(f"tokens: expected ids in [0, {self.cfg.d_vocab}), got range [{int(t.min())}, {int(t.max())}]")
        return t.long()

    # ---------------------------------------------------------------- forward
    def _normalize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cfg.normalization == "none":
            return x, torch.ones_like(x[..., :1])
        x = x - x.mean(-1, keepdim=True)
        scale = (x.pow(2).mean(-1, keepdim=True) + self.cfg.ln_eps).sqrt()
        return x / scale, scale

    def forward(self, tokens: torch.Tensor | Sequence[int] | str) -> torch.Tensor:
        """Logits ``[batch, pos, d_vocab]``."""
        logits, _ = self.run_with_cache(tokens, cache=False)
        return logits

    @torch.no_grad()
    def run_with_cache(
        self,
        tokens: torch.Tensor | Sequence[int] | str,
        *,
        patterns: Sequence[torch.Tensor | None] | None = None,
        head_results: Sequence[torch.Tensor | None] | None = None,
        names: Sequence[str] | None = None,
        cache: bool = True,
        memory_budget: int | None = None,
    ) -> tuple[torch.Tensor, ActivationCache]:
        """Run the model and return ``(logits, cache)``.

        Parameters
        ----------
        tokens
            ``[batch, pos]`` ids (or ``[pos]``, or a text); one position works (its
            pattern is ``[[1]]``), none is a :class:`ShapeError`.
        patterns
            Per layer, a frozen attention pattern ``[batch, n_heads, dest, src]``
            used instead of the computed one (``None`` entries compute it).
        head_results
            Per layer, ``[batch, pos, n_heads, d_model]`` written to the residual
            stream instead of each head's computed output ``z W_O`` (``b_O`` is still
            added). The cache still records the computed ``result``: the paper's
            term-importance algorithm feeds one run's computed outputs into the next.
        names
            Activation names to keep (default all); see :class:`ActivationCache`.
        cache
            ``False`` keeps nothing (a plain forward pass).
        memory_budget
            Bytes the run may hold at once (default :data:`FORWARD_MEMORY_BUDGET`):
            the logits, the kept activations and one layer's working tensors.
            A larger estimate raises :class:`MemoryBudgetError` before anything
            is computed (pass fewer sequences, fewer ``names``, or a larger budget).
        """
        cfg = self.cfg
        t = self._check_tokens(tokens)
        batch, n_pos = t.shape
        store: dict[str, torch.Tensor] = {}
        if names is not None and (isinstance(names, str) or not all(isinstance(n, str) for n in names)):
            raise ArgumentTypeError(f"names: expected a list of activation names, got {names!r:.80}")
        keep = set(names) if names is not None else None
        budget = FORWARD_MEMORY_BUDGET if memory_budget is None else memory_budget
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ArgumentTypeError(f"memory_budget: expected a positive int (bytes) or None, got {memory_budget!r}")
        needed = self.forward_bytes(batch, n_pos, names=keep if cache else set())
        if needed > budget:
            raise MemoryBudgetError(
                f"tokens: a forward pass on [batch={batch}, pos={n_pos}] {'keeping ' + (str(sorted(keep)) if keep is not None else 'every activation') if cache else 'without a cache'} "
                f"needs about {needed:,} bytes ({needed / 2**30:.2f} GiB), more than memory_budget={budget:,} bytes; "
                "pass fewer sequences, keep fewer activations with names=[...], or raise memory_budget"
            )

        def record(name: str, layer: int | None, value: torch.Tensor) -> None:
            if cache and (keep is None or name in keep):
                store[ActivationCache.key(name, layer)] = value

        self._check_overrides("patterns", patterns, (batch, cfg.n_heads, n_pos, n_pos))
        self._check_overrides("head_results", head_results, (batch, n_pos, cfg.n_heads, cfg.d_model))

        resid = self.W_E[t]
        record("embed", None, resid)
        pos = self.W_pos[:n_pos][None] if self.W_pos is not None else None
        if pos is not None:
            record("pos_embed", None, pos.expand(batch, -1, -1))
        if cfg.positional_embedding_type == "standard":
            assert pos is not None
            resid = resid + pos
        for layer in range(cfg.n_layers):
            record("resid_pre", layer, resid)
            frozen = patterns[layer] if patterns is not None else None
            replaced = head_results[layer] if head_results is not None else None
            attn_out = self._attention(layer, resid, pos, frozen, replaced, record)
            if cfg.has_mlp and cfg.parallel_attn_mlp:
                mlp_out = self._mlp(layer, resid, record)
                resid = resid + attn_out + mlp_out
            else:
                resid = resid + attn_out
                if cfg.has_mlp:
                    record("resid_mid", layer, resid)
                    resid = resid + self._mlp(layer, resid, record)
            record("resid_post", layer, resid)
        record("resid_final", None, resid)
        final, _ = self._normalize(resid)
        logits = final @ self.W_U
        b_U = self.weight("b_U")
        if b_U is not None:
            logits = logits + b_U
        return logits, ActivationCache(store)

    def forward_bytes(self, batch: int, n_pos: int, names: set[str] | None = None) -> int:
        """Estimated peak bytes of :meth:`run_with_cache` on ``[batch, n_pos]`` tokens keeping ``names`` (all when ``None``).

        Counts the logits, the kept activations of every layer and one layer's
        working tensors (scores, pattern, q/k/v/z, head results, MLP hidden), in
        the weights' dtype. A lower bound on the true peak, within a small factor.
        """
        cfg = self.cfg
        b, p, H, dh, d = batch, n_pos, cfg.n_heads, cfg.d_head, cfg.d_model
        per_layer = {
            "q": b * p * H * dh, "k": b * p * H * dh, "v": b * p * H * dh, "z": b * p * H * dh,
            "attn_scores": b * H * p * p, "pattern": b * H * p * p, "result": b * p * H * d,
            "scale": b * p, "attn_out": b * p * d, "resid_pre": b * p * d, "resid_post": b * p * d,
            "resid_mid": b * p * d if cfg.has_mlp else 0, "mlp_out": b * p * d if cfg.has_mlp else 0,
        }
        once = {"embed": b * p * d, "pos_embed": b * p * d, "resid_final": b * p * d}
        kept = sum(v * cfg.n_layers for k, v in per_layer.items() if names is None or k in names)
        kept += sum(v for k, v in once.items() if names is None or k in names)
        working = sum(per_layer.values()) + b * p * (cfg.d_mlp or 0) + 2 * b * p * d
        logits = b * p * cfg.d_vocab
        return int((kept + working + logits) * self.W_E.element_size())

    def _check_overrides(self, arg: str, values: Sequence[torch.Tensor | None] | None, shape: tuple[int, ...]) -> None:
        if values is None:
            return
        if isinstance(values, torch.Tensor) or not isinstance(values, Sequence):
            raise ArgumentTypeError(f"{arg}: expected a list with one tensor (or None) per layer, got {type(values).__name__}")
        if len(values) != self.cfg.n_layers:
            raise ShapeError(f"{arg}: expected one entry per layer ({self.cfg.n_layers}), got {len(values)}")
        for layer, value in enumerate(values):
            if value is None:
                continue
            if not isinstance(value, torch.Tensor) or not value.is_floating_point():
                raise ArgumentTypeError(f"{arg}[{layer}]: expected a floating-point torch.Tensor or None, got {type(value).__name__}")
            if tuple(value.shape) != shape:
                raise ShapeError(f"{arg}[{layer}]: expected shape {shape}, got {tuple(value.shape)}")
            if not bool(torch.isfinite(value).all()):
                raise NonFiniteError(f"{arg}[{layer}]: expected finite values, got NaN or infinite entries")

    def _attention(
        self,
        layer: int,
        resid: torch.Tensor,
        pos: torch.Tensor | None,
        frozen: torch.Tensor | None,
        replaced: torch.Tensor | None,
        record: Any,
    ) -> torch.Tensor:
        cfg = self.cfg
        x, scale = self._normalize(resid)
        record("scale", layer, scale)
        qk_in = x + pos if cfg.positional_embedding_type == "shortformer" and pos is not None else x
        q = torch.einsum("bpd,hde->bphe", qk_in, self.W_Q[layer])
        k = torch.einsum("bpd,hde->bphe", qk_in, self.W_K[layer])
        v = torch.einsum("bpd,hde->bphe", x, self.W_V[layer])
        for name, tensor in (("b_Q", q), ("b_K", k), ("b_V", v)):
            bias = self.weight(name)
            if bias is not None:
                tensor += bias[layer]
        if cfg.positional_embedding_type == "rotary":
            rotary_dim = cfg.rotary_dim or cfg.d_head
            q, k = _rotary(q, rotary_dim, cfg.rotary_base), _rotary(k, rotary_dim, cfg.rotary_base)
        record("q", layer, q)
        record("k", layer, k)
        record("v", layer, v)
        if frozen is None:
            scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / cfg.scale
            n_pos = resid.shape[1]
            mask = torch.ones(n_pos, n_pos, dtype=torch.bool, device=resid.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
            record("attn_scores", layer, scores)
            pattern = scores.softmax(dim=-1)
        else:
            pattern = frozen.to(v.dtype)
        record("pattern", layer, pattern)
        z = torch.einsum("bhqk,bkhe->bqhe", pattern, v)
        record("z", layer, z)
        result = torch.einsum("bqhe,hed->bqhd", z, self.W_O[layer])
        record("result", layer, result)
        written = replaced.to(result.dtype) if replaced is not None else result
        out = written.sum(dim=2)
        b_O = self.weight("b_O")
        if b_O is not None:
            out = out + b_O[layer]
        record("attn_out", layer, out)
        return out

    def _mlp(self, layer: int, resid: torch.Tensor, record: Any) -> torch.Tensor:
        cfg = self.cfg
        assert cfg.act_fn is not None
        x, _ = self._normalize(resid)
        pre = x @ self._buffers["W_in"][layer]  # type: ignore[index]
        b_in = self.weight("b_in")
        if b_in is not None:
            pre = pre + b_in[layer]
        out = _activation(cfg.act_fn, pre) @ self._buffers["W_out"][layer]  # type: ignore[index]
        b_out = self.weight("b_out")
        if b_out is not None:
            out = out + b_out[layer]
        record("mlp_out", layer, out)
        return out

    # -------------------------------------------------------------- save/load
    def save(self, path: str | Path) -> None:
        """Write ``model.safetensors``, ``config.json`` and (when it has one) ``tokenizer.json`` into a directory."""
        from safetensors.torch import save_file

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.weights().items()}, str(out / "model.safetensors"))
        (out / "config.json").write_text(json.dumps({**self.cfg.to_dict(), "name": self.name}, indent=2))
        if isinstance(self.tokenizer, FastTokenizer):
            self.tokenizer.save(out / "tokenizer.json")
        elif isinstance(self.tokenizer, HFTokenizer) and getattr(self.tokenizer.tokenizer, "backend_tokenizer", None):
            # A fast Hugging Face tokenizer is a ``tokenizers.Tokenizer`` underneath; keep that (JSON).
            self.tokenizer.tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
        elif isinstance(self.tokenizer, VocabTokenizer):
            (out / "vocab.json").write_text(json.dumps(self.tokenizer.vocab))

    @classmethod
    def load(cls, path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> CircuitModel:
        """Read a directory written by :meth:`save` (safetensors only; nothing is unpickled)."""
        from safetensors.torch import load_file

        if not isinstance(path, (str, Path)) or (isinstance(path, str) and "\x00" in path):
            raise ArgumentTypeError(f"path: expected a directory path (str or Path), got {path!r:.80}")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ArgumentTypeError(f"dtype: expected a floating-point torch.dtype, got {dtype!r}")
        try:
            device = torch.device(device)
        except (TypeError, RuntimeError, ValueError) as exc:
            raise ArgumentError(f"device: expected a torch device such as 'cpu' or 'cuda:0', got {device!r} ({exc})") from None
        root = Path(path)
        if not (root / "model.safetensors").is_file():
            pickles = sorted(p.name for p in root.glob("*") if p.suffix in _PICKLE_SUFFIXES) if root.is_dir() else []
            if pickles:
                raise ArgumentError(
                    f"path: {root} holds pickled weights {pickles} and no model.safetensors; circuitwidgets never "
                    "unpickles files (a pickle can run code). Convert the weights to safetensors, or load the model "
                    "with its own library and pass it to circuitwidgets.from_hf / from_transformer_lens"
                )
            raise ArgumentError(f"path: expected a model directory containing model.safetensors, got {root}")
        if not (root / "config.json").is_file():
            raise ArgumentError(f"path: expected a model directory containing config.json, got {root}")
        try:
            config = json.loads((root / "config.json").read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ArgumentError(f"path: {root / 'config.json'} is not valid JSON ({exc})") from None
        if not isinstance(config, dict):
            raise ArgumentError(f"path: {root / 'config.json'} must hold a JSON object, got {type(config).__name__}")
        try:
            cfg = ModelConfig.from_dict(config)
        except (ArgumentError, ArgumentTypeError) as exc:
            raise type(exc)(f"path: {root / 'config.json'} does not describe a model: {exc}") from None
        try:
            stored = load_file(str(root / "model.safetensors"))
        except Exception as exc:  # safetensors raises its own SafetensorError (and OSError)
            raise ArgumentError(f"path: {root / 'model.safetensors'} is not a valid safetensors file ({exc})") from None
        try:
            weights = {k: v.to(dtype=dtype, device=device) for k, v in stored.items()}
        except (RuntimeError, AssertionError) as exc:  # an unavailable device (no CUDA build, no such GPU)
            raise ArgumentError(f"device: cannot place the weights on {device} ({exc})") from None
        tokenizer = _load_tokenizer(root, cfg)
        return cls(cfg, weights, tokenizer=tokenizer, name=str(config.get("name", root.name)))

    def __repr__(self) -> str:
        c = self.cfg
        return (
            f"CircuitModel({self.name!r}, n_layers={c.n_layers}, n_heads={c.n_heads}, d_model={c.d_model}, "
            f"d_head={c.d_head}, d_vocab={c.d_vocab}, n_ctx={c.n_ctx}, positions={c.positional_embedding_type!r}, "
            f"mlp={c.has_mlp})"
        )
