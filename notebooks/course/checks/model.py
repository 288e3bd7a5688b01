"""Checks of the pieces written in the lesson on model."""

from __future__ import annotations
