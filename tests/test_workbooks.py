"""Workbooks are cut from their lessons along nbgrader's solution markers: stubs in place of answers, no
answer left anywhere (cells or outputs), the lesson's other outputs shown, the learner's edits never
overwritten; `check` hands later cells the learner's piece or the reference, and keeps a passing piece where
`keep_pieces` asked; `load_pieces` reads a saved notebook's pieces as `check` would, a kept piece in place of
its workbook cell."""

from __future__ import annotations

import json

import nbformat
import pytest
from course import pieces, workbooks

LESSON_CELLS = [
    ("markdown", "# A toy lesson\n\nIt teaches one piece."),
    ("code", "#| default_exp config"),
    ("markdown", "Write `double_it`: twice its argument."),
    (
        "code",
        "def toy_double_it(x):\n"
        '    "Twice `x`."\n'
        "    # hint: one multiplication\n"
        "    ### BEGIN SOLUTION\n"
        "    result_of_the_exercise = x * 2\n"
        "    return result_of_the_exercise\n"
        "    ### END SOLUTION",
    ),
    ("code", "toy_double_it = check(toy_double_it)"),
    ("markdown", "Why twice?\n### BEGIN SOLUTION\nBecause the toy says so.\n### END SOLUTION"),
]


def _lesson(tmp_path, cells=LESSON_CELLS, name="00_toy.ipynb"):
    nb = nbformat.v4.new_notebook()
    for kind, source in cells:
        new = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        nb.cells.append(new(source))
    nb.cells[3].outputs = [nbformat.v4.new_output("stream", text="an output of the solved cell\n")]
    nb.cells[4].outputs = [nbformat.v4.new_output("stream", text="toy_double_it: passed (3 -> 6)\n")]
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def _stored(nb, source_start: str) -> str:
    "The stored output text of the code cell of `nb` whose source starts with `source_start`."
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(source_start)]
    return workbooks.outputs_text([cell])


@pytest.fixture
def toy_piece():
    "A piece of the toy lesson 00_toy, registered for the test only."

    def check_double(fn):
        assert fn(3) == 6, f"toy_double_it(3) gave {fn(3)!r}, not 6: multiply by two"
        return "3 -> 6"

    pieces.REGISTRY["toy_double_it"] = pieces.Piece("toy_double_it", "00_toy", check_double, "lesson")
    yield pieces.REGISTRY["toy_double_it"]
    pieces.REGISTRY.pop("toy_double_it", None)


def test_a_workbook_has_stubs_no_answers_and_no_directives(tmp_path):
    lesson = _lesson(tmp_path)
    nb = workbooks.build(lesson)
    text = workbooks.text_of(nb)
    assert 'raise NotImplementedError("your code here")' in text and "YOUR ANSWER HERE" in text
    assert "result_of_the_exercise" not in text and "Because the toy says so" not in text
    assert '"Twice `x`."' in text and "# hint: one multiplication" in text  # docstring and hints stay
    assert "#|" not in text
    assert nb.cells[0].id == "workbook-header" and 'sys.path.insert(0, "..")' in nb.cells[1].source
    assert 'keep_pieces("00_toy")' in nb.cells[1].source
    assert nb.metadata["course"]["module"] == "gptlib.config" and workbooks.leaks(lesson, nb) == []


def test_a_workbook_shows_the_lessons_outputs_except_on_exercises_checks_and_answers(tmp_path):
    cells = [
        *LESSON_CELLS,
        ("code", "print('a table of the corpus')"),
        ("code", "print('peek:', 'result_of_the_exercise = x * 2')"),
    ]
    lesson = _lesson(tmp_path, cells)
    nb = nbformat.read(lesson, as_version=4)
    nb.cells[6].outputs = [nbformat.v4.new_output("stream", text="a table of the corpus\n")]
    nb.cells[6].execution_count = 7
    nb.cells[7].outputs = [nbformat.v4.new_output("stream", text="peek: result_of_the_exercise = x * 2\n")]
    nbformat.write(nb, lesson)
    workbook = workbooks.build(lesson)
    assert _stored(workbook, "print('a table") == "a table of the corpus\n"  # what to expect, shown
    assert _stored(workbook, "def toy_double_it") == ""  # the exercise's
    assert _stored(workbook, "toy_double_it = check(") == ""  # the check's verdict on the reference
    assert _stored(workbook, "print('peek:'") == ""  # an answer in an output
    assert all(c.get("execution_count") is None for c in workbook.cells if c.cell_type == "code")
    assert workbooks.leaks(lesson, workbook) == [
        "result_of_the_exercise = x * 2"
    ]  # its source still shows it


