"""`sample --run FOLDER`: text from a trained run's best or latest checkpoint.

Hand-written plumbing, not generated from a notebook: parses the flags and calls `gptlib.run_folder`
(the run's model and tokenizer), `gptlib.runtime` (the device) and `gptlib.model.sample_text`.

    sample --run FOLDER [--prompt TEXT] [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]

The sample goes to stdout and the line that says which checkpoint made it to stderr, so that
`gptlib sample ... > out.txt` keeps the text alone.
"""

from __future__ import annotations

import argparse
import sys

from gptlib.config import parse_path
from gptlib.model import sample_text
from gptlib.run_folder import load_trained
from gptlib.runtime import resolve_device

from ._shared import add_count, number

__all__ = ["add_to", "SEED_LIMIT"]

SEED_LIMIT = 2**64 - 1  # the largest seed torch's generators take


def add_to(commands) -> None:
    "The `sample` command, under the command line's `commands` (argparse subparsers)."
    sample = commands.add_parser("sample", help="generate text from a trained run")
    sample.add_argument(
        "--run",
        type=parse_path,
        required=True,
        metavar="FOLDER",
        help="the run folder (checkpoints/, tokenizer/)",
    )
    sample.add_argument(
        "--prompt",
        default="",
        help="text to continue, read as the middle of a document (none: start a new document at <|bos|>)",
    )
    add_count(sample, "--max-new-tokens", 200, "tokens to generate", low=0)
    sample.add_argument(
        "--temperature",
        type=number(low=0.0),
        metavar="T",
        default=0.8,
        help="softmax temperature (0: the likeliest token every time; default: 0.8)",
    )
    add_count(sample, "--top-k", 50, "sample among the k likeliest tokens (0: all)", low=0)
    add_count(sample, "--seed", 0, "seeds the sampling generator", low=0, high=SEED_LIMIT)
    sample.add_argument("--checkpoint", choices=("best", "latest"), default="best", help="which checkpoint")
    sample.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto")
    sample.set_defaults(handler=sample_command)


def sample_command(args: argparse.Namespace) -> int:
    model, tokenizer, meta = load_trained(args.run, args.checkpoint, device=resolve_device(args.device))
    print(f"=== sample ({args.checkpoint} checkpoint, step {meta['step']}) ===", file=sys.stderr)
    text = sample_text(
        model,
        tokenizer,
        args.prompt,
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k or None,
        seed=args.seed,
    )
    print(text)
    return 0
