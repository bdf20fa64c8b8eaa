"""Typed errors of circuitwidgets.

Every message names the argument (or tensor), what was expected and what was
received, so a user can fix the call without reading our source.
"""

from __future__ import annotations


class CircuitWidgetsError(Exception):
    """Base class of every error raised by circuitwidgets on purpose."""


class ArgumentError(CircuitWidgetsError, ValueError):
    """An argument has a valid type but an invalid value (range, shape, content)."""


class ArgumentTypeError(CircuitWidgetsError, TypeError):
    """An argument has the wrong type."""


class ShapeError(ArgumentError):
    """A tensor or array has the wrong rank or shape."""


class NonFiniteError(ArgumentError):
    """A tensor or array contains NaN or infinity."""


class UnsupportedArchitectureError(ArgumentError):
    """A model's architecture is not one circuitwidgets can represent exactly."""


class NetworkRefusedError(ArgumentError):
    """A hub name was given where a loaded model is needed: circuitwidgets never downloads."""


class OffsetRequiredError(ArgumentError):
    """A QK circuit of a rotary head was asked for without choosing the offset Δ = i − j it depends on."""


class MemoryBudgetError(ArgumentError):
    """The requested computation would materialise more memory than allowed."""


class WeightsAbsentError(ArgumentError):
    """The model was loaded without weights a computation needs (e.g. its MLPs, for the forward pass)."""


def expect(condition: bool, error: type[CircuitWidgetsError], message: str) -> None:
    """Raise ``error(message)`` unless ``condition`` holds."""
    if not condition:
        raise error(message)


class CustomCodeError(ArgumentError):
    """A checkpoint directory names its own Python code (``auto_map``), which circuitwidgets never runs."""


class IncompleteCheckpointError(ShapeError):
    """A checkpoint's stored tensors do not match the ones its config declares (missing or unexpected)."""


class NotCoveredError(ArgumentError):
    """A technique, site or option the nnsight backend does not run (``cw.from_nnsight``); the message names it."""


class RemoteWeightsError(WeightsAbsentError):
    """A weight-space analysis was asked of a remote (nnsight/NDIF) model whose weights are not on this machine."""


class RemoteRunError(CircuitWidgetsError, RuntimeError):
    """An nnsight trace failed where it ran (NDIF or a local simulation of it); the message quotes the server's."""


class FileFormatError(ArgumentError):
    """A file read from disk is not what its format allows (not a regular file, too large for its header or the
    budget, a field of the wrong type or range, a tensor that disagrees with its config); the message names the
    file, the field, the expected and the received."""
