"""Loaders that turn other libraries' models into a :class:`~circuitwidgets.CircuitModel`."""
