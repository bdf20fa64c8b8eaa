"""A model that runs through nnsight, locally or on NDIF: the handle ``cw.from_nnsight(lm, remote=False)``.

nnsight (``pip install circuitwidgets[nnsight]``) builds a Hugging Face model on the
meta device and runs traces of it where the weights are: here, or on NDIF with
``remote=True``, where only the values a trace ``.save()``\\ s come back. The handle
names the model's module tree (:data:`LAYOUTS`: where each family keeps its blocks,
attention, MLP, output norms), runs traces with the same ``remote`` flag each time,
turns a server's failure into :class:`~circuitwidgets.errors.RemoteRunError`, and
reads weights for weight-space analyses from the checkpoint's safetensors shards
(:meth:`NNsightModel.weights`). The causal toolkit runs it in
:mod:`circuitwidgets.causal.nnsight_backend`; the attention views' data
(:meth:`NNsightModel.attention_qk`, :meth:`NNsightModel.attention_patterns`) are here.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from circuitwidgets.errors import (
    ArgumentError,
    ArgumentTypeError,
    NotCoveredError,
    RemoteRunError,
    RemoteWeightsError,
    ShapeError,
)
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.tokens import as_ids
from circuitwidgets.sources import nnsight_remote
from circuitwidgets.sources.nnsight_remote import DEFAULT_REMOTE_TIMEOUT


@dataclass(frozen=True)
class Layout:
    """Where a family keeps what our sites read (dotted paths from the nnsight model's root, or a block's)."""

    blocks: str
    attn: str
    o_proj: str
    mlp: str
    final_norm: str
    attn_out_norm: str | None = None  # an output norm after attention (Gemma 2): ``attn_out`` is its output
    mlp_out_norm: str | None = None
    down: str = "down_proj"  # the MLP's output projection (its input is ``mlp_post``), under ``mlp``
    up: str = "gate_proj"  # the MLP's first projection whose output is ``mlp_pre`` (a gated MLP's gate), under ``mlp``
    pos_embed: str | None = None  # learned positions (GPT-2), added to the token embedding before block 0
    norm: str = "rms"  # "layer" (LayerNorm: centred, weight and bias), "rms" (weight), "rms_offset" (1 + weight)
    conv1d: bool = False  # projections store ``[d_in, d_out]`` (GPT-2's Conv1D), not ``[d_out, d_in]``
    attn_norm: str = "input_layernorm"  # the norm before attention, under a block
    mlp_norm: str = "post_attention_layernorm"  # the norm before the MLP (its input is ``resid_mid``), under a block


_LLAMA = Layout("model.layers", "self_attn", "o_proj", "mlp", "model.norm")
#: The families the nnsight path covers, by Hugging Face class.
LAYOUTS: dict[str, Layout] = {
    "LlamaForCausalLM": _LLAMA,
    "MistralForCausalLM": _LLAMA,
    "Qwen2ForCausalLM": _LLAMA,
    "Gemma2ForCausalLM": Layout(
        "model.layers",
        "self_attn",
        "o_proj",
        "mlp",
        "model.norm",
        "post_attention_layernorm",
        "post_feedforward_layernorm",
        norm="rms_offset",
        mlp_norm="pre_feedforward_layernorm",
    ),
    "GPT2LMHeadModel": Layout(
        "transformer.h",
        "attn",
        "c_proj",
        "mlp",
        "transformer.ln_f",
        down="c_proj",
        up="c_fc",
        pos_embed="transformer.wpe",
        norm="layer",
        conv1d=True,
        attn_norm="ln_1",
        mlp_norm="ln_2",
    ),
}


def _walk(envoy: Any, path: str) -> Any:
    for part in path.split("."):
        envoy = getattr(envoy, part)
    return envoy


@dataclass
class NNsightModel:
    """An ``nnsight`` language model as circuitwidgets runs it (build it with :func:`from_nnsight`).

    Attributes
    ----------
    lm
        the nnsight model (``nnsight.LanguageModel`` / ``TransformersModel``).
    remote
        passed to every trace: ``False`` (here), ``True`` (NDIF) or ``"local"``
        (nnsight's simulation of the remote path: serialised, deserialised, run here).
    layout
        the family's module tree (:data:`LAYOUTS`).
    weights_path
        a local checkpoint directory (safetensors shards) for weight-space analyses.
    host, timeout
        the server (``None``: nnsight's configured NDIF host) and the seconds one
        remote trace may take, connect to result (``DEFAULT_REMOTE_TIMEOUT``, 600 s).
    """

    lm: Any
    remote: bool | str
    layout: Layout
    architecture: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int
    d_vocab: int
    name: str
    weights_path: str | None = None
    host: str | None = None
    timeout: float = DEFAULT_REMOTE_TIMEOUT

    # ---------------------------------------------------------------- modules (inside a trace)
    def block(self, layer: int) -> Any:
        """Block ``layer``'s envoy."""
        return _walk(self.lm, self.layout.blocks)[layer]

    def module(self, layer: int, path: str) -> Any:
        """A module of block ``layer`` by dotted path."""
        return _walk(self.block(layer), path)

    def walk(self, path: str) -> Any:
        """The envoy at a dotted path from the model's root."""
        return _walk(self.lm, path)

    @property
    def d_mlp(self) -> int:
        """Neurons per MLP: the width of the down projection's input (read from the local, possibly meta, module)."""
        weight = self.module(0, f"{self.layout.mlp}.{self.layout.down}")._module.weight
        return int(weight.shape[0] if self.layout.conv1d else weight.shape[1])

    def final_norm(self) -> Any:
        """The final norm's envoy (its input is the stream after the last block)."""
        return _walk(self.lm, self.layout.final_norm)

    def attention_call(self, layer: int) -> Any:
        """The attention function's call inside block ``layer``'s attention: inputs ``(module, q, k, v, mask)``
        and ``scaling``/``softcap``/``sliding_window``, queries and keys as attention sees them (after rotary, QK-norm)."""
        source = self.module(layer, self.layout.attn).source
        calls = [n for n in source.names if n.startswith("attention_interface_")]
        if not calls:  # pragma: no cover - every covered family calls it
            raise NotCoveredError(
                f"model: {self.architecture}'s attention has no attention_interface call to read q, k"
            )
        return getattr(source, calls[-1])

    # ---------------------------------------------------------------- runs
    @contextlib.contextmanager
    def remote_errors(self, what: str) -> Iterator[None]:
        """Around every trace: one trace of the model at a time (another thread's call waits its turn, since nnsight
        refuses to run a model that is already running), and a failed remote trace as :class:`RemoteRunError`."""
        from nnsight.intervention.backends.remote import RemoteError

        with _lock_of(self.lm._module):
            try:
                yield
            except RemoteRunError as error:
                raise RemoteRunError(f"{what}: {error}") from error
            except RemoteError as error:
                raise RemoteRunError(f"{what}: the nnsight trace failed on the server: {error}") from error

    def trace(self, *inputs: Any) -> Any:
        """``lm.trace(*inputs)`` here, or remotely through :mod:`~circuitwidgets.sources.nnsight_remote` (a deadline of
        ``timeout`` seconds, typed failures); register circuitwidgets to ship by value when not running here."""
        if self.remote:
            import nnsight

            nnsight.register("circuitwidgets")
            if self.remote == "local":
                return self.lm.trace(*inputs, remote="local")
            return self.lm.trace(*inputs, backend=nnsight_remote.backend(self.lm, self.host, self.timeout))
        return self.lm.trace(*inputs)

    # ---------------------------------------------------------------- tokens
    def check_tokens(self, tokens: object, name: str = "tokens") -> torch.Tensor:
        """``[batch, pos]`` ids (a text is tokenised by the model's tokenizer), checked; errors name ``name``."""
        if isinstance(tokens, str):
            tokenizer = getattr(self.lm, "tokenizer", None)
            if tokenizer is None:
                raise ArgumentTypeError(f"{name}: the nnsight model has no tokenizer; pass token ids [batch, pos]")
            tokens = tokenizer(tokens, return_tensors="pt")["input_ids"]
        t = as_ids(name, tokens, None)
        if t.ndim == 1:
            t = t[None]
        if t.ndim != 2 or t.shape[1] == 0:
            raise ShapeError(f"{name}: expected [batch, pos] token ids with pos ≥ 1, got shape {tuple(t.shape)}")
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            raise ArgumentTypeError(f"{name}: expected integer token ids, got dtype {t.dtype}")
        if int(t.min()) < 0 or int(t.max()) >= self.d_vocab:
            raise ArgumentError(
                f"{name}: expected ids in [0, {self.d_vocab}), got range [{int(t.min())}, {int(t.max())}]"
            )
        return t.long()

    def to_str_tokens(self, ids: torch.Tensor) -> list[str]:
        """Display strings of ``ids [pos]`` (untrusted text)."""
        tokenizer = getattr(self.lm, "tokenizer", None)
        if tokenizer is None:
            return [str(int(i)) for i in ids]
        return [str(s) for s in tokenizer.convert_ids_to_tokens([int(i) for i in ids])]

    # ---------------------------------------------------------------- weights
    def weights(self) -> CircuitModel:
        """The model's weights for weight-space analyses (OV/QK circuits, composition, eigenvalues): attention,
        norms and embeddings streamed from the checkpoint's safetensors shards (``from_hf(path, mlp=False)``).

        Raises :class:`~circuitwidgets.errors.RemoteWeightsError` where the weights are not on this machine.
        """
        from circuitwidgets.sources.huggingface import from_hf

        path = self.weights_path
        if path is None:
            candidate = getattr(self.lm, "repo_id", None)
            if isinstance(candidate, str) and candidate and (Path(candidate) / "config.json").is_file():
                path = candidate
        if path is not None:
            return from_hf(path, mlp=False, name=self.name)
        if not self.remote and not any(p.is_meta for p in self.lm._module.parameters()):
            return from_hf(self.lm._module, name=self.name)
        raise RemoteWeightsError(
            f"model: {self.name!r} runs remotely and its weights are not on this machine; weight-space analyses read "
            "them from the checkpoint's safetensors shards: download the shards (attention, norms and embeddings "
            "suffice) and pass cw.from_nnsight(lm, remote=True, weights='path/to/checkpoint'), or cw.from_hf(path, mlp=False)"
        )

    # ---------------------------------------------------------------- attention views' data
    def attention_qk(self, tokens: object) -> dict[str, Any]:
        """Queries and keys of one prompt as attention sees them, every layer, for
        ``AttentionPatterns.from_qk(**data)``: ``tokens``, ``q`` ``[L, H, N, d_head]``, ``k`` ``[L, H_kv, N, d_head]``,
        ``scale``, ``softcap``, ``sliding_window``. One trace; only q and k cross the network (``4 · L · (H + H_kv)
        · N · d_head`` bytes in float32), never an ``N × N`` pattern."""
        import nnsight

        t = self.check_tokens(tokens)
        if t.shape[0] != 1:
            raise ShapeError(f"tokens: expected one prompt, got {t.shape[0]}")
        with self.remote_errors("attention_qk"), self.trace(t):
            qs, ks, options = [], [], []
            for layer in range(self.n_layers):
                call = self.attention_call(layer)
                args, kwargs = call.inputs
                qs.append(args[1][0].float())
                ks.append(args[2][0].float())
                options.append([float(kwargs.get("scaling") or 0.0), float(kwargs.get("softcap") or 0.0),
                                float(kwargs.get("sliding_window") or 0)])  # fmt: skip
            q = nnsight.save(torch.stack(qs))
            k = nnsight.save(torch.stack(ks))
            opts = nnsight.save(torch.tensor(options))
        scaling, softcap, window = opts[:, 0].tolist(), opts[:, 1].tolist(), opts[:, 2].tolist()
        if len(set(scaling)) != 1 or len(set(softcap)) != 1:
            raise NotCoveredError("attention_qk: layers with different attention scales or soft-caps")
        return {
            "tokens": self.to_str_tokens(t[0]),
            "q": q.detach(),
            "k": k.detach(),
            "scale": 1.0 / scaling[0] if scaling[0] else None,
            "softcap": softcap[0] or None,
            "sliding_window": [int(w) or None for w in window],
        }

    def attention_patterns(self, tokens: object) -> dict[str, Any]:
        """Every layer's pattern ``[H, N, N]`` of one short prompt, for ``AttentionPatterns.from_arrays(**data)``
        (``tokens``, ``attention``): the probabilities eager attention returns. Long prompts: :meth:`attention_qk`."""
        t = self.check_tokens(tokens)
        if t.shape[0] != 1:
            raise ShapeError(f"tokens: expected one prompt, got {t.shape[0]}")
        implementation = getattr(self.lm._module.config, "_attn_implementation", None)
        if implementation != "eager":
            raise NotCoveredError(
                f"attention_patterns: attention {implementation!r} returns no probabilities; load the model with "
                "attn_implementation='eager', or use attention_qk (queries and keys) with AttentionPatterns.from_qk"
            )
        import nnsight

        with self.remote_errors("attention_patterns"), self.trace(t):
            patterns = nnsight.save(
                torch.stack(
                    [self.module(layer, self.layout.attn).output[1][0].float() for layer in range(self.n_layers)]
                )
            )
        return {"tokens": self.to_str_tokens(t[0]), "attention": [p for p in patterns.detach()]}


#: One lock per nnsight model (its torch module): traces of one model from several threads run one at a time.
_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _lock_of(module: Any) -> threading.RLock:
    with _LOCKS_GUARD:
        lock = _LOCKS.get(module)
        if lock is None:
            lock = _LOCKS[module] = threading.RLock()
        return lock


def _config_int(config: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def from_nnsight(
    lm: Any,
    remote: bool | str = False,
    *,
    weights: str | None = None,
    host: str | None = None,
    timeout: float = DEFAULT_REMOTE_TIMEOUT,
) -> NNsightModel:
    """A handle on an nnsight model that circuitwidgets' causal toolkit and attention data accept.

    Parameters
    ----------
    lm
        ``nnsight.LanguageModel`` (or ``TransformersModel``) of a covered family (:data:`LAYOUTS`).
    remote
        ``True``: every trace runs on NDIF (only saved values come back); ``"local"``:
        nnsight's local simulation of the remote path; ``False``: here.
    weights
        a local checkpoint directory for weight-space analyses (:meth:`NNsightModel.weights`).
    host
        the server of ``remote=True`` (default: nnsight's configured NDIF host, ``NDIF_HOST``).
    timeout
        seconds one remote trace may take from connecting to its result (default
        ``circuitwidgets.sources.nnsight_remote.DEFAULT_REMOTE_TIMEOUT``, 600 s);
        past it, or on any failure of the exchange, a :class:`RemoteRunError` names the host and the cause.
    """
    try:
        from nnsight import Envoy
    except ImportError as error:  # pragma: no cover - the extra is missing
        raise ArgumentTypeError("lm: nnsight is not installed: pip install 'circuitwidgets[nnsight]'") from error
    if not isinstance(lm, Envoy) or not hasattr(lm, "trace"):
        raise ArgumentTypeError(f"lm: expected an nnsight model (nnsight.LanguageModel), got {type(lm).__name__}")
    if not isinstance(remote, bool) and remote != "local":
        raise ArgumentError(f"remote: expected True, False or 'local', got {remote!r}")
    if "vllm" in type(lm).__module__.lower():
        raise NotCoveredError(
            "lm: nnsight's vLLM models give neither attention probabilities nor gradients and are not run by "
            "circuitwidgets; load the checkpoint with nnsight.LanguageModel (transformers) instead (docs/nnsight.md)"
        )
    module = lm._module
    architecture = type(module).__name__
    if architecture not in LAYOUTS:
        raise NotCoveredError(
            f"lm: the nnsight path covers {sorted(LAYOUTS)}, got {architecture}; "
            "run a supported model, or convert it with cw.from_hf for the native engine"
        )
    timeout = nnsight_remote.check_timeout(timeout)
    host = nnsight_remote.check_host(host)
    config = module.config
    d_model = _config_int(config, "hidden_size", "n_embd")
    n_heads = _config_int(config, "num_attention_heads", "n_head")
    n_layers = _config_int(config, "num_hidden_layers", "n_layer")
    vocab = _config_int(config, "vocab_size")
    for key, value in (("hidden_size", d_model), ("num_attention_heads", n_heads), ("num_hidden_layers", n_layers),
                       ("vocab_size", vocab)):  # fmt: skip
        if not value or value < 1:
            raise ArgumentError(f"lm: its config's {key} must be a positive int, got {getattr(config, key, None)!r}")
    assert d_model and n_heads and n_layers and vocab
    blocks = _walk(module, LAYOUTS[architecture].blocks)
    if len(blocks) != n_layers:
        raise ArgumentError(
            f"lm: its config declares num_hidden_layers={n_layers}, its module holds {len(blocks)} blocks "
            f"({LAYOUTS[architecture].blocks}); a handle needs them to agree"
        )
    n_kv = _config_int(config, "num_key_value_heads") or n_heads
    d_head = _config_int(config, "head_dim") or d_model // n_heads
    name = str(getattr(config, "name_or_path", "") or architecture)
    if weights is not None and not Path(weights).is_dir():
        raise ArgumentError(f"weights: expected a local checkpoint directory, got {weights!r}")
    return NNsightModel(
        lm, remote, LAYOUTS[architecture], architecture, n_layers, n_heads, n_kv, d_head, d_model, vocab, name, weights,
        host, timeout,
    )  # fmt: skip


__all__: Sequence[str] = ["LAYOUTS", "Layout", "NNsightModel", "from_nnsight"]
