"""The Colab path of the course. Every badge a learner is shown opens a workbook; the install cell of every
notebook installs the course where gptlib is missing (tried in a fresh virtual environment on a copy of this
checkout, after which the notebook's next cell imports gptlib and the course's helpers) and does nothing
where gptlib is already importable; in Colab a workbook keeps each piece that passes its check in the
learner's Drive (the runtime's disk without one), where workbook 06, in a runtime of its own, finds it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "notebooks"))

from course import colab, pieces  # noqa: E402

NEXT_CELL = "import course, gptlib; print('imported', gptlib.__file__, 'in', os.getcwd())"
COLAB_LINK = re.compile(r"https://colab\.research\.google\.com/github/[^)\s]+")


def _copy_of_the_checkout(dest: Path, notebooks: bool = False) -> Path:
    """What a clone holds (the tracked files), copied, so that the install writes nothing in this checkout;
    the notebooks only when asked (the course reads the lessons and workbooks to find the pieces)."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in files.splitlines():
        if (ROOT / name).is_file() and (notebooks or not name.endswith(".ipynb")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, dest / name)
    return dest


def _cell(path: Path, cell_id: str) -> str:
    (cell,) = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c.get("id") == cell_id]
    return "".join(cell["source"])


# --- the badges ------------------------------------------------------------------------------------------


def test_every_lesson_sends_the_learner_to_its_workbook_in_its_first_cell_and_opens_with_the_cell():
    for lesson in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        cells = json.loads(lesson.read_text(encoding="utf-8"))["cells"]
        first = "".join(cells[0]["source"])
        assert colab.start_here(lesson.name) in first, f"{lesson.name}: run `make colab`"
        assert cells[1].get("id") == colab.CELL_ID, f"{lesson.name}: run `make colab`"
        assert "".join(cells[1]["source"]) == colab.install_cell(), f"{lesson.name}: run `make colab`"
        assert colab.LINK_ID not in [c.get("id") for c in cells], f"{lesson.name}: run `make colab`"


