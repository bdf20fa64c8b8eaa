"""Fuzzed calls of the causal API (issue 45, finding 5): every bad input a typed error naming the argument, every
good one a finite result; none untyped, none silent.

Each argument is drawn from a pool of values marked good, bad, or either (a value whose verdict depends on the
model, such as ``by="neuron"`` on a model without MLPs). A call with a bad value must raise a
:class:`~circuitwidgets.errors.CircuitWidgetsError` whose message names an argument; a call of good values must
return finite values (or raise a typed error that says why it cannot). Hypothesis draws the calls
(``derandomize``: the same calls on every run); the listed cases of the issue run one by one as well.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from conftest import make_random_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from circuitwidgets import causal
from circuitwidgets.errors import CircuitWidgetsError

GOOD, BAD, EITHER = "good", "bad", "either"
MODEL = make_random_model(n_layers=2, n_heads=2, d_model=8, d_head=4, d_vocab=20, n_ctx=16)
V = MODEL.cfg.d_vocab
_g = torch.Generator().manual_seed(0)
CLEAN = torch.randint(0, V, (2, 5), generator=_g)
CORRUPTED = torch.randint(0, V, (2, 5), generator=_g)

#: Each argument's pool: (label, value, verdict).
Pool = list[tuple[str, Any, str]]
MODELS: Pool = [("model", MODEL, GOOD), ("None", None, BAD), ("str", "gpt2", BAD), ("int", 3, BAD)]
TOKENS: Pool = [
    ("ids", CLEAN, GOOD),
    ("uint64", CLEAN.numpy().astype(np.uint64), GOOD),
    ("int32 list", CLEAN.int().tolist(), GOOD),
    ("uint64 max", np.full((2, 5), 2**64 - 1, dtype=np.uint64), BAD),
    ("float", CLEAN.double(), BAD),
    ("bool", CLEAN > 3, BAD),
    ("out of vocab", CLEAN + V, BAD),
    ("negative", -CLEAN - 1, BAD),
    ("empty", torch.zeros(2, 0, dtype=torch.long), BAD),
    ("3-d", CLEAN[None], BAD),
    ("None", None, BAD),
    ("dict", {"ids": 1}, BAD),
    ("too long", torch.zeros(1, 40, dtype=torch.long), BAD),
]
CORRUPT: Pool = [("ids", CORRUPTED, GOOD), ("other shape", CORRUPTED[:, :4], BAD), ("None", None, BAD)]
METRICS: Pool = [
    ("logit_diff", causal.logit_diff(1, 2), GOOD),
    ("normalised", causal.normalised(causal.logit_diff(1, 2)), GOOD),
    ("function", lambda logits: logits[:, -1, 3].mean(), GOOD),
    ("complex", lambda logits: logits[:, -1, 3].mean() * 1j, BAD),
    ("vector", lambda logits: logits[:, -1, 3], BAD),
    ("nan", lambda logits: logits[:, -1, 3].mean() * float("nan"), BAD),
    ("str result", lambda logits: "high", BAD),
    ("None", None, BAD),
    ("not callable", "logit_diff", BAD),
    ("id out of vocab", causal.logit_diff(V + 5, 2), BAD),
]
SITES: Pool = [
    *((s, s, GOOD) for s in ("resid_pre", "attn_out", "z", "q", "pattern", "result")),
    ("hook_z", "hook_z", GOOD),
    ("mlp_post (no MLP)", "mlp_post", BAD),
    ("TL name with layer", "blocks.0.attn.hook_z", BAD),
    ("unknown", "zz", BAD),
    ("None", None, BAD),
    ("int", 3, BAD),
]
BYS: Pool = [
    ("layer,pos", ("layer", "pos"), EITHER),  # pos: every site above has it
    ("layer,head", ("layer", "head"), EITHER),  # head: only the per-head sites
    ("layer", ("layer",), GOOD),
    ("str", "layer", GOOD),
    ("no layer", ("pos",), BAD),
    ("twice", ("layer", "layer"), BAD),
    ("unknown", ("layer", "batch"), BAD),
    ("None", None, BAD),
]
FLAGS: Pool = [("False", False, GOOD), ("True", True, GOOD), ("'yes'", "yes", BAD), ("None", None, BAD), ("1", 1, BAD)]
BUDGETS: Pool = [("None", None, GOOD), ("1 MiB", 2**20, GOOD), ("0", 0, BAD), ("-5", -5, BAD), ("str", "1GB", BAD),
                 ("float", 1.5, BAD)]  # fmt: skip
TOPS: Pool = [("None", None, GOOD), ("1", 1, GOOD), ("0", 0, BAD), ("huge", 10**9, BAD), ("str", "3", BAD)]
ANSWERS: Pool = [
    ("id", 3, GOOD),
    ("pair", (1, 2), GOOD),
    ("per prompt", [1, 2], GOOD),
    ("[batch, 2]", torch.tensor([[1, 2], [3, 4]]), GOOD),
    ("direction", torch.ones(8), GOOD),
    ("nan direction", torch.full((8,), float("nan")), BAD),
    ("inf direction", torch.full((8,), float("inf")), BAD),
    ("wrong direction size", torch.ones(7), BAD),
    ("None", None, BAD),
    ("dict", {"a": 1}, BAD),
    ("out of vocab", V, BAD),
    ("negative", -1, BAD),
    ("float", 1.5, BAD),
    ("three ids", [1, 2, 3], BAD),
    ("empty", [], BAD),
]
POSITIONS: Pool = [("-1", -1, GOOD), ("0", 0, GOOD), ("99", 99, BAD), ("-99", -99, BAD), ("float", 1.5, BAD),
                   ("bool", True, BAD)]  # fmt: skip
DLA_BY: Pool = [("component", "component", GOOD), ("head", "head", GOOD), ("layer", "layer", GOOD),
                ("neuron (no MLP)", "neuron", BAD), ("unknown", "bogus", BAD)]  # fmt: skip
REDUCE: Pool = [("mean", "mean", GOOD), ("none", "none", GOOD), ("max", "max", BAD)]
KS: Pool = [("5", 5, GOOD), ("V", V, GOOD), ("0", 0, BAD), ("too many", V + 1, BAD), ("float", 2.5, BAD)]
RANK_IDS: Pool = [("3", 3, GOOD), ("np.int64", np.int64(4), GOOD), ("-1", -1, BAD), ("V", V, BAD),
                  ("2048", 2048, BAD), ("float", 1.5, BAD), ("None", None, BAD)]  # fmt: skip
KINDS: Pool = [("zero", "zero", GOOD), ("mean", "mean", GOOD), ("unknown", "median", BAD), ("None", None, BAD)]
SENDERS: Pool = [("(0, 1)", (0, 1), GOOD), ("None", None, GOOD), ("last layer", (1, 0), BAD),
                 ("out of range", (5, 0), BAD), ("list", [0, 1], BAD), ("str", "L0H1", BAD)]  # fmt: skip
VIAS: Pool = [("q", "q", GOOD), ("k", "k", GOOD), ("v", "v", GOOD), ("z", "z", BAD), ("None", None, BAD)]

PER_HEAD_SITES = {"z", "q", "result", "pattern", "hook_z"}

#: Each function: its arguments (name → pool), and how to call it.
API: dict[str, tuple[dict[str, Pool], Callable[..., Any]]] = {
    "patch": (
        {
            "model": MODELS,
            "clean": TOKENS,
            "corrupted": CORRUPT,
            "metric": METRICS,
            "site": SITES,
            "by": BYS,
            "freeze_norms": FLAGS,
            "memory_budget": BUDGETS,
            "top": TOPS,
        },
        causal.patch,
    ),
    "ablate": (
        {
            "model": MODELS,
            "tokens": TOKENS,
            "metric": METRICS,
            "site": SITES,
            "by": BYS,
            "kind": KINDS,
            "freeze_norms": FLAGS,
            "memory_budget": BUDGETS,
        },
        causal.ablate,
    ),
    "attribution_patch": (
        {"model": MODELS, "clean": TOKENS, "corrupted": CORRUPT, "metric": METRICS, "site": SITES, "by": BYS},
        causal.attribution_patch,
    ),
    "path_patch": (
        {
            "model": MODELS,
            "clean": TOKENS,
            "corrupted": CORRUPT,
            "metric": METRICS,
            "sender": SENDERS,
            "via": VIAS,
            "freeze_norms": FLAGS,
        },
        causal.path_patch,
    ),
    "logit_attribution": (
        {"model": MODELS, "tokens": TOKENS, "answers": ANSWERS, "by": DLA_BY, "pos": POSITIONS, "reduce": REDUCE},
        causal.logit_attribution,
    ),
    "logit_lens": ({"model": MODELS, "tokens": TOKENS, "k": KS}, causal.logit_lens),
    "LogitLens.rank": ({"ids": RANK_IDS}, lambda ids: LENS.rank(ids)),
    "per_token_loss": ({"model": MODELS, "tokens": TOKENS}, causal.per_token_loss),
}
LENS = causal.logit_lens(MODEL, CLEAN)


def _verdict(name: str, args: dict[str, tuple[str, Any, str]]) -> str:
    """The call's verdict: bad if any argument is bad; either if one's verdict depends on the others; else good."""
    verdicts = {arg: v for arg, (_, _, v) in args.items()}
    if "by" in args and args["by"][2] == EITHER and "site" in args:  # ("layer", "head") needs a per-head site
        by, site = args["by"][1], args["site"][1]
        verdicts["by"] = GOOD if "head" not in by or site in PER_HEAD_SITES else BAD
    if name == "ablate" and args["kind"][1] == "mean" and args["tokens"][2] == GOOD:
        verdicts["kind"] = GOOD
    values = set(verdicts.values())
    return BAD if BAD in values else (EITHER if EITHER in values else GOOD)


def _finite(result: Any) -> bool:
    values = getattr(result, "values", result)
    if hasattr(result, "top_ids"):
        values = result.top_log_probs
    array = np.asarray(values, dtype=np.float64)
    if getattr(result, "extra", {}).get("top") is not None or getattr(result, "technique", "") == "path patching":
        return bool(np.isfinite(array).any())  # the cells not patched (top) or unreachable (path) are NaN by design
    return bool(np.isfinite(array).all())


#: The outcomes of every call made in this module: (function, verdict, outcome) → count.
TABLE: Counter[tuple[str, str, str]] = Counter()
_NAMES_AN_ARGUMENT = re.compile(r"^[\w .()\[\]'/-]+:")


def run_case(name: str, args: dict[str, tuple[str, Any, str]]) -> str:
    """Call ``name`` with the drawn arguments and classify: ``result``, ``typed``, ``untyped`` or ``silent``."""
    fn = API[name][1]
    verdict = _verdict(name, args)
    try:
        result = fn(**{arg: value for arg, (_, value, _) in args.items()})
    except CircuitWidgetsError as error:
        outcome = "typed" if _NAMES_AN_ARGUMENT.match(str(error)) else "untyped"
    except Exception:  # anything else is what the test counts as untyped
        outcome = "untyped"
    else:
        outcome = "silent" if verdict == BAD or not _finite(result) else "result"
    TABLE[(name, verdict, outcome)] += 1
    return outcome


def _describe(name: str, args: dict[str, tuple[str, Any, str]]) -> str:
    return f"{name}(" + ", ".join(f"{arg}={label}" for arg, (label, _, _) in args.items()) + ")"


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, tuple[str, Any, str]]]:
    name = draw(st.sampled_from(sorted(API)))
    pools = API[name][0]
    # mostly good values with one or two drawn from the whole pool, so each bad value is tried on its own
    args = {arg: pool[0] for arg, pool in pools.items()}
    for arg in draw(st.lists(st.sampled_from(sorted(pools)), min_size=0, max_size=2, unique=True)):
        args[arg] = draw(st.sampled_from(pools[arg]))
    return name, args


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(calls())
def test_fuzzed_calls_are_typed_or_correct(call: tuple[str, dict[str, tuple[str, Any, str]]]) -> None:
    name, args = call
    outcome = run_case(name, args)
    assert outcome in ("typed", "result"), f"{outcome}: {_describe(name, args)}"


@pytest.mark.slow
def test_every_pool_value_one_at_a_time() -> None:
    """Each value of each argument's pool, the others good: every function, every value (about 320 calls)."""
    failures = []
    for name, (pools, _) in API.items():
        for arg, pool in pools.items():
            for item in pool:
                args = {a: p[0] for a, p in pools.items()} | {arg: item}
                outcome = run_case(name, args)
                if outcome not in ("typed", "result"):
                    failures.append(f"{outcome}: {_describe(name, {arg: item})}")
    assert failures == []


