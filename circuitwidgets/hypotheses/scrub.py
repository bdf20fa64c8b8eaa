"""Causal scrubbing (Chan et al., Redwood Research, 2022): how much of the model's behaviour a hypothesis explains.

For each example scored (the reference), each kept path reads a random example
with the same key as the reference; every other path reads one random other
example (the same one for all of them: resampling the complement as one input).
The model is treeified so each path has its own input (:mod:`.treeify`). The
score is the metric recovered between full resampling (every path reads a random
other example: 0) and the clean model (1), averaged over ``resamples`` draws with
a 95 % interval over them; the full resampling baseline is drawn independently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from circuitwidgets._checks import check_int
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.hypotheses.paths import Hypothesis, check_against
from circuitwidgets.hypotheses.treeify import CACHED, Treeified, check_decomposes
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.model.cache import Recorder
from circuitwidgets.model.forward import soft_cap

#: ``metric(logits [N, pos, d_vocab], tokens [N, pos]) -> [N]``: one value per example.
ExampleMetric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Each example's mean cross-entropy of its next tokens ``[N]`` (the default metric)."""
    logp = torch.log_softmax(logits[:, :-1].double(), dim=-1)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1).mean(dim=1)


@dataclass
class Scrub:
    """A hypothesis scored by causal scrubbing.

    Attributes
    ----------
    recovered
        mean over the resamples of ``(scrubbed − random) / (clean − random)``: 1 the clean model, 0 full resampling.
    interval
        95 % interval of the mean over the resamples (normal approximation).
    draws
        each resample's fraction recovered.
    clean, scrubbed, random
        the metric (mean over examples) of the model, of the treeified model (mean over resamples), of full
        resampling (mean over resamples).
    extra
        ``assignments``: per resample, the examples each kept path read and the example the rest read.
    runs
        one-layer passes over the dataset the treeified model needed (all resamples), and ``sequences``: those passes
        times the examples, plus the dataset's one whole run.
    recomputed
        heads and MLPs recomputed from treeified inputs, all resamples.
    """

    hypothesis: str
    paths: list[str]
    recovered: float
    interval: tuple[float, float]
    draws: list[float]
    clean: float
    scrubbed: float
    random: float
    metric: str
    examples: int
    resamples: int
    seed: int
    runs: int
    sequences: int
    recomputed: int
    model: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    def describe(self) -> str:
        """One line a reader needs: the fraction recovered with its interval, the references and the cost."""
        lo, hi = self.interval
        return (
            f"{self.hypothesis!r} on {self.model!r} recovers {100 * self.recovered:.1f} % "
            f"(95 % interval {100 * lo:.1f} … {100 * hi:.1f} over {self.resamples} resamples) of {self.metric}: "
            f"clean {self.clean:.4f}, scrubbed {self.scrubbed:.4f}, fully resampled {self.random:.4f}; "
            f"{self.examples} examples, {self.runs} one-layer passes, seed {self.seed}"
        )

    def __repr__(self) -> str:
        return f"Scrub({self.describe()})"


def scrub(
    model: CircuitModel,
    hypothesis: Hypothesis,
    dataset: torch.Tensor | Sequence[Sequence[int]],
    metric: ExampleMetric | None = None,
    *,
    resamples: int = 10,
    seed: int = 0,
) -> Scrub:
    """Score ``hypothesis`` by causal scrubbing on ``dataset``.

    Parameters
    ----------
    hypothesis
        the paths kept and the key each reads (:class:`Hypothesis`).
    dataset
        token ids ``[N, pos]`` (every example of one length: paths carry positions); N ≥ 2.
    metric
        ``metric(logits [N, pos, d_vocab], tokens [N, pos]) -> [N]`` scored against each reference's own tokens;
        default: each example's mean next-token loss.
    resamples
        independent draws of the resampled inputs (≥ 2, for the interval).
    seed
        seeds every draw.
    """
    if not isinstance(hypothesis, Hypothesis):
        raise ArgumentTypeError(f"hypothesis: expected a Hypothesis, got {type(hypothesis).__name__}")
    tokens = check_dataset(model, dataset)
    n = tokens.shape[0]
    fn = next_token_loss if metric is None else metric
    if not callable(fn):
        raise ArgumentTypeError(f"metric: expected a function (logits, tokens) -> [N], got {type(fn).__name__}")
    draws_n = check_int("resamples", resamples, 2)
    check_int("seed", seed)
    for i, path in enumerate(hypothesis.paths):
        check_against(model, path.nodes, f"hypothesis.paths[{i}]")
    groups = [key_groups(path.key, tokens, f"hypothesis.paths[{i}]") for i, path in enumerate(hypothesis.paths)]
    with torch.no_grad():
        store: dict[str, torch.Tensor] = {}
        names = [c for c in CACHED if model.cfg.has_mlp or c not in ("resid_mid", "mlp_out")]
        logits = model.run_from(tokens, 0, None, Recorder(store, set(names)))
        cache = ActivationCache(store)
        check_decomposes(model, cache)
        clean_each = score(fn, logits, tokens)
        gen = torch.Generator().manual_seed(int(seed))
        draws, scrubbed, randoms, assignments = [], [], [], []
        runs = recomputed = 0
        for _ in range(draws_n):
            samples, rest = [same_key(g, gen) for g in groups], other(n, gen)
            assignments.append((samples, rest))
            tree = Treeified(model, tokens, cache, [p.nodes for p in hypothesis.paths], samples, rest)
            s = float(score(fn, unembed(model, tree.stream(("logits",))), tokens).mean())
            r = float(score(fn, logits[other(n, gen)], tokens).mean())
            runs, recomputed = runs + tree.passes, recomputed + tree.recomputed
            scrubbed.append(s)
            randoms.append(r)
            c = float(clean_each.mean())
            if abs(c - r) < 1e-12:
                raise ArgumentError("dataset: full resampling leaves the metric unchanged, so nothing can be recovered")
            draws.append((s - r) / (c - r))
    mean = float(np.mean(draws))
    half = 1.96 * float(np.std(draws, ddof=1)) / math.sqrt(draws_n)
    return Scrub(
        hypothesis.name, [str(p) for p in hypothesis.paths], mean, (mean - half, mean + half), draws,
        float(clean_each.mean()), float(np.mean(scrubbed)), float(np.mean(randoms)),
        str(getattr(fn, "__name__", type(fn).__name__)), n, draws_n, int(seed), runs, runs * n + n, recomputed,
        model.name, {"assignments": assignments},
    )  # fmt: skip


