"""The command line, `python -m gptlib COMMAND ...`: one module per command, and the error policy.

Hand-written plumbing, not generated from a notebook. Each command lives in a module of its own that builds
its parser (`add_to`) and calls the library; this module puts them together under one parser, parses the
arguments once, and runs the command under the error policy below.

    corpus     fetch / show the embedded corpus or a local one            gptlib.cli.corpus
    tokenizer  train / encode / decode with a byte-level BPE tokenizer    gptlib.cli.tokenizer
    data       prepare / show / export / import token shards              gptlib.cli.data
    model      show: a preset's sizes, parameters by component, FLOPs     gptlib.cli.model
    train      start (or resume) / config: flags generated from TrainConfig   gptlib.cli.train
    sample     generate text from a trained run                           gptlib.cli.sample
    run        the main job: the whole pipeline, on any corpus            gptlib.cli.run
    metrics    a run's metrics.jsonl as TensorBoard event files           gptlib.cli.metrics
    lab        experiments: baseline against candidate, paired seeds      gptlib.cli.lab

The error policy: a user's mistake ends in one line, a bug in its traceback.

- a bad flag (unknown, of the wrong type, out of its bounds, an empty path) is refused while parsing,
  before any work: one `error: ...` line, exit status 2;
- gptlib's own errors (`gptlib.errors.GptlibError` and its subclasses: a bad value, a damaged file, a
  folder that is not gptlib's, a device this machine lacks) and `OSError` (a full disk, a missing file, no
  permission, each naming its path) mean bad input or an unfit environment: one `error: ...` line, exit 2;
- Ctrl-C that reaches the command line: `interrupted`, exit 130 (as the shell reports SIGINT); training
  catches it earlier, saves a checkpoint and exits 130 itself;
- output whose reader went away (`gptlib corpus show -v | head -3`): no message, exit 141, as the shell
  reports SIGPIPE (Python would print a `BrokenPipeError` twice, once more while exiting);
- anything else is a bug, of gptlib or of a library it calls: it is not caught, so Python prints its
  traceback and exits 1. Turning a `ValueError`, `KeyError` or `TypeError` into one tidy line would hide
  exactly the bugs that need the traceback to be found.

`main(argv)` returns the exit status (for the console script `gptlib` and `python -m gptlib`) rather
than raising `SystemExit`, so the commands can also be driven from Python and tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from gptlib.errors import GptlibError

from . import corpus, data, lab, metrics, model, run, sample, tokenizer, train
from ._shared import Parser, UsageError
from .train import config_from_args, train_parser

__all__ = ["COMMANDS", "UsageError", "build_parser", "describe", "main", "config_from_args", "train_parser"]

COMMANDS = (corpus, tokenizer, data, model, train, sample, run, metrics, lab)  # in the order `-h` lists them


def build_parser() -> Parser:
    "The parser of every command: each command module adds its own."
    parser = Parser(
        prog="python -m gptlib", description="gptlib: GPT pretraining from scratch, from raw text to samples."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_to(commands)
    return parser


def describe(error: BaseException) -> str:
    "The one line that reports a user error: an OSError's reason and path(s), else the message's first line."
    if isinstance(error, OSError) and error.strerror:  # "[Errno 28] ..." -> "No space left on device: PATH"
        paths = [str(p) for p in (error.filename, error.filename2) if p is not None]
        return f"{error.strerror}: {' -> '.join(paths)}" if paths else error.strerror
    message = str(error).strip()
    return message.splitlines()[0] if message else type(error).__name__


def main(argv: list[str] | None = None) -> int:
    "Run the command of `argv` (default: the process's arguments); return its exit status."
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # `-h` (status 0) or a usage error, already printed in one line (status 2)
        return 0 if e.code is None else e.code if isinstance(e.code, int) else 2
    try:
        return args.handler(args)
    except BrokenPipeError:  # before OSError, which it is: the reader of stdout stopped reading
        with contextlib.suppress(OSError, ValueError):  # a stdout without a file (a test's) needs nothing
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 128 + signal.SIGPIPE
    except (GptlibError, OSError) as e:
        print(f"error: {describe(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
