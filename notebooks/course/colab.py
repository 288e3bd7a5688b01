"""The door of the course: each lesson's first cell sends the learner to its workbook, with an "Open in
Colab" badge that opens the workbook, and every lesson and workbook has a cell that installs the course
where gptlib is missing.

Hand-written tooling of the course, not part of the installed package. The repository's address is written
once, in pyproject.toml (`[project.urls] Repository`); the badges and the install cell are made from it by

    python notebooks/course/colab.py [LESSON.ipynb ...]   # make colab (default: every lesson)

which puts the paragraph `start_here` writes into the lesson's first cell, after its title and summary, and
the install cell right after that cell. `make workbooks` carries the cell into the workbooks and opens each
with a badge of its own. Every badge a learner is shown opens a workbook: a lesson holds the answers.

The cell does nothing where gptlib imports (a local checkout, CI); elsewhere it clones the repository (or
takes the checkout named by `$GPTLIB_SOURCE`), installs it with pip, makes it importable without restarting
the kernel and moves into the notebook's folder, where the course's helpers and data are found. Colab's own
torch (a CUDA build, and a T4 GPU on the free tier) satisfies gptlib's torch requirement, so nothing large
is downloaded.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent.parent
ROOT = NOTEBOOKS.parent
WORKBOOKS = Path("notebooks/workbooks")  # in the repository
CELL_ID = "colab-install"
LINK_ID = "colab-link"  # a lesson's former badge cell, on its own after the title: `make colab` removes it
BADGE = "[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]"


def repository() -> str:
    "The repository's address, from pyproject.toml's `[project.urls] Repository`."
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^\[project\.urls\][^\[]*?^Repository\s*=\s*"([^"]+)"', text, re.M | re.S)
    if match is None:
        raise SystemExit("pyproject.toml has no [project.urls] Repository: the Colab links are made from it")
    return match.group(1).rstrip("/")


def colab_url(notebook: Path) -> str:
    "The Colab address that opens `notebook` (a path inside the repository) from GitHub's main branch."
    owner_repo = repository().removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{owner_repo}/blob/main/{notebook.as_posix()}"


def badge(notebook: Path) -> str:
    "The 'Open in Colab' badge of `notebook` (a path inside the repository)."
    return f"{BADGE}({colab_url(notebook)})"


def start_here(name: str) -> str:
    """The paragraph of the lesson `name` (e.g. `01_bpe.ipynb`) that sends the learner to its workbook: the
    workbook's badge on a line of its own, then the words, wrapped as the lessons' prose is."""
    words = (
        f"**Start in your workbook, [`workbooks/{name}`](workbooks/{name})** (the badge opens it in Colab): "
        "this lesson with a stub where each piece you write goes, a check after each, and the lesson's "
        "figures and tables to compare with. This notebook is the answer key: every reference answer "
        "written out, and the outputs of a full-size run."
    )
    return f"{badge(WORKBOOKS / name)}\n" + textwrap.fill(words, width=110, break_on_hyphens=False)


def without_start_here(source: str) -> str:
    "A first cell's markdown without its start-here paragraph (a paragraph that opens with the badge)."
    paragraphs = source.split("\n\n")
    return "\n\n".join(p for p in paragraphs if not p.startswith(BADGE))


def with_start_here(source: str, name: str) -> str:
    """The lesson's first cell with the start-here paragraph right after its `# Title` and its `> summary`
    lines (they make the module's docstring), replacing the paragraph if it is there already."""
    lines = without_start_here(source).split("\n")
    at = 1  # after the title
    while at < len(lines) and not lines[at].strip():
        at += 1
    if at < len(lines) and lines[at].startswith(">"):
        while at < len(lines) and lines[at].startswith(">"):
            at += 1
    else:
        at = 1
    head, tail = "\n".join(lines[:at]).rstrip("\n"), "\n".join(lines[at:]).lstrip("\n")
    return f"{head}\n\n{start_here(name)}" + (f"\n\n{tail}" if tail else "")


def install_cell(folder: str = "notebooks") -> str:
    "The install cell: install the course where gptlib is missing, then work in `folder` of the checkout."
    return f'''# In Colab (or any Python without gptlib): install the course (the checkout this
# notebook sits in, or a clone of it) and use it; elsewhere: nothing.
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

if importlib.util.find_spec("gptlib") is None:
    here = next(
        (p for p in [Path.cwd(), *Path.cwd().parents] if (p / "gptlib" / "__init__.py").is_file()), None
    )
    source = Path(os.environ.get("GPTLIB_SOURCE") or here or "/content/gptlib")  # a checkout of the course
    if not (source / "pyproject.toml").is_file():
        clone = ["git", "clone", "--depth", "1", "{repository()}", str(source)]
        subprocess.run(clone, check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", str(source)], check=True)
    sys.path[:0] = [str(source), str(source / "notebooks")]  # gptlib and `course`, without a restart
    os.chdir(source / "{folder}")  # where this notebook's relative paths start'''


def _source_lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def add_to_lesson(path: Path) -> bool:
    """Put the start-here paragraph into the lesson's first cell and the install cell right after that cell,
    or bring them up to date (a former badge cell is removed); return whether the notebook changed."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    before = json.dumps(nb)
    first = nb["cells"][0]
    first["source"] = _source_lines(with_start_here("".join(first["source"]), path.name))
    new = {"cell_type": "code", "execution_count": None, "id": CELL_ID, "metadata": {}, "outputs": []}
    cell = next((c for c in nb["cells"] if c.get("id") == CELL_ID), new)  # its run, if stored, kept
    cell["source"] = _source_lines(install_cell())
    rest = [c for c in nb["cells"][1:] if c.get("id") not in (LINK_ID, CELL_ID)]
    nb["cells"] = [first, cell, *rest]
    if json.dumps(nb) == before:
        return False
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return True


if __name__ == "__main__":
    lessons = [Path(a).resolve() for a in sys.argv[1:]] or sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
    for lesson in lessons:
        print(f"{lesson.name}: {'updated' if add_to_lesson(lesson) else 'up to date'}")
    sys.exit(0)