def check_dataset(model: CircuitModel, dataset: object) -> torch.Tensor:
    """The dataset's ids ``[N, pos]``, refused (naming ``dataset``) when lengths differ or it has one example."""
    if isinstance(dataset, (list, tuple)) and dataset and all(isinstance(row, (list, tuple)) for row in dataset):
        lengths = sorted({len(row) for row in dataset})
        if len(lengths) > 1:
            raise ShapeError(
                f"dataset: expected examples of one length (a path reads positions), got lengths {lengths[:5]}"
            )
    try:
        tokens = model._check_tokens(dataset)  # type: ignore[arg-type]
    except (ArgumentError, ArgumentTypeError) as e:
        raise type(e)(f"dataset: {e}") from None
    if tokens.shape[0] < 2:
        raise ShapeError(f"dataset: expected at least 2 examples to resample from, got {tokens.shape[0]}")
    return tokens


def key_groups(key: Callable[[tuple[int, ...]], Hashable], tokens: torch.Tensor, arg: str) -> list[np.ndarray]:
    """Per example, the indices of the examples sharing its key (errors name ``arg``: a key that raises or is
    unhashable)."""
    index: dict[Hashable, list[int]] = {}
    keys = []
    for i, row in enumerate(tokens.tolist()):
        try:
            k = key(tuple(row))
        except Exception as e:  # a user's function: any failure is reported with the path it belongs to
            raise ArgumentError(f"{arg}: the key function raised {type(e).__name__}: {e} on example {i}") from e
        try:
            hash(k)
        except TypeError:
            raise ArgumentTypeError(
                f"{arg}: expected the key function to return a hashable value, got {type(k).__name__} on example {i}"
            ) from None
        index.setdefault(k, []).append(i)
        keys.append(k)
    arrays = {k: np.asarray(v) for k, v in index.items()}
    return [arrays[k] for k in keys]


def same_key(groups: list[np.ndarray], gen: torch.Generator) -> torch.Tensor:
    """Per example, a uniformly drawn example with its key (itself included)."""
    u = torch.rand(len(groups), generator=gen, dtype=torch.float64).numpy()
    return torch.tensor([int(g[min(int(x * len(g)), len(g) - 1)]) for g, x in zip(groups, u, strict=True)])


def other(n: int, gen: torch.Generator) -> torch.Tensor:
    """Per example, a uniformly drawn other example."""
    shift = torch.randint(1, n, (n,), generator=gen)
    return (torch.arange(n) + shift) % n


def unembed(model: CircuitModel, stream: torch.Tensor) -> torch.Tensor:
    """Logits of a final stream: the final norm (its scale from this stream), the unembedding and any soft-cap."""
    x = model._normalize(stream, Recorder({}, set()), "scale_final", None)
    b_U = model.weight("b_U")
    return soft_cap(x @ model.W_U + (b_U if b_U is not None else 0), model.cfg.final_softcap)


def score(fn: ExampleMetric, logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The metric per example ``[N]`` (float64), checked for shape and finiteness (errors name ``metric``)."""
    out = fn(logits, tokens)
    if not isinstance(out, torch.Tensor) or out.shape != (tokens.shape[0],):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ShapeError(f"metric: expected one value per example ({tokens.shape[0]},), got {got}")
    if not bool(torch.isfinite(out).all()):
        raise ArgumentError("metric: returned a non-finite value")
    return out.double()
