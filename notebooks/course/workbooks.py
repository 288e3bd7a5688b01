"""Workbooks: the learner's copy of each lesson, generated from it, never edited by hand.

Hand-written tooling of the course, not part of the installed package. A lesson (`notebooks/0N_*.ipynb`)
holds the reference code of its exercises between nbgrader's `### BEGIN SOLUTION` / `### END SOLUTION`
lines; its workbook (`notebooks/workbooks/0N_*.ipynb`) is the same notebook with

- every solution region replaced by a stub (nbgrader's `ClearSolutions` preprocessor: in code
  `# YOUR CODE HERE` and `raise NotImplementedError("your code here")`, in prose `YOUR ANSWER HERE`),
  the signature, docstring and hints around it kept;
- the lesson's stored outputs (a full-size run's figures, tables and printed shapes) where they show no
  answer: none on an exercise, none on the check after it (it prints the piece's own results), none that
  holds a line of an answer; no `#|` export directives (a workbook never writes gptlib);
- a first cell that says where it comes from, with its own Colab badge (the lesson's first cell sends the
  learner here), and after the install cell a setup cell that makes `course` (the checks) importable and
  keeps each piece that passes its check where workbook 06 finds it (`course.pieces.keep_pieces`).

    python notebooks/course/workbooks.py write [--force]   # make workbooks
    python notebooks/course/workbooks.py check              # make check-workbooks

`write` refuses to replace a workbook the learner has edited (its cells differ from what was generated)
unless `--force`. `check` fails when a committed workbook differs from its lesson's, when a workbook shows
an answer (a line of a solution region) anywhere, in a cell or in an output, or an output on an exercise or
its check, and then runs every workbook in smoke mode twice in a scratch copy of notebooks/: untouched
(every piece says "not done yet" and the notebook runs to its end on the references) and with every stub
filled by its reference (every piece passes; 06 finds every piece to be the learner's, each read from where
its check saved it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `course` as the notebooks import it

from course import colab  # noqa: E402
from course.pieces import (  # noqa: E402
    LESSONS,
    NOTEBOOKS,
    SOLUTION_REGION,
    STUB,
    STUB_MESSAGE,
    YOUR_GPT_LESSONS,
    is_exercise_cell,
)

WORKBOOKS = NOTEBOOKS / "workbooks"
MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)
DIRECTIVE = re.compile(r"^#\|.*\n?", re.M)
NBVAL_MARKER = re.compile(r"^# NBVAL_\w+[ \t]*\n?", re.M)  # the lessons' test markers, nothing to a learner
LESSON_ONLY = "lesson-only"  # the tag of lesson cells a workbook leaves out: they would show an answer
CHECK_LINE = re.compile(r"^\s*\w+\s*=\s*check\(", re.M)  # `piece = check(piece)`: the cell after an exercise
VERDICT = re.compile(r"^\w+: (passed|not done yet)\b", re.M)  # what `check` prints
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"  # a widget whose state no notebook stores
SETUP = """import sys

sys.path.insert(0, "..")  # notebooks/: `course`, the checks of the exercises
from course.pieces import keep_pieces

# each piece that passes its check is kept where workbook 06 finds it: in Colab this asks for your Google
# Drive and saves to MyDrive/gptlib/pieces (declined: this runtime's disk only); elsewhere 06 reads this
# workbook, saved
keep_pieces("{stem}")"""
# a lesson after 06's run (07): its pieces build the models it trains itself, and nothing keeps them
SETUP_AFTER_06 = """import sys

sys.path.insert(0, "..")  # notebooks/: `course`, the checks of the exercises"""


def _after_your_gpt(stem: str) -> bool:
    "Whether the lesson `stem` comes after 06, whose run is made of the pieces of 01-06 (07 does)."
    return stem in LESSONS and stem not in YOUR_GPT_LESSONS


def _header(stem: str, solved: bool) -> str:
    kind = "with every stub filled by its reference (for checks)" if solved else "for you to fill in"
    text = (
        f"Your copy of the lesson [`../{stem}.ipynb`](../{stem}.ipynb), made by `make workbooks`:",
        "start here. The code cells that say `# YOUR CODE HERE` are yours: write the piece, then run the",
        "cell after it, which checks it, names a mistake if it finds one, and says which version the rest",
        "of the notebook runs (yours once it passes). Before you run anything, the outputs are the",
        "lesson's, from a full-size run, except on the exercises and their checks: what to expect.",
        *(
            (
                "Workbook 06 trains a GPT from the pieces that pass: on your machine it reads them from the",
                "saved workbooks; in Colab the setup cell below keeps them in your Google Drive.",
            )
            if not _after_your_gpt(stem)
            else ("This workbook comes after 06's run: the models it trains are built from your pieces.",)
        ),
        "Change anything you like: `make workbooks` never replaces a workbook you have edited (unless",
        "`FORCE=1`). The lesson holds every reference answer; look there when you are stuck, not before.",
    )
    badge = colab.badge(colab.WORKBOOKS / f"{stem}.ipynb")  # the workbook opens in Colab as itself
    return f"# Workbook {stem} ({kind})\n\n{badge}\n\n" + " ".join(text)