def test_every_colab_link_a_learner_is_shown_opens_a_workbook():
    shown = {ROOT / "README.md": (ROOT / "README.md").read_text(encoding="utf-8")}
    for notebook in sorted((ROOT / "notebooks").glob("**/[0-9]*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        shown[notebook] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    for path, text in shown.items():
        for link in COLAB_LINK.findall(text):
            assert "/blob/main/notebooks/workbooks/" in link, (
                f"{path.relative_to(ROOT)}: {link} opens a lesson"
            )
    workbooks = sorted((ROOT / "notebooks" / "workbooks").glob("[0-9]*.ipynb"))
    for workbook in workbooks:  # each opens with its own badge
        first = "".join(json.loads(workbook.read_text(encoding="utf-8"))["cells"][0]["source"])
        assert colab.colab_url(workbook.relative_to(ROOT)) in first, f"{workbook.name}: run `make workbooks`"


# --- the install cell ------------------------------------------------------------------------------------


def test_the_cell_does_nothing_where_gptlib_imports(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPTLIB_SOURCE", str(tmp_path / "nowhere"))
    exec(colab.install_cell(), {})  # gptlib is installed here: no clone, no pip, no chdir
    assert Path.cwd() == tmp_path and not (tmp_path / "nowhere").exists()


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory):
    """A fresh virtual environment with what Colab brings along: torch (gptlib's one large dependency) and
    IPython (its kernel); gptlib itself is not installed."""
    venv = tmp_path_factory.mktemp("colab") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    torch_pin = f"torch=={__import__('torch').__version__.split('+')[0]}"
    ipython = f"ipython=={__import__('IPython').__version__}"
    subprocess.run([str(python), "-m", "pip", "install", "-q", torch_pin, ipython], check=True, timeout=900)
    return python


@pytest.mark.slow
def test_the_cell_installs_the_course_into_a_fresh_environment(tmp_path, fresh_python):
    subprocess.run([str(fresh_python), "-m", "pip", "uninstall", "-q", "-y", "gptlib"], check=True)
    source = _copy_of_the_checkout(tmp_path / "checkout")
    cells = f"{colab.install_cell()}\n{NEXT_CELL}\n"  # the kernel runs the two cells one after the other
    env = {**os.environ, "GPTLIB_SOURCE": str(source), "PYTHONPATH": ""}
    done = subprocess.run(
        [str(fresh_python), "-c", cells], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"imported {source / 'gptlib' / '__init__.py'} in {source / 'notebooks'}" in done.stdout


# --- the pieces, from one runtime to the next ------------------------------------------------------------


@pytest.fixture
def fake_colab(tmp_path, monkeypatch):
    """This process as a Colab kernel: `google.colab` imported, its Drive mounted (by `drive.mount`) under
    tmp_path rather than /content/drive, gptlib's data folder under tmp_path; returns the mounts made."""
    mounted = []

    def mount(mountpoint, **_):
        mounted.append(mountpoint)
        (Path(mountpoint) / "MyDrive").mkdir(parents=True, exist_ok=True)

    colab_module = types.ModuleType("google.colab")
    colab_module.drive = types.SimpleNamespace(mount=mount)
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab_module)
    monkeypatch.setattr(sys.modules["google"], "colab", colab_module, raising=False)
    monkeypatch.setattr(pieces, "DRIVE", tmp_path / "drive")
    monkeypatch.setattr(pieces, "_KEEPING", {})
    monkeypatch.delenv(pieces.PIECES_ENV, raising=False)
    monkeypatch.setenv("GPTLIB_DATA", str(tmp_path / "data"))
    return mounted


def test_in_colab_a_passing_piece_is_kept_in_drive_and_collect_reads_it_there(fake_colab, tmp_path, capsys):
    pieces.keep_pieces("01_bpe")  # workbook 01's setup cell: Drive is mounted first
    kept = pieces.pieces_folder()
    assert (
        fake_colab == [str(tmp_path / "drive")]
        and kept == tmp_path / "drive" / "MyDrive" / "gptlib" / "pieces"
    )
    assert "where workbook 06 reads them" in capsys.readouterr().out

    def count_pairs(ids, counts=None):
        counts = {} if counts is None else counts
        for pair in zip(ids, ids[1:]):
            counts[pair] = counts.get(pair, 0) + 1
        return counts

    assert pieces.check(count_pairs) is count_pairs
    assert list(pieces.read_kept(kept, "01_bpe")) == ["ex-count-pairs"]  # the lesson's exercise cell
    pieces._KEEPING.clear()  # workbook 06: another runtime, the checkout's workbooks untouched
    found = pieces.collect(notebooks=("01_bpe",))
    assert found.yours("count_pairs") and not found.yours("merge")
    assert found.sources["count_pairs"] == str(kept / "01_bpe.json")


def test_in_colab_without_drive_pieces_go_to_the_runtimes_disk_and_it_says_so(
    fake_colab, tmp_path, monkeypatch, capsys
):
    def decline(mountpoint, **_):
        raise RuntimeError("mount failed")  # what Colab raises when the learner says no

    monkeypatch.setattr(sys.modules["google.colab"].drive, "mount", decline)
    pieces.keep_pieces("02_data")
    assert pieces.pieces_folder() == tmp_path / "data" / "course" / "pieces"
    said = capsys.readouterr().out
    assert "Drive not mounted (RuntimeError: mount failed)" in said and "runtime's disk" in said


def test_on_your_own_machine_nothing_is_kept_and_06_reads_the_workbooks(monkeypatch, capsys):
    monkeypatch.delenv(pieces.PIECES_ENV, raising=False)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(pieces, "_KEEPING", {})
    pieces.keep_pieces("03_loader")
    assert pieces.pieces_folder() is None and not pieces._KEEPING
    assert "notebooks/workbooks/03_loader.ipynb" in capsys.readouterr().out


RUNTIME = """
import json, sys
from pathlib import Path

import google.colab  # a Colab kernel starts with it
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
for source in json.loads(Path(sys.argv[1]).read_text()):
    shell.run_cell(source, store_history=True).raise_error()
"""
FAKE_DRIVE = """
import os

def mount(mountpoint, **_):
    os.makedirs(os.path.join(mountpoint, "MyDrive"), exist_ok=True)
"""


@pytest.mark.slow
def test_a_piece_workbook_01_kept_in_colab_is_found_by_workbook_06_in_a_runtime_of_its_own(
    tmp_path, fresh_python
):
    """Two Colab runtimes, one after the other, sharing only the learner's Drive: each a fresh clone of the
    course installed by the install cell, running the workbook's cells in an IPython shell. In the first,
    workbook 01's count_pairs (the reference answer typed in) passes its check; in the second, workbook 06's
    `collect` finds it the learner's, read from Drive, while the clone's own workbook 01 is untouched."""
    fake = tmp_path / "fake"  # google.colab, with a drive.mount that makes MyDrive
    (fake / "google" / "colab").mkdir(parents=True)
    (fake / "google" / "__init__.py").write_text("")
    (fake / "google" / "colab" / "__init__.py").write_text("from . import drive\n")
    (fake / "google" / "colab" / "drive.py").write_text(FAKE_DRIVE)
    (tmp_path / "runtime.py").write_text(RUNTIME)
    drive = tmp_path / "drive"  # /content/drive in Colab
    solved = re.sub(
        r"^\s*### (BEGIN|END) SOLUTION\n",
        "",
        _cell(ROOT / "notebooks" / "01_bpe.ipynb", "ex-count-pairs"),
        flags=re.M,
    )
    workbooks = ROOT / "notebooks" / "workbooks"
    harness = f"import course.pieces\ncourse.pieces.DRIVE = Path({str(drive)!r})"  # Colab's fixed mount point
    runtimes = {
        "01": [
            colab.install_cell("notebooks/workbooks"),
            harness,
            _cell(workbooks / "01_bpe.ipynb", "workbook-setup"),
            "from course import check",
            solved,
            _cell(workbooks / "01_bpe.ipynb", "ex-count-pairs-check"),
        ],
        "06": [
            colab.install_cell("notebooks/workbooks"),
            harness,
            _cell(workbooks / "06_training.ipynb", "workbook-setup"),
            "from course import collect\nfound = collect(notebooks=('01_bpe',))\nprint(found.table())",
        ],
    }
    outputs = {}
    for name, cells in runtimes.items():
        subprocess.run([str(fresh_python), "-m", "pip", "uninstall", "-q", "-y", "gptlib"], check=True)
        source = _copy_of_the_checkout(tmp_path / f"clone-{name}", notebooks=True)  # a fresh runtime's clone
        (tmp_path / f"cells-{name}.json").write_text(json.dumps(cells))
        env = {**os.environ, "GPTLIB_SOURCE": str(source), "PYTHONPATH": str(fake)}
        env.pop("GPTLIB_DATA", None)
        env.pop(pieces.PIECES_ENV, None)
        done = subprocess.run(
            [str(fresh_python), str(tmp_path / "runtime.py"), str(tmp_path / f"cells-{name}.json")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        outputs[name] = done.stdout
    kept = drive / "MyDrive" / "gptlib" / "pieces"
    assert "count_pairs: passed" in outputs["01"] and f"saved in {kept}" in outputs["01"]
    assert re.search(r"count_pairs\s+01_bpe\s+yours", outputs["06"]), outputs["06"]
    assert re.search(r"merge\s+01_bpe\s+reference \(not done yet\)", outputs["06"])
    assert f"1 piece(s) read from {kept}" in outputs["06"]
