"""``circuitwidgets report``: one offline page that walks through the paper on a model, one module per part.

- :mod:`~circuitwidgets.report.paper`: the walk through *A Mathematical Framework for Transformer Circuits*
  (bigrams, copying, skip-trigrams, composition, induction heads, term importance, training);
- :mod:`~circuitwidgets.report.causal`: the induction circuit tested by intervening on runs;
- :mod:`~circuitwidgets.report.lens`: the logit lens and the repetition table;
- :mod:`~circuitwidgets.report.features`: the features the induction answer reads and its attribution graph
  (models with dictionaries);
- :mod:`~circuitwidgets.report.page`: the page itself (:func:`write_report`).
"""

from __future__ import annotations

from circuitwidgets.report.page import write_report
from circuitwidgets.report.paper import DEFAULT_TEXT, LINKED, Section, build_sections

__all__ = ["DEFAULT_TEXT", "LINKED", "Section", "build_sections", "write_report"]
