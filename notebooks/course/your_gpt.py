"""Your GPT: one run made of the pieces you wrote in workbooks 01-06, wherever they pass their checks.

Hand-written tooling of the course, not part of the installed package. Notebook 06 ends with this run. It
takes the pieces `course.collect()` gathered, from the workbooks in `notebooks/workbooks/` or from where their
checks kept them (in Colab, the learner's Drive: `course.pieces.keep_pieces`). Each is the learner's where it
passed its check, gptlib's reference where it did not (in the lesson, where the workbooks are untouched,
every piece is the reference). They are used as follows:

1. the tokenizer: `train_merges` (01) learns the merges from the course corpus's chunks, as many as the
   course's tokenizer has (`Tokenizer(merges)` then encodes with gptlib's back-end);
2. the shards: gptlib.data's `prepare` calling `frame`, `shuffle_documents`, `split_documents`,
   `plan_shards` and `write_shard` (02) (`course.checks.data.prepare_with`);
3. the batches: a `BatchLoader` whose batches come from `batch_xy`, `epoch_permutation`, `rank_windows` and
   `WindowBatches` (03) (`course.checks.loader.loader_with`);
4. the model: `GPT` (04), the `cpu` preset's shape, made of the other 04 pieces (its blocks, attention,
   MLP, positions and initialisation), and its `generate` and `sample_next_token` for the sample;
5. the optimizer: `AdamW` (05) over `param_groups` (05), at the rates of `lr_at` (05); the
   `DynamicLossScaler` (05) where the precision needs a scaler (fp16: not on a CPU);
6. the training: `train_loop` (06), which takes its steps with `train_step`, validates with `evaluate`, and
   checkpoints with `save_training` (06).

The other pieces are checked where they are taught and run inside these (`count_pairs`, `merge` and
`naive_train` teach the merge loop that `train_merges` is; `encode_chunk`, `TokenSplit`, `cross_entropy`,
`causal_attention`, `counted_activations`, `clip_grad_norm`, `accumulate_gradients` and `restore_training`
are checked in their lessons; the run's encoding, loss, clipping and accumulation are inside the pieces
above). `train_your_gpt` returns what the run made; `yours_line` is the line workbook 06 ends its table with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from course.checks.data import _rebound
from course.pieces import NOTEBOOKS, YOUR_GPT_LESSONS, Pieces, _registry, load_pieces

PROMPT = "Romeo.\n"  # what `make run` samples after (gptlib.pipeline.PROMPT): a speaker heading


@dataclass
class YourRun:
    "What the run made: its config, tokenizer, model, records, the held-out figures and a sample."

    config: object  # gptlib.train_config.TrainConfig, with the learner's learning-rate schedule
    tokenizer: object  # gptlib.tokenizer.Tokenizer, from the learner's merges
    same_merges: bool  # whether those merges are the course tokenizer's, the ones `make run` learns
    model: object  # the learner's GPT, trained
    history: list[dict]  # train_loop's records
    result: dict  # the last validation: val_loss (nats/token) and val_bpb (bits per byte)
    sample: str
    seconds: float  # the whole run: tokenizer, shards, training, sample


def yours_line(pieces: Pieces) -> str:
    """'N of M pieces are yours': the line `make check-workbooks` looks for in workbook 06's output; M counts
    the pieces of the lessons the run is made of (01-06)."""
    total = sum(piece.notebook in YOUR_GPT_LESSONS for piece in _registry().values())
    yours = sum(outcome.passed for outcome in pieces.outcomes)
    return f"{yours} of {total} pieces are yours"


def _namespaces(pieces: Pieces) -> dict[str, dict]:
    """Each lesson's names (its gptlib module's, with the pieces in place) as `collect` left them; a lesson
    whose workbook is missing gives its own reference pieces."""
    names = dict(pieces.namespaces)
    for stem in YOUR_GPT_LESSONS:
        if stem not in names:
            names[stem] = load_pieces(NOTEBOOKS / f"{stem}.ipynb", checks=False).namespaces[stem]
    return names


def _with_schedule(cfg, lr_at):
    """`cfg` as an instance of a subclass of its class whose `lr(step)` calls `lr_at` (the learner's
    schedule) instead of gptlib.optim's: every other field and method is the config's own."""
    import sys

    module = sys.modules[cfg.__class__.lr.__module__]  # where `lr` is defined: its names, lr_at replaced
    rebound = _rebound(cfg.__class__.lr, {**vars(module), "lr_at": lr_at})
    scheduled = type(cfg.__class__.__name__, (cfg.__class__,), {"lr": rebound})
    return scheduled(**{name: getattr(cfg, name) for name in cfg.__dataclass_fields__})


def _tokenizer(names: dict, work: Path, log):
    "The course's tokenizer learned again with the learner's `train_merges`, saved in `work/tokenizer`."
    from course.setup import CORPUS, VOCAB_SIZE, course_data
    from gptlib.corpus import open_corpus
    from gptlib.tokenizer import Tokenizer, count_chunks

    texts = [doc.text for doc in open_corpus(CORPUS)]
    merges = names["train_merges"](count_chunks(texts), VOCAB_SIZE - 259)  # 256 bytes + 3 special tokens
    tokenizer = Tokenizer([tuple(pair) for pair in merges])
    tokenizer.save(work / "tokenizer", overwrite=True)
    same = tokenizer.merges == course_data().tokenizer.merges
    log(f"tokenizer: {tokenizer.n_vocab:,d} ids, {'the' if same else 'not the'} course tokenizer's merges")
    return tokenizer, same


def _shards(names: dict, work: Path, tokenizer, log) -> Path:
    "The course's split of the corpus, written by gptlib.data's `prepare` running the learner's 02 pieces."
    from course.checks.data import prepare_with
    from course.setup import CORPUS
    from gptlib.data import DataConfig
    from gptlib.pipeline import VAL_FRACTION

    cfg = DataConfig(
        corpus=CORPUS, tokenizer=work / "tokenizer", out=work / "shards", val_fraction=VAL_FRACTION
    )
    manifest = prepare_with(names)(cfg, progress=False, tokenizer=tokenizer)
    splits = manifest["splits"]
    log(f"shards: train {splits['train']['n_tokens']:,d} tokens, val {splits['val']['n_tokens']:,d} tokens")
    return cfg.out


def _training(names: dict[str, dict], cfg, tokenizer):
    """A `gptlib.train.Training` of the learner's pieces: their GPT (04), their AdamW over their parameter
    groups (05), their batches (03) read through their `TokenSplit` (02); the precision `cfg.precision`
    decides on this machine."""
    import numpy as np
    import torch

    import gptlib.data
    from course.checks.loader import loader_with
    from gptlib.optim import choose_precision
    from gptlib.runtime import resolve_device
    from gptlib.train import Training, Validation

    model_names, optim_names = names["04_model"], names["05_optim"]
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)  # the initial weights, as gptlib's setup draws them
    model = model_names["GPT"](cfg.model_config()).to(device)
    groups = optim_names["param_groups"](model, cfg.weight_decay)
    optimizer = optim_names["AdamW"](groups, lr=cfg.max_lr, betas=(cfg.beta1, cfg.beta2))
    precision = choose_precision(device, cfg.precision)
    if precision.use_scaler:  # fp16: the learner's scaler computes what torch's GradScaler does
        scaler = optim_names["DynamicLossScaler"](init_scale=cfg.init_scale)
    else:  # bf16 and fp32 keep fp32's exponent range: no scaler (torch's, switched off, does nothing)
        scaler = torch.amp.GradScaler(device.type, enabled=False)
    shards = Path(cfg.shards)
    open_split = _rebound(gptlib.data.open_split, names["02_data"])  # opens the learner's TokenSplit
    batch_names = {**names["03_loader"], "open_split": open_split}
    loader = loader_with(
        batch_names,
        shards,
        "train",
        cfg.micro_batch,
        cfg.context,
        seed=cfg.seed,
        device=device,
        tokenizer=tokenizer,
    )
    lengths = torch.from_numpy(np.asarray(tokenizer.token_byte_lengths(), dtype=np.int64)).to(device)
    val = Validation(open_split(shards, "val", tokenizer), lengths)
    return Training(model, optimizer, scaler, precision, loader, val, inputs={}, forward=model)


def train_your_gpt(
    pieces: Pieces, work, *, steps: int, eval_batches: int = 0, log=print, sample_tokens: int = 200
) -> YourRun:
    """Train a GPT of the `cpu` preset's shape (lesson 04's pieces) for `steps` steps (its schedule: warmup,
    the peak held, the cosine over the last quarter) from the pieces in `pieces`, in the folder `work`: the
    tokenizer, the shards, the training and a sample, each of the learner's pieces where it passed its
    check. The one validation, at the end, scores `eval_batches` batches of the held-out plays (0: all of
    them). `log(line)` says what each stage made."""
    from gptlib.model import sample_text
    from gptlib.train_config import TrainConfig

    started, work = time.perf_counter(), Path(work)
    work.mkdir(parents=True, exist_ok=True)
    names = _namespaces(pieces)
    tokenizer, same = _tokenizer(names["01_bpe"], work, log)
    shards = _shards(names["02_data"], work, tokenizer, log)
    cfg = TrainConfig.preset(
        "cpu",
        tied_head=True,  # your GPT is lesson 04's: the preset's shape, without the pieces it took from 07
        mlp="gelu",
        vocab_size=tokenizer.n_vocab,
        shards=str(shards),
        tokenizer=str(work / "tokenizer"),
        out=str(work),
        max_steps=steps,
        log_every=max(1, steps // 10),
        eval_every=steps,  # one validation, at the end
        eval_batches=eval_batches,
        checkpoint_every=steps,
    )
    cfg = _with_schedule(cfg, names["05_optim"]["lr_at"])
    training = _training(names, cfg, tokenizer)
    log(f"training {steps} steps of {cfg.micro_batch} x {cfg.context} tokens in {training.precision.name}")
    loop = names["06_training"]["train_loop"]
    history = loop(cfg, training, work / "your-gpt.pt", log=lambda record: log(_line(record)))
    result = [r for r in history if "val_bpb" in r][-1]
    sample = sample_text(training.model, tokenizer, PROMPT, sample_tokens, temperature=0.8, top_k=50)
    return YourRun(
        cfg, tokenizer, same, training.model, history, result, sample, time.perf_counter() - started
    )


def _line(record: dict) -> str:
    if "val_bpb" in record:
        loss, bpb = record["val_loss"], record["val_bpb"]
        return f"  step {record['step']:4d} | val {loss:.3f} nats/token, {bpb:.3f} bits/byte"
    return f"  step {record['step']:4d} | loss {record['loss']:.3f} | grad norm {record['grad_norm']:.2f}"


__all__ = ["YourRun", "train_your_gpt", "yours_line"]
