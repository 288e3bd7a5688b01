"""`model show`: a model preset's sizes, parameters by component and FLOPs.

Hand-written plumbing, not generated from a notebook: parses the flags and calls `gptlib.model`.

    model show [--preset NAME] [--vocab-size N]    the configuration, the parameter budget, FLOPs/token
"""

from __future__ import annotations

import argparse

from gptlib.model import GPT, GPT_PRESETS, GPTConfig, param_counts

from ._shared import add_command, add_count, add_preset, check_memory

__all__ = ["add_to"]


def add_to(commands) -> None:
    "The `model` command and its verb, under the command line's `commands` (argparse subparsers)."
    verbs = add_command(commands, "model", help="describe a model preset: sizes, parameters, FLOPs")
    show = verbs.add_parser("show", help="print a preset's configuration, parameters by component and FLOPs")
    add_preset(show, GPT_PRESETS, "gpt-25m", "model")
    add_count(show, "--vocab-size", None, "the tokenizer's vocabulary size (default: the preset's)")
    show.set_defaults(handler=show_command)


def show_command(args: argparse.Namespace) -> int:
    overrides = {} if args.vocab_size is None else {"vocab_size": args.vocab_size}
    config = GPTConfig.preset(args.preset, **overrides)
    check_memory(config, training=False)  # built here, on the CPU
    model = GPT(config)
    total = model.num_params(non_embedding=False)
    print(f"preset {args.preset}: " + ", ".join(f"{k}={v}" for k, v in config.to_dict().items()))
    print(f"{total:,d} parameters ({total / 1e6:.2f} M, the LM head tied to the token embedding)")
    for component, n in param_counts(config).items():
        print(f"  {component:28s} {n:>12,d}  {n / total:6.1%}")
    print(f"{model.flops_per_token() / 1e6:.1f} MFLOP per token to train (6N + 12 L C T)")
    return 0