LISTED = [  # the issue's fuzzed cases, each with the argument its message must name
    ("patch", {"clean": TOKENS[1], "corrupted": ("uint64", CORRUPTED.numpy().astype(np.uint64), GOOD)}, None),
    ("patch", {"model": MODELS[1]}, "model"),
    ("patch", {"model": MODELS[2]}, "model"),
    ("logit_lens", {"model": MODELS[3]}, "model"),
    ("logit_attribution", {"answers": ANSWERS[8]}, "answers"),
    ("logit_attribution", {"answers": ("str", "x y z", BAD)}, "answers"),
    ("logit_attribution", {"answers": ANSWERS[9]}, "answers"),
    ("LogitLens.rank", {"ids": RANK_IDS[4]}, "ids"),
    ("LogitLens.rank", {"ids": RANK_IDS[2]}, "ids"),
    ("logit_attribution", {"answers": ANSWERS[5]}, "answers"),
    ("logit_attribution", {"answers": ANSWERS[6]}, "answers"),
    ("patch", {"freeze_norms": FLAGS[2]}, "freeze_norms"),
    ("patch", {"freeze_norms": FLAGS[3]}, "freeze_norms"),
    ("path_patch", {"freeze_norms": FLAGS[2]}, "freeze_norms"),
    ("patch", {"metric": METRICS[3]}, "metric"),
    ("attribution_patch", {"metric": METRICS[3]}, "metric"),
]


