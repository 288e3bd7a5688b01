"""The course's own tooling: checks of the learner's pieces, workbooks, and the export of gptlib.

Hand-written, not part of the installed package: it serves the notebooks (which import it from their
folder) and `make export` / `make workbooks` / `make check-workbooks`.

- `course.pieces`: the pieces a learner writes, `check(piece)` after each exercise, `keep_pieces()`, which a
  workbook's setup cell calls to save each piece that passes where 06 finds it (in Colab: the learner's
  Drive), and `collect()`, which gathers the learner's pieces from the workbooks and from there (notebook 06
  trains with them);
- `course.checks`: one module of checks per lesson (`bpe`, `data`, `loader`, `model`, `optim`, `training`);
- `course.workbooks`: a lesson's workbook (its stubs in place of the reference answers), written and checked;
- `course.run_workbooks`: every workbook run untouched and filled, as `make check-workbooks` does;
- `course/export.py`: the notebooks exported into gptlib (`make export`).
"""

from course.pieces import check, collect, load_pieces

__all__ = ["check", "collect", "load_pieces"]
