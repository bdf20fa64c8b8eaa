"""Sphinx extension of the circuitwidgets documentation: live widgets that need no network.

Three things, all at build time:

- ``notebooks/*.ipynb`` are executed (nbclient, a kernel of this interpreter)
  and written to ``docs/notebooks/`` with every circuitwidgets output rewritten
  by :func:`circuitwidgets.nbexport.make_widgets_offline`, the exporter behind
  ``jupyter nbconvert --to circuitwidgets``: our views, built from the state the
  kernel ended with, one bundle per page, no CDN widget manager. Executions are
  cached in ``docs/_build/.executed/``, keyed by the notebook and the package's
  Python sources, so an unchanged notebook is not run again. A cell error fails
  the build.
- The ``circuitwidget`` directive runs a code block in the build's Python and
  shows the code and the widget its last line evaluates to, as the same offline
  fragment (:func:`circuitwidgets.export.notebook_fragment`). Code that raises,
  or does not end in a widget, fails the build.
- The API pages (``docs/api/generated/``) are written from the ``__all__`` of
  ``circuitwidgets``, ``circuitwidgets.circuits``, ``circuitwidgets.causal``, ``circuitwidgets.graphs`` and ``circuitwidgets.widgets``,
  so every public name has an entry and a new one cannot be forgotten.

MyST-NB then renders the executed notebooks with execution off.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

DOCS = Path(__file__).resolve().parents[1]
REPO = DOCS.parent
NOTEBOOKS = REPO / "notebooks"
PACKAGE = REPO / "circuitwidgets"
CACHE = DOCS / "_build" / ".executed"
KERNEL = "circuitwidgets-docs"
CELL_TIMEOUT_S = 300

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- notebooks


def _sources_digest() -> str:
    """What an execution depends on besides the notebook: the package's Python and shipped models."""
    digest = hashlib.sha256()
    for path in sorted([*PACKAGE.rglob("*.py"), *(PACKAGE / "pretrained").rglob("*")]):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(PACKAGE)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def cached_execution(source: Path, digest: str | None = None) -> Path:
    """Where the execution of ``source`` on the current package sources is cached (it may not exist yet).

    ``tests/test_notebooks.py`` reads it too: a notebook the docs build just ran is not run again there.
    """
    key = hashlib.sha256(source.read_bytes() + (digest or _sources_digest()).encode()).hexdigest()[:20]
    return CACHE / f"{source.stem}-{key}.ipynb"


def _execute(source: Path, kernel_dir: Path) -> Any:
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(source, as_version=4)
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dir)]))
    with tempfile.TemporaryDirectory(prefix="cw-docs-") as workdir:
        client = NotebookClient(
            nb, km=km, timeout=CELL_TIMEOUT_S, store_widget_state=True, resources={"metadata": {"path": workdir}}
        )
        try:
            client.execute()
        except CellExecutionError as exc:
            raise ExtensionError(f"{source.name}: a cell raised while building the docs:\n{exc}") from None
    return nb


