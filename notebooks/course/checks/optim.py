"""Checks of the pieces written in the lesson on optim."""

from __future__ import annotations
