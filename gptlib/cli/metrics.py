"""`metrics tensorboard`: a run's metrics.jsonl as TensorBoard event files.

Hand-written plumbing, not generated from a notebook: parses the flags and calls `gptlib.tensorboard`.

    metrics tensorboard --run FOLDER     FOLDER/tensorboard/ written from FOLDER/metrics.jsonl

A run trained without `--tensorboard` (or by an older gptlib) gets its event files afterwards; the event
files in the run's `tensorboard/` folder are replaced (nothing else there is touched), so the command can be
repeated as the run goes on. A `tensorboard` that is a link is refused: the event files where it points may
be another run's.
"""

from __future__ import annotations

import argparse

from gptlib.config import parse_path
from gptlib.run_folder import CheckpointError, RunFolder, read_metrics
from gptlib.tensorboard import TENSORBOARD_DIR, check_installed, write_events

from ._shared import add_command

__all__ = ["add_to"]


def add_to(commands) -> None:
    "The `metrics` command and its verbs, under the command line's `commands` (argparse subparsers)."
    verbs = add_command(commands, "metrics", help="a run's metrics for other tools: TensorBoard event files")
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
    events = run / TENSORBOARD_DIR
    if events.is_symlink():
        raise CheckpointError(
            f"{events} is a link: the event files where it points may not be this run's, and they would be "
            "replaced; remove the link, run this again and link the folder it makes where you want it"
        )
    if events.exists() and not events.is_dir():
        raise CheckpointError(f"{events} exists and is not a folder: move it away")
    # the run's lock: a run training there now (maybe with --tensorboard) is not written under; a folder
    # that is not a gptlib run is refused
    with RunFolder(run):
        records = read_metrics(run)  # lines edited out of shape (a step that is not a number) left out
        write_events(records, events)  # the old event files replaced once the new one is written
    counts = {kind: sum(r["kind"] == kind for r in records) for kind in ("train", "val")}
    print(
        f"{counts['train']} train and {counts['val']} val records of {run / 'metrics.jsonl'} -> "
        f"{run / TENSORBOARD_DIR} (see them with `tensorboard --logdir {run / TENSORBOARD_DIR}`)"
    )
    return 0
