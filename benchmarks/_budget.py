"""Shared by benchmarks/recipe.py and benchmarks/train.py: train a configuration for a fixed CPU-time budget
on the embedded corpus and score it the same way every time.

- The step time is measured first, on random tokens of the candidate's shape (`probe_step_seconds`), as a
  ratio to a reference step (the `cpu` preset as it was, in bf16) timed in turn with it, step after step:
  whatever else the machine is doing slows both alike, so the median ratio holds on a busy machine. The
  ratio times the reference's step time on a quiet machine (`REFERENCE_STEP_S`) is the candidate's step
  time; the budget then fixes its number of steps, after setting aside validations (and compiling).
- Training itself may run on a busy machine: its result depends on the number of steps, not on the clock.
- The score is bits per byte over every window of the held-out plays (`eval_batches=0`) at the best
  validation of the run (the checkpoint the pipeline samples from), and the sample quality of that
  checkpoint over three seeds (`gptlib.quality`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch

from gptlib.corpus import data_dir
from gptlib.data import DataConfig, open_split, prepare
from gptlib.model import GPT
from gptlib.optim import choose_precision, make_adamw
from gptlib.pipeline import PROMPT, SAMPLING, prepare_tokenizer
from gptlib.quality import TrainingText, sample_quality
from gptlib.run_folder import load_trained
from gptlib.train import TrainConfig, sample_text, train

VAL_FRACTION = 0.05  # as `make run`: Cymbeline and Julius Caesar held out
SAMPLE_SEEDS = (0, 1, 2)
REFERENCE = {
    "precision": "bf16"
}  # over the `cpu` preset as it was: 4 x 256, vocab 4,096, 8 x 256 tokens a step
REFERENCE_STEP_S = 0.2034  # its step time on this project's 2-core machine, quiet (load average 1.0)


def corpus_data(vocab_size: int) -> tuple[Path, Path]:
    "The tokenizer and shards `make run` would use for this vocabulary size (made once, under data_dir())."
    root = data_dir()
    tok_dir, shards = (
        root / "tokenizers" / f"shakespeare-{vocab_size}",
        root / "shards" / f"shakespeare-{vocab_size}",
    )
    tokenizer, _ = prepare_tokenizer("shakespeare", vocab_size, tok_dir, progress=False)
    prepare(
        DataConfig(corpus="shakespeare", tokenizer=tok_dir, out=shards, val_fraction=VAL_FRACTION),
        progress=False,
        tokenizer=tokenizer,
    )
    return tok_dir, shards


def _step_function(cfg: TrainConfig):
    "A closure running one training step of `cfg`'s shape on random tokens (compiled when `cfg.compile`)."
    torch.manual_seed(0)
    model = GPT(cfg.model_config())
    optimizer, _ = make_adamw(model, lr=1e-3, weight_decay=cfg.weight_decay)
    precision = choose_precision("cpu", cfg.precision)
    forward = torch.compile(model) if cfg.compile else model
    x = torch.randint(0, cfg.vocab_size, (cfg.micro_batch, cfg.context))

    def one_step():
        for _ in range(cfg.grad_accum):
            with precision.autocast():
                _, loss = forward(x, x)
            (loss / cfg.grad_accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return one_step


def probe_step_seconds(cfg: TrainConfig, steps: int = 30) -> tuple[float, float]:
    """`(seconds per step on a quiet machine, seconds of warm-up)` of `cfg`'s training step: the median ratio
    of its step time to the reference's, the two timed in turn, times `REFERENCE_STEP_S`."""
    candidate, reference = _step_function(cfg), _step_function(TrainConfig.preset("cpu", **REFERENCE))
    started = time.perf_counter()
    for _ in range(3):
        candidate()
    warmup = time.perf_counter() - started
    reference()

    def timed(
        step_function,
    ) -> float:  # a step after a warm one, so that each finds its weights in the caches
        step_function()
        started = time.perf_counter()
        step_function()
        return time.perf_counter() - started

    ratios = [timed(candidate) / timed(reference) for _ in range(steps)]
    return sorted(ratios)[len(ratios) // 2] * REFERENCE_STEP_S, warmup


def train_for_budget(
    name: str,
    cfg: TrainConfig,
    budget_s: float,
    work: Path,
    *,
    n_evals: int = 6,
    step_s: float | None = None,
    log=None,
    prompt: str = PROMPT,
) -> dict:
    """Train `cfg` (shards, tokenizer and vocab_size set) for about `budget_s` seconds of this CPU's time and
    score it. Returns the figures of the run."""
    probe_s, warmup_s = probe_step_seconds(cfg)
    step_s = step_s or probe_s
    val_tokens = open_split(cfg.shards, "val")
    eval_s = len(val_tokens) * step_s / (cfg.micro_batch * cfg.grad_accum * cfg.context) / 3  # forward only
    compile_s = warmup_s if cfg.compile else 0.0
    steps = max(50, int((budget_s - n_evals * eval_s - compile_s) / step_s))
    every = max(1, steps // n_evals)
    cfg = replace(
        cfg,
        out=str(work / name),
        max_steps=steps,
        eval_every=every,
        checkpoint_every=every,
        eval_batches=0,
        keep_last=1,
        log_every=max(1, steps // 50),
    )
    started = time.perf_counter()
    history = train(cfg, log=log, progress=False)
    wall_s = time.perf_counter() - started
    val = [r for r in history if r["kind"] == "val"]
    if not history or history[-1]["step"] < steps or not val:
        raise RuntimeError(f"{name}: the run stopped before step {steps}; not scored")
    best = min(val, key=lambda r: r["val_loss"])
    train_records = [r for r in history if r["kind"] == "train"]
    model, tokenizer, meta = load_trained(cfg.out, "best")
    samples = [sample_text(model, tokenizer, prompt, 300, seed=s, **SAMPLING) for s in SAMPLE_SEEDS]
    training = TrainingText.from_split(open_split(cfg.shards, "train"), tokenizer)
    n_train = len(open_split(cfg.shards, "train"))
    tokens_seen = steps * cfg.micro_batch * cfg.grad_accum * cfg.context
    return {
        "name": name,
        "config": {k: v for k, v in cfg.to_dict().items() if k not in ("shards", "tokenizer", "out")},
        "params": model.num_params(non_embedding=False),
        "step_s": step_s,
        "steps": steps,
        "tokens_seen": tokens_seen,
        "epochs": tokens_seen / n_train,
        "budget_s": budget_s,
        "wall_s": wall_s,
        "best_step": best["step"],
        "best_val_loss": best["val_loss"],
        "best_val_bpb": best["val_bpb"],
        "final_val_bpb": val[-1]["val_bpb"],
        "final_train_loss": train_records[-1]["loss"],
        "val_tokens": best["val_tokens"],
        "quality": sample_quality([s[len(prompt) :] for s in samples], training),  # the continuations only
        "sample": samples[0],
    }
