"""Checks of the pieces written in the lesson on data."""

from __future__ import annotations
