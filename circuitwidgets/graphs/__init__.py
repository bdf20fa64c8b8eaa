"""Graphs of a model's computation (DESIGN.md §3e): attribution graphs over transcoder features (issue 41)."""

from __future__ import annotations
