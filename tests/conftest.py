"""Shared fixtures: small random models built from configs (no network, no files), and the shipped gelu-2l in
float64 with a clean/corrupted prompt pair for the causal tests (a module may define its own under either name)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
import torch

import circuitwidgets as cw
from circuitwidgets.model import CircuitModel, ModelConfig


def make_random_model(
    n_layers: int = 2,
    n_heads: int = 3,
    d_model: int = 16,
    d_head: int = 4,
    d_vocab: int = 50,
    n_ctx: int = 32,
    seed: int = 0,
    positional_embedding_type: str = "shortformer",
    biases: bool = False,
    dtype: torch.dtype = torch.float64,
) -> CircuitModel:
    """An attention-only model with Gaussian weights (float64 so dense checks are tight)."""
    g = torch.Generator().manual_seed(seed)
    L, H, d, dh, V = n_layers, n_heads, d_model, d_head, d_vocab

    def r(*shape: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    weights = {
        "W_E": r(V, d),
        "W_Q": r(L, H, d, dh, std=d**-0.5),
        "W_K": r(L, H, d, dh, std=d**-0.5),
        "W_V": r(L, H, d, dh, std=d**-0.5),
        "W_O": r(L, H, dh, d, std=(H * dh) ** -0.5),
        "W_U": r(d, V, std=d**-0.5),
    }
    if positional_embedding_type in ("shortformer", "standard"):
        weights["W_pos"] = r(n_ctx, d)
    if biases:
        weights |= {"b_Q": r(L, H, dh), "b_K": r(L, H, dh), "b_V": r(L, H, dh), "b_O": r(L, d), "b_U": r(V)}
    cfg = ModelConfig(L, H, d, dh, V, n_ctx, positional_embedding_type=positional_embedding_type)
    return CircuitModel(cfg, weights, name=f"random-{L}l-seed{seed}")


@pytest.fixture(scope="module")
def gelu() -> CircuitModel:
    """gelu-2l (shipped with the package) in float64, so the causal checks against slow definitions are tight."""
    return cw.load_pretrained("gelu-2l").to(torch.float64)


@pytest.fixture(scope="module")
def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    """Two random prompts of 10 tokens and their corruption at position 3."""
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(1, 2048, (2, 10), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 3] = torch.randint(1, 2048, (2,), generator=gen)
    return clean, corrupted


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Torch on one thread for a module's tests (``pytestmark = pytest.mark.usefixtures("one_thread")``): tiny
    products on two threads of a busy machine wait on each other (60x slower there); one thread does not."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def random_model() -> Callable[..., CircuitModel]:
    """Factory fixture: ``random_model(n_layers=2, ...)``."""
    return make_random_model


@pytest.fixture(autouse=True)
def _no_stale_event_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """Hide, outside browser tests, the event loop Playwright's sync API leaves registered as running.

    The browser tests' session-scoped Playwright keeps its asyncio loop marked as the thread's running loop
    between calls, so a later test would see a running loop that never turns: ``asyncio.run`` refuses to
    start, and work a widget defers to "the kernel's loop" (``widgets.core.coalesce``) would never run.
    Each non-browser test runs as a script does, with no running loop; the loop is put back afterwards.
    """
    stale = asyncio.events._get_running_loop()
    if stale is None or request.node.get_closest_marker("e2e") is not None:
        yield
        return
    asyncio.events._set_running_loop(None)
    try:
        yield
    finally:
        asyncio.events._set_running_loop(stale)


@pytest.fixture(autouse=True)
def _calibration_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The causal planner's on-disk calibration (causal/calibration.py) in a fresh folder per test, never the user's
    cache: no test sees another's stored choices, in any order (subprocesses inherit the variable)."""
    monkeypatch.setenv("CIRCUITWIDGETS_CACHE_DIR", str(tmp_path_factory.mktemp("cw-cache")))
