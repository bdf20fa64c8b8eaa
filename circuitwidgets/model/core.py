"""``CircuitModel``: one canonical transformer for every analysis and view.

Conventions (DESIGN.md §3, as TransformerLens): row vectors, residual
``[batch, pos, d_model]``, per-head weights (names and shapes in
:mod:`circuitwidgets.model.weights`; architecture in
:mod:`circuitwidgets.model.config`).

Norms are folded (DESIGN.md §3a): each norm's weight and bias live inside the
weights that read its output. What the forward pass still computes is the
per-token scalar (``1/rms(x)``, or layer norm's centring and ``1/σ``), which
weight-space analyses leave out, as the paper's appendix does.

Two views of the weights. The properties ``W_Q``, ``W_K``, ``W_V``, ``W_O`` are
the weights of the weight-space analyses: with QK-norm and output-norm
multipliers folded in (``W_Q diag(q_norm)``, ``W_O diag(post_attn_norm)``), and
keys and values per key/value head (``[L, G, ...]``; :attr:`CircuitModel.kv_index`
maps query heads to them). The forward pass reads the stored tensors
(:meth:`CircuitModel.weight`) and applies those multipliers after the per-token
norms, so it computes exactly what the source does. Where layers multiply the
whole residual stream by a ``layer_scalar`` (Gemma 4), ``W_O`` of layer ``l`` is
also divided by ``c_l``, the product of the scalars of the layers before it:
the residual stream is then ``c_l`` times the embedding plus each earlier
output ``/ c_m``, and the factor ``c_l`` common to all of it is one more
per-token scale for the next norm (:attr:`CircuitModel.weight_space_exclusions`
lists what weight-space analyses leave out).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from circuitwidgets.errors import (
    ArgumentError,
    ArgumentTypeError,
    ShapeError,
)
from circuitwidgets.model.centering import centred_weights
from circuitwidgets.model.config import ModelConfig
from circuitwidgets.model.io import load_model, save_model
from circuitwidgets.model.rotary import default_frequencies
from circuitwidgets.model.run import Runner
from circuitwidgets.model.tokens import as_ids
from circuitwidgets.model.weights import validate_weights
from circuitwidgets.tokenizer import TokenizerLike, VocabTokenizer


class CircuitModel(Runner, nn.Module):
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
        self._analysis: dict[str, torch.Tensor] = {}
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
        """The stored tensor ``name`` (as the forward pass uses it), or ``None`` when the model does not have it."""
        return self._buffers.get(name)

    def weights(self) -> dict[str, torch.Tensor]:
        """All stored tensors by name."""
        return {k: v for k, v in self._buffers.items() if v is not None}

    def _apply(self, fn: Any, recurse: bool = True) -> CircuitModel:
        self._analysis = {}  # moved or cast: the folded views are recomputed from the new tensors
        return super()._apply(fn, recurse)  # type: ignore[no-any-return,no-untyped-call]

    def _folded(self, name: str, multiplier: str, dims: str, per_layer: torch.Tensor | None = None) -> torch.Tensor:
        """``name`` with ``multiplier`` (and a factor ``per_layer [L]``) folded in (cached), or the stored tensor."""
        stored = self._buffers[name]
        assert stored is not None
        factor = self._buffers.get(multiplier)
        if factor is None and per_layer is None:
            return stored
        if name not in self._analysis:
            out = torch.einsum(dims, stored, factor) if factor is not None else stored
            if per_layer is not None:
                out = out * per_layer.to(out.dtype).view(-1, *([1] * (out.ndim - 1)))
            self._analysis[name] = out.contiguous()
        return self._analysis[name]

    def _residual_scales(self) -> torch.Tensor | None:
        """``1 / c_l`` ``[L]`` with ``c_l`` the product of the ``layer_scalar`` of layers ``< l``; ``None`` when all are 1."""
        scalar = self._buffers.get("layer_scalar")
        if scalar is None or bool((scalar == 1).all()):
            return None
        before = torch.cat([scalar.new_ones(1, dtype=torch.float64), scalar.double().cumprod(0)[:-1]])
        return 1.0 / before

    @property
    def W_E(self) -> torch.Tensor:  # noqa: N802 — the paper's name
        """Token embedding ``[d_vocab, d_model]`` (embedding multipliers such as Gemma's ``√d_model`` folded in)."""
        return self._buffers["W_E"]  # type: ignore[return-value]

    @property
    def W_U(self) -> torch.Tensor:  # noqa: N802
        """Unembedding ``[d_model, d_vocab]`` (the final norm's weight folded in)."""
        return self._buffers["W_U"]  # type: ignore[return-value]

    @property
    def W_Q(self) -> torch.Tensor:  # noqa: N802
        """Queries ``[n_layers, n_heads, d_model, d_head]``, the QK-norm multiplier folded in."""
        return self._folded("W_Q", "q_norm", "lhde,lhe->lhde")

    @property
    def W_K(self) -> torch.Tensor:  # noqa: N802
        """Keys ``[n_layers, n_kv_heads, d_model, d_head]``, the QK-norm multiplier folded in; see :attr:`kv_index`."""
        return self._folded("W_K", "k_norm", "lgde,lge->lgde")

    @property
    def W_V(self) -> torch.Tensor:  # noqa: N802
        """Values ``[n_layers, n_kv_heads, d_model, d_head]``; see :attr:`kv_index`."""
        return self._buffers["W_V"]  # type: ignore[return-value]

    @property
    def W_O(self) -> torch.Tensor:  # noqa: N802
        """Outputs ``[n_layers, n_heads, d_head, d_model]``, the attention output norm's multiplier folded in.

        With per-layer residual scalars, layer ``l``'s is divided by their product
        over the layers before it (module docstring).
        """
        return self._folded("W_O", "post_attn_norm", "lhed,ld->lhed", self._residual_scales())

    @property
    def weight_space_exclusions(self) -> tuple[str, ...]:
        """What weight-space analyses (``W_QK``, ``W_OV``, composition, eigenvalues) leave out of this model, one phrase each.

        The forward pass computes all of it (:meth:`ModelConfig.weight_space_exclusions`).
        """
        return self.cfg.weight_space_exclusions()

    @property
    def W_pos(self) -> torch.Tensor | None:  # noqa: N802
        """Positions ``[n_ctx, d_model]`` (``None`` for rotary or no positions)."""
        return self._buffers.get("W_pos")

    @property
    def kv_index(self) -> torch.Tensor:
        """``[n_heads]``: the key/value head each query head reads (``h // (n_heads / n_kv_heads)``)."""
        return torch.arange(self.cfg.n_heads, device=self.device) // self.cfg.group_size

    def per_query_head(self, tensor: torch.Tensor) -> torch.Tensor:
        """A ``[n_layers, n_kv_heads, ...]`` tensor repeated to ``[n_layers, n_heads, ...]`` (a copy under GQA)."""
        return tensor if self.cfg.group_size == 1 else tensor.repeat_interleave(self.cfg.group_size, dim=1)

    def rotary_freq(self, layer: int) -> torch.Tensor | None:
        """Rotary inverse frequencies of ``layer`` ``[rotary_dim / 2]``, or ``None`` when it has no rotation."""
        if self.cfg.positional_embedding_type != "rotary":
            return None
        stored = self._buffers.get("rotary_freq")
        if stored is not None:
            freq = stored[layer]
            return freq if bool((freq != 0).any()) else None
        return default_frequencies(self.cfg.rotary_dim or self.cfg.d_head, self.cfg.rotary_base).to(self.device)

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
            raise ShapeError(
                f"text: texts tokenise to different lengths {[len(r) for r in rows]}; pass them one at a time"
            )
        if not rows[0]:
            raise ArgumentError("text: expected at least one token, got an empty text")
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def to_str_tokens(self, text_or_tokens: str | torch.Tensor | Sequence[int], prepend_bos: bool = True) -> list[str]:
        """Display strings of each token (untrusted text: render it as text)."""
        if isinstance(text_or_tokens, str):
            ids = self.to_tokens(text_or_tokens, prepend_bos=prepend_bos)[0].tolist()
        else:
            t = as_ids("text_or_tokens", text_or_tokens, None)
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
        t = as_ids("tokens", tokens, self.device)
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
            raise ArgumentError(
                f"tokens: expected ids in [0, {self.cfg.d_vocab}), got range [{int(t.min())}, {int(t.max())}]"
            )
        return t.long()

    def centered(self) -> CircuitModel:
        """A copy with TransformerLens's default centring (``center_writing_weights``, ``center_unembed``).

        Outputs are unchanged (log-probabilities and logit differences exactly;
        logits by a constant per position); what changes is how the residual
        stream splits between components, so attributions and composition scores
        equal TransformerLens's defaults. See ``circuitwidgets.model.centering``
        for what is refused and why.
        """
        weights = centred_weights(self.cfg, self.weights())
        return type(self)(self.cfg, weights, tokenizer=self.tokenizer, name=self.name)

    # -------------------------------------------------------------- save/load
    def save(self, path: str | Path) -> None:
        """Write ``model.safetensors``, ``config.json`` and (when it has one) ``tokenizer.json`` into a directory."""
        save_model(self, path)

    @classmethod
    def load(
        cls,
        path: str | Path,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        center: bool = False,
    ) -> CircuitModel:
        """Read a directory written by :meth:`save` (safetensors only; nothing is unpickled).

        ``center=True`` centres the weights as TransformerLens does by default (:meth:`centered`).
        """
        if not isinstance(center, bool):
            raise ArgumentTypeError(f"center: expected a bool, got {center!r}")
        cfg, weights, tokenizer, name = load_model(path, dtype=dtype, device=device)
        model = cls(cfg, weights, tokenizer=tokenizer, name=name)
        return model.centered() if center else model

    def __repr__(self) -> str:
        c = self.cfg
        return (
            f"CircuitModel({self.name!r}, n_layers={c.n_layers}, n_heads={c.n_heads}, d_model={c.d_model}, "
            f"d_head={c.d_head}, d_vocab={c.d_vocab}, n_ctx={c.n_ctx}, positions={c.positional_embedding_type!r}, "
            f"mlp={'absent' if c.mlp_weights_absent else c.has_mlp})"
        )
