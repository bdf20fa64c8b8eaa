"""What is computed on a run of the model (its activations), not on its weights alone.

- :mod:`.detectors`: head detectors (previous-token, induction, ...) on random or given tokens;
- :mod:`.value_paths`: value norms ``‖v_j W_O‖``, value-weighted patterns, direct logit effects;
- :mod:`.loss`: the model's loss at each position, from a run's logits;
- :mod:`.qk_patterns`: long-context attention, exact tiles of ``softmax(q kᵀ)`` from queries and
  keys (:class:`~circuitwidgets.activations.qk_patterns.QKPatterns`), and :mod:`.summary`, the
  per-head block aggregates and top sources it summarises a pattern into.

Imports only run down: this package reads :mod:`circuitwidgets.model` and
:mod:`circuitwidgets._checks`, never :mod:`circuitwidgets.circuits` (which
re-exports :func:`head_scores`, :func:`value_norms`, ... so
``circuitwidgets.circuits.<name>`` keeps working) and never the widgets.
"""