def outputs_text(cells) -> str:
    "The text of the outputs of `cells`: what they print and display as text (pictures left out)."
    texts = []
    for cell in cells:
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            texts.append(text if isinstance(text, str) else "".join(text))
            for mime, value in output.get("data", {}).items():
                if mime.startswith("text/"):
                    texts.append(value if isinstance(value, str) else "".join(value))
    return "\n".join(texts)


def _shows_an_answer(cell) -> bool:
    "Whether `cell` is an exercise, or a check (it prints the piece's own results and the check's verdict)."
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    return is_exercise_cell(cell) or CHECK_LINE.search(source) is not None


def _shown_outputs(cell, answers: list[str]) -> list:
    """The lesson's stored outputs of `cell` that its workbook shows: none on an exercise or the check after
    it, none when one holds a check's verdict or a line of an answer; widget views (a widget's state is not
    stored) and errors left out. Execution counts are the learner's to make."""
    if cell.cell_type != "code" or _shows_an_answer(cell):
        return []
    outputs = [o for o in cell.outputs if o.output_type != "error" and WIDGET_VIEW not in o.get("data", {})]
    text = outputs_text([{"outputs": outputs}])
    if VERDICT.search(text) or any(line in text for line in answers):
        return []
    for output in outputs:
        if "execution_count" in output:
            output.execution_count = None
    return outputs


def build(lesson: Path, *, solved: bool = False) -> nbformat.NotebookNode:
    """The workbook of `lesson`: stubs (or, `solved`, the reference answers), the lesson's outputs that show
    no answer, no directives."""
    from nbgrader.preprocessors import ClearSolutions

    nb = nbformat.read(lesson, as_version=4)
    nb.cells = [c for c in _without_lesson_only(nb.cells, lesson.name) if c.get("id") != colab.LINK_ID]
    answers = answer_lines(lesson)
    shown = [_shown_outputs(cell, answers) for cell in nb.cells]  # decided on the lesson's own cells
    exports = [
        line.split()[-1]
        for c in nb.cells
        for line in c.source.splitlines()
        if line.startswith("#| default_exp")
    ]
    module = exports[0] if exports else None
    if solved:
        for cell in nb.cells:
            cell.source = MARKER.sub("", cell.source)
    else:
        clear = ClearSolutions(
            enforce_metadata=False, code_stub={"python": STUB}, text_stub="YOUR ANSWER HERE"
        )
        nb, _ = clear.preprocess(nb, {})
    nb.cells[0].source = colab.without_start_here(nb.cells[0].source)  # the workbook is where to start
    for cell, outputs in zip(nb.cells, shown):
        if cell.get("id") == colab.CELL_ID:
            cell.source = colab.install_cell("notebooks/workbooks")
        cell.metadata = {}
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = outputs, None
            cell.source = NBVAL_MARKER.sub("", DIRECTIVE.sub("", cell.source)).strip("\n")
    nb.cells = [c for c in nb.cells if c.source.strip()]  # `#| default_exp` cells become empty
    header = nbformat.v4.new_markdown_cell(_header(lesson.stem, solved), id="workbook-header")
    setup_source = SETUP_AFTER_06 if _after_your_gpt(lesson.stem) else SETUP.format(stem=lesson.stem)
    setup = nbformat.v4.new_code_cell(setup_source, id="workbook-setup")
    ids = [c.get("id") for c in nb.cells]
    at = ids.index(colab.CELL_ID) + 1 if colab.CELL_ID in ids else 0  # after the install: `course` imports
    nb.cells = [header, *nb.cells[:at], setup, *nb.cells[at:]]
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "course": {"lesson": lesson.stem, "module": f"gptlib.{module}" if module else None, "solved": solved},
    }
    nb.metadata["course"]["generated_sha256"] = sources_sha256(nb)
    return nb