def execute_notebooks(app: Sphinx) -> None:
    """Write ``docs/notebooks/NAME.ipynb``: each notebook executed (or from the cache), widgets offline."""
    import nbformat
    from ipykernel.kernelspec import write_kernel_spec

    from circuitwidgets.nbexport import make_widgets_offline

    out = DOCS / "notebooks"
    out.mkdir(exist_ok=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    digest = _sources_digest()
    sources = sorted(NOTEBOOKS.glob("*.ipynb"))
    cached = {source: cached_execution(source, digest) for source in sources}
    stale = [s for s in sources if not cached[s].is_file()]
    if stale:
        kernel_dir = Path(tempfile.mkdtemp(prefix="cw-docs-kernels-"))
        offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        write_kernel_spec(kernel_dir / KERNEL, overrides={"display_name": "circuitwidgets docs", "env": offline})

        def run(source: Path) -> None:
            started = time.monotonic()
            nb = _execute(source, kernel_dir)
            for old in CACHE.glob(f"{source.stem}-*.ipynb"):
                old.unlink()
            nbformat.write(nb, cached[source])
            logger.info(f"[circuitwidgets] executed {source.name} in {time.monotonic() - started:.0f}s")

        try:
            # Kernels are processes: running the notebooks side by side overlaps their start-up and imports.
            with ThreadPoolExecutor(max_workers=len(stale)) as pool:
                for future in [pool.submit(run, s) for s in stale]:
                    future.result()
        finally:
            shutil.rmtree(kernel_dir, ignore_errors=True)
    wanted = set()
    for source in sources:
        if source not in stale:
            logger.info(f"[circuitwidgets] {source.name}: execution reused from {cached[source].relative_to(DOCS)}")
        nb = nbformat.read(cached[source], as_version=4)
        count = make_widgets_offline(nb)
        if count == 0:
            raise ExtensionError(f"{source.name}: no circuitwidgets output to show (did a widget fail to display?)")
        target = out / source.name
        text = nbformat.writes(nb)
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
        wanted.add(target.name)
    for leftover in out.glob("*.ipynb"):
        if leftover.name not in wanted:
            leftover.unlink()


# ----------------------------------------------------------------------------- live examples


class CircuitWidgetDirective(SphinxDirective):
    """Run Python in the build and show the code and the widget its last expression gives.

    Blocks of one page share a namespace, top to bottom (like notebook cells).
    ``:hide-code:`` shows the widget only.
    """

    has_content = True
    option_spec = {"hide-code": directives.flag, "caption": directives.unchanged}  # noqa: RUF012

    def run(self) -> list[nodes.Node]:
        from circuitwidgets.export import notebook_fragment, widget_state

        code = "\n".join(self.content)
        namespace = self.env.temp_data.setdefault("circuitwidget_namespace", {"__name__": "__docs__"})
        tree = ast.parse(code, filename=self.env.docname)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        if last is None:
            raise self.error("circuitwidget: the code must end with an expression that is a widget")
        try:
            exec(compile(tree, self.env.docname, "exec"), namespace)
            widget = eval(compile(ast.Expression(last.value), self.env.docname, "eval"), namespace)
            state = widget_state(widget)
        except Exception as exc:
            raise self.error(f"circuitwidget: the example raised {type(exc).__name__}: {exc}") from exc
        first = not self.env.temp_data.get("circuitwidget_bundled")
        self.env.temp_data["circuitwidget_bundled"] = True
        out: list[nodes.Node] = []
        if "hide-code" not in self.options:
            block = nodes.literal_block(code, code, language="python")
            out.append(block)
        html = notebook_fragment(state, with_bundle=first)
        out.append(nodes.raw("", f'<div class="cw-docs-example">{html}</div>', format="html"))
        return out


# ----------------------------------------------------------------------------- API pages


def _api_entry(module: str, name: str, obj: Any) -> str:
    import inspect

    target = f"{module}.{name}"
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return f".. autoexception:: {target}\n   :members:\n"
    if inspect.isclass(obj):
        if getattr(obj, "_view", None) is not None:  # a widget: its traits are its API
            return (
                f".. autoclass:: {target}\n   :members:\n   :undoc-members:\n   :exclude-members: {WIDGET_EXCLUDED}\n"
            )
        return f".. autoclass:: {target}\n   :members:\n"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return f".. autofunction:: {target}\n"
    return f".. autodata:: {target}\n"


#: Members every anywidget/ipywidgets widget has; documented by ipywidgets, not here.
WIDGET_EXCLUDED = "keys, comm, log, layout, tabbable, tooltip, get_state, set_state"

API_PAGES = {
    "circuitwidgets": "The package: models, loaders, widgets, export",
    "circuitwidgets.circuits": "The engine: circuits of the paper as numbers",
    "circuitwidgets.causal": "Causal techniques: patching, ablation, attribution, the logit lens",
    "circuitwidgets.hypotheses": "Testing hypotheses: causal scrubbing, causal tracing, probes",
    "circuitwidgets.graphs": "Graphs: edge attribution, exact edge patching, faithfulness",
    "circuitwidgets.widgets": "The widgets",
    "circuitwidgets.superposition": "Toy models of superposition: training, measurements, phases",
    "circuitwidgets.training.grokking": "Grokking: modular addition trained, its progress measures and phases",
}

#: Names the public API returns or raises, documented on their own page (``supporting.rst``).
SUPPORTING = {
    "circuitwidgets.errors": None,  # None: the module's __all__, or else every class it defines
    "circuitwidgets.activations.qk_patterns": None,
    "circuitwidgets.model": ["ActivationCache"],
    "circuitwidgets.model.sublayers": ["Sublayers"],  # a base of CircuitModel: one layer's computations
    "circuitwidgets.model.run": ["Runner"],  # a base of CircuitModel: the forward pass and its hooks
    "circuitwidgets.tokenizer": ["TokenizerLike", "HFTokenizer"],
}


def write_api_pages(app: Sphinx) -> None:
    import importlib
    import inspect

    out = DOCS / "api" / "generated"
    out.mkdir(parents=True, exist_ok=True)
    widget_classes = {
        getattr(importlib.import_module("circuitwidgets.widgets"), n)
        for n in importlib.import_module("circuitwidgets.widgets").__all__
    }
    for module_name, title in API_PAGES.items():
        module = importlib.import_module(module_name)
        heading = f"``{module_name}``: {title}"
        lines = [heading, "=" * len(heading), "", f".. automodule:: {module_name}", "   :no-members:", ""]
        if module_name == "circuitwidgets":
            lines += [
                ".. py:data:: __version__",
                "   :type: str",
                f"   :value: {module.__version__!r}",
                "",
                "   The installed version.",
                "",
            ]
        for name in module.__all__:
            if name == "__version__":
                continue
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                raise ExtensionError(
                    f"{module_name}.{name} is the module {obj.__name__}, not the public name {name}: "
                    "importing the submodule replaced the package attribute"
                )
            if module_name == "circuitwidgets.widgets" and obj in widget_classes:
                # The same classes as at the top level, documented there in full.
                lines += [
                    f".. py:class:: {name}",
                    "",
                    f"   The widget :class:`circuitwidgets.{name}` (the same class).",
                    "",
                ]
                continue
            home = _documented_elsewhere(module_name, name, obj)
            if home is not None:  # a class documented on its own module's page: one description, two names
                lines += [f".. py:class:: {name}", "", f"   The class :class:`{home}.{name}` (the same class).", ""]
                continue
            lines.append(_api_entry(module_name, name, obj))
        _write(out / f"{module_name}.rst", lines)
    heading = "Supporting names: errors, activation cache, tokenizers, attention tiles"
    lines = [heading, "=" * len(heading), "", "What the public API returns, takes or raises.", ""]
    for module_name, names in SUPPORTING.items():
        lines += [f".. currentmodule:: {module_name}", ""]
        if names is None:
            module = importlib.import_module(module_name)
            names = list(
                getattr(module, "__all__", None)
                or (n for n, o in vars(module).items() if isinstance(o, type) and o.__module__ == module_name)
            )
        lines += [_api_entry(module_name, n, getattr(importlib.import_module(module_name), n)) for n in names]
    _write(out / "supporting.rst", lines)


def _documented_elsewhere(module_name: str, name: str, obj: Any) -> str | None:
    """The other API page that documents the non-widget class ``obj`` (Sphinx allows one description of a class)."""
    import importlib
    import inspect

    if module_name != "circuitwidgets" or not inspect.isclass(obj) or getattr(obj, "_view", None) is not None:
        return None
    for other in API_PAGES:
        if other not in (module_name, "circuitwidgets.widgets") and name in importlib.import_module(other).__all__:
            return other
    return None


def _write(path: Path, lines: list[str]) -> None:
    """Write only when changed, so Sphinx does not reread an unchanged page."""
    text = "\n".join(lines) + "\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def refuse_math(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """A page with math would load MathJax from a CDN: fail instead (the site works offline)."""
    if context.get("has_maths_elements"):
        raise ExtensionError(f"{pagename}: holds math markup, which would load MathJax from a CDN; write it as text")


def widget_signature(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, signature: str | None, return_annotation: str | None
) -> tuple[str, str | None] | None:
    """A widget's signature is its ``__init__``'s (traitlets' ``__new__`` would show ``(*args, **kwargs)``),
    without private keywords."""
    import inspect

    if what != "class" or getattr(obj, "_view", None) is None:
        return None
    init = inspect.signature(obj.__init__)
    # Types go in the description (autodoc_typehints = "description"), as for every other entry.
    params = [
        p.replace(annotation=inspect.Parameter.empty)
        for n, p in list(init.parameters.items())[1:]
        if not n.startswith("_")
    ]
    return str(init.replace(parameters=params, return_annotation=inspect.Signature.empty)), return_annotation


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("autodoc-process-signature", widget_signature)
    app.connect("html-page-context", refuse_math, priority=400)
    app.connect("builder-inited", write_api_pages)
    if os.environ.get("CW_DOCS_SKIP_NOTEBOOKS") != "1":
        app.connect("builder-inited", execute_notebooks)
    app.add_directive("circuitwidget", CircuitWidgetDirective)
    sys.path.insert(0, str(REPO))
    return {"parallel_read_safe": False, "parallel_write_safe": True}
