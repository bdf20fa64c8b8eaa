"""Every other figure the README states, read from its source: the shipped cards (training time, induction and
composition scores, the dictionaries' run and metrics), the pins the Makefile installs, the code's constants, and
(cheap enough to run here) the logit lens's prediction on its stated prompt. The causal figures are
``test_readme_figures.py``'s, the dictionaries' table ``test_features_pretrained.py``'s.

Each test builds the README's sentence from the source and requires it verbatim, so a figure that drifts fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from test_features_pretrained import _meets_targets  # (the targets the README states, applied by that test too)

import circuitwidgets as cw

ROOT = Path(__file__).resolve().parent.parent
README = re.sub(r"\s+", " ", (ROOT / "README.md").read_text(encoding="utf-8"))
PRETRAINED = ROOT / "circuitwidgets" / "pretrained"
WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def _card(name: str) -> dict:  # type: ignore[type-arg]
    return json.loads((PRETRAINED / name / "card.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _dictionaries() -> dict:  # type: ignore[type-arg]
    return json.loads((PRETRAINED / "gelu-2l" / "dictionaries" / "card.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _head(finding: dict) -> str:  # type: ignore[type-arg]
    return f"L{finding['layer']}H{finding['head']}"


def test_the_12_head_models_training_time_and_induction_scores_are_its_cards() -> None:
    card = _card("attn-only-2l-12h")
    assert f"It took {round(card['training']['train_seconds']):,} s of wall time" in README
    scores = np.sort(np.asarray(card["findings"]["head_induction"]).ravel())[::-1][:3]
    assert (
        f"its three induction heads end at induction scores {scores[0]:.2f}, {scores[1]:.2f} and {scores[2]:.2f}"
        in README
    )


def test_the_induction_heads_named_are_the_cards() -> None:
    twelve, four, gelu = (
        _card(n)["findings"]["induction_head"] for n in ("attn-only-2l-12h", "attn-only-2l", "gelu-2l")
    )
    n_heads = _card("gelu-2l")["config"]["n_heads"]
    assert f"{n_heads} heads a layer, whose induction head is {_head(gelu)}" in README
    assert f"`attn-only-2l`'s induction head {_head(four)};" in README
    assert f"the 12-head model, whose strongest induction head is {_head(twelve)}" in README
    # the composition paragraph: the previous-token head into the three induction heads, K-composition above baseline
    findings = _card("attn-only-2l-12h")["findings"]
    previous = twelve["previous_token_head"]["head"]
    above = np.asarray(findings["composition_K"])[previous, [5, 7, 9]] - findings["composition_K_baseline"]
    assert len({f"{v:.2f}" for v in above}) == 1
    assert f"The previous-token head L0H{previous} into the induction heads L1H5, L1H7 and L1H9" in README
    assert f"(K-composition {above[0]:.2f} above baseline," in README


def test_the_dictionaries_the_readme_names_and_their_run_are_the_cards() -> None:
    card = _dictionaries()
    entries = card["dictionaries"]
    assert README.count(f"`gelu-2l` ships {WORDS[len(entries)]}") == 2
    for name in entries:
        assert f"`{name}`" in README
    (k,), (width,) = {e["k"] for e in entries.values()}, {e["d_sae"] for e in entries.values()}
    runs = {
        (e["training"]["rows"], e["training"]["train_seconds"], e["hardware"]["cuda_device"]) for e in entries.values()
    }
    assert len(runs) == 1
    rows, seconds, device = runs.pop()
    assert f"[1, pos, {width}], at most {k} active per token" in README
    windows = card["evaluation"]["held_out_windows"]
    assert f"({windows:,} windows of files never trained on)" in README
    assert (
        f"(TopK, k = {k}, width {width:,}; one run of {rows / 1e6:.1f}M rows, {seconds:.0f} s on a lent {device.split()[-1]} GPU;"
        in README
    )
    m = {name: e["metrics"] for name, e in entries.items()}
    assert f"the plain first-MLP transcoder explains {m['L0.tc']['explained_variance']:.2f} of" in README
    assert f"(a linear skip path lifts the same width to {m['L0.stc']['explained_variance']:.2f})" in README
    n_tokens = m["L1.tc"]["n_tokens"]
    assert (
        f"{m['L1.tc']['dead_fraction'] * 100:.0f} % of `L1.tc`'s features never fire on the {n_tokens:,} held-out tokens"
        in README
    )
    met = [f"`{name}`" for name, metrics in m.items() if _meets_targets(metrics)]
    assert f"are met by {' and '.join(met)}." in README
    assert "(explained variance ≥ 0.85 and CE loss recovered ≥ 0.90 at L0 ≤ 32, ≤ 10 % dead)" in README


def test_the_versions_and_limits_the_readme_states_are_the_ones_installed_and_enforced() -> None:
    from circuitwidgets.widgets.attention.arrays import LONG_ARRAY_TOKENS

    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    pins = re.findall(r'"(sae-lens|circuit-tracer)==([\d.]+)"', make)
    assert len(pins) == 2 and all(f"{name} {version}" in README for name, version in pins), pins
    python = re.search(r"command -v python(3\.\d+)", make)
    assert python and f"Python {python.group(1)}, Node" in README and f"`.venv` (Python {python.group(1)})" in README
    torch_pin = re.search(r"TORCH_SPEC := (torch==[\d.]+)", make)
    assert torch_pin and f"`{torch_pin.group(1)}`" in README
    # Node: the highest minimum any package of the committed lockfile declares (vite's ^20.19.0 today)
    lock = json.loads((ROOT / "js" / "package-lock.json").read_text(encoding="utf-8"))
    floors = [
        (int(found.group(1)), int(found.group(2)))
        for entry in lock["packages"].values()
        if (found := re.match(r"\s*(?:\^|>=)\s*(\d+)\.(\d+)", (entry.get("engines") or {}).get("node", "")))
    ]
    major, minor = max(floors)
    assert f"Node ≥ {major}.{minor} with npm" in README
    assert f"one prompt over {LONG_ARRAY_TOKENS:,} tokens is shown as a long context" in README
    architecture = (ROOT / "tests" / "test_architecture.py").read_text(encoding="utf-8")
    limit = re.search(r"MAX_LINES = (\d+)", architecture)
    assert limit and f"is over {limit.group(1)} lines" in README


@pytest.mark.skipif("gelu-2l" not in cw.list_pretrained(), reason="shipped model missing")
def test_the_logit_lens_sentence_is_the_lens_of_its_prompt() -> None:
    from circuitwidgets import causal

    prompt = "def add(self, other):\n    return self.value + other.value"  # scripts/make_readme_images.py's
    source = (ROOT / "scripts" / "make_readme_images.py").read_text(encoding="utf-8")
    assert f"LENS_PROMPT = {prompt!r}".replace("'", '"') in source
    model = cw.load_pretrained("gelu-2l")
    lens = causal.logit_lens(model, prompt)
    pos = len(lens.tokens[0]) - 2  # the second "."
    assert lens.tokens[0][pos] == "."
    name = model.tokenizer.token_str
    final, before_1 = (int(lens.top_ids[r, 0, pos, 0]) for r in (-1, 1))
    p_final, p_before = (float(np.exp(lens.top_log_probs[r, 0, pos, 0])) for r in (-1, 1))
    assert (
        f"the final stream predicts `{name(final).strip()}` at {p_final * 100:.0f}%, the token that followed `self.` "
        f"earlier in the line; before layer 1 its top token is `{name(before_1).strip()}`, at {p_before * 100:.0f}%"
    ) in README


@pytest.mark.skipif("attn-only-2l-12h" not in cw.list_pretrained(), reason="shipped model missing")
def test_the_causal_prompts_are_as_many_as_the_readme_says() -> None:
    from circuitwidgets.causal.induction import SEED, induction_prompts

    p = induction_prompts(cw.load_pretrained("attn-only-2l-12h"))
    n, length = (int(x) for x in p.clean.shape)
    assert f"on {n} prompts of random tokens repeated twice" in README
    assert f"p = induction_prompts(model) # {n} prompts [BOS] r r[:{p.half - 1}] (seed {SEED})" in README
    assert length == 1 + 2 * p.half - 1


def test_the_docs_say_the_shipped_grokking_runs_modulus_and_training_share_from_its_run_file() -> None:
    """Read from the run file, not written here: the shipped grokking run may be replaced by a new one."""
    runs = sorted(PRETRAINED.glob("grokking-*/run.json"))
    assert len(runs) == 1, runs
    run = json.loads(runs[0].read_text(encoding="utf-8"))
    config = run["config"]
    page = (ROOT / "docs" / "training-dynamics.md").read_text(encoding="utf-8")
    steps = max(int(s) for s in run["records"]["step"])
    assert f"p = {config['p']}, {config['fraction'] * 100:.0f} % of the pairs, {steps:,} steps" in page
