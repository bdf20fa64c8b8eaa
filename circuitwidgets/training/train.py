"""``circuitwidgets train``: train the shipped attention-only models offline.

Deterministic given a seed (one CPU thread; batches are drawn from a generator
seeded by ``(seed, step)``, so a resumed run sees the same batches as an
unbroken one) and resumable from the last checkpoint. The learning rate is
constant after warm-up, so the checkpoint at step N is the model that
``--steps N`` would have produced; ``decay_steps`` anneals it (a cosine to
zero over the run's last steps), which a resumed run may add at its end.
"""

from __future__ import annotations

import json
import math
import pickle
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from tqdm import tqdm

from circuitwidgets._glibc import libc
from circuitwidgets.errors import ArgumentError
from circuitwidgets.training.batches import batch_at
from circuitwidgets.training.corpus import load_stdlib_corpus
from circuitwidgets.training.evaluate import direct_logit_attribution, head_scores, k_composition, val_losses
from circuitwidgets.training.tokenizer import BOS_TOKEN, encode_corpus, train_bpe
from circuitwidgets.training.transformer import ToyConfig, ToyTransformer


@dataclass
class TrainConfig:
    """Hyperparameters of one training run (defaults: the shipped two-layer model).

    ``d_mlp``, ``act_fn`` and ``norm`` add MLPs and LayerNorm (see
    :mod:`circuitwidgets.training.transformer`); their defaults keep the
    attention-only models and their training bit for bit.
    """

    n_layers: int = 2
    n_heads: int = 4
    d_model: int = 128
    d_head: int = 32
    n_ctx: int = 256
    vocab_size: int = 2048
    batch_size: int = 16
    steps: int = 8000
    lr: float = 1e-2
    warmup_steps: int = 100
    decay_steps: int = 0
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    seed: int = 0
    eval_every: int = 500
    checkpoint_every: int = 250
    threads: int = 1
    device: str = "cpu"
    d_mlp: int = 0
    act_fn: str = "gelu"
    norm: str = "none"
    extra: dict[str, str] = field(default_factory=dict)


#: Largest shipped model (its float16 weights, as :func:`export_model` writes them): the
#: package carries every shipped model, so a run that would not fit is refused up front.
MAX_MODEL_BYTES = 8 * 2**20


def exported_bytes(cfg: TrainConfig) -> int:
    """Bytes of the float16 weights :func:`export_model` writes for ``cfg`` (W_E, W_pos, W_Q/K/V/O, W_U;
    with MLPs and norms also ``W_in, W_out`` and the biases that folding creates)."""
    L, H, d, dh, V, n = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_head, cfg.vocab_size, cfg.n_ctx
    size = 2 * V * d + n * d + 4 * L * H * d * dh
    if cfg.d_mlp:
        size += L * (2 * d * cfg.d_mlp + cfg.d_mlp + d) + (2 * L * cfg.d_mlp if cfg.act_fn == "solu_ln" else 0)
    if cfg.norm != "none":
        size += L * (3 * H * dh + d) + V
    return 2 * size


def check_size_budget(cfg: TrainConfig, max_bytes: int = MAX_MODEL_BYTES) -> None:
    """Refuse, before any work, a configuration whose exported model would exceed ``max_bytes``."""
    size = exported_bytes(cfg)
    if size > max_bytes:
        raise ArgumentError(
            f"cfg: a model with n_layers={cfg.n_layers}, n_heads={cfg.n_heads}, d_model={cfg.d_model}, "
            f"d_head={cfg.d_head}, vocab_size={cfg.vocab_size} exports {size:,} bytes of float16 weights, more than "
            f"the budget of {max_bytes:,} bytes for a shipped model; shrink it, or pass --max-bytes to train it anyway"
        )


