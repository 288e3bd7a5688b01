"""Checks of the pieces written in the lesson on loader."""

from __future__ import annotations
