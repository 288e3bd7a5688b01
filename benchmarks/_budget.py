"""Shared by benchmarks/recipe.py and benchmarks/train.py: train a configuration for a fixed wall-time budget
of this CPU kind on the embedded corpus and score it the same way every time.

- The step time is measured first, on random tokens of the candidate's shape (`probe_step_seconds`), as a
  ratio to a reference step (the `cpu` preset as it was, in bf16) timed in turn with it, step after step:
  whatever else the machine is doing slows both alike, so the median ratio holds on a busy machine. The
  ratio times the reference's step time on a quiet machine of this CPU kind (`REFERENCE_STEP_S`, measured
  with 2 threads) is the candidate's step time, in the faster of fp32 and bf16 (what `precision=auto`
  would keep). The budget then fixes its number of steps by `gptlib.probe.steps_within`, the arithmetic
  a `--budget` run uses, after the seconds its probe and set-up take.
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
from gptlib.expected import cpu_kind, kind_text
from gptlib.model import sample_text
from gptlib.optim import choose_precision, make_adamw
from gptlib.pipeline import PROMPT, SAMPLING, prepare_tokenizer
from gptlib.probe import TIMED_STEPS, WARMUP_STEPS, Probe, steps_within
from gptlib.quality import TrainingText, sample_quality
from gptlib.run_folder import load_trained
from gptlib.train import train
from gptlib.train_config import TrainConfig, make_model

VAL_FRACTION = 0.05  # as `make run`: Cymbeline and Julius Caesar held out
SAMPLE_SEEDS = (0, 1, 2)
# the reference step: the `cpu` preset as it was (4 x 256, vocab 4,096, 8 x 256 tokens a step), in bf16
REFERENCE = {
    "precision": "bf16",
    "n_layer": 4,
    "n_head": 4,
    "n_embd": 256,
    "vocab_size": 4096,
    "context": 256,
    "compile": False,  # eager, as the recorded reference times were measured
    "tied_head": True,  # lesson 04's GPT: the preset took lesson 07's untied head and ReLU² later
    "mlp": "gelu",
}
# its step time with 2 threads on a quiet machine, by CPU kind: (model name, the bf16 unit that kind has, its
# CPU family or None for any, seconds). A model name alone does not say the kind: "AMD EPYC" names a Zen 4
# with avx512_bf16 and a Zen 2 with avx2 only, whose bf16 steps are some 35 times slower than fp32's, and a
# Zen 5 (family 26) with the Zen 4's units and twice its speed
REFERENCE_STEP_S = [
    ("Intel(R) Xeon(R) Processor", "amx_bf16", None, 0.2034),  # load average 1.0
    # a Zen 4 (family 25: the one with avx512_bf16): the median of the probes of the four 8-minute runs of
    # 2026-12-01 (246-351 ms a step; the same machine timed 0.39-0.40 s at another hour): round 4's 0.333 had
    # dropout 0.1 in it
    ("AMD EPYC", "avx512_bf16", "25", 0.300),
]
SAVE_S = 0.3  # a checkpoint of a model of a few million parameters, written and hashed


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


def _step_function(cfg: TrainConfig, precision: str):
    "A closure running one training step of `cfg`'s shape on random tokens (compiled when `cfg.compile`)."
    torch.manual_seed(0)
    model = make_model(cfg)
    optimizer, _ = make_adamw(model, lr=1e-3, weight_decay=cfg.weight_decay)
    chosen = choose_precision("cpu", precision)
    forward = torch.compile(model) if cfg.compile else model
    x = torch.randint(0, cfg.vocab_size, (cfg.micro_batch, cfg.context))

    def one_step():
        for _ in range(cfg.grad_accum):
            with chosen.autocast():
                _, loss = forward(x, x)
            (loss / cfg.grad_accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return one_step


def reference_step_s() -> float:
    "The reference step's quiet 2-thread time on this CPU kind; a kind without one is refused."
    kind = cpu_kind()
    for model, unit, family, seconds in REFERENCE_STEP_S:
        if (
            kind["model"] == model
            and unit in kind["features"]
            and family in (None, kind["ids"].get("cpu family"))
        ):
            return seconds
    raise SystemExit(
        f"error: no reference step for this CPU kind ({kind_text(kind)}): "
        "time the reference step on a quiet machine of this kind and add it to REFERENCE_STEP_S, "
        "with rounds of candidates of its own"
    )


def probe_step_seconds(cfg: TrainConfig, steps: int = 30) -> tuple[dict[str, float], float]:
    """`({precision: seconds per step on a quiet machine}, seconds of warm-up)` of `cfg`'s training step in
    each precision `cfg.precision` allows (`auto`: fp32 and bf16): the median ratio of its step time to the
    reference's, the two timed in turn, times the reference's quiet time on this CPU kind."""
    precisions = ("fp32", "bf16") if cfg.precision == "auto" else (cfg.precision,)
    reference = _step_function(TrainConfig.preset("cpu", **REFERENCE), "bf16")
    times, warmup = {}, 0.0
    for precision in precisions:
        candidate = _step_function(cfg, precision)
        started = time.perf_counter()
        for _ in range(3):
            candidate()
        warmup = max(warmup, time.perf_counter() - started)
        reference()

        def timed(step_function) -> float:  # a step after a warm one, each finding its weights in the caches
            step_function()
            started = time.perf_counter()
            step_function()
            return time.perf_counter() - started

        ratios = [timed(candidate) / timed(reference) for _ in range(steps)]
        times[precision] = sorted(ratios)[len(ratios) // 2] * reference_step_s()
    return times, warmup


def planned_steps(
    cfg: TrainConfig, step_s: dict[str, float], warmup_s: float, budget_s: float, val_tokens: int
):
    """`(precision, steps)` a `--budget` run of `cfg` would plan on a quiet machine of this kind: the faster
    precision, and the steps `gptlib.probe.steps_within` fits after the probe (its warm-up and timed steps in
    each precision) and the run's one compile when `cfg.compile`, with validations over `val_tokens` (forward
    passes, about a third of a step's work per batch)."""
    precision = min(step_s, key=lambda p: (step_s[p], p != "fp32"))  # fp32 on a tie: no autocast
    tokens_per_step = cfg.micro_batch * cfg.grad_accum * cfg.context
    eval_s = val_tokens / tokens_per_step * step_s[precision] / 3
    probe_s = (WARMUP_STEPS + TIMED_STEPS) * sum(step_s.values()) + eval_s / 10 + SAVE_S + 2.0
    compile_s = warmup_s if cfg.compile else 0.0
    probe = Probe(step_s=step_s, eval_s=eval_s, save_s=SAVE_S, precisions=tuple(step_s))
    steps = steps_within(
        budget_s - probe_s - compile_s,
        probe,
        precision=precision,
        eval_every=cfg.eval_every,
        checkpoint_every=cfg.checkpoint_every,
    )
    return precision, steps


def train_for_budget(
    name: str,
    cfg: TrainConfig,
    budget_s: float,
    work: Path,
    *,
    log=None,
    prompt: str = PROMPT,
) -> dict:
    """Train `cfg` (shards, tokenizer and vocab_size set) for the steps a `budget_s`-second budget gives it on
    a quiet machine of this CPU kind (its validations and checkpoints every `eval_every` steps, as the preset
    says), and score it. Returns the figures of the run."""
    step_s, warmup_s = probe_step_seconds(cfg)
    val_tokens = open_split(cfg.shards, "val")
    precision, steps = planned_steps(cfg, step_s, warmup_s, budget_s, len(val_tokens))
    cfg = replace(
        cfg,
        out=str(work / name),
        precision=precision,
        max_steps=steps,
        eval_batches=0,
        keep_last=1,
        budget=0.0,
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
        "cpu": cpu_kind(),
        "config": {k: v for k, v in cfg.to_dict().items() if k not in ("shards", "tokenizer", "out")},
        "params": model.num_params(non_embedding=False),
        "step_s": step_s[precision],
        "step_s_by_precision": step_s,
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
