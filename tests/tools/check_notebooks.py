"""Check that committed notebooks are clean and small: the rules nbstripout --verify cannot express.

    python tests/tools/check_notebooks.py notebooks/*.ipynb

A notebook fails when it stores an error output, widget state, a cell with outputs but no execution
count (nbval rejects those), a kernel other than `python3`, or more output than a learner needs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MAX_OUTPUT_BYTES_PER_NOTEBOOK = 600_000  # a handful of PNG figures
MAX_TEXT_OUTPUT_LINES_PER_CELL = 80


def problems_of(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = []
    kernel = nb.get("metadata", {}).get("kernelspec", {}).get("name")
    if kernel != "python3":
        found.append(f"kernelspec.name is {kernel!r}, expected 'python3'")
    if "widgets" in nb.get("metadata", {}):
        found.append("notebook metadata stores widget state")
    output_bytes = 0
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        where = f"cell {index} ({cell.get('id', '?')})"
        outputs = cell.get("outputs", [])
        if outputs and cell.get("execution_count") is None:
            found.append(f"{where} has outputs but no execution count")
        for output in outputs:
            output_bytes += len(json.dumps(output))
            if output["output_type"] == "error":
                found.append(f"{where} stores an error output: {output.get('ename')}: {output.get('evalue')}")
            if "application/vnd.jupyter.widget-state+json" in output.get("data", {}):
                found.append(f"{where} stores widget state")
            text = output.get("text", "")
            lines = len(text) if isinstance(text, list) else text.count("\n")
            if lines > MAX_TEXT_OUTPUT_LINES_PER_CELL:
                found.append(f"{where} prints {lines} lines (at most {MAX_TEXT_OUTPUT_LINES_PER_CELL})")
    if output_bytes > MAX_OUTPUT_BYTES_PER_NOTEBOOK:
        found.append(f"outputs take {output_bytes:,d} bytes (at most {MAX_OUTPUT_BYTES_PER_NOTEBOOK:,d})")
    return found


def main(paths: list[str]) -> int:
    failed = False
    for name in paths:
        for problem in problems_of(Path(name)):
            print(f"{name}: {problem}")
            failed = True
    if not failed:
        print(f"{len(paths)} notebooks clean")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
