"""`train start|config`: training runs, with a flag for every `TrainConfig` field.

Hand-written plumbing, not generated from a notebook: parses the flags and calls `gptlib.train`.

    train start --preset NAME --shards F --tokenizer F --out F [--FIELD VALUE ...]   train, or resume
                [--init-from RUN] [--tensorboard]
    train config --preset NAME [--FIELD VALUE ...]                                   the resolved config

`--init-from RUN` (continued pretraining) starts a new run from RUN's best weights with a new optimizer and
schedule, and ends with bits per byte on RUN's held-out text and on the new one, before and after.
`--tensorboard` writes the run's scalars as TensorBoard events in `OUT/tensorboard/` as it trains.

The flags are generated from the dataclass (`Config.add_arguments`): a field added to `TrainConfig` is a
flag at once, its description the flag's help, its type and bounds checked as the dataclass checks them.
The same parser serves `torchrun ... -m gptlib train start ...`, where every process parses its own copy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gptlib.display import save_plots
from gptlib.expected import check_bands, place
from gptlib.pipeline import TrainingEvents, continued_after, continued_pretraining
from gptlib.run_folder import CheckpointError, list_checkpoints, read_metrics
from gptlib.runtime import resolve_device
from gptlib.train import train
from gptlib.train_config import TRAIN_PRESETS, TrainConfig

from ._shared import (
    Parser,
    UsageError,
    add_command,
    add_preset,
    add_tensorboard,
    check_memory,
    signal_exit_code,
)

__all__ = ["add_to", "add_train_flags", "train_parser", "config_from_args", "RUN_FOLDERS"]

RUN_FOLDERS = ("shards", "tokenizer", "out")  # what a run reads and where it writes: no preset can say
_FOLDERS_HELP = "the shard folder and its tokenizer to train on, and the run folder to write"
_ABOUT = "Train a GPT. Every TrainConfig field is a flag; the preset gives the values not set."


def add_to(commands) -> None:
    "The `train` command and its verbs, under the command line's `commands` (argparse subparsers)."
    verbs = add_command(commands, "train", help="train a GPT from a shard folder (flags from TrainConfig)")
    start = verbs.add_parser(
        "start",
        help="train, or resume the run in --out; `train start -h` lists every flag",
        description=_ABOUT,
    )
    add_train_flags(start)
    add_tensorboard(start)
    start.set_defaults(handler=start_command)
    config = verbs.add_parser("config", help="print the resolved configuration as JSON, train nothing")
    add_train_flags(config)
    config.set_defaults(handler=config_command)


def add_train_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    "`--preset NAME`, then a flag for every TrainConfig field (generated from the dataclass)."
    add_preset(parser, TRAIN_PRESETS, "tiny", "training")
    return TrainConfig.add_arguments(parser, show_defaults=False)


def train_parser(prog: str = "python -m gptlib train start") -> argparse.ArgumentParser:
    "The flags of `train start` as a parser of their own, for code and tests."
    return add_train_flags(Parser(prog=prog, description=_ABOUT))


def config_from_args(argv: list[str], prog: str = "python -m gptlib train start") -> TrainConfig:
    "The TrainConfig of command-line flags; unknown flags and wrong types exit with a usage error."
    return _config(train_parser(prog).parse_args(argv))


def _config(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig.from_args(args, preset=args.preset)


def start_command(args: argparse.Namespace) -> int:
    # Checked here rather than by argparse, which would report a missing flag before a misspelt one.
    missing = [f"--{name}" for name in RUN_FOLDERS if not getattr(args, name)]
    if missing:
        raise UsageError(f"train start needs {', '.join(missing)}: {_FOLDERS_HELP}")
    if args.budget and args.max_steps is not None:  # a budget sets max_steps: one of them would be ignored
        raise UsageError("--budget sets max_steps from the steps that fit: pass --budget or --max-steps")
    cfg = _config(args)
    check_memory(cfg, training=True, device=resolve_device(cfg.device))  # before anything is built
    events = TrainingEvents(cfg.out) if args.tensorboard else None  # TensorBoard checked before any work
    start = _continued_start(cfg) if cfg.init_from else None
    if (damaged := check_bands()) is not None:  # said now, not found once the run has trained
        print(f"note: {damaged}: the run will not be placed against an expected band")
    seen_here = []  # `train` hands its records to the callback in the main process only

    def callback(record: dict) -> None:
        seen_here.append(record)
        if events is not None:
            events(record)

    try:
        history = train(cfg, callback=callback)
    finally:
        if events is not None:
            events.close()
    stopped = history[-1].get("stopped") if history else None
    if seen_here:  # so under torchrun one process draws the curves, reports and places the run
        records = read_metrics(cfg.out)
        band, placed = place(records, cfg.to_dict())  # the recipe's fields; its steps are in the records
        save_plots(records, Path(cfg.out) / "training.png", band=band)
        if start is not None:
            _print_continued(cfg, start, continued_after(cfg, start))
        if stopped is None:  # a finished run: is it normal? (the last lines)
            print("\n".join(placed))
    return signal_exit_code(stopped)


def _continued_start(cfg: TrainConfig) -> dict | None:
    """The figures of the weights a continued run starts from. A new run that cannot start from them is
    refused here, before any work; a resumed one needs them no more (its checkpoint holds its weights), so
    when the run it started from is gone it goes on without the `before` figures."""
    try:
        return continued_pretraining(cfg)
    except CheckpointError:
        if not list_checkpoints(cfg.out):
            raise
        print(f"{cfg.init_from} cannot be read any more: no figures of the weights this run started from")
        return None


def _print_continued(cfg: TrainConfig, start: dict, end: dict) -> None:
    "Continued pretraining's table: bits per byte on the old and the new held-out text, before and after."
    print(
        f"continued pretraining: bits per byte over the held-out text, before (the best checkpoint of "
        f"{cfg.init_from}, step {start['step']}) and after (this run's best, step {end['step']})"
    )
    for which, label in (("old", "the old run's"), ("new", "this run's")):
        before, after = start["before"][which], end["after"][which]
        figures = "its shards are gone" if before is None else f"{before:.4f} -> {after:.4f}"
        print(f"  {label:14s} {figures}   ({start['texts'][which]})")


def config_command(args: argparse.Namespace) -> int:
    print(json.dumps(_config(args).to_dict(), indent=1))
    return 0
