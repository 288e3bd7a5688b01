"""The pieces a learner writes, their checks, and the learner's own code gathered for later notebooks.

Hand-written tooling of the course, not part of the installed package. An *exercise* is a code cell of a
lesson whose reference code sits between nbgrader's `### BEGIN SOLUTION` and `### END SOLUTION` lines; the
workbook made from the lesson (`course.workbooks`) replaces each such region by a stub. Every function or
class such a cell defines whose name is registered here is a *piece*:

    @exercise("01_bpe", reference="gptlib.tokenizer:train_merges")
    def train_merges(fn) -> str:          # the check: raise AssertionError with a hint, or say what passed
        ...

The cell after an exercise checks it and says which version the rest of the notebook uses:

    train_merges = check(train_merges)

- the learner's piece passes: "passed (...)", and it is returned, so what they wrote is what runs next;
- it is still the stub (it raises `NotImplementedError("your code here")`): "not done yet", and the
  reference is returned, so a workbook with every stub untouched still runs to its end;
- it is wrong: AssertionError with a hint that names the mistake (the cell fails; fix it and run again).

`load_pieces(notebook)` does the same without a kernel: it runs the exercise cells of a saved notebook (a
lesson or the learner's workbook) on top of its gptlib module, checks each piece quietly and keeps the
reference where a check does not pass. `collect(folder)` gathers the pieces of workbooks 01-06 for notebook
06 (`YOUR_GPT_LESSONS`: 07 comes after 06's run), and `Pieces.table()` says whose each piece is.

Where 06 finds them: on your machine, in the saved workbooks (`notebooks/workbooks/`). In Colab each
workbook is a copy of its own, in a runtime of its own, so a workbook's setup cell calls `keep_pieces`: from
then on each piece that passes its check is also saved, as the source of its exercise cell, in
`pieces_folder()` (your Google Drive when it is mounted, else the runtime's disk; `$GPTLIB_PIECES` anywhere),
and `collect` reads a piece saved there in place of the workbook's cell.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import importlib
import inspect
import io
import json
import os
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

STUB_MESSAGE = "your code here"  # what every stub raises: NotImplementedError(STUB_MESSAGE)
STUB = f'# YOUR CODE HERE\nraise NotImplementedError("{STUB_MESSAGE}")'  # what a solution region becomes
SOLUTION_REGION = re.compile(
    r"^[ \t]*### BEGIN SOLUTION[ \t]*$.*?^[ \t]*### END SOLUTION[ \t]*$", re.M | re.S
)
NOTEBOOKS = Path(__file__).resolve().parent.parent  # notebooks/: the lessons, and workbooks/ below them
LESSONS = ("01_bpe", "02_data", "03_loader", "04_model", "05_optim", "06_training", "07_modern")
# the lessons whose pieces workbook 06 trains a GPT from: 06 and those before it (07 comes after the run)
YOUR_GPT_LESSONS = LESSONS[: LESSONS.index("06_training") + 1]


@dataclass
class Piece:
    "A registered piece: where it is taught, how it is checked, and where its reference lives."

    name: str
    notebook: str  # the lesson's stem, e.g. "01_bpe"
    checker: Callable[[object], str]
    reference: str  # "gptlib.module:name", or "lesson" for a piece the lesson defines but does not export
    minutes: int | None = None  # what the exercise asks of a learner, roughly

    def reference_object(self):
        "The reference: gptlib's own object, or the lesson's version of a piece it does not export."
        if self.reference == "lesson":
            return _lesson_namespace(self.notebook)[self.name]
        module, _, name = self.reference.partition(":")
        return getattr(importlib.import_module(module), name)


REGISTRY: dict[str, Piece] = {}


def exercise(notebook: str, reference: str, *, name: str | None = None, minutes: int | None = None):
    "Register the decorated function as the check of the piece `name` (default: the function's name)."
    if notebook not in LESSONS:
        raise ValueError(f"unknown lesson {notebook!r}; the lessons are {LESSONS}")

    def register(checker: Callable[[object], str]):
        piece_name = name or checker.__name__
        if piece_name in REGISTRY:
            raise ValueError(f"the piece {piece_name!r} is registered twice")
        REGISTRY[piece_name] = Piece(piece_name, notebook, checker, reference, minutes)
        return checker

    return register


def _registry() -> dict[str, Piece]:
    "Every piece, once the check modules (one per lesson, in course.checks) have registered theirs."
    importlib.import_module("course.checks")
    return REGISTRY


# --- checking one piece -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    "What checking a piece found: `status` is passed, not done or failed; `detail` says what, or the hint."

    name: str
    status: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def is_stub_error(error: BaseException) -> bool:
    "Whether `error` is an untouched stub's NotImplementedError (not one raised by a library)."
    return isinstance(error, NotImplementedError) and error.args[:1] == (STUB_MESSAGE,)


def run_check(name: str, obj) -> Outcome:
    """Check `obj` as the piece `name`: passed, not done (a stub) or failed (the check's hint). The check
    runs with torch on one thread: its tensors are tiny, and on a busy machine a pool turns ms into
    seconds."""
    piece = _registry()[name]
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    try:
        if torch is not None:
            torch.set_num_threads(1)
        return Outcome(name, "passed", piece.checker(obj) or "")
    except NotImplementedError as e:
        if not is_stub_error(e):
            raise  # something the learner's code (or a library) does not support: shown as it is
        return Outcome(name, "not done", "")
    except AssertionError as e:
        return Outcome(name, "failed", str(e))
    finally:
        if torch is not None:
            torch.set_num_threads(threads)


def check(obj, name: str | None = None):
    """Check a piece in a notebook (see the module docstring) and return the version to use from here on:
    the learner's when it passes, the reference while it is a stub. A wrong piece raises AssertionError."""
    name = name or obj.__name__
    outcome = run_check(name, obj)
    if outcome.status == "failed":
        raise AssertionError(f"{name}: {outcome.detail}")
    if outcome.passed:
        print(f"{name}: passed ({outcome.detail})" if outcome.detail else f"{name}: passed")
        _keep(name, obj)
        return obj
    print(
        f"{name}: not done yet. Replace `raise NotImplementedError(...)` with your code and run both cells "
        "again.\n  Until then the rest of this notebook uses the reference (it is in the lesson notebook, "
        f"../{_registry()[name].notebook}.ipynb)."
    )
    return _registry()[name].reference_object()


# --- the pieces of a saved notebook ------------------------------------------------------------------------


def read_cells(path: Path) -> list[dict]:
    return json.loads(Path(path).read_text(encoding="utf-8"))["cells"]


def cell_source(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def is_exercise_cell(cell: dict) -> bool:
    "A code cell with a solution region (a lesson), or the stub a workbook has in its place."
    source = cell_source(cell)
    return cell["cell_type"] == "code" and (SOLUTION_REGION.search(source) is not None or STUB in source)


def defined_names(source: str) -> list[str]:
    "The functions and classes a cell defines at its top level, in order."
    tree = ast.parse(_without_directives(source))
    return [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]


def _without_directives(source: str) -> str:
    "A cell's code without its `#|` lines and IPython magics (what runs as plain Python)."
    lines = source.splitlines()
    return "\n".join("" if line.startswith(("#|", "%", "!")) else line for line in lines)


def default_module(cells: list[dict]) -> str | None:
    "The gptlib module a notebook exports (`#| default_exp NAME`), as `gptlib.NAME`."
    for cell in cells:
        for line in cell_source(cell).splitlines():
            if line.startswith("#| default_exp"):
                return f"gptlib.{line.split()[-1]}"
    return None


@dataclass
class Pieces:
    "The pieces of some notebooks, each the learner's when it passed its check, else the reference."

    namespaces: dict[str, dict] = field(default_factory=dict)  # notebook stem -> its names
    outcomes: list[Outcome] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # piece name -> the notebook it was read from

    def __getattr__(self, name: str):
        for namespace in reversed(self.namespaces.values()):  # a later notebook's name wins
            if name in namespace:
                return namespace[name]
        raise AttributeError(f"no notebook defines {name!r}")

    def yours(self, name: str) -> bool:
        return any(o.name == name and o.passed for o in self.outcomes)

    def table(self) -> str:
        "One line per piece: whose it is, and why."
        rows = [f"{'piece':22s} {'notebook':12s} whose"]
        notebooks = {name: piece.notebook for name, piece in _registry().items()}
        for o in self.outcomes:
            whose = {"passed": "yours", "not done": "reference (not done yet)"}.get(
                o.status, "reference (its check fails)"
            )
            rows.append(f"{o.name:22s} {notebooks[o.name]:12s} {whose}")
        kept = [Path(s) for s in self.sources.values() if s.endswith(".json")]  # saved by their checks
        for folder in sorted({path.parent for path in kept}):
            count = sum(path.parent == folder for path in kept)
            rows.append(f"{count} piece(s) read from {folder}, where their checks saved them")
        return "\n".join(rows)


def _exercise_cells(path: Path, nb: dict | None, kept: dict[str, str]) -> tuple[list[dict], str | None]:
    """The exercise cells of a saved notebook and its gptlib module. A lesson's are those with a solution
    region; a workbook's (its metadata names its lesson, `../STEM.ipynb` beside its folder) are the cells
    with the ids of the lesson's exercise cells, whatever the learner wrote in them, in the lesson's order,
    each replaced by the source `kept` holds for its id (a piece saved by its check). `nb` None: the
    workbook `path` is missing, and only the kept cells are there."""
    meta = (nb or {}).get("metadata", {}).get("course")
    if nb is not None and not meta:
        return [c for c in nb["cells"] if is_exercise_cell(c)], default_module(nb["cells"])
    lesson = read_cells(path.parent.parent / f"{meta['lesson'] if meta else path.stem}.ipynb")
    ids = [c.get("id") for c in lesson if is_exercise_cell(c)]
    own = {c.get("id"): c for c in (nb or {}).get("cells", []) if c["cell_type"] == "code"}
    cells = []
    for cell_id in ids:
        if cell_id in kept:
            cells.append({"cell_type": "code", "id": cell_id, "source": kept[cell_id], "kept": True})
        elif cell_id in own:
            cells.append(own[cell_id])
    return cells, meta["module"] if meta else default_module(lesson)


def load_pieces(
    path, *, checks: bool = True, into: Pieces | None = None, kept_in: Path | None = None
) -> Pieces:
    """Run the exercise cells of the saved notebook `path` (a lesson or a workbook) on top of a copy of its
    gptlib module's names (so the module's own classes keep their identity), then check each piece its
    lesson teaches, in the order the cells define them: one that does not pass, or whose cell does not
    run, is replaced by its reference, as `check` does in the notebook (quietly here). With `kept_in` (a
    folder of `pieces_folder`'s), a workbook's exercise cell whose piece was saved there by its check runs
    the saved source instead."""
    path, pieces = Path(path), into if into is not None else Pieces()
    nb = json.loads(path.read_text(encoding="utf-8")) if path.is_file() or kept_in is None else None
    lesson = (nb or {}).get("metadata", {}).get("course", {}).get("lesson", path.stem)
    kept = read_kept(kept_in, lesson) if kept_in is not None else {}
    cells, module = _exercise_cells(path, nb, kept)
    namespace = (
        copy.copy(vars(importlib.import_module(module))) if module else {"__name__": f"pieces_{path.stem}"}
    )
    defined, broken = [], {}  # the names the exercise cells defined; a cell that failed: why
    origin = {}  # piece name -> where its code was read
    for cell in cells:
        source = _without_directives(cell_source(cell))
        try:
            names = defined_names(source)
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, f"<{path.name}: exercise>", "exec"), namespace)
            defined += names
            where = str(kept_path(kept_in, lesson)) if cell.get("kept") else str(path)
            origin.update(dict.fromkeys(names, where))
        except Exception as e:  # the learner's cell does not run (or even parse)
            if not checks:
                raise
            broken[cell.get("id")] = f"its cell does not run: {type(e).__name__}: {e}"
    if checks:
        taught = [name for name, piece in _registry().items() if piece.notebook == lesson]
        for name in sorted(taught, key=lambda n: defined.index(n) if n in defined else len(defined)):
            if name in defined:
                outcome = run_check(name, namespace[name])
            else:
                outcome = Outcome(name, "failed", next(iter(broken.values()), "no exercise cell defines it"))
            pieces.outcomes.append(outcome)
            pieces.sources[name] = origin.get(name, str(path))
            if not outcome.passed:
                namespace[name] = _registry()[name].reference_object()
    pieces.namespaces[path.stem] = namespace
    return pieces


