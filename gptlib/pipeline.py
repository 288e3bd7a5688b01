"""The main job, `python -m gptlib run`: corpus, tokenizer, shards, training, a sample.

Hand-written plumbing, not generated from a notebook: each stage is taught by its own notebook (01 to 06);
this module only chains them, and reuses a finished stage while its inputs are unchanged:

- `prepare_tokenizer` trains a tokenizer unless the folder already holds one trained on the same corpus
  (its stamp) with the same vocabulary size, recorded in `trained_on.json`;
- `gptlib.data.prepare` reuses shards made from the same inputs (their key);
- `gptlib.train.train` resumes an interrupted run from its newest intact checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .corpus import data_dir, open_corpus
from .data import DataConfig, open_split, prepare
from .display import save_plots
from .expected import place
from .files import atomic_write, write_json
from .quality import TrainingText, reference_losses, sample_quality
from .run_folder import CheckpointError, load_trained, read_metrics
from .tokenizer import Tokenizer
from .train import TrainConfig, sample_text, train

__all__ = [
    "TRAINED_ON",
    "PROMPT",
    "SAMPLING",
    "PreparedData",
    "prepare_tokenizer",
    "prepare_data",
    "run_pipeline",
]

PROMPT = "Romeo.\n"  # a speaker heading as the corpus writes them (name, full stop, new line)
SAMPLING = {"temperature": 0.8, "top_k": 50}  # how `make run` samples from the best checkpoint
SAMPLE_SEEDS = 3  # samples whose quality is measured; the first is printed
VAL_FRACTION = 0.05  # of the documents held out: 2 of Shakespeare's 42 plays

# beside a tokenizer made by prepare_tokenizer: the corpus and vocab it was trained for
TRAINED_ON = "trained_on.json"


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


def prepare_data(corpus: str, vocab_size: int, root, *, log=print, progress: bool = True) -> PreparedData:
    """The tokenizer (`root/tokenizers/NAME-V`) and shards (`root/shards/NAME-V`, 2 of Shakespeare's 42
    plays held out) of `corpus`, each made unless it already is from the same inputs. The notebooks' one
    setup."""
    say = log or (lambda line: None)
    name = corpus if "/" not in corpus and "." not in corpus else Path(corpus).stem or "corpus"
    tok_dir = Path(root) / "tokenizers" / f"{name}-{vocab_size}"
    say(f"== tokenizer ({vocab_size} ids) in {tok_dir}")
    t0 = time.perf_counter()
    tokenizer, reused = prepare_tokenizer(corpus, vocab_size, tok_dir, progress=progress)
    say(f"   {'reused' if reused else 'trained'}: {tokenizer.n_vocab} ids ({time.perf_counter() - t0:.1f} s)")
    shards = Path(root) / "shards" / f"{name}-{vocab_size}"
    say(f"== shards in {shards}")
    t0 = time.perf_counter()
    data_cfg = DataConfig(corpus=corpus, tokenizer=tok_dir, out=shards, val_fraction=VAL_FRACTION)
    manifest = prepare(data_cfg, progress=progress, tokenizer=tokenizer)
    splits = manifest["splits"]
    say(
        f"   train {splits['train']['n_tokens']:,d} tokens, val {splits['val']['n_tokens']:,d} tokens "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    return PreparedData(name, tokenizer, tok_dir, shards, manifest)


def run_pipeline(
    preset: str = "cpu",
    *,
    root=None,
    corpus: str = "shakespeare",
    prompt: str = PROMPT,
    sample_tokens: int = 300,
    overrides: dict | None = None,
    log=print,
    progress: bool = True,
    callback=None,
) -> dict:
    """The main job: corpus -> tokenizer -> shards -> training (resumed if interrupted) -> a sample and
    plots, everything under `root` (default `gptlib.corpus.data_dir()`). Finished stages are reused.
    `overrides` are TrainConfig fields over the preset (e.g. `{"budget": 8.0}`: minutes of training).
    Returns a summary, with the run placed against its expected band (`gptlib.expected`)."""
    started = time.perf_counter()
    say = log or (lambda line: None)
    root = Path(root) if root is not None else data_dir()
    cfg = TrainConfig.preset(preset, **(overrides or {}))
    data = prepare_data(corpus, cfg.vocab_size, root, log=log, progress=progress)
    tokenizer, tok_dir, shards, name = data.tokenizer, data.tokenizer_dir, data.shards, data.name
    run = root / "runs" / f"{name}-{preset}"
    if tokenizer.n_vocab != cfg.vocab_size:  # a small corpus ran out of pairs to merge before vocab_size
        say(f"   the tokenizer has {tokenizer.n_vocab} ids, not {cfg.vocab_size}: so has the model")
    # vocab_size is the number of token ids, the tokenizer's and the model's alike
    cfg = replace(cfg, shards=str(shards), tokenizer=str(tok_dir), out=str(run), vocab_size=tokenizer.n_vocab)
    say(f"== training the {preset!r} preset in {run}")
    try:
        history = train(cfg, callback=callback, log=log, progress=progress)
    except CheckpointError as e:  # e.g. the corpus was edited since this run began
        raise CheckpointError(f"{run} cannot continue: {e}. Delete {run} to train again from scratch") from e
    stopped = history[-1].get("stopped") if history else None
    train_tokens, val_tokens = open_split(shards, "train"), open_split(shards, "val")
    references = reference_losses(np.asarray(train_tokens), np.asarray(val_tokens), tokenizer.n_vocab)
    records = read_metrics(run)  # the whole run, also the part an earlier start of it trained
    band, placed = place(records, cfg.to_dict())  # the recipe's fields; its steps are in the records
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
    summary = {
        "run": str(run),
        "step": meta["step"],
        "stopped_early": stopped is not None,
        "signal": stopped,
        "plots": str(plots),
        "val_loss": best and best["val_loss"],
        "val_bpb": best and best["val_bpb"],
        "val_tokens": best and best["val_tokens"],
        "references": references,
        "sample": samples[0],
        "quality": quality,
        "band": placed,  # lines: the expected band of this run's recipe and CPU kind, and where the run is
        "wall_s": time.perf_counter() - started,
    }
    return summary
