"""Activations streamed from runs of a model over a token stream, through a shuffled buffer.

A corpus's activations are never all held: the stream cuts the tokens into
windows of ``n_ctx``, visits them in an order drawn per epoch from
``(seed, epoch)``, runs the model on a few windows at a time (stopping after the
layer it reads), and keeps ``buffer_rows`` rows; each refill shuffles the buffer
and serves half of it, so a batch mixes many windows. The window counter is the
stream's whole state: a resumed run continues with the next unseen window
(its buffer is rebuilt, so its shuffling differs from an unbroken run's).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.sites import mlp_input
from circuitwidgets.model import CircuitModel

#: The order in which one layer records what a dictionary may read (the last one needed ends the run).
_ORDER = ("resid_pre", "attn_out", "resid_mid", "scale_mlp", "mlp_pre", "mlp_post", "mlp_out", "resid_post")
_NEEDS = {"mlp_in": ("resid_mid", "scale_mlp")}


class _StopPassError(Exception):
    """Raised from a hook once every activation needed is recorded: the rest of the pass is not computed."""


Key = tuple[str, int]


def read_until(model: CircuitModel, tokens: torch.Tensor, keys: Sequence[Key]) -> dict[Key, torch.Tensor]:
    """``{(site, layer): [batch, pos, width]}`` from one pass that stops after the last activation it needs."""
    needed = sorted({(n, layer) for site, layer in keys for n in _NEEDS.get(site, (site,))}, key=_position)
    seen: dict[Key, torch.Tensor] = {}

    def keep(key: Key, last: bool) -> Callable[[torch.Tensor], None]:
        def hook(value: torch.Tensor) -> None:
            seen[key] = value
            if last:
                raise _StopPassError

        return hook

    hooks = {key: keep(key, i == len(needed) - 1) for i, key in enumerate(needed)}
    with contextlib.suppress(_StopPassError):
        model.run_with_hooks(tokens, hooks)  # type: ignore[arg-type]
    out = {}
    for site, layer in keys:
        if site == "mlp_in":
            out[site, layer] = mlp_input(model.cfg, seen["resid_mid", layer], seen["scale_mlp", layer])
        else:
            out[site, layer] = seen[site, layer]
    return out


def _position(key: Key) -> tuple[int, int]:
    return key[1], _ORDER.index(key[0])


def corpus_tokens(model: CircuitModel, cache_dir: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(train, val)`` token streams of the shipped corpus (the Python standard library) under ``model``'s tokenizer.

    Each file is preceded by BOS (when the tokenizer has one), as the shipped models were trained.
    Cached as ``.npy`` in ``cache_dir`` (keyed by the model's name) when given.
    """
    from circuitwidgets.training.corpus import load_stdlib_corpus

    paths = None
    if cache_dir is not None:
        paths = (cache_dir / f"{model.name}.train.npy", cache_dir / f"{model.name}.val.npy")
        if paths[0].exists() and paths[1].exists():
            return np.load(paths[0]), np.load(paths[1])
    corpus = load_stdlib_corpus()
    bos = model.tokenizer.bos_token_id
    dtype = np.uint16 if model.cfg.d_vocab <= 2**16 else np.int64

    def encode(texts: list[str]) -> np.ndarray:
        return np.concatenate(
            [np.asarray(([bos] if bos is not None else []) + model.tokenizer.encode(t), dtype=dtype) for t in texts]
        )

    train, val = encode(corpus.train), encode(corpus.val)
    if paths is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
        np.save(paths[0], train)
        np.save(paths[1], val)
        meta = {"corpus_root": str(corpus.root), "n_train_tokens": int(train.size), "n_val_tokens": int(val.size)}
        (cache_dir / f"{model.name}.corpus.json").write_text(json.dumps(meta))  # type: ignore[operator]
    return train, val


def held_out_tokens(model: CircuitModel) -> np.ndarray:
    """The held-out split of :func:`corpus_tokens` alone (encoding only those files: a few seconds)."""
    from circuitwidgets.training.corpus import load_stdlib_corpus

    bos = model.tokenizer.bos_token_id
    dtype = np.uint16 if model.cfg.d_vocab <= 2**16 else np.int64
    pieces = [
        np.asarray(([bos] if bos is not None else []) + model.tokenizer.encode(t), dtype=dtype)
        for t in load_stdlib_corpus().val
    ]
    return np.concatenate(pieces)