def collect(folder=None, notebooks=YOUR_GPT_LESSONS, kept_in: Path | None = None) -> Pieces:
    """The learner's pieces from the workbooks in `folder` (default: notebooks/workbooks/), in course order,
    each piece saved by its check in `kept_in` (default: `pieces_folder()`, None on your own machine) read
    from there instead of its workbook."""
    folder = Path(folder) if folder is not None else NOTEBOOKS / "workbooks"
    kept_in = kept_in if kept_in is not None else pieces_folder()
    pieces = Pieces()
    for stem in notebooks:
        path = folder / f"{stem}.ipynb"
        if path.is_file() or (kept_in is not None and kept_path(kept_in, stem).is_file()):
            load_pieces(path, into=pieces, kept_in=kept_in)
    return pieces


# --- the pieces that passed, kept where workbook 06 finds them ---------------------------------------------

PIECES_ENV = "GPTLIB_PIECES"  # a folder: where `keep_pieces` saves and `collect` reads, on any machine
KEPT_FORMAT, KEPT_VERSION = "gptlib-course-pieces", 1
DRIVE = Path("/content/drive")  # where Colab mounts Google Drive
_KEEPING: dict = {}  # what `keep_pieces` set in this kernel: {"folder": Path}


def in_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def pieces_folder(*, mount: bool = False) -> Path | None:
    """Where the pieces that pass their checks are kept for workbook 06: `$GPTLIB_PIECES` when set; in Colab,
    `gptlib/pieces` in your Google Drive when it is mounted (`mount`: ask to mount it first), else
    `course/pieces` in gptlib's data folder on the runtime's disk, which ends with the runtime. None
    elsewhere: on your own machine 06 reads the saved workbooks."""
    if env := os.environ.get(PIECES_ENV):
        return Path(env).expanduser()
    if not in_colab():
        return None
    if mount and not (DRIVE / "MyDrive").is_dir():
        _mount_drive()
    if (DRIVE / "MyDrive").is_dir():
        return DRIVE / "MyDrive" / "gptlib" / "pieces"
    from gptlib.corpus import data_dir

    return data_dir() / "course" / "pieces"


