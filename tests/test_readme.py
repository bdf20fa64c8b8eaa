"""The README's Python snippets run as written, and its install advice covers what it names.

Every fenced ```` ```python ```` block of README.md is executed on its own, in a
fresh namespace, as a notebook cell would be: statements run, and the value of
each top-level expression is displayed (its ``_repr_mimebundle_`` is built, as
Jupyter does). A block that must not run is preceded by the line
``<!-- readme: not run -->`` (an HTML comment, invisible on GitHub and PyPI).
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SKIP_MARKER = "<!-- readme: not run -->"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


def python_blocks(markdown: str) -> list[tuple[int, str, bool]]:
    """``(line, source, skipped)`` for each fenced block whose language is ``python``."""
    blocks = []
    for m in _FENCE.finditer(markdown):
        info = m["info"].strip().split()
        if not info or info[0].lower() not in ("python", "py"):
            continue
        line = markdown.count("\n", 0, m.start()) + 1
        before = markdown[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        blocks.append((line, m["body"], before == SKIP_MARKER))
    return blocks


def run_cell(source: str, filename: str) -> tuple[dict[str, Any], list[Any]]:
    """Execute ``source`` like a notebook cell; return its namespace and the displayed values."""
    tree = ast.parse(source, filename)
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    shown: list[Any] = []
    for node in tree.body:
        if isinstance(node, ast.Expr):
            value = eval(compile(ast.Expression(node.value), filename, "eval"), namespace)
            if value is not None:
                shown.append(value)
        else:
            exec(compile(ast.Module([node], type_ignores=[]), filename, "exec"), namespace)
    return namespace, shown


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))


def test_the_readme_has_the_snippets_a_new_user_starts_from() -> None:
    run = [source for _, source, skipped in BLOCKS if not skipped]
    assert any("load_pretrained(" in s for s in run), "no runnable snippet with a shipped model"
    assert any("from_arrays(" in s for s in run), "no runnable from-arrays snippet"
    first = run[0]
    code_lines = [ln for ln in first.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(code_lines) <= 3, f"the first snippet should be three lines, it has {len(code_lines)}"


@pytest.mark.parametrize(("line", "source", "skipped"), BLOCKS, ids=[f"README.md:{b[0]}" for b in BLOCKS])
def test_readme_python_block_runs(line: int, source: str, skipped: bool) -> None:
    if skipped:
        pytest.skip(f"marked {SKIP_MARKER}")
    _, shown = run_cell(source, f"README.md:{line}")
    widgets = [v for v in shown if hasattr(v, "_repr_mimebundle_")]
    for widget in widgets:
        bundle = widget._repr_mimebundle_()
        assert bundle is not None, f"{type(widget).__name__} displayed nothing"
        data, _ = bundle
        assert WIDGET_VIEW_MIME in data and "text/html" in data, sorted(data)


def test_from_arrays_snippet_state() -> None:
    """The from-arrays snippet builds what it says: 6 tokens, 4 heads, the destination it sets."""
    (source,) = [s for _, s, skipped in BLOCKS if "from_arrays(" in s and not skipped]
    namespace, _ = run_cell(source, "README.md")
    w = namespace["w"]
    assert w.tokens == namespace["tokens"]
    assert w.patterns.shape[:2] == (1, 4)
    assert w.selected_dest == 5


def test_skip_marker_is_honoured() -> None:
    text = f"x\n\n{SKIP_MARKER}\n```python\nraise SystemExit\n```\n\n```python\n1 + 1\n```\n```bash\nls\n```\n"
    assert [(src, skipped) for _, src, skipped in python_blocks(text)] == [
        ("raise SystemExit\n", True),
        ("1 + 1\n", False),
    ]


# ---------------------------------------------------------------- the export extra


def _closure(requirements: list[str], extras: set[str]) -> set[str]:
    """Normalised names of the distributions that ``requirements`` pull in, as installed here."""
    seen: set[str] = set()
    todo = [(Requirement(r), extras) for r in requirements]
    while todo:
        req, active = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in (active or {""})):
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            sub = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [(Requirement(r), set(req.extras)) for r in sub]
    return seen


def test_the_export_extra_installs_what_the_exporter_imports() -> None:
    """``pip install "circuitwidgets[export]"`` is enough for ``jupyter nbconvert --to circuitwidgets --execute``."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "circuitwidgets[export]" in README.read_text(encoding="utf-8")
    closure = _closure(project["dependencies"] + project["optional-dependencies"]["export"], set())
    tree = ast.parse((ROOT / "circuitwidgets" / "nbexport.py").read_text())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    roots = {m.split(".")[0] for m in modules} - set(sys.stdlib_module_names) - {"__future__", "circuitwidgets"}
    providers = metadata.packages_distributions()
    needed = {re.sub(r"[-_.]+", "-", d).lower() for root in roots for d in providers.get(root, [root])}
    needed |= {"jupyter-core", "nbclient", "ipykernel"}  # the `jupyter` command; `--execute` and its kernel
    assert "nbconvert" in needed
    assert needed <= closure, f"not installed by circuitwidgets[export]: {sorted(needed - closure)}"


def test_the_readme_and_docs_state_no_count_that_drifts_unchecked() -> None:
    """No test-run tally ("2,914 passed") in the README, and any count of the notebooks is the true one."""
    words = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
    notebooks = len(list((ROOT / "notebooks").glob("*.ipynb")))
    texts = {README.name: README.read_text(encoding="utf-8")}
    texts |= {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")}
    for name, text in texts.items():
        flat = re.sub(r"\s+", " ", text)
        assert not re.search(r"\d[\d,]* passed", flat) or name != README.name, f"{name}: a test-run tally"
        for word in re.findall(r"\b(\w+) notebooks\b", flat, flags=re.I):
            count = words.get(word.lower()) or (int(word) if word.isdigit() else None)
            assert count in (None, notebooks), f"{name}: '{word} notebooks', but notebooks/ holds {notebooks}"
