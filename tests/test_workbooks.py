"""Workbooks are cut from their lessons along nbgrader's solution markers: stubs in place of answers, no
answer left anywhere, the learner's edits never overwritten; `check` hands later cells the learner's piece
or the reference; `load_pieces` reads a saved notebook's pieces as `check` would."""

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
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


@pytest.fixture
def toy_piece():
    "A piece of the toy lesson 00_toy, registered for the test only."

    def check_double(fn):
        assert fn(3) == 6, f"toy_double_it(3) gave {fn(3)!r}, not 6: multiply by two"
        return "3 -> 6"

    pieces.REGISTRY["toy_double_it"] = pieces.Piece("toy_double_it", "00_toy", check_double, "lesson")
    yield pieces.REGISTRY["toy_double_it"]
    pieces.REGISTRY.pop("toy_double_it", None)


def test_a_workbook_has_stubs_no_answers_no_outputs_and_no_directives(tmp_path):
    lesson = _lesson(tmp_path)
    nb = workbooks.build(lesson)
    text = workbooks.text_of(nb)
    assert 'raise NotImplementedError("your code here")' in text and "YOUR ANSWER HERE" in text
    assert "result_of_the_exercise" not in text and "Because the toy says so" not in text
    assert '"Twice `x`."' in text and "# hint: one multiplication" in text  # docstring and hints stay
    assert "#|" not in text and all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert nb.cells[0].id == "workbook-header" and 'sys.path.insert(0, "..")' in nb.cells[1].source
    assert nb.metadata["course"]["module"] == "gptlib.config" and workbooks.leaks(lesson, nb) == []


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
