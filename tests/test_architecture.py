"""The layout holds: imports run down the floors, never in a circle, and no module grows past a page or so.

The floors, lowest first (README.md, "Architecture"). A module may import its own
floor or a lower one, never a higher one; the whole graph has no cycle.

How the graph is built, from ``ast`` over ``circuitwidgets/``:

- every ``import`` and ``from ... import`` is an edge, wherever it stands: at
  module level, inside a function (a lazy import), or under ``if TYPE_CHECKING:``
  (a type-only import is still a dependency a reader must follow);
- ``from package import name`` is an edge to the module ``package.name`` when
  there is one, else to ``package`` (its ``__init__``);
- the implicit import of parent packages (``import a.b.c`` first runs ``a`` and
  ``a.b``) is not an edge: every module would otherwise depend on
  ``circuitwidgets/__init__.py``, which names the public API lazily.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "circuitwidgets"

#: Floors, lowest first; each entry is a module or a package (all of its modules).
FLOORS: list[tuple[str, ...]] = [
    # text, errors, tokenizers, the C library: no circuitwidgets dependency above them
    ("errors", "_text", "_glibc", "token_display", "tokenizer"),
    # the canonical model: weights, forward pass with hooks, cache, io
    ("model",),
    # loaders of weights into a model; argument checks shared by the engines
    ("sources", "_checks"),
    # what is computed on a run's activations (detectors, value norms, long-context attention);
    # toy models of superposition (their own tiny engine: it imports errors only)
    ("activations", "superposition"),
    # the weight-space engine (the paper); re-exports the run-side functions by name
    ("circuits",),
    # interventions on a run; training the shipped toy models (uses the engine's scores); sparse dictionaries
    # (features: splice into runs, train on activations streamed over the training corpus)
    # testing hypotheses (causal tracing, probes, causal scrubbing) on the causal engine
    ("causal", "training", "features", "hypotheses"),
    # graphs of a model's computation: edge attribution and attribution graphs (use the causal engine, dictionaries)
    ("graphs",),
    # the widgets: shared machinery (widgets.core) and one module or folder per view
    ("widgets",),
    # pages: offline HTML, nbconvert, the report
    ("export", "nbexport", "report"),
    # the command line and the package's lazy public names
    ("cli", "__init__", "__main__"),
]

#: Imports allowed although they close a cycle, each with its reason. Keep this empty where possible.
ALLOWED_EDGES: dict[tuple[str, str], str] = {}

#: Longest module, in lines, under circuitwidgets/ and js/src/ (about a page and a half of screen).
MAX_LINES = 420


def _modules() -> dict[str, tuple[Path, bool]]:
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    targets.add(full if full in modules else source)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _floor(module: str) -> int:
    parts = module.split(".")
    unit = parts[1] if len(parts) > 1 else "__init__"
    for level, units in enumerate(FLOORS):
        if unit in units:
            return level
    raise AssertionError(f"{module}: on no floor; add its package to FLOORS (and to README.md's Architecture)")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_graph_sees_lazy_and_type_only_imports() -> None:
    graph = _graph()
    # lazy (inside a function) and TYPE_CHECKING imports are edges too
    assert "circuitwidgets.sources.pretrained" in graph["circuitwidgets.widgets.history"]  # inside a function
    assert "circuitwidgets.widgets.core.base" in graph["circuitwidgets.widgets.core.compose"]  # under TYPE_CHECKING
    assert "circuitwidgets.widgets.core.page" in graph["circuitwidgets.widgets.core.base"]


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = _graph()
    for (source, target), _reason in ALLOWED_EDGES.items():
        graph.get(source, set()).discard(target)
    cycles = _cycles(graph)
    assert not cycles, "import cycles (each line: modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_imports_run_down_the_floors() -> None:
    upward = [
        f"{source} (floor {_floor(source)}) imports {target} (floor {_floor(target)})"
        for source, targets in sorted(_graph().items())
        for target in sorted(targets)
        if _floor(target) > _floor(source)
    ]
    assert not upward, "imports running up a floor:\n" + "\n".join(upward)


def test_a_page_exporter_imports_widgets_and_no_widget_imports_a_page_exporter() -> None:
    graph = _graph()
    exporters = {
        "circuitwidgets.export",
        "circuitwidgets.nbexport",
        "circuitwidgets.report",
        "circuitwidgets.report.paper",
        "circuitwidgets.report.causal",
        "circuitwidgets.report.lens",
        "circuitwidgets.report.features",
        "circuitwidgets.report.page",
    }
    for source, targets in graph.items():
        if source.startswith("circuitwidgets.widgets"):
            assert not targets & exporters, f"{source} imports {sorted(targets & exporters)}"


def test_every_view_with_several_modules_has_its_folder() -> None:
    widgets = PACKAGE / "widgets"
    flat = sorted(p.name for p in widgets.glob("_*.py") if p.name != "__init__.py")
    assert not flat, (
        f"private modules loose in widgets/ (shared machinery goes in widgets/core/, a view's in its folder): {flat}"
    )
    for folder in (p for p in widgets.iterdir() if p.is_dir() and (p / "__init__.py").is_file()):
        text = (folder / "__init__.py").read_text(encoding="utf-8")
        assert text.startswith('"""'), f"{folder.name}/__init__.py: say in a docstring what the folder holds"


def test_no_module_is_longer_than_a_page_and_a_half() -> None:
    sources = [p for p in PACKAGE.rglob("*.py")]
    sources += [p for p in (ROOT / "js" / "src").rglob("*") if p.suffix in (".ts", ".tsx", ".js", ".mjs", ".css")]
    assert sources
    long = sorted(
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in sources
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    )
    assert not long, f"modules over {MAX_LINES} lines (split them by concern):\n" + "\n".join(long)
