"""`lab run|queue|show|pin`: did a change help? Experiments that seed noise cannot fool.

Hand-written plumbing, not generated from a notebook: parses the flags and calls `gptlib.lab` (whose
docstring gives the design: pinned steps, paired seeds, the rule declared first, the ledger).

    lab run LEDGER --name NAME --base FLAGS [--baseline FLAGS] [--candidate FLAGS] [--seed-shift N]
            [--first-seed N] [--min-effect X] [--level A] [--min-seeds N] [--max-seeds N]
            [--threads N] [--max-trials N] [--work DIR]
    lab queue LEDGER FILE [--threads N] [--max-trials N] [--work DIR]   a line of `run` flags per experiment
    lab show LEDGER [LEDGER ...] [--figure PNG]                         the table (and the figure)
    lab pin LEDGER --base FLAGS --budget MIN [--seed N] [--threads N]   the steps and precision to pin

FLAGS are `train start` flags in one quoted argument (`--base "--preset cpu --shards S --tokenizer T
--max-steps 200 --precision fp32 --compile false"`); each arm is the base with its own flags over it. The
lab sets each trial's seed and run folder itself, so `--seed`, `--out` and `--budget` are refused there.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from gptlib.config import ConfigError, parse_path
from gptlib.files import FolderLock
from gptlib.lab import ARMS, Experiment, Ledger, Rule, pin, run_experiment, save_figure, summary
from gptlib.train_config import TrainConfig

from ._shared import Parser, UsageError, add_command, integer, number
from .train import add_train_flags

__all__ = ["add_to", "experiment_parser", "experiment_from_args"]

GUIDE = """\
How to propose a change, run it and read the decision:
  1. Say the change as train flags (`--candidate "--positions rotary"`). A change of the code goes behind a
     config field of its own, off by default (as --positions is): one tree then trains both arms, and the
     ledger records that tree's fingerprint and git commit with every trial.
  2. Pin the trial: `lab pin LEDGER --base FLAGS --budget 1` prints the steps and precision a one-minute
     budget buys the baseline here; put them in --base (--max-steps N --precision P).
  3. Declare the rule before the runs (--min-effect, --level, --min-seeds, --max-seeds: kept in the
     ledger, and refused if changed later under the same name), then `lab run LEDGER --name NAME ...`.
  4. Read the last line, or `lab show LEDGER`: keep (better by more than --min-effect, with confidence),
     reject (better by less, or worse), undecided (the cap came first: the effect is too small to see with
     so few seeds). A killed run is resumed by the same command: trials in the ledger are not retrained.
