"""Every lesson and workbook opens in Colab in one click: a link at its top, and a cell that installs the
course where gptlib is missing.

Hand-written tooling of the course, not part of the installed package. The repository's address is written
once, in pyproject.toml (`[project.urls] Repository`); the links and the install cell are made from it by

    python notebooks/course/colab.py          # make colab: put the link and the cell in every lesson

and `make workbooks` carries both into the workbooks. The cell does nothing where gptlib imports (a local
checkout, CI); elsewhere it clones the repository (or takes the checkout named by `$GPTLIB_SOURCE`), installs
it with pip, makes it importable without restarting the kernel and moves into the notebook's folder, where
the course's helpers and data are found. Colab's own torch (a CUDA build, and a T4 GPU on the free tier)
satisfies gptlib's torch requirement, so nothing large is downloaded.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent.parent
ROOT = NOTEBOOKS.parent
LINK_ID, CELL_ID = "colab-link", "colab-install"
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


def install_cell(folder: str = "notebooks") -> str:
    "The first code cell: install the course where gptlib is missing, then work in `folder` of the checkout."
    return f'''# In Colab (or any Python without gptlib): clone the course and install it; elsewhere: nothing.
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

if importlib.util.find_spec("gptlib") is None:
    source = Path(os.environ.get("GPTLIB_SOURCE", "/content/gptlib"))  # a checkout of the course
    if not (source / "pyproject.toml").is_file():
        clone = ["git", "clone", "--depth", "1", "{repository()}", str(source)]
        subprocess.run(clone, check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", str(source)], check=True)
    sys.path[:0] = [str(source), str(source / "notebooks")]  # gptlib and `course`, without a restart
    os.chdir(source / "{folder}")  # where this notebook's relative paths start'''


def _source_lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def add_to_lesson(path: Path) -> bool:
    """Put the Colab link (a markdown cell) and the install cell right after the lesson's title cell, or bring
    them up to date; return whether the notebook changed."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    before = json.dumps(nb)
    link = {"cell_type": "markdown", "id": LINK_ID, "metadata": {}}
    link["source"] = _source_lines(f"{BADGE}({colab_url(path.relative_to(ROOT))})")
    cell = {"cell_type": "code", "execution_count": None, "id": CELL_ID, "metadata": {}, "outputs": []}
    cell["source"] = _source_lines(install_cell())
    rest = [c for c in nb["cells"][1:] if c.get("id") not in (LINK_ID, CELL_ID)]
    nb["cells"] = [nb["cells"][0], link, cell, *rest]
    if json.dumps(nb) == before:
        return False
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return True


if __name__ == "__main__":
    lessons = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
    for lesson in lessons:
        print(f"{lesson.name}: {'updated' if add_to_lesson(lesson) else 'up to date'}")
    sys.exit(0)
