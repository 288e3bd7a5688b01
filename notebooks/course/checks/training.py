"""Checks of the pieces written in the lesson on training."""

from __future__ import annotations
