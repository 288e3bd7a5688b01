"""`tokenizer train|encode|decode`: a byte-level BPE tokenizer on the command line.

Hand-written plumbing, not generated from a notebook: parses the flags and calls `gptlib.tokenizer`, the
tokenizer's folder (`Tokenizer.save`, `check_tokenizer_folder`) and the compression figure of
`gptlib.quality`.

    tokenizer train [--corpus SPEC] [--vocab-size N] [--out FOLDER]   train and save a tokenizer folder
    tokenizer encode [--text TEXT | --file FILE]                      token ids (stdin without either)
    tokenizer decode --ids '[15, 27]'                                 the text of some ids

Text comes in as UTF-8 from `--text`, `--file` and stdin alike; anything else is refused naming the first
byte that is not UTF-8, rather than encoded as replacement characters that would hide the damage. A file or
stdin is read up to `ENCODE_MAX_BYTES` and refused beyond, so that a stream without end (`/dev/zero`) is an
error line, not a read until memory runs out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

from gptlib.config import parse_path
from gptlib.corpus import open_corpus
from gptlib.data import readable_count
from gptlib.files import FolderLock, naming
from gptlib.quality import compression
from gptlib.tokenizer import SPECIAL_TOKENS, Tokenizer, check_tokenizer_folder, check_vocab_size

from ._shared import (
    UsageError,
    add_command,
    add_corpus,
    add_count,
    add_sdist,
    add_tokenizer,
    default_tokenizer,
)

__all__ = ["add_to", "COMPRESSION_SAMPLE_BYTES", "ENCODE_MAX_BYTES"]

COMPRESSION_SAMPLE_BYTES = 10_000_000  # the corpus's first 10 MB: seconds to encode, whatever its size
ENCODE_MAX_BYTES = 64_000_000  # the most text `tokenizer encode` reads from a file or stdin


def add_to(commands) -> None:
    "The `tokenizer` command and its verbs, under the command line's `commands` (argparse subparsers)."
    verbs = add_command(
        commands, "tokenizer", help="train a byte-level BPE tokenizer, encode and decode with it"
    )
    train = verbs.add_parser("train", help="train on a corpus and save the tokenizer folder")
    add_corpus(train)
    add_sdist(train)
    add_count(
        train, "--vocab-size", 8192, f"256 bytes + merges + {len(SPECIAL_TOKENS)} specials (default: 8192)"
    )
    train.add_argument(
        "--out",
        type=parse_path,
        metavar="FOLDER",
        default=default_tokenizer(),
        help=f"the tokenizer folder to write (default: {default_tokenizer()})",
    )
    add_count(train, "--workers", None, "processes that split the corpus (default: CPUs)", low=1)
    train.add_argument("--overwrite", action="store_true", help="replace a tokenizer already in the folder")
    train.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    train.set_defaults(handler=train_command)

    encode = verbs.add_parser("encode", help="print the token ids of a text (from --text, --file or stdin)")
    add_tokenizer(encode)
    encode.add_argument("--text", help="the text to encode")
    encode.add_argument("--file", type=parse_path, help="a UTF-8 file to encode")
    encode.add_argument(
        "--allow-special", action="store_true", help="turn <|bos|>, <|eos|>, <|pad|> into their ids"
    )
    encode.add_argument(
        "--show", action="store_true", help="print the tokens as a JSON list of their texts instead of ids"
    )
    encode.set_defaults(handler=encode_command)

    decode = verbs.add_parser("decode", help="print the text of a JSON list of ids")
    add_tokenizer(decode)
    decode.add_argument("--ids", required=True, help="a JSON list of ids, like [15, 27]")
    decode.set_defaults(handler=decode_command)


def train_command(args: argparse.Namespace) -> int:
    # Everything that can refuse the command runs before training, which takes minutes: the vocabulary size,
    # the folder, the corpus's name, then the folder's lock, which also finds a folder that cannot be written.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # training warns again, with the corpus in view
        check_vocab_size(args.vocab_size)
    check_tokenizer_folder(args.out, overwrite=args.overwrite)
    corpus = open_corpus(args.corpus, sdist=args.sdist)
    with FolderLock(args.out, "tokenizer folder"):  # a second `tokenizer train` into it is refused now
        tokenizer = _train(corpus, args)
        measured = compression(tokenizer, corpus.head(COMPRESSION_SAMPLE_BYTES))
        print(
            f"compression: {measured.bytes_per_token:.2f} bytes per token on "
            f"{readable_count(measured.bytes, 'B')} of the corpus"
        )
        tokenizer.save(args.out, overwrite=args.overwrite)
    print(f"saved to {args.out} (fingerprint {tokenizer.fingerprint()[:16]})")
    return 0


def _train(corpus, args: argparse.Namespace) -> Tokenizer:
    "The tokenizer trained on `corpus` as the flags say; what it saw and did, printed."
    print(f"training a byte-level BPE tokenizer on {corpus.describe}, vocab size {args.vocab_size:,d} ...")
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        texts = (doc.text for doc in corpus)  # streamed: memory grows with the distinct chunks only
        tokenizer = Tokenizer.train(texts, args.vocab_size, workers=args.workers, progress=not args.quiet)
    seconds = time.perf_counter() - started
    for warning in caught:
        print(f"note: {warning.message}")
    stats = tokenizer.train_stats
    print(
        f"{readable_count(stats.bytes, 'B')} of text, {stats.chunks:,d} chunks "
        f"({stats.distinct_chunks:,d} distinct): made {stats.merges:,d} of {stats.requested_merges:,d} "
        f"merges in {seconds:.1f} s, n_vocab {tokenizer.n_vocab:,d}"
    )
    return tokenizer


def encode_command(args: argparse.Namespace) -> int:
    tokenizer = Tokenizer.load(args.tokenizer)
    text = _input_text(args)
    ids = tokenizer.encode(text, allowed_special="all" if args.allow_special else "none")
    if args.show:  # a JSON list of the tokens' texts: unambiguous whatever characters the text holds
        print(json.dumps([tokenizer.decode([i]) for i in ids], ensure_ascii=False))
    else:
        print(json.dumps(ids))
    n_bytes = len(text.encode("utf-8"))
    print(
        f"{len(ids):,d} tokens, {n_bytes:,d} bytes ({n_bytes / max(1, len(ids)):.2f} bytes per token)",
        file=sys.stderr,
    )
    return 0


def decode_command(args: argparse.Namespace) -> int:
    tokenizer = Tokenizer.load(args.tokenizer)
    print(tokenizer.decode(_ids(args.ids)))
    return 0


def _input_text(args: argparse.Namespace) -> str:
    "The text to encode, from `--file`, `--text` or stdin, each refused alike when it is not UTF-8."
    if args.file is not None:
        if args.file.is_dir():
            raise UsageError(f"--file {args.file} is a folder: give the path of a text file")
        with naming(args.file):
            if not args.file.is_file():  # a pipe or a device (`/dev/zero`): no size to check, maybe no end
                with open(args.file, "rb") as f:
                    return _utf8_text(_bounded_read(f, str(args.file)), str(args.file))
            if args.file.stat().st_size > ENCODE_MAX_BYTES:
                raise _too_long(str(args.file))
            return _utf8_text(args.file.read_bytes(), str(args.file))
    if args.text is not None:  # argv keeps bytes that are not UTF-8 as surrogates: back to those bytes
        return _utf8_text(os.fsencode(args.text), "--text")
    return _utf8_text(_bounded_read(sys.stdin.buffer, "stdin"), "stdin")


def _bounded_read(f, where: str) -> bytes:
    """All of `f`, refused (a `UsageError` naming `where`) past `ENCODE_MAX_BYTES`: a pipe or a device
    (`--file /dev/zero`, `< /dev/urandom`) may never end, and would be read until memory runs out."""
    data = f.read(ENCODE_MAX_BYTES + 1)
    if len(data) > ENCODE_MAX_BYTES:
        raise _too_long(where)
    return data


def _too_long(where: str) -> UsageError:
    return UsageError(
        f"{where} holds more than {readable_count(ENCODE_MAX_BYTES, 'B')}, the most `tokenizer encode` "
        "reads (its ids are printed): tokenize a corpus that large with `data prepare`"
    )


def _utf8_text(data: bytes, where: str) -> str:
    "`data` decoded as UTF-8, or a `UsageError` naming `where` and the first byte that is not UTF-8."
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{where} is not valid UTF-8 (byte {e.start}: {e.reason})") from e


def _ids(text: str) -> list[int]:
    "The ids of `--ids`: a JSON list of ints (JSON's `true` is no id, though Python counts bools as ints)."
    try:
        ids = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"--ids must be a JSON list of ints, like [15, 27]: {e}") from e
    if not isinstance(ids, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        raise UsageError(f"--ids must be a JSON list of ints, like [15, 27], got {text!r}")
    return ids
