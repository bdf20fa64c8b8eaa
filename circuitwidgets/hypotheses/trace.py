"""Causal tracing (Meng et al., 2022, "ROME"): noise the subject's embeddings, restore one clean state at a time.

The corrupted run adds Gaussian noise of ``noise`` × the standard deviation of the
token embeddings (all of ``W_E``'s entries) to the token embeddings of the chosen
positions, one draw per noise sample; each cell ``(layer, pos)`` restores the clean
run's ``site`` at that position, in that layer (or a window of layers centred on it,
clipped at the ends, as ROME restores ``window`` MLP or attention outputs), and
reads the probability of the answer at the last position, averaged over the samples.

Every cell's run is a variant of the one noised base run, so the sweep runs on the
causal engine: the noise samples are the base run's batch, each variant restarts
from the base run's stream at its layer, variants stack on the batch axis within
the memory budget, and a pass recomputes only positions from its cells on
(:mod:`circuitwidgets.causal.engine`). A window of several layers patches several
layers per variant, so it runs its own passes (:func:`_window_values`), each from
the base run's stream at the window's first layer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from circuitwidgets._checks import check_int, check_token
from circuitwidgets.causal.engine import base_names, check_budget, plan, sweep
from circuitwidgets.causal.labels import dim_labels, prompts_of
from circuitwidgets.causal.metrics import Metric
from circuitwidgets.causal.precision import full_precision
from circuitwidgets.causal.result import Sweep
from circuitwidgets.causal.sites import Cells, check_site
from circuitwidgets.causal.staircase import BaseRun
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.model.cache import Hook, Recorder

#: The states a trace restores: the stream after each layer (ROME's hidden state), or a layer's MLP or attention output.
TRACE_SITES = {"resid": "resid_post", "resid_post": "resid_post", "mlp_out": "mlp_out", "attn_out": "attn_out"}


def causal_trace(
    model: CircuitModel,
    tokens: torch.Tensor | Sequence[int] | str,
    corrupt: Sequence[int],
    answer: int | str,
    *,
    site: str = "resid",
    noise: float = 3.0,
    samples: int = 10,
    window: int = 1,
    seed: int = 0,
    memory_budget: int | None = None,
) -> Sweep:
    """Causal tracing: ``p(answer)`` at the last position with the ``corrupt`` tokens noised and one state restored.

    Parameters
    ----------
    tokens
        one prompt: ``[pos]`` or ``[1, pos]`` token ids, or a text.
    corrupt
        the positions whose token embeddings are noised (ROME's subject tokens); negative counts from the end.
    answer
        the token whose probability is read at the last position (an id, or a text of one token).
    site
        ``"resid"`` (the stream after each layer, ``resid_post``), ``"mlp_out"`` or ``"attn_out"``.
    noise
        the noise's standard deviation in units of the token embeddings' (ROME: 3).
    samples
        noise draws; every value is the mean over them.
    window
        layers restored per cell, centred on the cell's layer and clipped at the ends (ROME: 10 for MLP and
        attention outputs of a 48-layer model).
    seed
        seeds the noise.
    memory_budget
        bytes the call may hold (default 1 GiB), as in :func:`~circuitwidgets.causal.patch`.

    Returns
    -------
    Sweep
        ``[layer, pos]`` probabilities; ``clean_value`` and ``corrupted_value`` are the clean and the noised runs'.
        :class:`~circuitwidgets.PatchingMap` draws it.
    """
    model, upcast = full_precision(model)
    t = model._check_tokens(tokens)
    if t.shape[0] != 1:
        raise ShapeError(f"tokens: expected one prompt ([pos] or [1, pos]), got shape {tuple(t.shape)}")
    n_pos = t.shape[1]
    positions = check_corrupt(corrupt, n_pos)
    answer_id = check_token(model, "answer", answer)
    site_name = check_trace_site(site)
    scale = check_noise(noise)
    n_samples = check_int("samples", samples, 1)
    width = check_int("window", window, 1, model.cfg.n_layers + 1)
    check_int("seed", seed)
    cells = check_site(model, site_name, ("layer", "pos"), n_pos)
    metric = answer_probability(answer_id, n_samples, model.to_str_tokens([answer_id])[0])
    batch = t.repeat(n_samples, 1)
    kept = base_names(cells, metric)
    most = plan(model, cells, metric, batch, check_budget(memory_budget), [[site_name], kept], "causal trace")
    std = float(model.W_E.double().std())
    offsets = embedding_noise(n_samples, len(positions), model.cfg.d_model, scale * std, int(seed))
    base = noised_run(model, batch, positions, offsets.to(model.W_E.dtype), metric, kept)
    _, clean_cache = model.run_with_cache(t, names=[site_name])
    clean_logits = model(t)[:, -1].double()
    clean_value = float(torch.softmax(clean_logits, -1)[0, answer_id])

    def source(layer: int) -> torch.Tensor:
        value = clean_cache[site_name, layer]
        return value.expand(n_samples, *value.shape[1:])

    if width == 1:
        values = sweep(model, base, source, cells, metric, freeze_norms=False, most=most, desc=f"trace {site_name}")
    else:
        values = _window_values(model, base, source, cells, metric, width, most)
    return Sweep(
        values, cells.by, dim_labels(model, cells, t), "causal tracing", metric.name, clean_value, base.value,
        site_name,
        f"Gaussian noise of {scale:g} × the embeddings' std ({scale * std:.4g}) on the token embeddings at positions "
        f"{positions}, {n_samples} samples (seed {seed}); restoring "
        + ("one layer" if width == 1 else f"a window of {width} layers centred on each layer")
        + upcast,
        model.name, prompts_of(model, clean=t),
        extra={"corrupt": positions, "noise": scale, "noise_std": scale * std, "samples": n_samples,
               "window": width, "seed": int(seed), "answer": answer_id},
    )  # fmt: skip


def check_corrupt(corrupt: object, n_pos: int) -> list[int]:
    """The noised positions as sorted non-negative indices (errors name ``corrupt``)."""
    if isinstance(corrupt, int) and not isinstance(corrupt, bool):
        corrupt = [corrupt]
    if (
        not isinstance(corrupt, (Sequence, range, np.ndarray, torch.Tensor))
        or isinstance(corrupt, str)
        or len(corrupt) == 0
    ):
        raise ArgumentTypeError(f"corrupt: expected a non-empty list of positions, got {corrupt!r:.80}")
    return sorted({check_int("corrupt", p, -n_pos, n_pos) % n_pos for p in list(corrupt)})


def check_trace_site(site: object) -> str:
    """The hook name of a trace's site (errors name ``site``)."""
    if not isinstance(site, str) or site not in TRACE_SITES:
        raise ArgumentError(f"site: expected one of {sorted(TRACE_SITES)}, got {site!r}")
    return TRACE_SITES[site]


