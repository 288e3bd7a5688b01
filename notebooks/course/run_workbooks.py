"""Run the workbooks as a learner would, twice, and check what they say (part of `make check-workbooks`).

Hand-written tooling of the course, not part of the installed package. In a scratch copy of notebooks/
(the lessons, `course` and the workbooks), every workbook runs in smoke mode (`GPTLIB_SMOKE=1`):

1. untouched: it must run to its end on the references, every piece it teaches saying "not done yet";
2. with every stub filled by its reference (`workbooks.build(..., solved=True)`): every piece must pass,
   and 06, which trains from the pieces of workbooks 01-06, must find every one of them the learner's.
   As in Colab, where 06 never sees the other workbooks' edits: each piece that passes is kept in a scratch
   folder (`$GPTLIB_PIECES`, `course.pieces.keep_pieces`), and once a filled workbook has run its file is put
   back untouched, so that 06 finds the pieces of the workbooks run before it only where their checks kept
   them.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course.pieces import LESSONS, NOTEBOOKS, PIECES_ENV, YOUR_GPT_LESSONS, _registry

YOUR_GPT = "06_training"  # the workbook that trains a GPT from the pieces of 01-06
ALL_YOURS = "pieces are yours"  # 06's table ends with "N of N pieces are yours" when every piece passed


def _scratch(root: Path) -> Path:
    "A copy of notebooks/ under `root` without its workbooks: lessons, `course`, the sanitizer."
    scratch = root / "notebooks"
    shutil.copytree(
        NOTEBOOKS, scratch, ignore=shutil.ignore_patterns("workbooks", "__pycache__", ".ipynb_checkpoints")
    )
    (scratch / "workbooks").mkdir()
    return scratch


def _outputs_text(nb) -> str:
    texts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            texts.append(
                output.get("text", "") if "text" in output else output.get("data", {}).get("text/plain", "")
            )
    return "\n".join(map(str, texts))


def _yours_table(nb) -> str:
    "The output of workbook 06's cell that prints whose each piece is and how many are the learner's."
    for cell in nb.cells:
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        if ALL_YOURS in text and "whose" in text:
            return text.rstrip()
    return "(no table of pieces printed)"


def _expect(nb, stem: str, solved: bool) -> list[str]:
    "What is wrong with the outputs of workbook `stem` after it ran (untouched, or `solved`)."
    text, problems = _outputs_text(nb), []
    pieces = [name for name, piece in _registry().items() if piece.notebook == stem]
    if len(pieces) < 2:
        problems.append(f"{stem} teaches {len(pieces)} registered piece(s); every workbook has at least two")
    for name in pieces:
        said = f"{name}: passed" if solved else f"{name}: not done yet"
        if said not in text:
            problems.append(f"{stem} ({'filled' if solved else 'untouched'}) never printed {said!r}")
    if solved and stem == YOUR_GPT:
        total = sum(piece.notebook in YOUR_GPT_LESSONS for piece in _registry().values())
        if f"{total} of {total} {ALL_YOURS}" not in text:
            problems.append(f"{stem} (filled) did not find all {total} pieces to be the learner's")
    return problems


def run_all(stems=LESSONS, timeout: int = 600) -> int:
    "Run the workbooks of `stems` untouched and filled; print what went wrong; 0 when nothing did."
    from course.workbooks import build

    problems = []
    with tempfile.TemporaryDirectory(prefix="gptlib-workbooks-") as tmp:
        os.environ["GPTLIB_SMOKE"] = "1"
        for solved in (False, True):
            scratch = _scratch(Path(tmp) / ("filled" if solved else "untouched"))
            workbooks = scratch / "workbooks"
            os.environ[PIECES_ENV] = str(scratch.parent / "pieces")  # where the kernels keep passing pieces
            for stem in LESSONS:  # all are written: 06 gathers the pieces of the earlier ones
                nbformat.write(build(scratch / f"{stem}.ipynb", solved=solved), workbooks / f"{stem}.ipynb")
            for stem in stems:
                nb = nbformat.read(workbooks / f"{stem}.ipynb", as_version=4)
                started = time.perf_counter()
                try:
                    client = NotebookClient(nb, timeout=timeout, kernel_name="python3")
                    client.execute(cwd=str(workbooks))
                except Exception as e:  # a cell failed: nbclient says which and with what
                    problems.append(f"{stem} ({'filled' if solved else 'untouched'}) failed: {e}")
                    continue
                if solved:  # its pieces reach 06 only as they would in Colab: kept by their checks
                    untouched = build(scratch / f"{stem}.ipynb")
                    nbformat.write(untouched, workbooks / f"{stem}.ipynb")
                found = _expect(nb, stem, solved)
                problems += found
                state = "filled" if solved else "untouched"
                seconds = time.perf_counter() - started
                print(f"{stem} {state}: {'ok' if not found else 'PROBLEMS'} in {seconds:.0f} s")
                if solved and stem == YOUR_GPT:  # whose pieces trained the GPT: the log shows it
                    print(_yours_table(nb))
        os.environ.pop(PIECES_ENV)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0
