"""Minutes of reading on each notebook's main path: 200 words of prose and 8 lines of code a minute.

    python tests/tools/reading_time.py notebooks/0*.ipynb

The main path ends at the first heading that starts with "Appendix" (`## Appendix: ...`); what follows is
counted apart. Outputs are not counted. Issue 18 holds each main path to at most 75 minutes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

WORDS_PER_MINUTE, CODE_LINES_PER_MINUTE = 200, 8
APPENDIX = re.compile(r"^#+\s*Appendix", re.M)


def minutes(cells: list[dict]) -> float:
    # the Colab install cell is the same plumbing atop every lesson, run once and skipped by a reader
    cells = [c for c in cells if c.get("id") != "colab-install"]
    words = sum(len("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")
    code = sum(
        1
        for c in cells
        if c["cell_type"] == "code"
        for line in "".join(c["source"]).splitlines()
        if line.strip() and not line.startswith("#|")
    )
    return words / WORDS_PER_MINUTE + code / CODE_LINES_PER_MINUTE


def split(cells: list[dict]) -> tuple[list[dict], list[dict]]:
    "The main path and the appendix of a notebook's cells."
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and APPENDIX.search("".join(cell["source"])):
            return cells[:index], cells[index:]
    return cells, []


if __name__ == "__main__":
    for path in sys.argv[1:]:
        main, appendix = split(json.loads(Path(path).read_text(encoding="utf-8"))["cells"])
        name = Path(path).name
        print(f"{name:24s} main path {minutes(main):5.1f} min   appendix {minutes(appendix):5.1f} min")
