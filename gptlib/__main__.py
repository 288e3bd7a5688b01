"""`python -m gptlib ...`: hand-written plumbing that hands over to `gptlib.cli`.

Ctrl-C outside the command itself is the process's to handle: while the command line is imported (torch
takes seconds), `interrupted` and exit 130, as `gptlib.cli.main` says during the command; once the command
has ended, nothing (its status stands: Python would otherwise print a `KeyboardInterrupt` traceback while
shutting down, or die of the signal)."""

import contextlib
import gc
import signal
import sys


def main() -> int:
    "The command line's status; the `gptlib` console script's entry too (pyproject.toml)."
    try:
        try:
            from gptlib.cli import main as command

            return command()
        finally:
            # what the command left in reference cycles goes now, while the interpreter is whole: a
            # torchrun rank's DDP wrapper (its hooks hold it in a cycle) keeps gloo's process group alive,
            # and a group freed during the interpreter's shutdown aborts the process ("terminate called
            # without an active exception", exit -6, one 2-process run in six here)
            gc.collect()
            with contextlib.suppress(ValueError):  # called from another thread: no signal to set
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command has ended: its status stands
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
