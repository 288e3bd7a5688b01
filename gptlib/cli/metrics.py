"""`metrics tensorboard`: a run's metrics.jsonl as TensorBoard event files.

Hand-written plumbing, not generated from a notebook: parses the flags and calls `gptlib.tensorboard`.

    metrics tensorboard --run FOLDER     FOLDER/tensorboard/ written from FOLDER/metrics.jsonl

A run trained without `--tensorboard` (or by an older gptlib) gets its event files afterwards; the run's
`tensorboard/` folder, its own, is replaced whole, so the command can be repeated as the run goes on.
"""

from __future__ import annotations

import argparse

from gptlib.config import parse_path
from gptlib.files import build_folder
from gptlib.run_folder import CheckpointError, RunFolder, read_metrics
from gptlib.tensorboard import TENSORBOARD_DIR, check_installed, write_events

__all__ = ["add_to"]


def add_to(commands) -> None:
    "The `metrics` command and its verbs, under the command line's `commands` (argparse subparsers)."
    metrics = commands.add_parser("metrics", help="a run's metrics for other tools: TensorBoard event files")
    verbs = metrics.add_subparsers(dest="verb", required=True, metavar="VERB")
    tensorboard = verbs.add_parser(
        "tensorboard", help="write RUN/tensorboard/ from RUN/metrics.jsonl (replacing the events there)"
    )
    tensorboard.add_argument(
        "--run", type=parse_path, required=True, metavar="FOLDER", help="a run folder (`train start --out`)"
    )
    tensorboard.set_defaults(handler=tensorboard_command)


def tensorboard_command(args: argparse.Namespace) -> int:
    run = args.run
    if not (run / "metrics.jsonl").is_file():  # before RunFolder, which would make a missing folder a run
        raise CheckpointError(f"{run} has no metrics.jsonl: not a run folder, or no run has begun in it")
    check_installed()
    # the run's lock: a run training there now (maybe with --tensorboard) is not written under; a folder
    # that is not a gptlib run is refused
    with RunFolder(run):
        records = read_metrics(run)
        with build_folder(run / TENSORBOARD_DIR) as work:  # the old events replaced once the new are written
            write_events(records, work)
    counts = {kind: sum(r["kind"] == kind for r in records) for kind in ("train", "val")}
    print(
        f"{counts['train']} train and {counts['val']} val records of {run / 'metrics.jsonl'} -> "
        f"{run / TENSORBOARD_DIR} (see them with `tensorboard --logdir {run / TENSORBOARD_DIR}`)"
    )
    return 0