def test_an_output_that_shows_an_answer_is_a_leak(tmp_path):
    lesson = _lesson(tmp_path)
    workbook = workbooks.build(lesson)
    check_cell = next(c for c in workbook.cells if c.source.startswith("toy_double_it = check("))
    check_cell.outputs = [nbformat.v4.new_output("stream", text="toy_double_it: passed (3 -> 6)\n")]
    other = next(c for c in workbook.cells if c.id == "workbook-setup")
    other.outputs = [nbformat.v4.new_output("stream", text="    result_of_the_exercise = x * 2\n")]
    found = workbooks.leaks(lesson, workbook)
    assert "result_of_the_exercise = x * 2" in found
    assert any("exercise or check cell" in problem for problem in found)


def test_the_lesson_sends_the_learner_to_the_workbook_which_opens_in_colab_as_itself(tmp_path):
    from course import colab

    lesson = _lesson(tmp_path)
    nb = json.loads(lesson.read_text())
    nb["cells"][0]["source"] = "# A toy lesson\n> It teaches one piece.\n\nProse."
    lesson.write_text(json.dumps(nb))
    colab.add_to_lesson(lesson)
    cells = json.loads(lesson.read_text())["cells"]
    first = "".join(cells[0]["source"])
    assert first.startswith("# A toy lesson\n> It teaches one piece.\n\n" + colab.start_here(lesson.name))
    assert first.endswith("\n\nProse.") and cells[1]["id"] == colab.CELL_ID
    assert colab.colab_url(colab.WORKBOOKS / lesson.name) in first
    assert not colab.add_to_lesson(lesson)  # up to date: run again, nothing changes
    workbook = workbooks.build(lesson)
    header, title = workbook.cells[0].source, workbook.cells[1].source
    assert colab.colab_url(colab.WORKBOOKS / lesson.name) in header
    assert title == "# A toy lesson\n> It teaches one piece.\n\nProse."  # where to start: here
    ids = [c.get("id") for c in workbook.cells]
    assert ids.index("workbook-setup") == ids.index(colab.CELL_ID) + 1  # `course` imports once installed


def test_a_filled_workbook_holds_the_answers_without_markers(tmp_path):
    nb = workbooks.build(_lesson(tmp_path), solved=True)
    text = workbooks.text_of(nb)
    assert "result_of_the_exercise = x * 2" in text and "SOLUTION" not in text


def test_an_answer_shown_outside_its_region_is_a_leak(tmp_path):
    cells = [*LESSON_CELLS, ("code", "print('peek:', 'result_of_the_exercise = x * 2')")]
    lesson = _lesson(tmp_path, cells)
    assert workbooks.leaks(lesson, workbooks.build(lesson)) == ["result_of_the_exercise = x * 2"]


def test_cells_tagged_lesson_only_are_left_out_with_a_note_and_test_markers_go(tmp_path):
    cells = [
        *LESSON_CELLS,
        ("markdown", "## Appendix: the library's own loop\n\nIt is the answer, written out."),
        ("code", "def library_loop():\n    return 'the answer, written out'"),
        ("code", "# NBVAL_CHECK_OUTPUT\nprint(2 + 2)"),
    ]
    lesson = _lesson(tmp_path, cells)
    nb = nbformat.read(lesson, as_version=4)
    for cell in nb.cells[-3:-1]:
        cell.metadata["tags"] = [workbooks.LESSON_ONLY]
    nbformat.write(nb, lesson)
    workbook = workbooks.build(lesson)
    text = workbooks.text_of(workbook)
    assert "the answer, written out" not in text and "NBVAL" not in text and "print(2 + 2)" in text
    notes = [c for c in workbook.cells if c.source.startswith("## Appendix: the library's own loop: in the")]
    assert len(notes) == 1 and "00_toy.ipynb" in notes[0].source


def test_writing_refuses_to_replace_a_workbook_the_learner_edited(tmp_path, monkeypatch):
    lesson = _lesson(tmp_path)
    monkeypatch.setattr(workbooks, "NOTEBOOKS", tmp_path)
    out = tmp_path / "workbooks"
    (path,) = workbooks.write([lesson.stem], out=out)
    assert workbooks.write([lesson.stem], out=out) == [path]  # untouched: regenerated freely
    nb = json.loads(path.read_text())
    nb["cells"][4]["source"] = "def toy_double_it(x):\n    return x + x\n"  # the learner's answer
    path.write_text(json.dumps(nb))
    with pytest.raises(FileExistsError, match="holds your own work"):
        workbooks.write([lesson.stem], out=out)
    assert "return x + x" in path.read_text()
    workbooks.write([lesson.stem], out=out, force=True)
    assert "return x + x" not in path.read_text()


