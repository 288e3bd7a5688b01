"""Every notebook opens by telling the learner what they will build and how long it takes on a laptop
CPU; each exercise (a solution region, a stub in the workbook) is checked by the cell after it; each
exported cell follows prose. Read from the notebook JSON; no kernel."""

from __future__ import annotations

import json
import re

import pytest
from lab_harness import notebook_names, notebooks_folder

# A duration: "20 minutes", "about a minute", "1-2 hours", "a few minutes", "90 s", "1.5 h".
_NUMBER_WORDS = "an?|one|two|three|four|five|six|seven|eight|nine|ten|twenty|thirty|(?:a )?few|several"
_AMOUNT = rf"(?:\d+(?:[.,]\d+)?|{_NUMBER_WORDS})"
DURATION = re.compile(
    rf"\b{_AMOUNT}(?:\s*(?:-|–|to)\s*{_AMOUNT})?\s*(?:seconds?|minutes?|hours?|mins?)\b"
    r"|\b\d+(?:[.,]\d+)?\s*(?:s|h)\b",
    re.I,
)
BUILD_WORDS = re.compile(r"\b(?:build|builds|built|you will|you'll|we will|we'll|write|train)\b", re.I)


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
def test_every_exercise_is_checked_by_the_cell_after_it(name):
    """An exercise (a code cell with a solution region, which the workbook turns into a stub) defines pieces;
    the next code cell checks each registered one and rebinds its name: `piece = check(piece)`."""
    from course.pieces import _registry, defined_names

    registered, cells = _registry(), load(name)
    code = [c["source"] for c in cells if c["type"] == "code"]
    exercises = [i for i, source in enumerate(code) if "### BEGIN SOLUTION" in source]
    assert len(exercises) >= 2, f"{name}: {len(exercises)} exercise cell(s); every lesson has at least two"
    for i in exercises:
        pieces = [n for n in defined_names(code[i]) if n in registered]
        assert pieces, f"{name}: the exercise cell {code[i].splitlines()[0]!r} defines no registered piece"
        after = code[i + 1] if i + 1 < len(code) else ""
        unchecked = [n for n in pieces if not re.search(rf"\b{n}\s*=\s*check\({n}\b", after)]
        assert not unchecked, (
            f"{name}: the cell after the exercise does not check {unchecked} (`x = check(x)`)"
        )


@pytest.mark.parametrize("name", NAMES)
def test_exported_cells_come_after_prose(name):
    """What a notebook exports is read in the notebook: each exported cell comes right after a markdown cell
    that explains it."""
    cells = load(name)
    for before, cell in zip(cells, cells[1:]):
        if cell["type"] != "code" or not cell["source"].lstrip().startswith("#| export"):
            continue
        first = (cell["source"].strip().splitlines() + [""])[1][:60]  # the line after `#| export`
        assert before["type"] == "markdown", f"{name}: the exported cell at {first!r} has no prose before it"
