"""The main job, `python -m gptlib run`: corpus, tokenizer, shards, training, a sample.

Hand-written plumbing, not generated from a notebook: each stage is taught by its own notebook (01 to 06);
this module only chains them, on any corpus gptlib reads (`gptlib.corpus.open_corpus`), and reuses a
finished stage while its inputs are unchanged:

- `prepare_tokenizer` trains a tokenizer unless the folder already holds one trained on the same corpus
  (its stamp) with the same vocabulary size, recorded in `trained_on.json`;
- `gptlib.data.prepare` reuses shards made from the same inputs (their key);
- `gptlib.train.train` resumes an interrupted run from its newest intact checkpoint.

Everything lives under one root (default `gptlib.corpus.data_dir()`): `tokenizers/NAME-V`, `shards/NAME-V`
and `runs/NAME-PRESET`, where NAME is `corpus_name(spec)`: the embedded corpus's own name, or the stem of a
folder or file followed by a short hash of its resolved path, so that two folders called `texts` in
different places never share a tokenizer, shards or a run (a corpus that moves is a new corpus).

The validation text is whole documents held out (`held_out_fraction`): 5 % of them, at least one, fewer when
those hold more than `VAL_MAX_TOKENS`, and never fewer than hold one window of the model's context. A corpus
of one document cannot be split that way and is refused before any work with an error that says what to do,
as is a folder that holds the data folder itself (`check_corpus`). The sample at the end is prompted with a
speaker heading for Shakespeare, and otherwise with the opening of the first held-out document
(`held_out_prompt`), text the model has never trained on.

Also here, for the commands that train: `TrainingEvents` (a run's scalars as TensorBoard events while it
trains, `--tensorboard`), and `continued_pretraining` with `held_out_bpb` (the figures of continued
pretraining, `train start --init-from`: bits per byte on the old and the new held-out text, before and
after).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import regex
import torch

from .corpus import EMBEDDED, CorpusError, data_dir, open_corpus
from .data import DataConfig, open_split, prepare
from .display import save_plots
from .expected import check_bands, place
from .files import atomic_write, sha256_bytes, write_json
from .loader import eval_batches
from .model import sample_text
from .modern import build_model
from .optim import choose_precision
from .quality import TrainingText, reference_losses, sample_quality
from .run_folder import CheckpointError, init_from_run, load_trained, read_metrics
from .shards import ShardError, read_manifest
from .tensorboard import TENSORBOARD_DIR, TensorBoardLog, check_installed
from .tokenizer import Tokenizer
from .train import evaluate, train
from .train_config import TrainConfig

__all__ = [
    "TRAINED_ON",
    "PROMPT",
    "SAMPLING",
    "VAL_FRACTION",
    "VAL_MAX_TOKENS",
    "corpus_name",
    "check_corpus",
    "held_out_fraction",
    "held_out_prompt",
    "tokens_per_parameter",
    "PreparedData",
    "prepare_tokenizer",
    "prepare_shards",
    "prepare_data",
    "TrainingEvents",
    "held_out_bpb",
    "continued_pretraining",
    "continued_after",
    "run_pipeline",
]

PROMPT = "Romeo.\n"  # a speaker heading as the corpus writes them (name, full stop, new line)
SAMPLING = {"temperature": 0.8, "top_k": 50}  # how `make run` samples from the best checkpoint
SAMPLE_SEEDS = 3  # samples whose quality is measured; the first is printed
VAL_FRACTION = 0.05  # of the documents held out: 2 of Shakespeare's 42 plays
# Held-out text beyond this buys a steadier figure no longer, only a slower validation (every window of it
# is read at each one in the `cpu` preset): twice Shakespeare's two held-out plays at 4,096 ids
VAL_MAX_TOKENS = 2**17
BANDS_CORPUS = "shakespeare"  # what the committed expected bands were trained on (benchmarks/train.py)
PROMPT_CHARS = 40  # the longest prompt taken from the held-out text: a line or a few words

# beside a tokenizer made by prepare_tokenizer: the corpus and vocab it was trained for
TRAINED_ON = "trained_on.json"


def corpus_name(spec: str) -> str:
    """The name of corpus `spec` in folder names: an embedded edition's own name (`shakespeare`); otherwise
    the folder's or file's stem (a hub dataset's last name part) and 8 hex digits of the sha256 of its
    resolved path (of the spec, for a hub dataset): `texts-1a2b3c4d`. Characters a folder name should not
    hold become `_`."""
    if spec in EMBEDDED:
        return spec
    if spec.startswith("hf:"):  # hf:OWNER/NAME[:CONFIG][@SPLIT]: NAME, and the whole spec hashed
        stem, key = re.split(r"[:@]", spec[3:])[0].rsplit("/", 1)[-1], spec.encode()
    else:
        path = Path(spec).expanduser().resolve()
        stem, key = (path.stem if path.is_file() else path.name), os.fsencode(path)
    stem = re.sub(r"[^\w.-]+", "_", stem).strip("._")[:40] or "corpus"  # \w: letters of any script
    return f"{stem}-{sha256_bytes(key)[:8]}"


def _canonical(spec: str) -> str:
    """A local corpus's spec as its resolved path, so that `texts`, `./texts` and `/home/me/texts` are one
    corpus to the tokenizer's and the shards' records, as they are one folder name (`corpus_name`)."""
    if spec in EMBEDDED or spec.startswith("hf:") or not spec:
        return spec
    return str(Path(spec).expanduser().resolve())


def check_corpus(spec: str, root=None) -> None:
    """Refuse, before any work, a local corpus that the pipeline writing under `root` (default `data_dir()`)
    cannot use: a folder that holds `root` (the samples and texts written there would be read back as
    documents, a new corpus at every run), or a corpus of one document (validation holds out whole
    documents, and one document cannot be both trained on and held out). Its first two documents are read
    for that, no more; an empty corpus is refused on the way (`gptlib.corpus`)."""
    path = Path(spec).expanduser()
    if spec in EMBEDDED or spec.startswith("hf:") or not path.exists():
        return  # open_corpus names what is wrong with a spec that is neither
    path, root = path.resolve(), Path(root if root is not None else data_dir()).expanduser().resolve()
    if path.is_dir() and (path == root or path in root.parents):
        raise CorpusError(
            f"the corpus folder {path} holds {root}, the data folder where `run` writes: its samples would "
            "be read back as documents; give a folder that does not hold it, or set GPTLIB_DATA elsewhere"
        )
    first = list(itertools.islice(open_corpus(str(path)), 2))
    if len(first) == 1:
        records = path.suffix in (".jsonl", ".parquet")  # a document a record, else a document a .txt file
        name = first[0].name if records else f"{first[0].name}.txt"
        several = f"a {path.suffix} file of several records" if records else "a folder of several .txt files"
        raise ShardError(
            f"the corpus {spec} is one document ({name}): its validation text is whole documents held out, "
            f"so give {several} (a chapter or a part each)"
        )


def held_out_fraction(lengths, context: int) -> float:
    """The `val_fraction` (`gptlib.data.DataConfig`) that holds out the right documents, given `lengths`, the
    framed length in tokens of every document in the seeded order the split takes them in: `VAL_FRACTION`
    of the documents (at least one); fewer when the first of those already hold `VAL_MAX_TOKENS`; but never
    fewer than hold one window of `context + 1` tokens, or validation would have nothing to read. Always at
    least one document to train on; a corpus that cannot give both is refused (`ShardError`)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    if n < 2:
        raise ShardError(
            f"a train/validation split holds out whole documents and needs at least 2, the corpus has {n}: "
            "give a corpus of several documents"
        )
    held = np.cumsum(lengths)  # held[k - 1]: the tokens of the first k documents
    share = min(n - 1, max(1, round(n * VAL_FRACTION)))  # what data.split_documents holds out at VAL_FRACTION
    capped = min(share, _documents_holding(held, VAL_MAX_TOKENS))
    needed = _documents_holding(held, context + 1)  # a window: `context` inputs and the last one's target
    if needed > n - 1:
        raise ShardError(
            f"the corpus is too small: its {n} documents ({int(held[-1]):,d} tokens) cannot hold out one "
            f"validation window of {context + 1} tokens and keep a document to train on; add text or use "
            "a preset with a shorter context"
        )
    count = max(capped, needed)
    # k / n makes split_documents hold out exactly k documents (round(n * k / n) is k); VAL_FRACTION itself
    # when that is what it holds out, so that the embedded corpus's shards keep the key they always had
    return VAL_FRACTION if count == share else count / n


def _documents_holding(held: np.ndarray, tokens: int) -> int:
    "The fewest leading documents whose tokens add up to at least `tokens` (all of them when none do)."
    return min(len(held), int(np.searchsorted(held, tokens)) + 1)


def _split_lengths(shards) -> np.ndarray:
    """The framed length of every document of a shard folder, in the seeded order the split took them in:
    the held-out documents first (`gptlib.data.split_documents` holds out the permutation's first ones),
    then the training documents, each split in its own order (read from the shards' `.ds.index` files)."""
    parts = [open_split(shards, split, checksums=False).doc_ends for split in ("val", "train")]
    return np.concatenate([np.diff(ends, prepend=0) for ends in parts])


def _last_fraction(shards: Path) -> float:
    """The `val_fraction` the shards in `shards` were made with, else `VAL_FRACTION`: the first guess of
    `prepare_shards`, right whenever the corpus has not changed since."""
    with contextlib.suppress(ValueError, OSError, KeyError, TypeError):  # ShardError is a ValueError
        fraction = read_manifest(shards)["split"]["val_fraction"]
        if isinstance(fraction, float) and 0 < fraction < 1:
            return fraction
    return VAL_FRACTION


def prepare_shards(
    corpus: str, tokenizer: Tokenizer, tok_dir, shards, context: int, *, progress=True
) -> dict:
    """The shards of `corpus` in `shards`, holding out the documents `held_out_fraction` chooses for
    `context`; returns their manifest. The choice needs the documents' lengths in tokens, known only once
    they are tokenized, so the shards are first made (or reused) with the fraction they were made with last
    time, and made once more in the rare case that the lengths call for another (a corpus of few or short
    documents, the first time)."""

    def made(fraction: float) -> dict:
        config = DataConfig(corpus=corpus, tokenizer=Path(tok_dir), out=Path(shards), val_fraction=fraction)
        return prepare(config, progress=progress, tokenizer=tokenizer)

    manifest = made(_last_fraction(Path(shards)))
    fraction = held_out_fraction(_split_lengths(shards), context)
    if fraction != manifest["split"]["val_fraction"]:
        manifest = made(fraction)
    return manifest


def prepare_tokenizer(
    corpus: str, vocab_size: int, folder, *, progress: bool = True
) -> tuple[Tokenizer, bool]:
    """The tokenizer in `folder`, trained on `corpus` and saved there unless it already is; returns
    `(tokenizer, reused)`. It is reused only while the corpus's stamp (`Corpus.stamp()`), the vocab size and
    the tokenizer's fingerprint match those recorded in `folder/trained_on.json` (a tokenizer saved there
    since by other means has another fingerprint); otherwise it is trained again and saved over the old."""
    folder = Path(folder)
    source = open_corpus(corpus)
    trained_on = {"corpus": corpus, "corpus_stamp": source.stamp(), "vocab_size": vocab_size}
    if (folder / "tokenizer.json").is_file() and (folder / TRAINED_ON).is_file():
        with contextlib.suppress(ValueError, OSError):
            tokenizer = Tokenizer.load(folder)
            recorded = json.loads((folder / TRAINED_ON).read_text(encoding="utf-8"))
            if recorded == {**trained_on, "fingerprint": tokenizer.fingerprint()}:
                return tokenizer, True
    tokenizer = Tokenizer.train((doc.text for doc in source), vocab_size, progress=progress)
    tokenizer.save(folder, overwrite=True)
    write_json(folder / TRAINED_ON, {**trained_on, "fingerprint": tokenizer.fingerprint()})  # after the save
    return tokenizer, False


@dataclass
class PreparedData:
    "What the first two stages leave: the tokenizer (and its folder), the shards and their manifest."

    name: str  # the corpus's name in folder names
    tokenizer: Tokenizer
    tokenizer_dir: Path
    shards: Path
    manifest: dict


def prepare_data(
    corpus: str, vocab_size: int, root, *, context: int = 1, log=print, progress: bool = True
) -> PreparedData:
    """The tokenizer (`root/tokenizers/NAME-V`) and shards (`root/shards/NAME-V`, whole documents held out:
    2 of Shakespeare's 42 plays) of `corpus`, each made unless it already is from the same inputs; the
    held-out documents hold at least one window of `context + 1` tokens. The notebooks' one setup."""
    say = log or (lambda line: None)
    corpus = _canonical(corpus)
    check_corpus(corpus, root)
    name = corpus_name(corpus)
    tok_dir = Path(root) / "tokenizers" / f"{name}-{vocab_size}"
    say(f"== tokenizer ({vocab_size} ids) in {tok_dir}")
    t0 = time.perf_counter()
    tokenizer, reused = prepare_tokenizer(corpus, vocab_size, tok_dir, progress=progress)
    say(f"   {'reused' if reused else 'trained'}: {tokenizer.n_vocab} ids ({time.perf_counter() - t0:.1f} s)")
    shards = Path(root) / "shards" / f"{name}-{vocab_size}"
    say(f"== shards in {shards}")
    t0 = time.perf_counter()
    manifest = prepare_shards(corpus, tokenizer, tok_dir, shards, context, progress=progress)
    train_split, val_split = manifest["splits"]["train"], manifest["splits"]["val"]
    documents = train_split["n_documents"] + val_split["n_documents"]
    say(
        f"   train {train_split['n_tokens']:,d} tokens, val {val_split['n_tokens']:,d} tokens "
        f"({val_split['n_documents']} of {documents} documents held out, {time.perf_counter() - t0:.1f} s)"
    )
    return PreparedData(name, tokenizer, tok_dir, shards, manifest)


def held_out_prompt(val, tokenizer: Tokenizer) -> str:
    """A prompt from the held-out text (`val`, an opened split): the first line of its first document with
    the line break after it, when that line is short (a title, a heading); else its first words, up to
    `PROMPT_CHARS` characters; "" when the document is blank. It is cut where the tokenizer's split pattern
    cuts the text, so that the prompt's tokens are those the document itself is made of: cut inside a chunk
    (after one of the two line breaks `\n\n` make, or before the space that starts ` word`), it would end
    in a token the model never saw there, and the sample would start with noise."""
    end = int(val.doc_ends[0]) - 1  # the document's tokens: past <|bos|>, before <|eos|>
    span = min(end, 1 + 4 * PROMPT_CHARS)  # enough tokens for PROMPT_CHARS characters of any script
    chunks = regex.findall(tokenizer.pattern, tokenizer.decode(val.read(1, max(1, span))))
    if span < end and chunks:
        chunks.pop()  # the last chunk may be cut short by the span: never part of the prompt
    while chunks and not chunks[0].strip():
        chunks.pop(0)  # blank lines or spaces before the text
    if chunks:
        chunks[0] = chunks[0].lstrip()
    breaks = [i for i, chunk in enumerate(chunks) if "\n" in chunk]
    if breaks and len("".join(chunks[: breaks[0]])) <= PROMPT_CHARS:
        return "".join(chunks[: breaks[0] + 1])  # a short first line: as a speaker heading is for Shakespeare
    prompt = ""
    for chunk in chunks:
        if "\n" in chunk or len(prompt + chunk) > PROMPT_CHARS:
            break
        prompt += chunk
    # one chunk longer than PROMPT_CHARS (a script written without spaces): its first characters
    return prompt or "".join(chunks)[:PROMPT_CHARS].split("\n")[0]


class TrainingEvents:
    """A run's scalars as TensorBoard events while it trains (`--tensorboard`), in `RUN/tensorboard/` beside
    its `metrics.jsonl`: a callback for `gptlib.train.train`. The event file is opened at the run's first
    record, the start line, which `train` writes at the step the run starts from: a resumed run's events
    after that step then replace the interrupted run's, as its metrics do. Refuses at once, before any work,
    when TensorBoard is not installed."""

    def __init__(self, run):
        check_installed()
        self.folder, self._log = Path(run) / TENSORBOARD_DIR, None

    def __call__(self, record: dict) -> None:
        if self._log is None:
            self._log = TensorBoardLog(self.folder, resume_step=record["step"])
        self._log(record)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()


def _each(*callbacks):
    "One callback that calls each of `callbacks` that is not None, in order (None when there is none)."
    chosen = [callback for callback in callbacks if callback is not None]
    if not chosen:
        return None

    def call(record: dict) -> None:
        for callback in chosen:
            callback(record)

    return call


def held_out_bpb(model, shards, tokenizer: Tokenizer, cfg: TrainConfig) -> float:
    """Bits per byte of `model` (on the CPU) over the held-out split of `shards`, read as the run of `cfg`
    validates (its batch, context and `eval_batches`), in fp32: the figures of continued pretraining, the
    weights a run started from and its best checkpoint, on its own held-out text and the older run's."""
    val = open_split(shards, "val", tokenizer)  # refused unless these ids are this tokenizer's
    windows = eval_batches(val, cfg.micro_batch, cfg.context, cfg.eval_batches or None)
    # (V,) the raw bytes each token id stands for, 0 for the special tokens: what bits per byte divides by
    lengths = torch.from_numpy(np.asarray(tokenizer.token_byte_lengths(), dtype=np.int64))
    return evaluate(model, windows, lengths, choose_precision("cpu", "fp32"))["val_bpb"]


def continued_pretraining(cfg: TrainConfig) -> dict:
    """Where continued pretraining (`cfg.init_from`) starts: the held-out texts it is measured on (`old`, the
    shards the run it starts from trained on; `new`, this run's) and the bits per byte there of the weights
    it starts from (`before`; None for a text whose shards are gone). Checked as `train` checks it
    (`gptlib.run_folder.init_from_run`), so a run that would be refused is refused here, before any work."""
    tokenizer = Tokenizer.load(cfg.tokenizer)
    with torch.random.fork_rng():  # built only to be loaded into: the run's own random draws are untouched
        model = build_model(cfg.model_config())
    meta = init_from_run(model, cfg.init_from, tokenizer)
    texts = {"old": meta["config"]["shards"], "new": cfg.shards}
    before = {which: _bpb_if_there(model, shards, tokenizer, cfg) for which, shards in texts.items()}
    return {"texts": texts, "before": before, "step": meta["step"]}


def continued_after(cfg: TrainConfig, start: dict) -> dict:
    """The same figures for the run's best checkpoint, on the texts of `start` (`continued_pretraining`):
    `after`, each held-out text's bits per byte or None, and the checkpoint's `step`."""
    model, tokenizer, meta = load_trained(cfg.out, "best")
    after = {which: _bpb_if_there(model, shards, tokenizer, cfg) for which, shards in start["texts"].items()}
    return {"after": after, "step": meta["step"]}


def _bpb_if_there(model, shards, tokenizer: Tokenizer, cfg: TrainConfig) -> float | None:
    "`held_out_bpb`, or None when the folder `shards` is gone (moved or deleted since the old run trained)."
    if not Path(shards).is_dir():
        return None
    return held_out_bpb(model, shards, tokenizer, cfg)


def _passes(cfg: TrainConfig, train_tokens: int) -> str:
    """How many times the run reads its training text, in words: a preset's steps are fixed (they were tuned
    on Shakespeare's 1.4 M tokens), so on a small corpus they are many passes, and the model may learn the
    text by heart long before the end; the validation loss then turns up (the best checkpoint is sampled)."""
    if cfg.budget:  # the steps are set when the run starts, from its probe's timed steps
        per_step = cfg.micro_batch * cfg.grad_accum * cfg.context
        one_pass = train_tokens / per_step
        return (
            f"{cfg.budget:g} minutes of training (the probe sets the steps); one pass over the "
            f"{train_tokens:,d} training tokens is {one_pass:,.0f} steps of {per_step:,d} tokens"
        )
    tokens = cfg.max_steps * cfg.micro_batch * cfg.grad_accum * cfg.context
    passes = tokens / max(1, train_tokens)
    line = f"{cfg.max_steps:,d} steps read {tokens:,d} tokens: {passes:.1f} passes over the "
    line += f"{train_tokens:,d} training tokens"
    if passes > 20:
        line += " (many: the validation loss may turn up early; the best checkpoint is the one sampled)"
    return line


def tokens_per_parameter(cfg: TrainConfig, train_tokens: int) -> str:
    """The training text's tokens per model parameter, in words: Chinchilla's compute-optimal runs read about
    20 (Hoffmann et al. 2022); far fewer, and passes over the same text soon teach the model the text itself
    rather than the language (the validation loss turns up while the training loss falls)."""
    with torch.device("meta"):  # its parameters counted, none drawn or stored
        params = build_model(cfg.model_config()).num_params(non_embedding=False)
    ratio = train_tokens / params
    line = f"{train_tokens:,d} training tokens for {params:,d} parameters: {ratio:.2g} tokens per parameter"
    return line + (
        " (Chinchilla's runs read about 20: this text is small for this model)" if ratio < 2 else ""
    )


def run_pipeline(
    preset: str = "cpu",
    *,
    root=None,
    corpus: str = "shakespeare",
    prompt: str | None = None,
    sample_tokens: int = 300,
    config: TrainConfig | None = None,
    tensorboard: bool = False,
    log=print,
    progress: bool = True,
    callback=None,
) -> dict:
    """The main job: corpus -> tokenizer -> shards -> training (resumed if interrupted) -> a sample and
    plots, everything under `root` (default `gptlib.corpus.data_dir()`). Finished stages are reused.
    `prompt` None: `PROMPT` for Shakespeare, else `held_out_prompt`. `config` is the run's TrainConfig
    (default: the preset `preset`, which also names the run folder), e.g. `TrainConfig.preset("cpu",
    budget=8.0)`. `tensorboard`: the run's scalars also as TensorBoard events (`TrainingEvents`). Returns a
    summary, with the run placed against its expected band (`gptlib.expected`)."""
    started = time.perf_counter()
    say = log or (lambda line: None)
    root = Path(root) if root is not None else data_dir()
    cfg = config if config is not None else TrainConfig.preset(preset)
    if tensorboard:
        check_installed()  # before any stage, not once two of them have run
    data = prepare_data(corpus, cfg.vocab_size, root, context=cfg.context, log=log, progress=progress)
    tokenizer, tok_dir, shards, name = data.tokenizer, data.tokenizer_dir, data.shards, data.name
    run = root / "runs" / f"{name}-{preset}"
    if tokenizer.n_vocab != cfg.vocab_size:  # a small corpus ran out of pairs to merge before vocab_size
        say(f"   the tokenizer has {tokenizer.n_vocab} ids, not {cfg.vocab_size}: so has the model")
    # vocab_size is the number of token ids, the tokenizer's and the model's alike
    cfg = replace(cfg, shards=str(shards), tokenizer=str(tok_dir), out=str(run), vocab_size=tokenizer.n_vocab)
    events = TrainingEvents(run) if tensorboard else None
    say(f"== training the {preset!r} preset in {run}")
    if corpus == BANDS_CORPUS and (damaged := check_bands()) is not None:  # said now, not once it has trained
        say(f"   note: {damaged}: the run will not be placed against an expected band")
    say(f"   {_passes(cfg, data.manifest['splits']['train']['n_tokens'])}")
    say(f"   {tokens_per_parameter(cfg, data.manifest['splits']['train']['n_tokens'])}")
    try:
        history = train(cfg, callback=_each(callback, events), log=log, progress=progress)
    except CheckpointError as e:  # e.g. the corpus was edited since this run began
        raise CheckpointError(
            f"{run} cannot continue: {e}. If the corpus or the preset changed since this run began, delete "
            f"{run} to train again from scratch"
        ) from e
    finally:
        if events is not None:
            events.close()
    stopped = history[-1].get("stopped") if history else None
    train_tokens, val_tokens = open_split(shards, "train"), open_split(shards, "val")
    if prompt is None:  # Shakespeare's speaker heading, or the held-out text's opening
        prompt = PROMPT if corpus in EMBEDDED else held_out_prompt(val_tokens, tokenizer)
    references = reference_losses(np.asarray(train_tokens), np.asarray(val_tokens), tokenizer.n_vocab)
    records = read_metrics(run)  # the whole run, also the part an earlier start of it trained
    if corpus == BANDS_CORPUS:
        band, placed = place(records, cfg.to_dict())  # the recipe's fields; its steps are in the records
    else:  # a band says what a run on its own data looks like: on other text it would mislead
        band, placed = None, [f"no expected band for {corpus}: the committed bands are of {BANDS_CORPUS}"]
    plots = save_plots(records, run / "training.png", references, band)
    model, tokenizer, meta = load_trained(run, "best")  # the checkpoint with the lowest validation loss
    samples = [
        sample_text(model, tokenizer, prompt, sample_tokens, seed=cfg.seed + i, **SAMPLING)
        for i in range(SAMPLE_SEEDS)
    ]
    continuations = [sample[len(prompt) :] for sample in samples]  # the prompt's own words not counted
    quality = sample_quality(continuations, TrainingText.from_split(train_tokens, tokenizer))
    atomic_write(run / "sample.txt", (samples[0] + "\n").encode())
    best = next((r for r in read_metrics(run) if r["kind"] == "val" and r["step"] == meta["step"]), None)
    splits = data.manifest["splits"]
    summary = {
        "corpus": corpus,
        "tokenizer": str(tok_dir),
        "shards": str(shards),
        "run": str(run),
        "held_out": splits["val"]["n_documents"],  # the documents validation reads, of all `documents`
        "documents": splits["val"]["n_documents"] + splits["train"]["n_documents"],
        "step": meta["step"],  # the best checkpoint's, the one sampled
        "last_step": history[-1]["step"] if history else meta["step"],  # where training stopped
        "stopped_early": stopped is not None,
        "signal": stopped,
        "plots": str(plots),
        "val_loss": best and best["val_loss"],
        "val_bpb": best and best["val_bpb"],
        "val_tokens": best and best["val_tokens"],
        "references": references,
        "prompt": prompt,
        "sample": samples[0],
        "quality": quality,
        "tensorboard": str(events.folder) if events is not None else None,
        "band": placed,  # lines: the expected band of this run's recipe and CPU kind, and where the run is
        "wall_s": time.perf_counter() - started,
    }
    return summary