def _mount_drive() -> None:
    "Ask Colab to mount the learner's Google Drive; a refusal (or no Drive) leaves it unmounted."
    print(
        "Colab asks for your Google Drive: workbook 06 runs in a runtime of its own and finds the pieces you "
        "pass there (in MyDrive/gptlib/pieces). Decline, and they stay on this runtime's disk."
    )
    try:
        from google.colab import drive

        drive.mount(str(DRIVE))
    except Exception as e:  # declined, timed out, or no Drive: Colab's own errors, all of them a "no"
        print(f"Drive not mounted ({type(e).__name__}: {e})")


def keep_pieces(lesson: str) -> None:
    """From now on in this kernel, save each piece that passes its check where workbook 06 finds it
    (`pieces_folder`, mounting Drive in Colab), and say where (it returns nothing: a cell's last line, it
    shows nothing more). A workbook's setup cell calls it; a lesson does not (its pieces are the
    references)."""
    if lesson not in LESSONS:
        raise ValueError(f"unknown lesson {lesson!r}; the lessons are {LESSONS}")
    folder = pieces_folder(mount=True)
    _KEEPING.clear()
    if folder is None:
        print(
            f"Workbook 06 reads your pieces from this workbook's file (notebooks/workbooks/{lesson}.ipynb): "
            "save it before you run 06."
        )
        return
    _KEEPING["folder"] = folder
    if PIECES_ENV not in os.environ and not folder.is_relative_to(DRIVE):
        where = (
            "on this runtime's disk, which ends with the runtime: workbook 06 runs in a runtime of its own, "
            "so mount your Drive (run this cell again) to keep them"
        )
    else:
        where = "where workbook 06 reads them"
    print(f"Each piece that passes its check is saved in {folder}, {where}.")


