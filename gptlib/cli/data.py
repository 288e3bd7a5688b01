"""`data prepare|show|export|import`: token shards made, checked and translated.

Hand-written plumbing, not generated from a notebook: parses the flags and calls `gptlib.data` (prepare,
read and verify shard folders) and the `.bin` functions of `gptlib.interop` (nanoGPT's and llm.c's files).

    data prepare --tokenizer FOLDER --out FOLDER [--corpus SPEC ...]   a flag per DataConfig field
    data show --shards FOLDER [--quick]                                describe and verify
    data export --shards FOLDER --format nanogpt|llmc --out FOLDER     .bin files for other trainers
    data import --format nanogpt|llmc --train F --val F --tokenizer FOLDER --out FOLDER
"""

from __future__ import annotations

import argparse
import time

from gptlib.config import parse_path
from gptlib.data import SPLITS, DataConfig, prepare, read_manifest, readable_count, verify_split
from gptlib.interop import export_llmc, export_nanogpt, import_bins

from ._shared import add_command, add_count, add_shards, add_tokenizer

__all__ = ["add_to", "EXPORTS"]

EXPORTS = {"nanogpt": export_nanogpt, "llmc": export_llmc}  # the formats, both ways (import_bins reads them)


def add_to(commands) -> None:
    "The `data` command and its verbs, under the command line's `commands` (argparse subparsers)."
    verbs = add_command(
        commands, "data", help="documents -> shuffled, split token shards; check, export, import"
    )

    prep = verbs.add_parser("prepare", help="tokenize a corpus into shuffled train/val shards (reuses work)")
    DataConfig.add_arguments(prep, required=("tokenizer", "out"))  # a flag per DataConfig field
    prep.add_argument("--no-progress", action="store_true", help="no progress bars")
    prep.set_defaults(handler=prepare_command)

    show = verbs.add_parser("show", help="describe a shard folder and verify its files against the manifest")
    add_shards(show)
    show.add_argument("--quick", action="store_true", help="check sizes only, not sha256 checksums")
    show.set_defaults(handler=show_command)

    export = verbs.add_parser("export", help="write nanoGPT train.bin/val.bin or llm.c .bin files")
    add_shards(export)
    _add_format(export, "the target format")
    export.add_argument(
        "--out",
        type=parse_path,
        required=True,
        metavar="FOLDER",
        help="the folder for the .bin files and gptlib-export.json (which tokenizer made them)",
    )
    export.set_defaults(handler=export_command)

    imp = verbs.add_parser("import", help="turn nanoGPT or llm.c .bin files into a shard folder")
    _add_format(imp, "the source format")
    imp.add_argument("--train", type=parse_path, required=True, metavar="FILE", help="the train .bin file")
    imp.add_argument("--val", type=parse_path, required=True, metavar="FILE", help="the val .bin file")
    add_tokenizer(
        imp,
        required=True,
        help="the tokenizer the files were made with (checked: files of another tokenizer are refused)",
    )
    imp.add_argument(
        "--out", type=parse_path, required=True, metavar="FOLDER", help="the output shard folder"
    )
    add_count(imp, "--shard-tokens", 50_000_000, "target tokens per shard file", low=1)
    imp.set_defaults(handler=import_command)


def _add_format(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--format", choices=sorted(EXPORTS), required=True, help=help)


def prepare_command(args: argparse.Namespace) -> int:
    cfg = DataConfig.from_args(args)
    started = time.perf_counter()
    manifest = prepare(cfg, progress=not args.no_progress)
    seconds = time.perf_counter() - started
    corpus = manifest["corpus"]
    print(f"{corpus['spec']}: {corpus['n_documents']} documents -> {cfg.out} in {seconds:.1f} s")
    _print_splits(manifest)
    return 0


def show_command(args: argparse.Namespace) -> int:
    manifest = read_manifest(args.shards)
    tok = manifest["tokenizer"]
    print(
        f"{args.shards}: {manifest['format']} v{manifest['format_version']}, "
        f"{manifest['tokens']['dtype']} tokens, tokenizer {tok['fingerprint'][:16]} ({tok['n_vocab']} ids), "
        f"seed {manifest['shuffle']['seed']}"
    )
    _print_splits(manifest)
    for split in SPLITS:
        verify_split(args.shards, manifest, split, checksums=not args.quick)
    print("sizes verified" if args.quick else "sizes and sha256 checksums verified")
    return 0


def export_command(args: argparse.Namespace) -> int:
    for split, path in EXPORTS[args.format](args.shards, args.out).items():
        print(f"  {split:5s} -> {path}")
    return 0


def import_command(args: argparse.Namespace) -> int:
    manifest = import_bins(
        args.train, args.val, args.out, args.tokenizer, fmt=args.format, shard_tokens=args.shard_tokens
    )
    print(f"imported {args.format} files into {args.out}")
    _print_splits(manifest)
    return 0


def _print_splits(manifest: dict) -> None:
    "A line per split of a shard folder's manifest: documents, tokens, shards and bytes on disk."
    for split, entry in manifest["splits"].items():
        size = sum(f["bytes"] for shard in entry["shards"] for f in shard["files"])
        print(
            f"  {split:5s} {entry['n_documents']:>8,d} documents {entry['n_tokens']:>14,d} tokens "
            f"{len(entry['shards']):>5d} shards {readable_count(size, 'B'):>10s}"
        )
