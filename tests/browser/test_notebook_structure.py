"""Every notebook opens by telling the learner what they will build and how long it takes on a laptop
CPU, and ends with exercises where the learner writes code: stubs, each checked by a checker of
gptlib.exercises in the same cell. Read from the notebook JSON; no kernel."""

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


def _parse(source: str) -> ast.Module | None:
    "A cell's code with the Jupyter magics and shell lines left out, or None when it does not parse."
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        return ast.parse(code)
    except SyntaxError:
        return None


def imported_checkers(cells: list[dict]) -> set[str]:
    "The names the notebook imports from gptlib.exercises, in any code cell."
    names = set()
    for cell in cells:
        tree = _parse(cell["source"]) if cell["type"] == "code" else None
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.ImportFrom) and node.module == "gptlib.exercises":
                names |= {alias.asname or alias.name for alias in node.names}
    return names


def is_stub(source: str) -> bool:
    "Whether the cell raises NotImplementedError: an exercise the learner fills in."
    tree = _parse(source)
    return tree is not None and any(
        isinstance(node, ast.Raise)
        and node.exc is not None
        and "NotImplementedError" in {getattr(n, "id", None) for n in ast.walk(node.exc)}
        for node in ast.walk(tree)
    )


def calls_a_checker(source: str, checkers: set[str]) -> bool:
    "Whether the cell calls a checker of gptlib.exercises (imported by name, or as exercises.check_...)."
    tree = _parse(source)
    calls = [node.func for node in ast.walk(tree) if isinstance(node, ast.Call)] if tree else []
    return any(
        (isinstance(f, ast.Name) and f.id in checkers)
        or (
            isinstance(f, ast.Attribute)
            and f.attr.startswith("check_")
            and ast.unparse(f.value).endswith("exercises")
        )
        for f in calls
    )


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


def _checked_where_written(name: str, cells: list[dict]) -> None:
    """The workbook convention (issue 17): each exercise cell holds a solution region, and the cell right
    after it checks the piece with `course.check` (tests/test_workbooks.py checks the workbooks)."""
    for cell, after in zip(cells, cells[1:]):
        if cell["type"] == "code" and "### BEGIN SOLUTION" in cell["source"]:
            first = cell["source"].strip().splitlines()[0][:60]
            assert after["type"] == "code" and "check(" in after["source"], (
                f"{name}: the exercise cell at {first!r} is not followed by the cell that checks it"
            )


@pytest.mark.parametrize("name", NAMES)
def test_notebook_ends_with_exercises_checked_in_a_cell(name):
    cells = load(name)
    if any(c["type"] == "code" and "### BEGIN SOLUTION" in c["source"] for c in cells):
        return _checked_where_written(name, cells)
    headings = [i for i, c in enumerate(cells) if c["type"] == "markdown" and EXERCISES.search(c["source"])]
    assert headings, f"{name}: no '## Exercises' heading"
    start = headings[-1]
    later_headings = [
        c["source"]
        for c in cells[start + 1 :]
        if c["type"] == "markdown" and re.search(r"^#\s", c["source"], re.M)
    ]
    assert not later_headings, f"{name}: the exercises are not the last section (a top-level heading follows)"
    checkers = imported_checkers(cells)
    stubs = [c["source"] for c in cells[start + 1 :] if c["type"] == "code" and is_stub(c["source"])]
    assert stubs, (
        f"{name}: no exercise after the exercises heading is a stub (`raise NotImplementedError`) to fill in"
    )
    unchecked = [s.splitlines()[0] for s in stubs if not calls_a_checker(s, checkers)]
    assert not unchecked, (
        f"{name}: exercise cells that call no checker of gptlib.exercises (e.g. check_merge_step(merge_step)) in "
        f"the same cell: {unchecked}"
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