@pytest.mark.parametrize(("name", "changed", "named"), LISTED, ids=[f"{n}-{next(iter(c))}" for n, c, _ in LISTED])
def test_the_issues_cases(name: str, changed: dict[str, tuple[str, Any, str]], named: str | None) -> None:
    args = {arg: pool[0] for arg, pool in API[name][0].items()} | changed
    if named is None:
        assert run_case(name, args) == "result"
        return
    with pytest.raises(CircuitWidgetsError, match=rf"^{named}\b"):
        API[name][1](**{arg: value for arg, (_, value, _) in args.items()})
    TABLE[(name, BAD, "typed")] += 1


def test_zz_fuzz_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The table of every call above (runs last in this module): cases, typed, silent, untyped."""
    if not TABLE:
        pytest.skip("run with the fuzz tests above")
    totals = Counter({outcome: 0 for outcome in ("result", "typed", "untyped", "silent")})
    for (_, _, outcome), n in TABLE.items():
        totals[outcome] += n
    with capsys.disabled():
        print(f"\nfuzz table: {sum(totals.values())} cases, {totals['typed']} typed errors, "
              f"{totals['result']} results, {totals['untyped']} untyped, {totals['silent']} silent")  # fmt: skip
    assert totals["untyped"] == 0 and totals["silent"] == 0