def check_noise(noise: object) -> float:
    """A positive, finite noise scale (errors name ``noise``)."""
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not np.isfinite(noise) or noise <= 0:
        raise ArgumentError(f"noise: expected a positive number (× the embeddings' std), got {noise!r}")
    return float(noise)


def embedding_noise(samples: int, n_positions: int, d_model: int, std: float, seed: int) -> torch.Tensor:
    """``[samples, n_positions, d_model]`` Gaussian offsets of standard deviation ``std`` (float64, seeded on CPU)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(samples, n_positions, d_model, generator=gen, dtype=torch.float64) * std


def answer_probability(answer: int, samples: int, text: str) -> Metric:
    """The mean over the noise samples of ``p(answer)`` at the last position, evaluated for many variants at once."""

    def batched(logits: torch.Tensor, batch: int) -> torch.Tensor:
        # logits [n, batch, 1, d_vocab]: a softmax over the whole vocabulary, so every column is read
        return torch.softmax(logits[:, :, 0].double(), dim=-1)[..., answer].mean(dim=1)

    return Metric(f"p({text!r}) at the last position, mean over {samples} noise samples", batched, positions=[-1])


def noised_run(
    model: CircuitModel,
    tokens: torch.Tensor,
    positions: list[int],
    offsets: torch.Tensor,
    metric: Metric,
    names: Sequence[str],
) -> BaseRun:
    """The corrupted run: ``offsets`` ``[batch, len(positions), d_model]`` added to the token embeddings there."""
    index = torch.tensor(positions, device=model.device)

    def add_noise(value: torch.Tensor) -> torch.Tensor:
        out = value.clone()
        out[:, index] = out[:, index] + offsets.to(value.device)
        return out

    store: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        record = Recorder(store, set(names), {("embed", None): add_noise})
        logits = model.run_from(tokens, 0, None, record, positions=metric.positions_at(tokens.shape[1]))
    value = float(metric.batched(logits[None], tokens.shape[0])[0])
    return BaseRun(tokens, ActivationCache(store), value)


def window_layers(layer: int, width: int, n_layers: int) -> range:
    """The layers a window of ``width`` centred on ``layer`` restores, clipped at the model's ends (ROME's window)."""
    return range(max(0, layer - width // 2), min(n_layers, layer + (width + 1) // 2))


def _window_values(
    model: CircuitModel,
    base: BaseRun,
    source: Callable[[int], torch.Tensor],
    cells: Cells,
    metric: Metric,
    width: int,
    most: int,
) -> np.ndarray:
    """Values ``[layer, pos]`` with each cell restoring ``cells.site`` at its position in a window of layers.

    Cells whose windows start at the same layer share passes of at most ``most`` variants, started from the base
    run's stream at that layer; each layer's hook restores the rows whose window holds it.
    """
    L, n_pos = model.cfg.n_layers, base.tokens.shape[1]
    batch = base.tokens.shape[0]
    out = np.full((L, n_pos), np.nan)
    by_start: dict[int, list[tuple[int, int]]] = {}
    for layer in range(L):
        first = model.restart_layer(window_layers(layer, width, L).start)
        by_start.setdefault(first, []).extend((layer, p) for p in range(n_pos))
    sources = {layer: source(layer) for layer in range(L)}
    read = metric.positions_at(n_pos)
    with torch.no_grad():
        for start, todo in by_start.items():
            for i in range(0, len(todo), most):
                chunk = todo[i : i + most]
                n = len(chunk)
                hooks: dict[tuple[str, int | None], Hook] = {}
                for j in sorted({k for layer, _ in chunk for k in window_layers(layer, width, L)}):
                    mask = torch.zeros(n, 1, n_pos, 1, dtype=base.cache["resid_pre", 0].dtype, device=model.device)
                    for row, (layer, p) in enumerate(chunk):
                        if j in window_layers(layer, width, L):
                            mask[row, 0, p] = 1.0
                    hooks[(cells.site, j)] = _restore(mask, sources[j])
                resid = base.cache["resid_pre", start].repeat(n, 1, 1)
                logits = model.run_from(base.tokens, start, resid, Recorder({}, set(), hooks), positions=read)
                values = metric.batched(logits.view(n, batch, *logits.shape[1:]), batch).cpu().numpy()
                for (layer, p), v in zip(chunk, values, strict=True):
                    out[layer, p] = v
    return out


def _restore(mask: torch.Tensor, src: torch.Tensor) -> Hook:
    """A hook setting each variant's value to ``src`` where ``mask`` ``[n, 1, pos, 1]`` is 1."""

    def hook(value: torch.Tensor) -> torch.Tensor:
        v = value.view(mask.shape[0], -1, *value.shape[1:])
        return (v + mask * (src[None] - v)).view_as(value)

    return hook
