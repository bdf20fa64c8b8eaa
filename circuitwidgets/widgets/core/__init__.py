"""Machinery every view shares; no view lives here.

- :mod:`.base`: :class:`~circuitwidgets.widgets.core.base.CircuitWidget`, the bundle, safe sync from the view;
- :mod:`.spec`: the roles of a view's traits (data, setting, head selection, kernel reply);
- :mod:`.traits`: self-checking traits (selections, choices, counts, edges);
- :mod:`.arrays`: binary transport of numpy arrays;
- :mod:`.page`: a widget state as offline HTML (the notebook's ``text/html`` fallback);
- :mod:`.link`: :func:`circuitwidgets.link` across widgets;
- :mod:`.compose`: views inside one widget (the explorer);
- :mod:`.context`: context-length checks and progress bars;
- :mod:`.offset`: the rotary query-key offset setting.
"""
