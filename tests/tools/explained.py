"""How much of a module explains itself: the share of non-blank lines that are docstrings or carry a comment.

    python tests/tools/explained.py gptlib/*.py [--min 0.30]

A line counts as explanation when it belongs to a docstring (module, class or function) or holds a `#`
comment, whole-line or trailing (nbdev's `# %% cell` markers do not count). minbpe's regex.py and nanoGPT's
model.py sit at about a third; the generated modules are held to at least 30 % (issue 16).
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path


def explained_share(source: str) -> tuple[int, int]:
    "(explanation lines, non-blank lines) of a module's source."
    lines = source.splitlines()
    explained = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and not token.string.startswith("# %%"):
            explained.add(token.start[0])
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
            ):
                if isinstance(body[0].value.value, str):
                    explained.update(range(body[0].lineno, body[0].end_lineno + 1))
    non_blank = {i + 1 for i, line in enumerate(lines) if line.strip() and not line.startswith("# %%")}
    return len(explained & non_blank), len(non_blank)


def main(argv: list[str]) -> int:
    minimum = float(argv[argv.index("--min") + 1]) if "--min" in argv else None
    paths = [a for a in argv if a.endswith(".py")]
    failed = False
    for path in paths:
        explained, total = explained_share(Path(path).read_text(encoding="utf-8"))
        share = explained / max(total, 1)
        low = minimum is not None and share < minimum
        failed |= low
        verdict = "  < minimum" if low else ""
        print(f"{path:32s} {explained:5d} / {total:5d} lines explained  {share:5.1%}{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
