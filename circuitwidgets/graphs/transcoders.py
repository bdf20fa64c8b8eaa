"""The transcoders an attribution graph runs on (defined in :mod:`circuitwidgets.features.transcoders`, one floor
down, so that feature interventions share the same checks); re-exported here under their old names."""

from __future__ import annotations

from circuitwidgets.features.transcoders import (
    INPUT_SITES,
    TranscoderLike,
    check_architecture,
    check_transcoders,
    transcoder_input,
)

__all__ = ["INPUT_SITES", "TranscoderLike", "check_architecture", "check_transcoders", "transcoder_input"]
