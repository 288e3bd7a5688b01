"""The Colab cell of every notebook installs the course where gptlib is missing: tried in a fresh virtual
environment on a copy of this checkout, after which the notebook's next cell imports gptlib and the course's
helpers; where gptlib is already importable the cell does nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "notebooks"))

from course import colab  # noqa: E402

NEXT_CELL = "import course, gptlib; print('imported', gptlib.__file__, 'in', os.getcwd())"


def _copy_of_the_checkout(dest: Path) -> Path:
    "What a clone holds (the tracked files), copied, so that the install writes nothing in this checkout."
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in files.splitlines():
        if (ROOT / name).is_file() and not name.endswith(".ipynb"):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, dest / name)
    return dest


def test_the_cell_does_nothing_where_gptlib_imports(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPTLIB_SOURCE", str(tmp_path / "nowhere"))
    exec(colab.install_cell(), {})  # gptlib is installed here: no clone, no pip, no chdir
    assert Path.cwd() == tmp_path and not (tmp_path / "nowhere").exists()


@pytest.mark.slow
def test_the_cell_installs_the_course_into_a_fresh_environment(tmp_path):
    source = _copy_of_the_checkout(tmp_path / "checkout")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    torch_pin = f"torch=={__import__('torch').__version__.split('+')[0]}"  # as Colab has torch already
    subprocess.run([str(python), "-m", "pip", "install", "-q", torch_pin], check=True, timeout=900)
    cells = f"{colab.install_cell()}\n{NEXT_CELL}\n"  # the kernel runs the two cells one after the other
    env = {**os.environ, "GPTLIB_SOURCE": str(source), "PYTHONPATH": ""}
    done = subprocess.run(
        [str(python), "-c", cells], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"imported {source / 'gptlib' / '__init__.py'} in {source / 'notebooks'}" in done.stdout


def test_every_lesson_links_to_colab_and_opens_with_the_cell():
    import json

    for lesson in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        cells = json.loads(lesson.read_text(encoding="utf-8"))["cells"]
        ids = [c.get("id") for c in cells[:3]]
        assert ids[1:] == [colab.LINK_ID, colab.CELL_ID], f"{lesson.name}: run `make colab`"
        assert colab.colab_url(lesson.relative_to(ROOT)) in "".join(cells[1]["source"])
        assert "".join(cells[2]["source"]) == colab.install_cell(), f"{lesson.name}: run `make colab`"