def windows(tokens: np.ndarray, n_ctx: int, seed: int, start: int, count: int) -> torch.Tensor:
    """Windows ``start .. start + count`` of the stream's visiting order, ``[count, n_ctx]`` int64.

    The stream is cut into ``len(tokens) // n_ctx`` windows; epoch ``e`` visits them
    in the order ``default_rng([seed, e]).permutation``.
    """
    n = tokens.size // n_ctx
    if n < 1:
        raise ArgumentError(f"tokens: expected at least n_ctx = {n_ctx} tokens, got {tokens.size}")
    rows = []
    for i in range(start, start + count):
        epoch, j = divmod(i, n)
        order = _permutation(n, seed, epoch)
        s = int(order[j]) * n_ctx
        rows.append(tokens[s : s + n_ctx])
    return torch.from_numpy(np.stack(rows).astype(np.int64))


_PERMS: dict[tuple[int, int, int], np.ndarray] = {}


def _permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    key = (n, seed, epoch)
    if key not in _PERMS:
        _PERMS.clear()
        _PERMS[key] = np.random.default_rng([seed, epoch]).permutation(n)
    return _PERMS[key]


class ActivationStream:
    """Batches of rows ``{(site, layer): [batch, width]}`` streamed from runs of ``model`` (all keys from one pass).

    ``passes`` puts every row into the buffer that many times (at different
    shuffled places): the model's pass, the costly part on a CPU, then serves
    several optimiser steps. 1 (the default) uses each token once.
    """

    def __init__(
        self,
        model: CircuitModel,
        keys: Sequence[Key],
        tokens: np.ndarray,
        *,
        n_ctx: int = 128,
        seed: int = 0,
        window: int = 0,
        buffer_rows: int = 2**16,
        windows_per_run: int = 32,
        passes: int = 1,
        device: str | torch.device = "cpu",
    ) -> None:
        self.model, self.keys = model, list(dict.fromkeys(keys))
        self.tokens, self.n_ctx, self.seed, self.window = tokens, n_ctx, seed, window
        self.windows_per_run, self.passes, self.device = windows_per_run, passes, torch.device(device)
        run_rows = windows_per_run * n_ctx * passes
        self.capacity = max(2, buffer_rows // run_rows) * run_rows
        self._buf: dict[Key, torch.Tensor] = {}
        self._filled = 0
        self._served = 0
        self._gen = torch.Generator().manual_seed(seed * 1_000_003 + window)

    def _run(self) -> dict[Key, torch.Tensor]:
        t = windows(self.tokens, self.n_ctx, self.seed, self.window, self.windows_per_run).to(self.model.device)
        self.window += self.windows_per_run
        got = read_until(self.model, t, self.keys)
        return {k: v.reshape(-1, v.shape[-1]).float().repeat(self.passes, 1) for k, v in got.items()}

    def _refill(self) -> None:
        while self._filled < self.capacity:
            rows = self._run()
            n = 0
            for key, value in rows.items():
                if key not in self._buf:
                    self._buf[key] = torch.empty(self.capacity, value.shape[1], device=self.device)
                n = value.shape[0]
                self._buf[key][self._filled : self._filled + n] = value.to(self.device)
            self._filled += n
        perm = torch.randperm(self.capacity, generator=self._gen).to(self.device)
        self._buf = {k: v[perm] for k, v in self._buf.items()}
        self._served = 0

    def next(self, batch_size: int) -> dict[Key, torch.Tensor]:
        """The next ``batch_size`` rows of every key."""
        if batch_size > self.capacity // 2:
            raise ArgumentError(
                f"batch_size: expected at most half the buffer ({self.capacity // 2} rows), got {batch_size}"
            )
        if self._filled < self.capacity or self._served + batch_size > self.capacity // 2:
            if self._filled == self.capacity:  # keep the unserved rows, refill behind them
                keep = self.capacity - self._served
                for value in self._buf.values():
                    value[:keep] = value[self._served :].clone()
                self._filled = keep
            self._refill()
        s = self._served
        self._served += batch_size
        return {k: v[s : s + batch_size] for k, v in self._buf.items()}
