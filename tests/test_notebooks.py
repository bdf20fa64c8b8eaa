"""The notebooks run on a fresh install, and what they print is the paper's claims.

Each notebook in ``notebooks/`` is executed once per session with nbclient, in a
kernel of this very interpreter (a kernelspec written to a temporary directory,
the only one the kernel manager searches, so no user or system kernelspec can
substitute another Python; a fresh ``make setup`` venv needs nothing installed), unless the docs build, which
``make test`` runs first, has just executed the same notebook on the same package sources (its cache key hashes
both; ``CW_NOTEBOOKS_EXECUTE=1`` runs them here regardless). Cells whose outputs are checked carry a tag
(``metadata.tags``); each test reads one tagged cell's printed text and asserts
the claim it states, robustly (who is strongest, which layer, which order is
larger; never exact numbers, which change when the shipped weights do).

The README's pictures are checked too: every image the README shows exists,
is small, and is one of the views (or the report pictures) ``scripts/make_readme_images.py``
draws, and every picture it draws is shown.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _notebooks_run import INDUCTION_12H, NAMES, NOTEBOOKS, REPO, executed, find, kernel_dir, number, printed

__all__ = ["executed", "kernel_dir"]  # (fixtures used here, defined with the runner)

pytestmark = pytest.mark.slow


# ----------------------------------------------------------------------------- committed form


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_committed_without_outputs(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    dirty = [c.get("id") for c in nb.cells if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
    assert not dirty, f"{name}.ipynb: strip the outputs of cells {dirty}"
    assert (NOTEBOOKS / f"{name}.ipynb").stat().st_size < 60_000


# ----------------------------------------------------------------------------- 01: zero and one layer


@pytest.fixture(scope="module")
def nb01(executed: Callable[[str], nbformat.NotebookNode]) -> nbformat.NotebookNode:
    return executed("01_zero_and_one_layer")


def test_direct_path_reads_as_python_bigrams(nb01: nbformat.NotebookNode) -> None:
    out = printed(nb01, "bigrams")
    nexts = {m.group(1): ast.literal_eval(m.group(2)) for m in re.finditer(r"next after ('.*?')\s+(\[.*\])", out)}
    assert "." in nexts["'self'"][:3], out  # self.
    assert "self" in nexts["'('"][:3], out  # (self


def test_direct_path_agrees_with_held_out_bigrams_far_above_chance(nb01: nbformat.NotebookNode) -> None:
    out = printed(nb01, "bigram-agreement")
    agreement = {m.group(1): float(m.group(2)) for m in re.finditer(r"(attn-only-\dl): .*? for ([\d.]+)%", out)}
    assert agreement, out
    assert all(v >= 5.0 for v in agreement.values()), out  # chance is 0.05%
    if "attn-only-0l" in agreement:  # the whole zero-layer model is a bigram table; the 1L direct path a residual
        assert agreement["attn-only-0l"] >= agreement["attn-only-1l"], out


def test_one_layer_logits_are_the_sum_of_direct_path_and_head_terms(nb01: nbformat.NotebookNode) -> None:
    assert number(r"largest \|logit - \(direct \+ heads\)\| = (\S+)", printed(nb01, "path-expansion")) < 1e-3


def test_one_layer_heads_copy_by_every_measure_and_random_heads_do_not(nb01: nbformat.NotebookNode) -> None:
    out = printed(nb01, "copying-heads")
    assert abs(number(r"eigenvalue score ([+-][\d.]+) ±", out)) < 0.2, out
    best = find(r"strongest copying head: \S+ \(eigen ([+-][\d.]+), diagonal ([\d.]+), top-5 ([\d.]+)\)", out)
    eigen, diagonal, topk = (float(g) for g in best.groups())
    assert eigen > 0.5 and diagonal > 0.5 and topk > 5 / 2048, out
    positive, total = (int(g) for g in find(r"positive eigenvalue score: (\d+) of (\d+)", out).groups())
    assert 2 * positive >= total, out  # most heads copy


def test_skip_trigram_bug_search_reports_and_the_bugs_are_live(nb01: nbformat.NotebookNode) -> None:
    n_bugs = int(number(r"skip-trigram bugs: (\d+) \(head, source\) pairs", printed(nb01, "skip-trigram-bugs")))
    live = printed(nb01, "bug-live")
    if n_bugs == 0:
        assert "no skip-trigram bug found" in live
        return
    lines = [line for line in live.splitlines() if " raises " in line]
    assert len(lines) == 2, live
    for line in lines:  # at both destinations the head raises both outs, the seen one and the never-seen one
        effects = [float(v) for v in re.findall(r"' ([+-][\d.]+) \(rank", line)]
        assert len(effects) == 2 and all(e > 0 for e in effects), line


# ----------------------------------------------------------------------------- 02: two layers


@pytest.fixture(scope="module")
def nb02(executed: Callable[[str], nbformat.NotebookNode]) -> nbformat.NotebookNode:
    return executed("02_two_layer_induction")


def test_strongest_composition_is_k_composition_from_layer_0_into_layer_1(nb02: nbformat.NotebookNode) -> None:
    out = printed(nb02, "composition")
    assert find(r"strongest composition overall: (\w) from 0\.\d into 1\.\d", out).group(1) == "K", out


def test_induction_heads_attend_to_token_after_previous_copy_via_previous_token_head(
    nb02: nbformat.NotebookNode,
) -> None:
    out = printed(nb02, "heads")
    assert find(r"strongest previous-token head: (\d)\.\d", out).group(1) == "0", out
    assert "the strongest induction head is in layer 1" in out, out
    assert "that is the previous-token head: True" in out, out


def test_two_layer_model_predicts_the_repeat_and_one_layer_model_much_less(nb02: nbformat.NotebookNode) -> None:
    out = printed(nb02, "repeated-loss")
    drops = {m.group(1): float(m.group(2)) for m in re.finditer(r"(attn-only-\dl): .*\(drop ([+-]?[\d.]+)\)", out)}
    assert drops["attn-only-2l"] > 1.0, out
    assert drops["attn-only-2l"] > 2 * drops["attn-only-1l"], out


def test_induction_head_sits_in_the_eigenvalue_corner(nb02: nbformat.NotebookNode) -> None:
    out = printed(nb02, "eigen-corner")
    assert number(r"OV eigenvalue score ([+-][\d.]+)", out) > 0.5, out
    assert number(r"K-composition QK eigenvalue score ([+-][\d.]+)", out) > 0.5, out


def test_order_1_terms_explain_more_loss_than_order_2_and_layer_1_more_than_layer_0(
    nb02: nbformat.NotebookNode,
) -> None:
    out = printed(nb02, "term-importance")
    order = {
        int(m.group(1)): float(m.group(2))
        for m in re.finditer(r"order (\d) terms reduce the loss by ([+-]?[\d.]+)", out)
    }
    layer = {
        int(m.group(1)): float(m.group(2)) for m in re.finditer(r"layer (\d)'s heads alone .* by ([+-]?[\d.]+)", out)
    }
    assert order[0] > order[2] and order[1] > order[2], out
    assert layer[1] > layer[0], out


def test_virtual_heads_contribute_less_than_single_heads(nb02: nbformat.NotebookNode) -> None:
    out = printed(nb02, "virtual-heads")
    single, virtual = (float(g) for g in find(r"single head ([\d.]+), virtual head ([\d.]+)", out).groups())
    assert virtual < single, out
    assert number(r"largest \|logit - \(direct \+ heads \+ virtual heads\)\| = (\S+)", out) < 1e-3, out


# ----------------------------------------------------------------------------- 03: your own model


@pytest.fixture(scope="module")
def nb03(executed: Callable[[str], nbformat.NotebookNode]) -> nbformat.NotebookNode:
    return executed("03_bring_your_own_model")


@pytest.mark.parametrize("tag", ["tl-convert", "hf-convert"])
def test_converted_models_reproduce_their_source_logits(nb03: nbformat.NotebookNode, tag: str) -> None:
    assert number(r"max \|logit difference\|.*: (\S+)", printed(nb03, tag)) < 1e-4


def test_hub_names_are_refused_not_downloaded(nb03: nbformat.NotebookNode) -> None:
    assert printed(nb03, "refuses-names").startswith("NetworkRefusedError:")


def test_a_cell_drives_the_selection_and_reads_it_back(nb03: nbformat.NotebookNode) -> None:
    assert "selected: layer 1, head 2, destination 5" in printed(nb03, "drive-selection")
    refused = printed(nb03, "refuse-selection")
    assert "refused:" in refused and "selected_head" in refused and "still selected: head 2" in refused
    assert "observed: [('selected_head', 0), ('selected_dest', 3)]" in printed(nb03, "observe")
    assert "attention view shows layer 0, head 3" in printed(nb03, "link")


def test_export_writes_one_page_with_every_widget_and_one_bundle(nb03: nbformat.NotebookNode) -> None:
    assert "3 widgets, one script bundle: True" in printed(nb03, "export")


# ----------------------------------------------------------------------------- README pictures


def _readme_script() -> Any:
    spec = importlib.util.spec_from_file_location("make_readme_images", REPO / "scripts" / "make_readme_images.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_images_exist_are_small_and_match_the_script_views() -> None:
    script = _readme_script()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    shown = re.findall(r"!\[[^\]]*\]\((docs/images/[^)\s]+)\)", readme)
    missing = [p for p in shown if not (REPO / p).is_file()]
    assert not missing, f"README shows images that do not exist: {missing}"
    assert len(shown) == len(set(shown))
    on_disk = {p.stem for p in (REPO / "docs" / "images").glob("*.png")}
    assert set(script.VIEWS) == set(script.BUILDERS), "every view needs a builder"
    pictures = set(script.VIEWS) | set(script.REPORT_IMAGES["image_names"]())  # (the views', the reports')
    assert {Path(p).stem for p in shown} == pictures == on_disk
    big = {p: (REPO / p).stat().st_size for p in shown if (REPO / p).stat().st_size > script.MAX_BYTES}
    assert not big, f"images over {script.MAX_BYTES} bytes: {big}"


def test_readme_links_every_notebook() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((notebooks/[^)\s]+\.ipynb)\)", readme))
    assert linked == {f"notebooks/{name}.ipynb" for name in NAMES}
    assert {p.stem for p in NOTEBOOKS.glob("*.ipynb")} == set(NAMES)


def test_twelve_head_model_has_several_induction_heads_fed_by_one_previous_token_head(
    nb02: nbformat.NotebookNode,
) -> None:
    out = printed(nb02, "twelve-heads")
    heads = re.findall(r"L1H(\d+) ([\d.]+)", out.splitlines()[0])
    assert len(heads) >= 3 and all(float(score) >= 0.3 for _, score in heads)
    first, second = (float(v) for v in re.findall(r": (-?[\d.]+)", out.splitlines()[1]))
    assert first >= 2.5 * second


def test_the_phase_change_is_shown(nb02: nbformat.NotebookNode) -> None:
    out = printed(nb02, "phase-change")
    found = re.search(r"around step (\d+) \(between (\d+) and (\d+)\)", out)
    assert found is not None, out
    step, start, end = (int(v) for v in found.groups())
    assert 0 < start <= step <= end and end - start <= 4_000


# ----------------------------------------------------------------------------- 04: causal methods


@pytest.fixture(scope="module")
def nb04(executed: Callable[[str], nbformat.NotebookNode]) -> nbformat.NotebookNode:
    return executed("04_causal_induction")


def test_ablation_finds_the_previous_token_head_and_induction_heads(nb04: nbformat.NotebookNode) -> None:
    out = printed(nb04, "ablation")
    heads = ast.literal_eval(find(r"hurts most: (\[.*\])", out).group(1))
    assert "L0H11" in heads and len(set(heads) & set(INDUCTION_12H)) >= 2, out


def test_head_patching_three_strongest_heads_are_the_induction_heads(nb04: nbformat.NotebookNode) -> None:
    out = printed(nb04, "head-patching")
    assert ast.literal_eval(find(r"three strongest heads: (\[.*\])", out).group(1)) == INDUCTION_12H, out
    assert number(r"previous-token head L0H11 alone: ([+-][\d.]+)", out) < 0.1, out  # does not restore induction


def test_the_previous_token_head_restores_when_only_the_address_is_corrupted(nb04: nbformat.NotebookNode) -> None:
    out = printed(nb04, "previous-token-alone")
    assert number(r"restoring the previous-token head L0H11: ([+-][\d.]+)", out) > 0.6, out
    patterned = re.findall(r"attention pattern of (L\d+H\d+)", out)
    assert sorted(patterned) == INDUCTION_12H, out


def test_path_patching_runs_through_the_induction_heads_keys_not_queries_or_values(nb04: nbformat.NotebookNode) -> None:
    out = printed(nb04, "path-patching")
    via = {m.group(1): float(m.group(2)) for m in re.finditer(r"via (\w): strongest receiver \S+ ([+-][\d.]+)", out)}
    assert via["k"] > 0.2 and via["q"] < 0.05 and via["v"] < 0.05, out
    assert ast.literal_eval(find(r"strongest key receivers: (\[.*\])", out).group(1)) == INDUCTION_12H, out


def test_weights_and_causal_test_name_the_same_heads(nb04: nbformat.NotebookNode) -> None:
    out = printed(nb04, "agreement")
    assert "weights and causal test agree: True" in out, out


def test_on_the_gelu_model_the_key_path_runs_through_the_first_mlp(nb04: nbformat.NotebookNode) -> None:
    out = printed(nb04, "gelu")
    assert number(r"restoring L0H\d+: ([+-][\d.]+)", out) > 0.5, out
    direct = number(r"-> keys, strongest receiver \S+: ([+-][\d.]+)", out)
    via_mlp = number(r"answer's earlier position: ([+-][\d.]+)", out)
    assert direct < 0.1 < 0.5 < via_mlp, out


def test_notebook_04_exports_offline_with_no_saved_progress_bar(nb04: nbformat.NotebookNode) -> None:
    """Our sweeps' progress bars are plain text, never ipywidgets saved with the notebook, so the
    ``--to circuitwidgets`` page of the executed notebook loads no widget manager and requests nothing."""
    import json as json_module

    from circuitwidgets.nbexport import OfflineHTMLExporter, make_widgets_offline

    nb = nbformat.from_dict(json_module.loads(json_module.dumps(nb04)))  # type: ignore[no-untyped-call]
    assert make_widgets_offline(nb) >= 1  # our views become offline views
    assert "widgets" not in nb.metadata, "a widget other than ours (a progress bar?) was saved"
    html, _ = OfflineHTMLExporter().from_notebook_node(nb)  # type: ignore[no-untyped-call]
    assert "html-manager" not in html and "require.js" not in html
    assert not re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html), "the page would make a request"


# ----------------------------------------------------------------------------- 05: superposition


@pytest.fixture(scope="module")
def nb05(executed: Callable[[str], nbformat.NotebookNode]) -> nbformat.NotebookNode:
    return executed("05_superposition")


def test_five_features_in_two_dimensions_go_from_two_to_antipodal_pairs_to_a_pentagon(
    nb05: nbformat.NotebookNode,
) -> None:
    out = printed(nb05, "intro")
    rows = {
        m.group(1): (int(m.group(2)), ast.literal_eval(m.group(3)))
        for m in re.finditer(r"1 - S = ([\d.]+): (\d) represented, gaps (\[.*?\]) degrees", out)
    }
    assert rows["1.000"][0] == 2 and sorted(rows["1.000"][1]) == [90, 270], out
    assert rows["0.300"][0] == 4 and all(abs(g - 90) <= 4 for g in rows["0.300"][1]), out
    for sparse in ("0.030", "0.010"):
        assert rows[sparse][0] == 5 and all(abs(g - 72) <= 3 for g in rows[sparse][1]), out


def test_feature_dimensionality_sticks_to_the_papers_fractions(nb05: nbformat.NotebookNode) -> None:
    out = printed(nb05, "dimensionality")
    assert "1 - S = 1.000: ['dedicated dimension']" in out and "1 - S = 0.300: ['antipodal pair']" in out, out
    assert "1 - S = 0.030: ['pentagon']" in out and "1 - S = 0.010: ['pentagon']" in out, out
    assert all(float(d) < 0.04 for d in re.findall(r"largest distance to a fraction ([\d.]+)", out)), out


def test_the_extra_feature_is_dropped_given_a_dimension_or_superposed_as_the_paper_says(
    nb05: nbformat.NotebookNode,
) -> None:
    out = printed(nb05, "phases")
    assert "1 - S = 1.0, r = 0.1: not represented" in out, out
    assert "1 - S = 1.0, r = 10.0: dedicated dimension" in out, out
    assert "1 - S = 0.01, r = 1.0: superposition" in out, out


def test_a_docs_execution_is_reused_only_for_the_same_notebook_and_package_sources(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("cw_docs_key", REPO / "docs" / "_ext" / "cw_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = NOTEBOOKS / f"{NAMES[0]}.ipynb"
    edited = tmp_path / source.name
    edited.write_bytes(source.read_bytes().replace(b"import", b"import ", 1))
    digest = module._sources_digest()
    key = module.cached_execution(source, digest)
    assert key.parent == module.CACHE and key.name.startswith(NAMES[0] + "-")
    assert module.cached_execution(edited, digest) != key  # an edited notebook: run again
    assert module.cached_execution(source, digest + "0") != key  # edited package sources: run again
    assert module.cached_execution(source) == key  # (the default digest is the current sources')
