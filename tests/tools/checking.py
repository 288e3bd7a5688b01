"""What the tests of the course's checks share (tests/test_course_*.py): a piece's reference, and the
assertion that a check fails a wrong piece with a hint that names the mistake."""

from __future__ import annotations

from course import pieces


def reference(name: str):
    "The lesson's own version of piece `name`."
    return pieces._registry()[name].reference_object()


def rejects(name: str, wrong, hint: str) -> None:
    "The check of `name` fails `wrong`, and its hint contains `hint`."
    outcome = pieces.run_check(name, wrong)
    assert outcome.status == "failed", (
        f"{name}: {getattr(wrong, '__name__', wrong)!r} was not rejected ({outcome})"
    )
    assert hint in outcome.detail, f"{name}: expected {hint!r} in {outcome.detail!r}"


def stub(*args, **kwargs):
    "A piece as the workbook hands it over, untouched."
    raise NotImplementedError("your code here")
