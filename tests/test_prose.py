"""The lessons' prose agrees with their stored outputs: every loss, time, rate or speed-up the markdown quotes
is one a stored output shows (tests/tools/prose_figures.py says how a figure is found and what is exempt)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "tools"))

from prose_figures import unbacked  # noqa: E402

LESSONS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))


@pytest.mark.parametrize("notebook", LESSONS, ids=lambda p: p.stem)
def test_every_figure_of_the_prose_is_in_the_stored_outputs(notebook):
    problems = unbacked(notebook)
    assert not problems, "\n".join(problems)


def test_a_figure_the_outputs_contradict_is_found(tmp_path):
    cell = {
        "cell_type": "code",
        "outputs": [{"output_type": "stream", "text": ["finished 2600 steps in 952 s\n"]}],
    }
    prose = {"cell_type": "markdown", "source": ["The run takes about 8.5 minutes; it ends at 15.9 minutes."]}
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text(__import__("json").dumps({"cells": [prose, cell]}))
    (problem,) = unbacked(notebook)
    assert "'8.5 minutes'" in problem  # 952 s is 15.9 minutes, not 8.5
