"""Every notebook opens by telling the learner what they will build and how long it takes on a laptop
CPU, and ends with exercises whose checks run in a cell. Read from the notebook JSON; no kernel."""

from __future__ import annotations

import ast
import json
import re

import pytest
from lab_harness import notebook_names, notebooks_folder

# A duration: "20 minutes", "about a minute", "1-2 hours", "a few minutes", "90 s", "1.5 h".
_AMOUNT = r"(?:\d+(?:[.,]\d+)?|an?|one|two|three|four|five|six|seven|eight|nine|ten|twenty|thirty|(?:a )?few|several)"
DURATION = re.compile(
    rf"\b{_AMOUNT}(?:\s*(?:-|–|to)\s*{_AMOUNT})?\s*(?:seconds?|minutes?|hours?|mins?)\b"
    r"|\b\d+(?:[.,]\d+)?\s*(?:s|h)\b",
    re.I,
)
BUILD_WORDS = re.compile(r"\b(?:build|builds|built|you will|you'll|we will|we'll|write|train)\b", re.I)
EXERCISES = re.compile(r"^#+\s.*\bexercises?\b", re.I | re.M)


def load(name: str) -> list[dict]:
    nb = json.loads((notebooks_folder() / f"{name}.ipynb").read_text(encoding="utf-8"))
    return [{"type": c["cell_type"], "source": "".join(c["source"])} for c in nb["cells"]]


def opening_text(cells: list[dict]) -> str:
    """The markdown before the first code cell: what the learner reads before running anything."""
    text = []
    for cell in cells:
        if cell["type"] == "code":
            break
        if cell["type"] == "markdown":
            text.append(cell["source"])
    return "\n".join(text)


def assertions_with_hints(source: str) -> int:
    """How many `assert cond, message` statements the cell holds (Jupyter magics left out)."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return 0
    return sum(isinstance(node, ast.Assert) and node.msg is not None for node in ast.walk(tree))


NAMES = notebook_names()


@pytest.mark.parametrize("name", NAMES)
def test_notebook_opens_with_what_is_built_and_the_time_on_a_cpu(name):
    cells = load(name)
    assert cells and cells[0]["type"] == "markdown", f"{name}: the first cell is not markdown"
    first = cells[0]["source"]
    assert re.match(r"#\s+\S", first), f"{name}: the first cell does not start with a '# Title'"
    assert re.search(r"^>\s*\S", first, re.M), f"{name}: the first cell has no '> one-line summary'"
    opening = opening_text(cells)
    assert BUILD_WORDS.search(opening), f"{name}: the opening does not say what the learner will build"
    assert "CPU" in opening, f"{name}: the opening does not say how long it takes on a laptop CPU"
    assert DURATION.search(opening), f"{name}: the opening gives no duration (e.g. 'about 10 minutes')"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_ends_with_exercises_checked_in_a_cell(name):
    cells = load(name)
    headings = [i for i, c in enumerate(cells) if c["type"] == "markdown" and EXERCISES.search(c["source"])]
    assert headings, f"{name}: no '## Exercises' heading"
    start = headings[-1]
    later_headings = [
        c["source"]
        for c in cells[start + 1 :]
        if c["type"] == "markdown" and re.search(r"^#\s", c["source"], re.M)
    ]
    assert not later_headings, f"{name}: the exercises are not the last section (a top-level heading follows)"
    checks = [c for c in cells[start + 1 :] if c["type"] == "code" and assertions_with_hints(c["source"])]
    assert checks, (
        f"{name}: no code cell after the exercises heading checks an answer with `assert ..., 'hint'`"
    )
