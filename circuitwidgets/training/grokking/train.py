"""Training the modular-addition transformer: full batch AdamW, a history per step, checkpoints, resumable.

The loop is the recipe and nothing else: one forward over the training pairs
(:func:`~circuitwidgets.training.grokking.model.forward`, the last position
only), one backward, one fused AdamW step; the test pairs are evaluated without
autograd every ``eval_every`` steps. The training loss and accuracy of step
``s`` are the ones the gradient of step ``s`` came from (the weights after
``s`` updates), and so are the test measurements and the checkpoint of ``s``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.training.grokking.model import (
    GrokConfig,
    Weights,
    accuracy,
    forward,
    init_weights,
    loss_and_accuracy,
    pairs,
    split,
)
from circuitwidgets.training.grokking.store import load_resume_state, save_checkpoint, save_resume_state

HISTORY_FIELDS = ("train_loss", "test_loss", "train_accuracy", "test_accuracy")


@dataclass
class GrokHistory:
    """What a grokking run recorded.

    Attributes
    ----------
    config : GrokConfig
        The task and the recipe.
    steps : numpy.ndarray
        The steps (updates done) at which the four curves were measured.
    train_loss, test_loss, train_accuracy, test_accuracy : numpy.ndarray
        One value per entry of ``steps`` (losses: mean cross-entropy, natural log).
    checkpoints : dict[int, dict[str, torch.Tensor]]
        Weights (float32, CPU) after ``step`` updates, every ``checkpoint_every`` steps and at the end.
    train_seconds : float
        Wall time of the training loop (resumed runs add their parts).
    """

    config: GrokConfig
    steps: np.ndarray
    train_loss: np.ndarray
    test_loss: np.ndarray
    train_accuracy: np.ndarray
    test_accuracy: np.ndarray
    checkpoints: dict[int, Weights] = field(default_factory=dict)
    train_seconds: float = 0.0

    @property
    def final_step(self) -> int:
        """The last step measured."""
        return int(self.steps[-1])

    def weights(self, step: int | None = None) -> Weights:
        """The checkpoint at ``step`` (default: the last one)."""
        if not self.checkpoints:
            raise ArgumentError("step: this history holds no checkpoints")
        step = max(self.checkpoints) if step is None else step
        if step not in self.checkpoints:
            raise ArgumentError(f"step: expected one of the checkpoint steps {sorted(self.checkpoints)}, got {step!r}")
        return self.checkpoints[step]

    def grokked_at(self, threshold: float = 0.99) -> int | None:
        """First step whose test accuracy is >= ``threshold`` after a step with train accuracy 1 and test < 0.5
        (memorised first, then generalised); ``None`` if the run did not grok."""
        memorised = (self.train_accuracy >= 1.0) & (self.test_accuracy < 0.5)
        if not memorised.any():
            return None
        after = np.nonzero(self.steps > self.steps[np.argmax(memorised)])[0]
        hits = after[self.test_accuracy[after] >= threshold]
        return int(self.steps[hits[0]]) if hits.size else None


def _optimizer(params: list[torch.Tensor], cfg: GrokConfig) -> torch.optim.Optimizer:
    kwargs: dict[str, object] = {"lr": cfg.lr, "weight_decay": cfg.weight_decay, "betas": (cfg.beta1, cfg.beta2)}
    try:
        return torch.optim.AdamW(params, fused=True, **kwargs)  # type: ignore[arg-type]
    except (RuntimeError, TypeError):  # a build without the fused CPU kernel
        return torch.optim.AdamW(params, foreach=True, **kwargs)  # type: ignore[arg-type]


def _check_steps(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name}: expected an int >= {low}, got {type(value).__name__} {value!r}")
    if value < low:
        raise ArgumentError(f"{name}: expected an int >= {low}, got {value}")
    return value


def train(
    p: int = 113,
    fraction: float = 0.3,
    *,
    steps: int = 20_000,
    d_model: int = 128,
    n_heads: int = 4,
    d_head: int = 32,
    d_mlp: int = 512,
    lr: float = 1e-3,
    weight_decay: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.98),
    seed: int = 0,
    eval_every: int = 10,
    checkpoint_every: int = 100,
    stop_when_grokked: bool = False,
    out_dir: str | Path | None = None,
    checkpoint_dtype: torch.dtype = torch.float32,
    threads: int | None = None,
    progress: bool = False,
) -> GrokHistory:
    """Train a one-layer transformer on ``(a + b) mod p`` with Nanda et al.'s recipe; return its history.

    Parameters
    ----------
    p : int
        Modulus, >= 3.
    fraction : float
        Fraction of the ``p²`` pairs to train on, in (0, 1); the rest is the test set.
    steps : int
        Full-batch AdamW updates.
    d_model, n_heads, d_head, d_mlp : int
        Widths (defaults: the paper's).
    lr, weight_decay, betas
        AdamW's settings (defaults: the paper's 1e-3, 1.0, (0.9, 0.98)).
    seed : int
        Seeds the initialisation and the split.
    eval_every : int
        Steps between measurements of the four curves (1: every step).
    checkpoint_every : int
        Steps between kept checkpoints (the progress measures are computed on these).
    stop_when_grokked : bool
        Stop at the first step where :meth:`GrokHistory.grokked_at` is not ``None``.
    out_dir : str or Path, optional
        Where to write checkpoints and the resumable state; a run there is resumed.
    checkpoint_dtype : torch.dtype
        dtype of the checkpoint files written to ``out_dir`` (float16 halves them).
    threads : int, optional
        ``torch.set_num_threads`` for the run.
    progress : bool
        Print a plain-text progress line at each checkpoint (to stderr).

    Returns
    -------
    GrokHistory

    Raises
    ------
    ArgumentError, ArgumentTypeError
        A modulus < 3 or not an int, a fraction outside (0, 1), a weight decay < 0, a bad count; a resumed
        ``out_dir`` holding another task or another configuration.
    """
    if not (isinstance(betas, tuple) and len(betas) == 2):
        raise ArgumentTypeError(f"betas: expected a tuple of two floats, got {betas!r}")
    cfg = GrokConfig(p, fraction, d_model, n_heads, d_head, d_mlp, lr, weight_decay, betas[0], betas[1], seed)
    return train_config(
        cfg, steps, eval_every, checkpoint_every, stop_when_grokked, out_dir, checkpoint_dtype, threads, progress
    )


def train_config(
    cfg: GrokConfig,
    steps: int,
    eval_every: int = 10,
    checkpoint_every: int = 100,
    stop_when_grokked: bool = False,
    out_dir: str | Path | None = None,
    checkpoint_dtype: torch.dtype = torch.float32,
    threads: int | None = None,
    progress: bool = False,
) -> GrokHistory:
    """:func:`train` from a :class:`GrokConfig`."""
    _check_steps("steps", steps, 1)
    _check_steps("eval_every", eval_every, 1)
    _check_steps("checkpoint_every", checkpoint_every, 1)
    if threads is not None:
        torch.set_num_threads(_check_steps("threads", threads, 1))
    a, b = pairs(cfg.p)
    answers = (a + b) % cfg.p
    train_idx, test_idx = split(cfg)
    a_tr, b_tr, y_tr = a[train_idx], b[train_idx], answers[train_idx]
    a_te, b_te, y_te = a[test_idx], b[test_idx], answers[test_idx]
    weights = init_weights(cfg)
    params = list(weights.values())
    for t in params:
        t.requires_grad_(True)
    opt = _optimizer(params, cfg)
    records: dict[str, list[float]] = {name: [] for name in ("step", *HISTORY_FIELDS)}
    checkpoints: dict[int, Weights] = {}
    start, elapsed = 0, 0.0
    directory = Path(out_dir) if out_dir is not None else None
    if directory is not None:
        resumed = load_resume_state(directory, cfg, weights, opt)
        if resumed is not None:
            start, elapsed, records, checkpoints = resumed
    t0 = time.perf_counter()
    step = start
    memorised = any(
        tr >= 1.0 and te < 0.5 for tr, te in zip(records["train_accuracy"], records["test_accuracy"], strict=True)
    )
    grokked = False
    while True:
        measure = step % eval_every == 0 or step == steps
        logits = forward(weights, a_tr, b_tr)
        loss = torch.nn.functional.cross_entropy(logits.double(), y_tr)
        if measure:
            acc = accuracy(logits.detach(), y_tr)
            with torch.no_grad():
                test_loss, test_acc = loss_and_accuracy(forward(weights, a_te, b_te), y_te)
            for name, value in zip(
                ("step", *HISTORY_FIELDS),
                (step, loss.item(), test_loss.item(), acc.item(), test_acc.item()),
                strict=True,
            ):
                records[name].append(value)
            memorised = memorised or (acc.item() >= 1.0 and test_acc.item() < 0.5)
            grokked = memorised and test_acc.item() >= 0.99
        done = step == steps or (stop_when_grokked and grokked)
        if step % checkpoint_every == 0 or done:
            checkpoints[step] = {k: v.detach().clone() for k, v in weights.items()}
            if directory is not None:
                seconds = elapsed + time.perf_counter() - t0
                save_checkpoint(directory, cfg, step, checkpoints[step], checkpoint_dtype)
                save_resume_state(directory, cfg, step, seconds, weights, opt, records)
            if progress:
                print(
                    f"step {step}/{steps}: train loss {loss.item():.4g}, test accuracy "
                    f"{records['test_accuracy'][-1] if records['test_accuracy'] else float('nan'):.3f}",
                    file=sys.stderr,
                    flush=True,
                )
        if done:
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        step += 1
    history = _history(cfg, records)
    history.checkpoints = checkpoints
    history.train_seconds = elapsed + time.perf_counter() - t0
    if directory is not None:
        (directory / "history.json").write_text(json.dumps({"config": cfg.to_dict(), **records}))
    return history


def _history(cfg: GrokConfig, records: dict[str, list[float]]) -> GrokHistory:
    def curve(name: str) -> np.ndarray:
        return np.asarray(records[name], dtype=np.float64)

    return GrokHistory(
        cfg,
        np.asarray(records["step"], dtype=np.int64),
        curve("train_loss"),
        curve("test_loss"),
        curve("train_accuracy"),
        curve("test_accuracy"),
    )
