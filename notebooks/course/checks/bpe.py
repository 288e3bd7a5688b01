"""Checks of the pieces written in the lesson on bpe."""

from __future__ import annotations