def kept_path(folder: Path, lesson: str) -> Path:
    return Path(folder) / f"{lesson}.json"


def read_kept(folder: Path, lesson: str) -> dict[str, str]:
    """The exercise cells of `lesson` saved in `folder` by their checks: cell id -> source ({} when none
    is). A damaged file raises gptlib's DocumentError naming it."""
    from gptlib.files import DocumentError, read_json_document

    path = kept_path(folder, lesson)
    if not path.is_file():
        return {}
    document = read_json_document(
        path, format=KEPT_FORMAT, version=KEPT_VERSION, required=("lesson", "cells"), what="pieces file"
    )
    cells = document["cells"]
    if document["lesson"] != lesson:
        raise DocumentError(f"{path} holds the pieces of {document['lesson']!r}, not of {lesson!r}")
    if not isinstance(cells, dict) or not all(isinstance(v, str) for v in cells.values()):
        raise DocumentError(f"{path}: its cells are not a mapping of cell ids to sources")
    return cells


def save_piece(folder: Path, lesson: str, cell_id: str, source: str) -> Path:
    "Save `source` as the exercise cell `cell_id` of `lesson` in `folder` (the other cells kept as they are)."
    from gptlib.files import write_json

    cells = read_kept(folder, lesson)
    cells[cell_id] = source
    Path(folder).mkdir(parents=True, exist_ok=True)
    document = {"format": KEPT_FORMAT, "version": KEPT_VERSION, "lesson": lesson, "cells": cells}
    write_json(kept_path(folder, lesson), document)
    return kept_path(folder, lesson)


