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
import itertools
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
NAMES = (
    "01_zero_and_one_layer",
    "02_two_layer_induction",
    "03_bring_your_own_model",
    "04_causal_induction",
    "05_superposition",
    "06_features",
    "07_attribution_graph",
    "08_circuit_discovery",
    "09_testing_hypotheses",
    "10_training_dynamics",
)
KERNEL = "circuitwidgets-notebooks"
CELL_TIMEOUT_S = 300

pytestmark = pytest.mark.slow


# ----------------------------------------------------------------------------- running


@pytest.fixture(scope="session")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding one kernelspec: this interpreter, offline for hubs."""
    pytest.importorskip("ipykernel")
    from ipykernel.kernelspec import write_kernel_spec

    root = tmp_path_factory.mktemp("kernels")
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # the notebooks never reach a hub; make sure
    write_kernel_spec(root / KERNEL, overrides={"display_name": "circuitwidgets tests", "env": offline})
    return root


@pytest.fixture(scope="session")
def executed(kernel_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], nbformat.NotebookNode]:
    """``executed(name)``: the notebook run top to bottom (once per session), with its outputs.

    The kernel manager looks for kernelspecs in :func:`kernel_dir` only, so no user
    or system kernelspec named like ours can run another Python.
    """
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    done: dict[str, nbformat.NotebookNode] = {}
    executions = docs_executions()

    def run(name: str) -> nbformat.NotebookNode:
        if name not in done and (reused := executions.get(name)) is not None:
            # the docs build ran this very notebook on these very sources, top to bottom, in a kernel of this
            # interpreter (its cache key hashes both): its outputs are what running it again would print
            sys.stderr.write(f"\n{name}.ipynb: the docs build's execution reused ({reused.name})\n")
            done[name] = nbformat.read(reused, as_version=4)
        if name not in done:
            nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
            km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dir)]))
            workdir = tmp_path_factory.mktemp(name)
            started = time.monotonic()
            NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, resources={"metadata": {"path": str(workdir)}}).execute()
            elapsed = time.monotonic() - started
            sys.stderr.write(f"\n{name}.ipynb executed in {elapsed:.0f}s\n")
            done[name] = nb
        return done[name]

    return run


def docs_executions() -> dict[str, Path]:
    """``{name: path}`` of the notebooks the docs build executed on the current notebook and package sources.

    ``make test`` builds the docs (executing every notebook, cached in ``docs/_build/.executed/`` under a key of
    the notebook's bytes and the package's sources) before pytest; a notebook whose key matches is not run twice.
    None when the docs extension cannot be loaded (no Sphinx) or ``CW_NOTEBOOKS_EXECUTE=1`` asks for fresh runs.
    """
    if os.environ.get("CW_NOTEBOOKS_EXECUTE") == "1":
        return {}
    spec = importlib.util.spec_from_file_location("cw_docs_for_tests", REPO / "docs" / "_ext" / "cw_docs.py")
    if spec is None or spec.loader is None:
        return {}
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError:
        return {}
    found = {}
    digest = module._sources_digest()  # (once: it reads the package and its shipped weights)
    for name in NAMES:
        path = module.cached_execution(NOTEBOOKS / f"{name}.ipynb", digest)
        if path.is_file():
            found[name] = path
    return found


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


def printed(nb: nbformat.NotebookNode, tag: str) -> str:
    """Everything the cell tagged ``tag`` wrote to stdout."""
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"expected one cell tagged {tag!r}, found {len(cells)}"
    return "".join(o.get("text", "") for o in cells[0].outputs if o.output_type == "stream" and o.name == "stdout")


def find(pattern: str, text: str) -> re.Match[str]:
    match = re.search(pattern, text)
    assert match, f"expected output matching {pattern!r}, got:\n{text}"
    return match


def number(pattern: str, text: str) -> float:
    return float(find(pattern, text).group(1))


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


INDUCTION_12H = ["L1H5", "L1H7", "L1H9"]


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


# ----------------------------------------------------------------------------- 08: circuit discovery


@pytest.fixture(scope="module")
def nb08(executed: Callable[[str], nbformat.NotebookNode]) -> nbformat.NotebookNode:
    return executed("08_circuit_discovery")


def test_the_strongest_edges_are_the_induction_heads_writing_the_answer(nb08: nbformat.NotebookNode) -> None:
    out = printed(nb08, "discovery")
    top = re.findall(r"(\S+) → (\S+)\s+([+-][\d.]+)", out)
    into_logits = [s for s, r, w in top[:4] if r == "logits" and float(w) < 0]
    assert len(set(into_logits) & set(INDUCTION_12H)) >= 2, out


# measured (8 pairs, seed 0): attn-only-2l-12h ρ 0.898 / 0.571 / 0.835 / 0.756, top-20 0.85 / 0.65 / 0.80 / 0.75;
# gelu-2l ρ 0.721 / 0.642 / 0.723 / 0.638, ρ of |score| 0.973 / 0.854 / 0.935 / 0.888, top-20 0.70 / 0.80 / 0.70 / 0.80
AGREEMENT = {  # model prefix, method: (ρ above, ρ of |score| above, top-20 overlap at least)
    ("", "eap"): (0.8, 0.9, 0.7), ("", "eap-ig-inputs"): (0.4, 0.7, 0.5), ("", "eap-ig-activations"): (0.7, 0.8, 0.7),
    ("", "clean-corrupted"): (0.6, 0.8, 0.6), ("gelu-2l ", "eap"): (0.6, 0.9, 0.6),
    ("gelu-2l ", "eap-ig-inputs"): (0.5, 0.8, 0.6), ("gelu-2l ", "eap-ig-activations"): (0.6, 0.85, 0.6),
    ("gelu-2l ", "clean-corrupted"): (0.5, 0.8, 0.6),
}  # fmt: skip


@pytest.mark.parametrize(("model", "method"), AGREEMENT)
def test_every_methods_scores_agree_with_exact_edge_patching(
    nb08: nbformat.NotebookNode, model: str, method: str
) -> None:
    out = printed(nb08, "gelu" if model else "agreement")
    found = find(rf"(?m)^{model}{method}: rho ([\d.]+), rho of \|score\| ([\d.]+), top-20 overlap ([\d.]+)", out)
    rho, abs_rho, top = AGREEMENT[(model, method)]
    assert float(found.group(1)) > rho and float(found.group(2)) > abs_rho and float(found.group(3)) >= top, out


def test_a_small_circuit_is_faithful_and_the_ends_are_exact(nb08: nbformat.NotebookNode) -> None:
    out = printed(nb08, "curve")
    assert (
        "top   0 edges (  0 kept): faithfulness +0.000" in out
        and "top 529 edges (529 kept): faithfulness +1.000" in out
    )
    kept = number(r"smallest circuit reaching 0.8: (\d+) of 529", out)
    assert kept < 0.2 * 529 and number(r"CPR ([\d.]+)", out) > 0.8, out


def test_kept_key_edges_are_the_k_composition_and_path_patching_heads(nb08: nbformat.NotebookNode) -> None:
    out = printed(nb08, "kcomp")
    kept = ast.literal_eval(find(r"kept edges into keys: (\[.*?\])", out).group(1))
    assert kept == INDUCTION_12H, out
    assert ast.literal_eval(find(r"K-composition: (\[.*\])", out).group(1)) == INDUCTION_12H, out
    assert ast.literal_eval(find(r"path patching into keys: (\[.*\])", out).group(1)) == INDUCTION_12H, out


def test_on_the_gelu_model_the_circuit_reaches_keys_through_the_first_mlp(nb08: nbformat.NotebookNode) -> None:
    out = printed(nb08, "gelu")
    assert len(ast.literal_eval(find(r"MLP0 → keys: (\[.*\])", out).group(1))) >= 3, out
    assert ast.literal_eval(find(r"layer-0 heads → keys: (\[.*\])", out).group(1)) == [], out


# ----------------------------------------------------------------------------- 06: features


@pytest.fixture(scope="module")
def nb06(executed: Callable[[str], nbformat.NotebookNode]) -> nbformat.NotebookNode:
    from circuitwidgets import features
    from circuitwidgets.errors import ArgumentError

    try:
        features.load_pretrained("gelu-2l")
    except ArgumentError as exc:  # (the shipped dictionaries come with issue 39's training half, branch h-feat)
        if "ships no dictionaries" not in str(exc):
            raise
        pytest.skip(f"06_features reads the shipped dictionaries, not in this tree: {exc}")
    return executed("06_features")


def test_the_quote_neuron_fires_on_quotes_before_line_breaks(nb06: nbformat.NotebookNode) -> None:
    out = printed(nb06, "neuron317")
    # measured: 1.00 on quotes, 0.75 followed by a line break
    assert number(r"L1N317: ([\d.]+) of its top 20 contexts are on a quote", out) >= 0.9
    assert number(r"([\d.]+) followed by a line break", out) >= 0.5


def test_the_quote_neurons_job_is_split_across_features_on_quotes_that_promote_whitespace(
    nb06: nbformat.NotebookNode,
) -> None:
    out = printed(nb06, "split317")
    pattern = (
        r"L1\.tc/(\d+): correlation ([-\d.]+), decoder cosine with W_out\[317\] ([-\d.]+), "
        r"([\d.]+) of top contexts on a quote, promotes (\d+)/10 whitespace tokens"
    )
    rows = re.findall(pattern, out)
    assert len(rows) == 3, out
    # measured (the shipped width-4,096 L1.tc): correlations 0.82, 0.82, 0.81; cosines 0.94, 0.88, 0.81; 0.75, 1.00
    # and 1.00 of top contexts on quotes; 9, 9 and 8 of 10 promoted tokens whitespace
    for _, corr, cos, quote, blank in rows:
        assert float(corr) > 0.2 and float(cos) > 0.2 and float(quote) >= 0.7 and int(blank) >= 5
    assert find(r"most aligned decoder: L1\.tc/(\d+)", out).group(1) in {r[0] for r in rows}


def test_the_induction_answer_is_the_heads_and_the_feature_adding_most_reads_them(nb06: nbformat.NotebookNode) -> None:
    out = printed(nb06, "induction")
    # measured: heads 3.10, all features -0.03; L1.tc/1902 +4.09 in the repeated half, 1.6x the average feature
    heads = number(r"direct effect on the answer ([-\d.]+)", out)
    assert heads > 2 * abs(number(r"features together: ([-\d.]+)", out))
    assert number(r"activation ([-+\d.]+) in the repeated half", out) > 0
    assert number(r"reads the induction heads ([\d.]+)x the average feature", out) > 1.3


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


# ----------------------------------------------------------------------------- 07: attribution graphs


@pytest.fixture(scope="module")
def nb07(executed: Callable[[str], nbformat.NotebookNode]) -> nbformat.NotebookNode:
    return executed("07_attribution_graph")


def test_the_graph_explains_the_induction_answer_with_scores_between_0_and_1(nb07: nbformat.NotebookNode) -> None:
    out = printed(nb07, "graph")
    # measured (first shipped transcoders): ' +=' at p 0.86; 57 nodes, 37 features; replacement 0.795, completeness 0.930
    assert find(r"the model predicts (.*) with p", out).group(1) == "' +='"
    assert number(r"with p = ([\d.]+)", out) > 0.5
    assert "top logit node: logit '·+='" in out
    for name in ("replacement", "completeness"):
        assert 0 < number(rf"{name} ([\d.]+)", out) <= 1
    assert number(r"'feature': (\d+)", out) > 0


def test_higher_thresholds_keep_more(nb07: nbformat.NotebookNode) -> None:
    out = printed(nb07, "pruning")
    rows = [
        tuple(int(x) for x in m.groups()) for m in re.finditer(r"(\d+) nodes \(\s*(\d+) features\),\s+(\d+) edges", out)
    ]
    assert len(rows) == 5, out
    for smaller, larger in itertools.pairwise(rows):
        assert all(a <= b for a, b in zip(smaller, larger, strict=True)), out
    assert rows[-1][1] <= 200  # (max_feature_nodes)


def test_the_pinned_circuit_is_the_groups_and_the_logit(nb07: nbformat.NotebookNode) -> None:
    out = printed(nb07, "pinned")
    sizes = [int(n) for n in re.findall(r"\('layer \d features', (\d+)\)", out)]
    assert len(sizes) == 2 and all(n >= 1 for n in sizes), out
    assert number(r"Graph\(method='attribution', .*?, (\d+) nodes", out) == sum(sizes) + 1


def test_qk_attribution_is_exact_and_the_first_mlp_carries_the_match(nb07: nbformat.NotebookNode) -> None:
    out = printed(nb07, "qk")
    # measured: L1H3 attends 0.98; score 15.17 vs 8.47 at the key before; MLP0 x MLP0 +7.76 of the 6.70 difference
    assert number(r"attends ([\d.]+) from", out) > 0.5
    total, score = number(r"sum of terms ([-+\d.]+)", out), number(r"the model's score ([-+\d.]+)", out)
    assert abs(total - score) <= 1e-3 * max(1.0, abs(score))
    assert score > number(r"at the key before: ([-+\d.]+)", out)
    first = find(r"query (\S.*?)\s+× key (\S.*?)\s+([-+\d.]+)\n", out)
    assert (first.group(1), first.group(2)) == ("MLP0", "MLP0") and float(first.group(3)) > 0, out


def test_graph_files_round_trip(nb07: nbformat.NotebookNode) -> None:
    out = printed(nb07, "files")
    assert "round trip equal: True" in out
    read, wrote = (
        find(r"(\d+) nodes and (\d+) edges \(wrote (\d+) and (\d+)\)", out).groups()[:2],
        find(r"wrote (\d+) and (\d+)", out).groups(),
    )
    assert read == wrote and "2 supernodes" in out


def test_an_intervention_moves_the_pair_target_as_the_graph_says(nb07: nbformat.NotebookNode) -> None:
    out = printed(nb07, "intervene")
    assert "target node: logit '·+=' − '·='" in out, out
    direct = number(r"zero: direct change ([-+\d.]+)", out)
    predicted = number(r"zeroing predicts ([-+\d.]+)", out)
    assert abs(direct - predicted) <= 1e-3 * max(1.0, abs(predicted)), out
    assert number(r"x2: direct change ([-+\d.]+)", out) == pytest.approx(-direct, abs=1e-3)


def test_predicted_against_measured_on_a_held_out_prompt(nb07: nbformat.NotebookNode) -> None:
    out = printed(nb07, "check")
    rows = re.findall(r"^L\d f\d+ @\d+ ", out, flags=re.M)
    assert len(rows) == 20, out
    assert number(r"largest error ([\d.e+-]+) \(relative\)", out) < 1e-4  # float32: the direct part is the edge
    assert -1 <= number(r"frozen-attention ([-\d.]+)", out) <= 1
    assert -1 <= number(r"free ([-\d.]+)", out) <= 1


def test_the_quote_graph_predicts_a_line_break(nb07: nbformat.NotebookNode) -> None:
    out = printed(nb07, "quote")
    assert find(r"the model predicts (.*) with p", out).group(1) == "'\\n'"
    for name in ("replacement", "completeness"):
        assert 0 < number(rf"{name} ([\d.]+)", out) <= 1


# ----------------------------------------------------------------------------- 09: testing hypotheses


@pytest.fixture(scope="module")
def nb09(executed: Callable[[str], nbformat.NotebookNode]) -> nbformat.NotebookNode:
    return executed("09_testing_hypotheses")


def _recovered(out: str, step: str) -> float:
    return number(rf"(?m)^step {step} .*?: recovered (-?[\d.]+) %", out)


def test_scrubbing_the_induction_hypothesis_on_attn_only_2l_12h(nb09: nbformat.NotebookNode) -> None:
    out = printed(nb09, "scrub-attn")
    assert ast.literal_eval(find(r"induction heads (\[.*?\])", out).group(1)) == INDUCTION_12H, out
    assert _recovered(out, "1") == 100.0, out  # the full hypothesis is the model itself
    assert _recovered(out, "2") > 80.0, out  # measured 92.4 %
    assert _recovered(out, "3") > 90.0, out  # measured 102.7 %: the K path through the previous-token head suffices


def test_the_paths_read_only_the_tokens_the_induction_story_names(nb09: nbformat.NotebookNode) -> None:
    out = printed(nb09, "scrub-tokens")
    whole, tokens = _recovered(out, "3"), _recovered(out, "4")
    assert whole > 60.0 and tokens > whole - 5.0, out  # measured 83.0 % and 84.3 % (300 examples, 4 resamples)


def test_on_gelu_2l_the_key_path_runs_through_mlp0_and_q_v_need_it_too(nb09: nbformat.NotebookNode) -> None:
    out = printed(nb09, "scrub-gelu")
    assert _recovered(out, "1") == 100.0, out
    assert _recovered(out, "2") > 80.0, out  # measured 113.6 %
    assert _recovered(out, "3a") < 50.0, out  # measured 23.2 %: queries and values from the embedding alone fail
    assert _recovered(out, "3b") > 90.0, out  # measured 107.9 %


def test_tracing_a_copied_identifier_restores_it_at_the_copied_token(nb09: nbformat.NotebookNode) -> None:
    out = printed(nb09, "trace")
    clean, noised = number(r"clean ([\d.]+)", out), number(r"noised ([\d.]+)", out)
    assert clean > 0.7 and noised < clean - 0.2, out  # measured 0.808 and 0.454
    for site in ("resid", "mlp_out"):
        found = find(rf"{site}: strongest restoration in the identifier L0 at 'ot': p ([\d.]+)", out)
        assert float(found.group(1)) > clean, out  # measured 0.914 and 0.873


def test_probes_report_accuracy_and_selectivity_by_layer(nb09: nbformat.NotebookNode) -> None:
    out = printed(nb09, "probes")
    rows = re.findall(r"L(\d) string: accuracy ([\d.]+), control ([\d.]+), selectivity ([+-][\d.]+)", out)
    assert [r[0] for r in rows] == ["0", "1"], out
    for _, accuracy, control, selectivity in rows:
        assert float(accuracy) > 0.9 and abs(float(accuracy) - float(control) - float(selectivity)) < 2e-3, out
    depth = re.findall(r"depth: R2 (-?[\d.]+)", out)
    assert len(depth) == 2 and all(float(d) > 0.5 for d in depth), out


# ----------------------------------------------------------------------------- 10: training dynamics


@pytest.fixture(scope="module")
def nb10(executed: Callable[[str], nbformat.NotebookNode]) -> nbformat.NotebookNode:
    return executed("10_training_dynamics")


def test_the_progress_measures_put_the_three_phases_in_order(nb10: nbformat.NotebookNode) -> None:
    text = printed(nb10, "phases")
    m = find(r"memorised at (\d+); cleanup from (\d+); grokked at (\d+)", text)
    memorised, cleanup, grokked = (int(g) for g in m.groups())
    assert 0 < memorised < cleanup < grokked
    rows = [
        [float(x) for x in row]
        for row in re.findall(r"test acc ([\d.]+), test loss [\d.]+, restricted ([\d.]+), excluded ([\d.]+)", text)
    ]
    assert len(rows) == 4  # memorised, cleanup, grokked, final
    assert rows[0][1] > rows[0][2]  # at memorisation the key frequencies alone fit the training pairs worse
    assert rows[1][0] < 0.5 and rows[2][0] >= 0.99  # test accuracy: still failing at cleanup, grokked after


def test_a_handful_of_key_frequencies_carry_the_embedding_and_the_neurons(nb10: nbformat.NotebookNode) -> None:
    text = printed(nb10, "keys")
    keys = find(r"key frequencies: \[([\d, ]+)\]", text).group(1).split(",")
    assert 2 <= len(keys) <= 8
    start, final, even = (
        float(x) for x in find(r"step 0 ([\d.]+), final ([\d.]+) \(an even spread would give ([\d.]+)", text).groups()
    )
    assert start < 3 * even and final > 0.5
    assert number(r"strongest frequency is a key frequency: ([\d.]+)", text) > 0.9


def test_the_live_variant_memorises_then_groks(nb10: nbformat.NotebookNode) -> None:
    text = printed(nb10, "live")
    first, grokked = (int(x) for x in find(r"first at step (\d+); grokked at step (\d+)", text).groups())
    assert first < grokked
    assert number(r"final test accuracy ([\d.]+)", text) >= 0.99


def test_solu_inhibits_laterally_and_leans_on_its_layernorm(nb10: nbformat.NotebookNode) -> None:
    text = printed(nb10, "solu")
    gelu = number(r"pair-gelu-1l: .*lateral inhibition (\S+)", text)
    solu = number(r"pair-solu-1l: .*lateral inhibition (\S+)", text)
    assert gelu == 0.0 and solu < 0
    before, after = (float(x) for x in find(r"average scale: loss ([\d.]+) -> ([\d.]+)", text).groups())
    assert after > before
