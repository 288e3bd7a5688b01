"""The checks of every piece the learner writes, one module per lesson; importing this registers them all.

Hand-written tooling of the course, not part of the installed package. Each check takes the learner's
object, runs it on small fixed inputs (well under a second) against a reference (gptlib, torch or golden
values) and returns a short summary of what passed, or raises AssertionError with a hint that names the
mistake and the idea to revisit. tests/test_course_*.py prove that each accepts its reference and
rejects plausible wrong answers.
"""

from course.checks import bpe, data, loader, model, modern, optim, training  # noqa: F401  (each registers its pieces)