def _cached_corpus_tokens(cache: Path, vocab_size: int) -> tuple[Tokenizer, np.ndarray, np.ndarray]:
    """Tokenizer and token arrays (train, val), built once and cached under ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    tok_path = cache / "tokenizer.json"
    train_path, val_path = cache / "train_tokens.npy", cache / "val_tokens.npy"
    if tok_path.exists() and train_path.exists() and val_path.exists():
        return Tokenizer.from_file(str(tok_path)), np.load(train_path), np.load(val_path)
    corpus = load_stdlib_corpus()
    tokenizer = train_bpe(corpus.train, vocab_size=vocab_size)
    train_tokens = encode_corpus(tokenizer, corpus.train)
    val_tokens = encode_corpus(tokenizer, corpus.val)
    tokenizer.save(str(tok_path))
    np.save(train_path, train_tokens)
    np.save(val_path, val_tokens)
    meta = {
        "corpus": f"Python {platform.python_version()} standard library (*.py, site-packages excluded)",
        "corpus_root": str(corpus.root),
        "n_train_files": len(corpus.train),
        "n_val_files": len(corpus.val),
        "n_chars": corpus.n_chars,
        "n_train_tokens": int(train_tokens.size),
        "n_val_tokens": int(val_tokens.size),
    }
    (cache / "corpus.json").write_text(json.dumps(meta, indent=2))
    return tokenizer, train_tokens, val_tokens


def _lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def _save_checkpoint(ckpt: Path, model: ToyTransformer, opt: torch.optim.Optimizer, step: int) -> None:
    ckpt.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(ckpt / "model.tmp"))
    torch.save(opt.state_dict(), ckpt / "optim.tmp")
    (ckpt / "model.tmp").replace(ckpt / "model.safetensors")
    (ckpt / "optim.tmp").replace(ckpt / "optim.pt")
    (ckpt / "state.json").write_text(json.dumps({"step": step}))


def _load_optimizer_state(path: Path) -> dict[str, object]:
    """The optimizer state saved by :func:`_save_checkpoint`, read with ``torch.load(weights_only=True)``.

    Only tensors and plain containers are accepted: a pickle that would build
    any other object (and so could run code) is refused before anything runs.
    """
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ArgumentError(
            f"checkpoint: {path} is not a plain tensor checkpoint and was refused (read with weights_only=True, "
            f"nothing was run): {first[:200]}"
        ) from None
    if not isinstance(state, dict):
        raise ArgumentError(f"checkpoint: {path} must hold an optimizer state dict, got {type(state).__name__}")
    return state


def export_model(
    model: ToyTransformer, tokenizer: Tokenizer, out: Path, meta: dict[str, object], dtype: torch.dtype = torch.float16
) -> None:
    """Write a model directory that :meth:`circuitwidgets.CircuitModel.load` reads."""
    out.mkdir(parents=True, exist_ok=True)
    weights = {name: w.to(dtype).contiguous() for name, w in model.canonical_weights().items()}
    save_file(weights, str(out / "model.safetensors"))
    tokenizer.save(str(out / "tokenizer.json"))
    config = model.model_config(tokenizer.token_to_id(BOS_TOKEN))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "training.json").write_text(json.dumps(meta, indent=2))


def _tune_allocator() -> None:
    """Keep freed activations in the heap instead of returning them to the OS.

    Every step allocates the same large logits tensors; with glibc's defaults
    each one is a fresh mmap and page faults cost about a third of a CPU step.
    """
    c = libc()
    if c is None:
        return
    c.mallopt(-3, 2**30)  # M_MMAP_THRESHOLD
    c.mallopt(-1, 2**34)  # M_TRIM_THRESHOLD
    c.mallopt(-2, 2**28)  # M_TOP_PAD


def lr_factor(cfg: TrainConfig, step: int) -> float:
    """Multiplier of ``cfg.lr`` at 0-based ``step``: linear warm-up, constant, then a cosine to 0
    over the last ``cfg.decay_steps`` steps."""
    warm = min(1.0, (step + 1) / cfg.warmup_steps)
    into_decay = step - (cfg.steps - cfg.decay_steps)
    if cfg.decay_steps <= 0 or into_decay < 0:
        return warm
    return warm * 0.5 * (1.0 + math.cos(math.pi * min(1.0, (into_decay + 1) / cfg.decay_steps)))


def _records_up_to(log_path: Path, step: int) -> list[str]:
    """The log's lines at or before ``step``: a resumed run rewrites what came after its checkpoint."""
    if not log_path.exists():
        return []
    return [line for line in log_path.read_text().splitlines() if line and json.loads(line)["step"] <= step]


