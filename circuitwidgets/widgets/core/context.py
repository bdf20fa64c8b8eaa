"""What every widget that runs the model checks first, and how a slow build shows its progress.

- :func:`check_context`: a text longer than the model's context is refused
  before any work, with what to do instead (the same condition as the model's
  own check, which only comes at the forward pass, after the other views'
  work).
- :func:`build_progress`: a plain-text ``tqdm`` bar on stderr (never a widget, so a
  saved notebook carries none) over
  the steps of a build, named step by step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from circuitwidgets.errors import ShapeError

if TYPE_CHECKING:
    from circuitwidgets.model import CircuitModel

__all__ = ["ContextLengthError", "build_progress", "check_context"]


class ContextLengthError(ShapeError):
    """A text or token sequence is longer than the model's context ``n_ctx``."""


def context_limited(model: CircuitModel) -> bool:
    """Whether ``model`` refuses sequences longer than ``n_ctx`` (learned absolute positions)."""
    return model.cfg.positional_embedding_type in ("shortformer", "standard")


def check_context(model: CircuitModel, n_positions: int, argument: str, how: str = "") -> None:
    """Refuse ``n_positions`` tokens when they exceed the context of ``model``, before any work.

    Parameters
    ----------
    model
        The model the tokens will run through.
    n_positions
        Tokens per sequence, BOS included.
    argument
        Name of the argument that holds them (``"text_or_tokens"``, ``"tokens"``).
    how
        What else the caller offers for long texts (appended to the message).

    Raises
    ------
    ContextLengthError
        A :class:`~circuitwidgets.errors.ShapeError` naming ``argument``, the
        length, ``n_ctx`` and how to proceed.
    """
    n_ctx = int(model.cfg.n_ctx)
    if n_positions <= n_ctx or not context_limited(model):
        return
    raise ContextLengthError(
        f"{argument}: expected at most n_ctx={n_ctx} tokens (the context of {model.name or 'the model'}, BOS "
        f"included), got {n_positions}. Pass a shorter text, for example the first {n_ctx} token ids "
        f"(tokens[:{n_ctx}]) or a few paragraphs" + (f"; {how}" if how else "") + ". Nothing was computed."
    )


@contextmanager
def build_progress(
    total: int, desc: str, enabled: bool | None = None, delay: float = 0.0
) -> Iterator[Callable[[str], None]]:
    """A progress bar over the ``total`` steps of a build; yields ``step(name)``, called as each step starts.

    The bar is plain-text ``tqdm`` on stderr, in a terminal and in a notebook alike
    (a notebook widget would be saved with the notebook and need a CDN when
    exported). ``enabled=None`` lets tqdm decide (hidden when stderr is not a
    terminal); ``delay`` seconds pass before it appears.
    It is removed when the build ends.
    """
    from tqdm import tqdm

    bar: Any = tqdm(total=total, desc=desc, disable=None if enabled is None else not enabled, leave=False, delay=delay)
    started = False

    def step(name: str) -> None:
        nonlocal started
        if started:
            bar.update(1)
        started = True
        bar.set_postfix_str(name)

    try:
        yield step
        if started:
            bar.update(1)
    finally:
        bar.close()
