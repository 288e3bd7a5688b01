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
reference where a check does not pass. `collect(folder)` gathers every workbook's pieces for notebook 06,
and `Pieces.table()` says whose each piece is.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import importlib
import io
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

STUB_MESSAGE = "your code here"  # what every stub raises: NotImplementedError(STUB_MESSAGE)
STUB = f'# YOUR CODE HERE\nraise NotImplementedError("{STUB_MESSAGE}")'  # what a solution region becomes
SOLUTION_REGION = re.compile(
    r"^[ \t]*### BEGIN SOLUTION[ \t]*$.*?^[ \t]*### END SOLUTION[ \t]*$", re.M | re.S
)
NOTEBOOKS = Path(__file__).resolve().parent.parent  # notebooks/: the lessons, and workbooks/ below them
LESSONS = ("01_bpe", "02_data", "03_loader", "04_model", "05_optim", "06_training")


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
        return "\n".join(rows)


def _exercise_cells(path: Path, nb: dict) -> tuple[list[dict], str | None]:
    """The exercise cells of a saved notebook and its gptlib module. A lesson's are those with a solution
    region; a workbook's (its metadata names its lesson, `../STEM.ipynb` beside its folder) are the cells
    with the ids of the lesson's exercise cells, whatever the learner wrote in them."""
    meta = nb.get("metadata", {}).get("course")
    if not meta:
        return [c for c in nb["cells"] if is_exercise_cell(c)], default_module(nb["cells"])
    lesson = read_cells(path.parent.parent / f"{meta['lesson']}.ipynb")
    ids = {c.get("id") for c in lesson if is_exercise_cell(c)}
    return [c for c in nb["cells"] if c["cell_type"] == "code" and c.get("id") in ids], meta["module"]


def load_pieces(path, *, checks: bool = True, into: Pieces | None = None) -> Pieces:
    """Run the exercise cells of the saved notebook `path` (a lesson or a workbook) on top of a copy of its
    gptlib module's names (so the module's own classes keep their identity), then check each piece its
    lesson teaches, in the order the cells define them: one that does not pass, or whose cell does not
    run, is replaced by its reference, as `check` does in the notebook (quietly here)."""
    path, pieces = Path(path), into if into is not None else Pieces()
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells, module = _exercise_cells(path, nb)
    namespace = (
        copy.copy(vars(importlib.import_module(module))) if module else {"__name__": f"pieces_{path.stem}"}
    )
    defined, broken = [], {}  # the names the exercise cells defined; a cell that failed: why
    for cell in cells:
        source = _without_directives(cell_source(cell))
        try:
            names = defined_names(source)
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, f"<{path.name}: exercise>", "exec"), namespace)
            defined += names
        except Exception as e:  # the learner's cell does not run (or even parse)
            if not checks:
                raise
            broken[cell.get("id")] = f"its cell does not run: {type(e).__name__}: {e}"
    if checks:
        lesson = (nb.get("metadata", {}).get("course") or {}).get("lesson", path.stem)
        taught = [name for name, piece in _registry().items() if piece.notebook == lesson]
        for name in sorted(taught, key=lambda n: defined.index(n) if n in defined else len(defined)):
            if name in defined:
                outcome = run_check(name, namespace[name])
            else:
                outcome = Outcome(name, "failed", next(iter(broken.values()), "no exercise cell defines it"))
            pieces.outcomes.append(outcome)
            pieces.sources[name] = str(path)
            if not outcome.passed:
                namespace[name] = _registry()[name].reference_object()
    pieces.namespaces[path.stem] = namespace
    return pieces


def collect(folder=None, notebooks=LESSONS) -> Pieces:
    "The learner's pieces from the workbooks in `folder` (default: notebooks/workbooks/), in course order."
    folder = Path(folder) if folder is not None else NOTEBOOKS / "workbooks"
    pieces = Pieces()
    for stem in notebooks:
        if (folder / f"{stem}.ipynb").is_file():
            load_pieces(folder / f"{stem}.ipynb", into=pieces)
    return pieces


_LESSON_CACHE: dict[str, dict] = {}


def _lesson_namespace(stem: str) -> dict:
    "The names the lesson `stem` defines in its exercise cells (its reference answers), loaded once."
    if stem not in _LESSON_CACHE:
        _LESSON_CACHE[stem] = load_pieces(NOTEBOOKS / f"{stem}.ipynb", checks=False).namespaces[stem]
    return _LESSON_CACHE[stem]