def _keep(name: str, obj) -> None:
    "Save the cell that defined the piece `name` (it passed its check), when `keep_pieces` asked for it."
    if "folder" not in _KEEPING:
        return
    lesson = _registry()[name].notebook
    cell_id = _exercise_cell_ids(lesson).get(name)
    source = _kernel_source(name) or _object_source(obj)
    if cell_id is None or source is None:
        print(f"  ({name} could not be saved for workbook 06: its cell's source was not found)")
        return
    try:
        save_piece(_KEEPING["folder"], lesson, cell_id, source)
    except (OSError, ValueError) as e:  # the disk, or a damaged pieces file (DocumentError): say so, go on
        print(f"  ({name} could not be saved for workbook 06: {e})")


def _exercise_cell_ids(lesson: str) -> dict[str, str]:
    "Piece name -> the id of the lesson's exercise cell that defines it."
    return {
        name: cell.get("id")
        for cell in read_cells(NOTEBOOKS / f"{lesson}.ipynb")
        if is_exercise_cell(cell)
        for name in defined_names(cell_source(cell))
    }


def _kernel_source(name: str) -> str | None:
    "The source of the latest cell run in this IPython kernel that defines `name` at its top level."
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return None
    for source in reversed(shell.history_manager.input_hist_raw):
        try:
            if name in defined_names(source):
                return source
        except SyntaxError:
            continue
    return None


def _object_source(obj) -> str | None:
    "The source of a function or class defined in a file (outside a kernel)."
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None


_LESSON_CACHE: dict[str, dict] = {}


def _lesson_namespace(stem: str) -> dict:
    "The names the lesson `stem` defines in its exercise cells (its reference answers), loaded once."
    if stem not in _LESSON_CACHE:
        _LESSON_CACHE[stem] = load_pieces(NOTEBOOKS / f"{stem}.ipynb", checks=False).namespaces[stem]
    return _LESSON_CACHE[stem]
