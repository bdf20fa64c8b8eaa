"""The shipped dictionaries of gelu-2l: they load, fit the model, and their card's numbers are recomputed.

The card's ``ci_metrics`` were measured by ``circuitwidgets.features.publish`` on the first
held-out windows of the corpus with the shipped float16 weights; here they are measured again
from the files (reading the card is not the test: the numbers must come out of the dictionaries).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import circuitwidgets as cw
from circuitwidgets.features.evaluation import evaluate
from circuitwidgets.features.pretrained import (
    dictionaries_dir,
    dictionary_card,
    list_pretrained_dictionaries,
    load_pretrained,
)

NAMES = ["L0.resid_post", "L0.stc", "L0.tc", "L1.tc"]


@pytest.fixture(scope="module")
def model() -> cw.CircuitModel:
    return cw.load_pretrained("gelu-2l")


def test_shipped_dictionaries_load_and_fit(model: cw.CircuitModel) -> None:
    assert list_pretrained_dictionaries("gelu-2l") == NAMES
    dictionaries = cw.features.load_pretrained("gelu-2l")
    assert list(dictionaries) == NAMES
    tokens = model.to_tokens("def f(x):\n    return x + 1\n")
    for name, d in dictionaries.items():
        d.check_model(model)
        f = d.features(model, tokens)
        assert f.shape == (1, tokens.shape[1], d.d_sae) and bool((f >= 0).all())
        assert d.label(3) == f"{name}/3"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_card_metrics_are_recomputed_from_the_files(model: cw.CircuitModel, name: str) -> None:
    card = dictionary_card("gelu-2l")
    entry = card["dictionaries"][name]
    d = load_pretrained("gelu-2l")[name]
    got = evaluate(d, model, torch.tensor(card["evaluation"]["ci_tokens"]))
    for metric, value in entry["ci_metrics"].items():
        assert got[metric] == pytest.approx(value, rel=1e-6, abs=2e-4), metric  # mse is in the thousands
    assert entry["metrics"]["l0"] <= d.k  # at L0 <= 32, as the targets ask
    torch.testing.assert_close(torch.tensor(got["l0"]), torch.tensor(float(d.k)), atol=1.0, rtol=0)


def _meets_targets(metrics: dict[str, float]) -> bool:
    """The issue's targets on held-out code: EV >= 0.85 and CE loss recovered >= 0.90 at L0 <= 32, <= 10 % dead."""
    return (
        metrics["explained_variance"] >= 0.85
        and metrics["ce_loss_recovered"] >= 0.90
        and metrics["l0"] <= 32
        and metrics["dead_fraction"] <= 0.10
    )


def _card_metrics(name: str) -> dict[str, float]:
    """Measured at publishing on the held-out windows (the slow test above recomputes a slice from the files)."""
    card = dictionary_card("gelu-2l")
    assert card["evaluation"]["held_out_windows"] * card["evaluation"]["n_ctx"] >= 100_000
    return dict(card["dictionaries"][name]["metrics"])


@pytest.mark.parametrize("name", ["L0.stc", "L0.resid_post"])
def test_the_layer_0_skip_transcoder_and_the_sae_meet_every_target(name: str) -> None:
    assert _meets_targets(_card_metrics(name))


def test_the_plain_transcoders_recover_the_loss_and_l1_explains_the_variance() -> None:
    l0, l1 = _card_metrics("L0.tc"), _card_metrics("L1.tc")
    assert l0["ce_loss_recovered"] >= 0.90 and l0["dead_fraction"] <= 0.10 and l0["l0"] <= 32
    assert l1["ce_loss_recovered"] >= 0.90 and l1["explained_variance"] >= 0.85 and l1["l0"] <= 32


@pytest.mark.xfail(
    strict=True,
    reason="measured misses, stated on the card's README and in the closing note: L0.tc explains 0.82 of the "
    "variance (its skip-transcoder L0.stc 0.86), and 15-19 % of L1.tc's features never fire on 131k-398k "
    "held-out or training tokens (the lease-cut run was still reviving them when its learning rate decayed)",
)
def test_the_plain_transcoders_meet_every_target() -> None:
    assert _meets_targets(_card_metrics("L0.tc")) or _meets_targets(_card_metrics("L1.tc"))


def test_the_shipped_dictionaries_fit_in_20_mb() -> None:
    entries = dictionary_card("gelu-2l")["dictionaries"]
    assert sum((dictionaries_dir("gelu-2l") / e["file"]).stat().st_size for e in entries.values()) <= 20_000_000


def test_the_readme_table_is_the_cards_measurement() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    card = dictionary_card("gelu-2l")
    n_tokens = {e["metrics"]["n_tokens"] for e in card["dictionaries"].values()}
    assert len(n_tokens) == 1 and f"Measured on {n_tokens.pop():,} held-out tokens" in readme
    for name, e in card["dictionaries"].items():
        m = e["metrics"]
        row = (
            f"| `{name}` | {m['l0']:.0f} | {m['explained_variance']:.3f} | {m['ce_loss_recovered']:.3f} | "
            f"{m['kl_score']:.3f} | {m['dead_fraction'] * 100:.1f} % |"
        )
        assert row in readme, row
