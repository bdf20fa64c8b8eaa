"""Every view on Llama-, Gemma-2-, Qwen3- and Gemma-4-shaped models, and the rotary offset they read QK circuits at."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import traitlets
from families import CASES_BY_ID

import circuitwidgets as cw
from circuitwidgets import circuits
from circuitwidgets.sources.huggingface import from_hf

pytestmark = pytest.mark.filterwarnings("ignore::circuitwidgets._checks.MLPPathsExcludedWarning")

FAMILY_CASES = [
    "llama-gqa2-biases-llama3rope",
    "gemma2-softcaps-window",
    "qwen3-qknorm-wide-heads",
    "gemma4-e2b-shaped",
]
TOKENS = [1, 5, 9, 12, 5, 9, 30, 2]


@pytest.fixture(scope="module", params=FAMILY_CASES)
def model(request: pytest.FixtureRequest) -> Any:
    return from_hf(CASES_BY_ID[request.param].build())


def test_every_view_builds_and_says_which_offset_it_reads(model: Any) -> None:
    eigen = cw.EigenScatter(model)
    table = cw.SkipTrigramTable(model, k=5)
    composition = cw.CompositionMap(model)
    assert eigen.qk_offset == table.qk_offset == composition.qk_offset == 0
    attention = cw.AttentionPatterns(model, TOKENS)
    terms = cw.TermImportance(model, TOKENS)
    explorer = cw.CircuitExplorer(model, TOKENS, k=5)
    assert attention.n_heads == model.cfg.n_heads and np.isfinite(terms.losses).all()
    assert explorer.eigen_qk_offset == explorer.trigram_qk_offset == explorer.composition_qk_offset == 0
    # what the scatter shows at offset 0 is the engine's QK circuit at offset 0
    qk = eigen.scores[eigen.methods.index("eigen"), 1]
    np.testing.assert_allclose(qk, circuits.copying_scores(model, circuit="qk", offset=0), atol=1e-5)


def test_changing_the_offset_recomputes_what_depends_on_it(model: Any) -> None:
    eigen = cw.EigenScatter(model, offset=1)
    np.testing.assert_allclose(eigen.scores[0, 1], circuits.copying_scores(model, circuit="qk", offset=1), atol=1e-5)
    ov_before = eigen.scores[0, 0].copy()
    eigen.qk_offset = 3
    np.testing.assert_allclose(eigen.scores[0, 1], circuits.copying_scores(model, circuit="qk", offset=3), atol=1e-5)
    np.testing.assert_array_equal(eigen.scores[0, 0], ov_before)  # the OV circuit does not rotate

    composition = cw.CompositionMap(model)
    composition.qk_offset = 2
    k_scores = composition.scores[1]
    np.testing.assert_allclose(k_scores, circuits.composition_scores(model, "K", offset=2), atol=1e-5)

    table = cw.SkipTrigramTable(model, k=5)
    before = table.row_values.copy()
    table.qk_offset = 2
    assert table.ready.all() and not np.array_equal(table.row_values, before)
    expected = circuits.skip_trigrams(model, 0, 0, k=5, by="qk", offset=2)
    assert {round(r.qk, 4) for r in expected} <= {round(float(v), 4) for v in table.row_values[0, 0, :, 0]}


def test_the_explorer_keeps_one_offset_for_its_views(model: Any) -> None:
    explorer = cw.CircuitExplorer(model, TOKENS, k=5)
    explorer.trigram_qk_offset = 1
    assert explorer.eigen_qk_offset == explorer.composition_qk_offset == 1
    np.testing.assert_allclose(
        explorer.eigen_data["scores"][0, 1], circuits.copying_scores(model, circuit="qk", offset=1), atol=1e-5
    )


@pytest.mark.parametrize("bad", [-1, 10_000])
def test_an_offset_outside_the_context_is_refused(model: Any, bad: int) -> None:
    eigen = cw.EigenScatter(model)
    with pytest.raises(traitlets.TraitError, match="qk_offset"):
        eigen.qk_offset = bad
    assert eigen.qk_offset == 0


def test_a_model_without_rotary_has_no_offset() -> None:
    shipped = cw.load_pretrained("attn-only-2l")
    eigen = cw.EigenScatter(shipped)
    assert eigen.qk_offset == -1
    with pytest.raises(traitlets.TraitError, match="no rotary layer"):
        eigen.qk_offset = 1


def _word_tokenizer() -> Any:
    """A 64-word tokenizer (offline), so a saved checkpoint has text tokens as real ones do."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<unk>", "<s>", "def", "(", ")", "self", "import", "return", ":", "x", "y", "="]
    vocab = {w: i for i, w in enumerate(words + [f"w{i}" for i in range(64 - len(words))])}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", unk_token="<unk>")


@pytest.mark.parametrize(
    ("case_id", "folder_name"), [("qwen3-qknorm-wide-heads", "qwen3"), ("gemma4-e2b-shaped", "gemma4")]
)
def test_the_report_reads_a_save_pretrained_directory(tmp_path: Any, case_id: str, folder_name: str) -> None:
    from circuitwidgets.cli import main

    folder = tmp_path / folder_name
    CASES_BY_ID[case_id].build().save_pretrained(folder)
    _word_tokenizer().save_pretrained(folder)
    out = tmp_path / "report.html"
    assert main(["report", "--model", str(folder), "--text", "def f ( x ) : return x", "-o", str(out)]) == 0
    page = out.read_text()
    assert f'"model_name":"{folder_name}"' in page
    assert page.count('"qk_offset":0') == 3  # the scatter, the table and the composition map say which offset


def test_building_an_explorer_computes_each_weight_space_view_once(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The initial offset traits of a rotary model must not start a recomputation (they once ran every QK view
    three more times: one per child's offset trait)."""
    calls = {"eigen": 0, "composition": 0}
    for name, cls in (("eigen", cw.EigenScatter), ("composition", cw.CompositionMap)):

        def counted(*args: Any, _name: str = name, _original: Any = cls.initial, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(cls, "initial", counted)
    explorer = cw.CircuitExplorer(model, TOKENS, k=5)
    assert calls == {"eigen": 1, "composition": 1}
    explorer.trigram_qk_offset = explorer.trigram_qk_offset + 1  # a real change recomputes once
    assert calls == {"eigen": 2, "composition": 2}