def test_check_passes_the_learners_piece_and_hands_back_the_reference_for_a_stub(toy_piece, capsys):
    def toy_double_it(x):
        return 2 * x

    assert pieces.check(toy_double_it) is toy_double_it
    assert "toy_double_it: passed (3 -> 6)" in capsys.readouterr().out

    def stub(x):
        raise NotImplementedError("your code here")

    reference = object()
    pieces.REGISTRY["toy_double_it"].reference_object = lambda: reference
    assert pieces.check(stub, "toy_double_it") is reference
    assert "not done yet" in capsys.readouterr().out

    def wrong(x):
        return x + 1

    with pytest.raises(AssertionError, match="multiply by two"):
        pieces.check(wrong, "toy_double_it")


def test_an_unrelated_not_implemented_error_is_not_taken_for_a_stub(toy_piece):
    def unsupported(x):
        raise NotImplementedError("this dtype is not supported")

    with pytest.raises(NotImplementedError, match="dtype"):
        pieces.check(unsupported, "toy_double_it")


def test_a_piece_kept_by_its_check_is_read_in_place_of_its_untouched_workbook_cell(
    tmp_path, toy_piece, monkeypatch
):
    lesson = _lesson(tmp_path)
    monkeypatch.setattr(pieces, "NOTEBOOKS", tmp_path)  # the toy lesson's exercise cells
    path = tmp_path / "workbooks" / lesson.name
    path.parent.mkdir()
    nbformat.write(workbooks.build(lesson), path)  # untouched, as Colab's checkout holds it
    kept = tmp_path / "kept"
    monkeypatch.setenv(pieces.PIECES_ENV, str(kept))
    monkeypatch.setattr(pieces, "_KEEPING", {})
    monkeypatch.setattr(pieces, "LESSONS", (*pieces.LESSONS, "00_toy"))
    pieces.keep_pieces("00_toy")  # a workbook's setup cell

    def toy_double_it(x):
        return x + x

    pieces.check(toy_double_it)  # passes: the cell's source is kept
    saved = pieces.read_kept(kept, "00_toy")
    assert list(saved) == [nbformat.read(lesson, as_version=4).cells[3].id]
    assert "return x + x" in next(iter(saved.values()))
    found = pieces.collect(tmp_path / "workbooks", notebooks=("00_toy",))
    assert found.yours("toy_double_it") and found.toy_double_it(5) == 10
    assert found.sources["toy_double_it"] == str(pieces.kept_path(kept, "00_toy"))
    assert f"1 piece(s) read from {kept}" in found.table()


def test_a_damaged_pieces_file_is_named_not_trusted(tmp_path):
    from gptlib.files import DocumentError

    (tmp_path / "01_bpe.json").write_text(
        '{"format": "gptlib-course-pieces", "version": 1, "lesson": "01_bpe"'
    )
    with pytest.raises(DocumentError, match="01_bpe.json"):
        pieces.read_kept(tmp_path, "01_bpe")
    pieces.save_piece(tmp_path / "other", "02_data", "cell-a", "def frame(): ...")
    (tmp_path / "other" / "02_data.json").rename(tmp_path / "other" / "03_loader.json")
    with pytest.raises(DocumentError, match="not of '03_loader'"):
        pieces.read_kept(tmp_path / "other", "03_loader")


def test_load_pieces_keeps_a_passing_piece_and_replaces_a_stub_by_the_reference(tmp_path, toy_piece):
    lesson = _lesson(tmp_path)
    solved = pieces.load_pieces(lesson)
    assert solved.yours("toy_double_it") and solved.toy_double_it(4) == 8
    reference = object()
    pieces.REGISTRY["toy_double_it"].reference_object = lambda: reference
    path = tmp_path / "workbooks" / lesson.name
    path.parent.mkdir()
    nbformat.write(workbooks.build(lesson), path)
    untouched = pieces.load_pieces(path)
    assert not untouched.yours("toy_double_it") and untouched.toy_double_it is reference
    assert "reference (not done yet)" in untouched.table()
