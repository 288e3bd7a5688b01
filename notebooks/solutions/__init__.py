"""Reference answers to the exercises that close each notebook, one file per notebook (a module name cannot
start with a digit): training (06). The other lessons hold theirs in their own exercise cells (the
checks in `course.checks` check them).

Try an exercise before reading its answer. From a notebook, `%load -s NAME solutions/FILE.py` shows one
answer in a cell; `from solutions.FILE import NAME` uses it. The checkers in `gptlib.exercises` accept these
answers (tests/test_exercises.py proves it). Each answer uses only what its notebook has already imported
(torch, torch.nn.functional as F, math, numpy as np), so a loaded answer runs as it is."""