def _without_lesson_only(cells: list, lesson_name: str) -> list:
    """`cells` with each run of cells tagged `lesson-only` replaced by one markdown cell that says where they
    are: the lesson's own versions of pieces the learner writes (06's appendix of gptlib's loop, save and
    resume), which would give the answers away. Cells after them must not need what they define."""
    kept, leaving = [], False
    for cell in cells:
        if LESSON_ONLY not in cell.metadata.get("tags", []):
            kept.append(cell)
            leaving = False
        elif not leaving:  # the first of a run: its heading, if it has one, names what is left out
            heading = next((line for line in cell.source.splitlines() if line.startswith("#")), "")
            level = len(heading) - len(heading.lstrip("#")) or 2  # the heading's own level, in the outline
            title = heading.lstrip("#").strip() or "A part of the lesson"
            note = (
                f"{'#' * level} {title}: in the lesson\n\n"
                f"This part of [`../{lesson_name}`](../{lesson_name}) shows gptlib's own versions of pieces "
                "you write in this workbook: it stays in the lesson. Read it there once yours pass."
            )
            kept.append(nbformat.v4.new_markdown_cell(note, id=f"{cell.get('id', 'lesson')}-left-out"))
            leaving = True
    return kept


def sources_sha256(nb) -> str:
    "sha256 of a notebook's cell types and sources: what `write` compares to see a learner's edits."
    cells = [
        [c["cell_type"], c["source"] if isinstance(c["source"], str) else "".join(c["source"])]
        for c in nb["cells"]
    ]
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()


def text_of(nb) -> str:
    return "\n".join(
        c["source"] if isinstance(c["source"], str) else "".join(c["source"]) for c in nb["cells"]
    )


def answer_lines(lesson: Path) -> list[str]:
    "The lines of the lesson's solution regions that would give an answer away (code, not comments)."
    nb = nbformat.read(lesson, as_version=4)
    found = []
    for cell in nb.cells:
        for region in SOLUTION_REGION.findall(cell.source):
            for line in region.splitlines()[1:-1]:
                line = line.strip()
                if len(line) >= 20 and not line.startswith("#") and line != STUB_MESSAGE:
                    found.append(line)
    return found


def leaks(lesson: Path, workbook) -> list[str]:
    """The answer lines of `lesson` that can be read somewhere in `workbook`, in a cell or in an output
    (stubs must hide them all), and every output shown on an exercise or its check."""
    text = text_of(workbook) + "\n" + outputs_text(workbook["cells"])
    found = [line for line in answer_lines(lesson) if line in text]
    for cell in workbook["cells"]:
        if cell["cell_type"] == "code" and cell.get("outputs") and _shows_an_answer(cell):
            found.append(f"the output of the exercise or check cell {cell.get('id')!r}")
    return found


def _dumps(nb) -> str:
    return nbformat.writes(nb) + "\n"


def write(stems=LESSONS, *, force: bool = False, out: Path = WORKBOOKS, solved: bool = False) -> list[Path]:
    """Write the workbooks of the lessons `stems` into `out`. One the learner has edited is not replaced
    (unless `force`): `FileExistsError` names it."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stem in stems:
        path = out / f"{stem}.ipynb"
        if path.is_file() and not force:
            current = json.loads(path.read_text(encoding="utf-8"))
            recorded = current.get("metadata", {}).get("course", {}).get("generated_sha256")
            if recorded != sources_sha256(current):
                raise FileExistsError(
                    f"{path} holds your own work (its cells differ from what was generated): copy it "
                    "elsewhere first, or pass --force (make workbooks FORCE=1) to replace it"
                )
        nb = build(NOTEBOOKS / f"{stem}.ipynb", solved=solved)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(_dumps(nb), encoding="utf-8")
        os.replace(tmp, path)
        written.append(path)
    return written


def out_of_step(stems=LESSONS) -> list[str]:
    "What differs between the committed workbooks and their lessons, and every answer a workbook shows."
    problems = []
    for stem in stems:
        lesson, path = NOTEBOOKS / f"{stem}.ipynb", WORKBOOKS / f"{stem}.ipynb"
        expected = build(lesson)
        if not path.is_file():
            problems.append(f"{path} is missing: run `make workbooks`")
        elif path.read_text(encoding="utf-8") != _dumps(expected):
            problems.append(f"{path} is out of step with {lesson.name}: run `make workbooks`")
        problems += [f"{path.name} shows an answer: {line!r}" for line in leaks(lesson, expected)]
    return problems


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="make or check the workbooks")
    parser.add_argument("action", choices=("write", "check"))
    parser.add_argument("--force", action="store_true", help="replace workbooks even if you edited them")
    parser.add_argument("--only", nargs="*", default=list(LESSONS), help="some lessons only (their stems)")
    args = parser.parse_args()
    if args.action == "write":
        try:
            for written in write(args.only, force=args.force):
                print(f"wrote {written.relative_to(NOTEBOOKS.parent)}")
        except FileExistsError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
    else:
        from course.run_workbooks import run_all

        problems = out_of_step(args.only)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        if problems:
            raise SystemExit(1)
        raise SystemExit(run_all(args.only))
