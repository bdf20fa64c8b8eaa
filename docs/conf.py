"""Sphinx configuration of the circuitwidgets documentation (``make docs``).

Sphinx with MyST-NB: the scientific-Python convention (NumPy, SciPy, ipywidgets,
TransformerLens publish with Sphinx), numpy-style docstrings read by autodoc and
napoleon, nitpicky cross-references that fail the build, and notebooks rendered
from their executed outputs. The widgets are ours, offline: ``_ext/cw_docs.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))

import circuitwidgets  # noqa: E402

project = "circuitwidgets"
author = "the circuitwidgets authors"
copyright = "the circuitwidgets authors"
release = version = circuitwidgets.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "myst_nb",
    "cw_docs",
]

exclude_patterns = ["_build", "_ext", "**.ipynb_checkpoints", "README.md"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# --- notebooks: executed by _ext/cw_docs.py (cached), rendered as they are ------------------
nb_execution_mode = "off"
# Our widgets' outputs are rewritten to offline views (text/html) before MyST-NB
# sees them; never load the CDN widget manager MyST-NB adds for saved widget state.
nb_ipywidgets_js: dict[str, dict[str, str]] = {}
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# --- API reference ------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_typehints_format = "short"
autodoc_default_options = {"show-inheritance": False}
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False

# A cross-reference that does not resolve fails the build (`-W -n` in `make docs`),
# except to names of other libraries (no intersphinx: the build is offline).
nitpicky = True
nitpick_ignore_regex = [
    # other libraries (numpy, torch, traitlets, ...) and unqualified names of them
    (r"py:.*", r"(?!circuitwidgets\b).*"),
    # private helpers named in docstrings (a leading underscore is not API)
    (r"py:.*", r"circuitwidgets(\.\w+)*\._\w+(\.\w+)*"),
    # internal modules of packages whose public names the API pages document elsewhere: the shared
    # widget machinery and the folders of multi-module views (the classes are documented as
    # circuitwidgets.<Name>), the engine's tilings and shared pieces, and the run-side package
    # (its public functions are documented as circuitwidgets.circuits.<name>)
    (r"py:.*", r"circuitwidgets\.widgets\.(core|attention|eigen|skip_trigrams)(\.\w+)*"),
    (r"py:.*", r"circuitwidgets\.circuits\.(topk_tiles|topk_methods|composition_tiles|kcomp)(\.\w+)*"),
    (r"py:mod", r"circuitwidgets\.activations(\.\w+)*"),
    # the run-side engines behind the attention view (named in its docstrings, not public API)
    (r"py:.*", r"circuitwidgets\.activations\.(dense_patterns|summary|writes)\.\w+"),
    # the causal package's modules (its public names are documented as circuitwidgets.causal.<name>)
    # and the forward pass's internals that its docstrings name
    (r"py:.*", r"circuitwidgets\.causal\.(engine|metrics|sites|components|patching|attribution|lens|result)(\.\w+)*"),
    (r"py:.*", r"circuitwidgets\.model\.(cache|run)\.(Recorder|Hook|Hooks|Runner)(\.\w+)*"),
]
# Module-level helpers that public docstrings name but the API does not document.
nitpick_ignore = [
    ("py:data", "circuitwidgets.activations.detectors.KINDS"),
]

# --- HTML: nothing from the network -------------------------------------------------
html_theme = "furo"
html_title = f"circuitwidgets {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
html_copy_source = False
# MathJax would come from a CDN: _ext/cw_docs.py fails the build on a page with math markup
# (LaTeX in the notebooks' Markdown stays as source, as in `--to circuitwidgets` exports).