An A/A (the baseline against itself, --seed-shift 1000) shows what noise alone decides: keep at most
--level of the time."""


class _Flags(Parser):
    "A parser of flags inside an argument or a queue file: its errors name where they came from."

    def __init__(self, where: str):
        super().__init__(prog=where, add_help=False)
        self.where = where

    def error(self, message: str):
        raise UsageError(f"{self.where}: {message}")


def add_experiment_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    "The flags that make one experiment: a `lab run` command's, and each line of a queue file."
    parser.add_argument("--name", required=True, help="the experiment's name in the ledger (no spaces)")
    parser.add_argument(
        "--base", default="", metavar="FLAGS", help="train start flags both arms share: --preset, data, steps"
    )
    parser.add_argument("--baseline", default="", metavar="FLAGS", help="the baseline's flags over --base")
    parser.add_argument("--candidate", default="", metavar="FLAGS", help="the candidate's flags over --base")
    parser.add_argument(
        "--first-seed", type=integer(low=0), default=1, help="the seed of the first pair (default: 1)"
    )
    parser.add_argument(
        "--seed-shift",
        type=int,
        default=0,
        help="the candidate's seeds shifted by this (0: paired seeds; an A/A: no candidate flags, a shift)",
    )
    Rule.add_arguments(parser)  # under the heading of Rule's docstring
    return parser


def experiment_parser(where: str = "lab run") -> argparse.ArgumentParser:
    "The experiment's flags as a parser of their own, whose errors raise `UsageError` naming `where`."
    return add_experiment_flags(_Flags(where))


def arm_config(flags: str, where: str) -> TrainConfig:
    "The TrainConfig of `train start` flags (a string), refusing the flags the lab sets itself."
    try:
        argv = shlex.split(flags)
    except ValueError as e:
        raise UsageError(f"{where}: {e}") from None
    args = add_train_flags(_Flags(where)).parse_args(argv)
    for name in ("seed", "out", "budget"):
        if getattr(args, name) is not None:
            raise UsageError(f"{where}: the lab sets --{name} itself (seeds: --first-seed, --seed-shift)")
    return TrainConfig.from_args(args, preset=args.preset)


def experiment_from_args(args: argparse.Namespace) -> Experiment:
    "The experiment of parsed experiment flags: each arm is --base with its own flags after it."
    arms = {arm: arm_config(f"{args.base} {getattr(args, arm)}", f"--{arm}") for arm in ARMS}
    return Experiment(
        name=args.name,
        **arms,
        rule=Rule.from_args(args),
        first_seed=args.first_seed,
        seed_shift=args.seed_shift,
    )


def _add_machine_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads", type=integer(low=1), default=1, help="torch threads of each trial (part of its key)"
    )
    parser.add_argument(
        "--max-trials", type=integer(low=1), help="train at most this many new trials, then stop (resumable)"
    )
    parser.add_argument(
        "--work", type=parse_path, metavar="DIR", help="the trials' run folders (default: LEDGER-runs/)"
    )


def add_to(commands) -> None:
    "The `lab` command and its verbs, under the command line's `commands` (argparse subparsers)."
    formatter = argparse.RawDescriptionHelpFormatter
    verbs = add_command(
        commands,
        "lab",
        help="experiments: a baseline against a candidate, paired seeds, a rule declared first",
        description=f"Did a change help? Judged so that seed noise cannot fool it.\n\n{GUIDE}",
        formatter_class=formatter,
    )
    run = verbs.add_parser(
        "run",
        help="run one experiment until its rule decides (resumes where a killed one stopped)",
        description=GUIDE,
        formatter_class=formatter,
    )
    run.add_argument(
        "ledger", type=parse_path, metavar="LEDGER", help="the ledger (JSON lines), e.g. lab.jsonl"
    )
    add_experiment_flags(run)
    _add_machine_flags(run)
    run.set_defaults(handler=run_command)
    queue = verbs.add_parser("queue", help="run the experiments of a file, one line of `run` flags each")
    queue.add_argument("ledger", type=parse_path, metavar="LEDGER")
    queue.add_argument("file", type=parse_path, metavar="FILE", help="experiments, one a line; # comments")
    _add_machine_flags(queue)
    queue.set_defaults(handler=queue_command)
    show = verbs.add_parser("show", help="the ledgers' experiments as a table (and a figure)")
    show.add_argument("ledgers", type=parse_path, nargs="+", metavar="LEDGER")
    show.add_argument("--figure", type=parse_path, metavar="PNG", help="draw the paired differences here")
    show.set_defaults(handler=show_command)
    pinning = verbs.add_parser(
        "pin", help="train the baseline to a budget once: the steps and precision to pin"
    )
    pinning.add_argument("ledger", type=parse_path, metavar="LEDGER")
    pinning.add_argument("--base", required=True, metavar="FLAGS", help="the baseline's train start flags")
    pinning.add_argument("--budget", type=number(low=0.01), required=True, help="minutes of the budget")
    pinning.add_argument("--seed", type=integer(low=0), default=1, help="the budget run's seed (default: 1)")
    _add_machine_flags(pinning)
    pinning.set_defaults(handler=pin_command)


def _work(args: argparse.Namespace) -> Path:
    return args.work or args.ledger.with_name(f"{args.ledger.stem}-runs")


def _run(experiments: list[Experiment], args: argparse.Namespace) -> int:
    ledger, work, left = Ledger(args.ledger), _work(args), args.max_trials
    with FolderLock(work, "lab's run folder"):
        for experiment in experiments:
            before = len(ledger.trials())
            verdict = run_experiment(
                experiment, ledger, work, threads=args.threads, max_trials=left, log=print
            )
            if left is not None:
                left -= len(ledger.trials()) - before
            if verdict is None:
                print(f"{experiment.name}: stopped before a decision; run the same command again to go on")
                return 130 if left is None or left > 0 else 0  # a signal, or the trials asked for are done
            print(f"{experiment.name}: {verdict.decision}")
    return 0


def run_command(args: argparse.Namespace) -> int:
    return _run([experiment_from_args(args)], args)


def queue_command(args: argparse.Namespace) -> int:
    "Every line is parsed and checked before the first trial: a bad line is refused before any work."
    experiments = []
    for number_, line in enumerate(args.file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{args.file} line {number_}"
        try:
            argv = shlex.split(line)
        except ValueError as e:
            raise UsageError(f"{where}: {e}") from None
        try:
            experiments.append(experiment_from_args(experiment_parser(where).parse_args(argv)))
        except ConfigError as e:  # a rule's value, or arms the lab cannot pair: named with its line
            raise UsageError(f"{where}: {e}") from None
    names = [e.name for e in experiments]
    if len(set(names)) < len(names):
        raise UsageError(f"{args.file} names an experiment twice")
    return _run(experiments, args)


def show_command(args: argparse.Namespace) -> int:
    missing = [str(path) for path in args.ledgers if not path.is_file()]
    if missing:
        raise UsageError(f"no ledger at {', '.join(missing)}")
    rows = [row for path in args.ledgers for row in summary(Ledger(path).records())]
    print(
        f"{'experiment':24s} {'candidate changes':34s} {'seeds':>5s} {'mean':>8s} "
        f"{'interval':>19s} {'decision':10s} {'trials':>6s} {'minutes':>7s}"
    )
    for row in rows:
        changed = ", ".join(f"{k} {a}->{b}" for k, (a, b) in row["changed"].items())
        changed = changed or f"seeds +{row['seed_shift']} (A/A)"
        figures = (
            "" if row["mean"] is None else f"{row['mean']:+8.4f} [{row['lower']:+.4f}, {row['upper']:+.4f}]"
        )
        print(
            f"{row['name']:24s} {changed:34s} {row['n']:5d} {figures:28s} {row['decision']:10s} "
            f"{row['trials']:6d} {row['seconds'] / 60:7.1f}"
        )
    if args.figure:
        print(f"figure: {save_figure(rows, args.figure)}")
    return 0


def pin_command(args: argparse.Namespace) -> int:
    cfg = arm_config(args.base, "--base")
    cfg = TrainConfig.from_dict({**cfg.to_dict(), "seed": args.seed})
    with FolderLock(_work(args), "lab's run folder"):
        out = _work(args) / f"pin-{args.budget:g}min-seed{args.seed}"  # a killed one resumes its plan
        pinned = pin(cfg, args.budget, out, args.threads)
        Ledger(args.ledger).append({"kind": "pin", **pinned, "seed": args.seed, "config": cfg.to_dict()})
    print(f"pinned: --max-steps {pinned['max_steps']} --precision {pinned['precision']}")
    return 0