def train(
    cfg: TrainConfig,
    out_dir: Path,
    cache_dir: Path | None = None,
    progress: bool = True,
    max_bytes: int = MAX_MODEL_BYTES,
) -> ToyTransformer:
    """Train (or resume) a model into ``out_dir``; return the trained module.

    ``out_dir/checkpoint`` holds the resumable state, ``out_dir/log.jsonl`` the
    evaluations, and ``out_dir/model`` the exported model at the end. A model
    whose float16 export would exceed ``max_bytes`` is refused before anything runs.
    """
    check_size_budget(cfg, max_bytes)
    torch.set_num_threads(cfg.threads)
    _tune_allocator()
    tokenizer, train_tokens, val_tokens = _cached_corpus_tokens(cache_dir or out_dir / "cache", cfg.vocab_size)
    bos = cast(int, tokenizer.token_to_id(BOS_TOKEN))
    mcfg = ToyConfig(
        cfg.n_layers,
        cfg.n_heads,
        cfg.d_model,
        cfg.d_head,
        tokenizer.get_vocab_size(),
        cfg.n_ctx,
        d_mlp=cfg.d_mlp,
        act_fn=cfg.act_fn,
        norm=cfg.norm,
    )
    model = ToyTransformer(mcfg, generator=torch.Generator().manual_seed(cfg.seed)).to(cfg.device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    ckpt, log_path = out_dir / "checkpoint", out_dir / "log.jsonl"
    start = 0
    if (ckpt / "state.json").exists():
        model.load_state_dict(load_file(str(ckpt / "model.safetensors"), device=cfg.device))
        opt.load_state_dict(_load_optimizer_state(ckpt / "optim.pt"))
        start = json.loads((ckpt / "state.json").read_text())["step"]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    for group in opt.param_groups:  # a resumed optimiser carries the old run's schedule: restart from cfg
        group["initial_lr"] = cfg.lr
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(cfg, s), last_epoch=start - 1)
    elapsed = 0.0
    if start:
        kept = _records_up_to(log_path, start)
        log_path.write_text("".join(line + "\n" for line in kept))
        elapsed = json.loads(kept[-1])["train_seconds"] if kept else 0.0
    bar = tqdm(
        range(start, cfg.steps),
        initial=start,
        total=cfg.steps,
        disable=not progress,
        desc=f"train {cfg.n_layers}L",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    loss = torch.tensor(math.nan)
    for step in bar:
        batch = batch_at(train_tokens, cfg.n_ctx, cfg.batch_size, cfg.seed, step).to(cfg.device)
        loss = _lm_loss(model(batch), batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        schedule.step()
        done = step + 1
        if done % cfg.eval_every == 0 or done == cfg.steps:
            scores = head_scores(model, bos) if cfg.n_layers else {}
            val_loss, icl = val_losses(model, val_tokens, cfg.n_ctx)
            record = {
                "step": done,
                "tokens": done * cfg.batch_size * cfg.n_ctx,
                "train_seconds": round(elapsed + time.perf_counter() - t0, 1),
                "train_loss": round(loss.item(), 4),
                "val_loss": round(val_loss, 4),
                "icl_score": round(icl, 4),
                **scores,
            }
            if cfg.n_layers > 1:
                record["k_composition"] = k_composition(model)
            if not mcfg.attention_only:
                record["direct_logit_attribution"] = direct_logit_attribution(model, val_tokens, cfg.n_ctx)
            with log_path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            bar.set_postfix(val=record["val_loss"])
        if done % cfg.checkpoint_every == 0 or done == cfg.steps:
            _save_checkpoint(ckpt, model, opt, done)
    records = [json.loads(line) for line in log_path.read_text().splitlines()] if log_path.exists() else []
    meta: dict[str, object] = {
        "train_config": asdict(cfg),
        "log": records,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    corpus_meta = (cache_dir or out_dir / "cache") / "corpus.json"
    if corpus_meta.exists():
        meta["corpus"] = json.loads(corpus_meta.read_text())
    export_model(model, tokenizer, out_dir / "model", meta)
    return model
