"""One prepared check of gptlib on a GPU (issue 35), a stage at a time; gpu_check.sh runs them all.

    python benchmarks/gpu_check.py STAGE --out DIR [--work DIR] [--dry-run] [--data DIR]
    python benchmarks/gpu_check.py results --out DIR      # RESULTS.md's `gpu-check` section from DIR

The stages, the most important first (each writes `STAGE.json` into `--out`, record by record, so that a
stage stopped by its time limit keeps what it measured):

- `data`: the embedded corpus's tokenizers and shards, at the seed's 32,768 ids and the `cpu` preset's
  4,096 (under `$GPTLIB_DATA`; `--dry-run`: three plays and 300 ids, or the folder `--data` gives);
- `loop`: the real loop (`gptlib.train.train`) at the seed's shape (fp16, 8 x 4, eager) and at the shape
  a GPU's `auto` chooses (`gptlib.probe.search`), its tokens/s and MFU beside the bare step's
  (`gptlib.train.train_step` alone, on random tokens held on the device) of the same configuration;
- `budget`: a `--budget 1` run of `gpt-25m` with `auto`: the share of its minute it used;
- `recipe`: a short recipe search for the embedded corpus: each candidate trained to the same short
  budget, scored by its best held-out bits per byte over every window;
- `steps`: the step table, shapes x precision x compile, MFU against the datasheet's dense peak
  (`gptlib.optim.peak_flops`) and against a measured matrix product;
- `peer`: nanoGPT's model (benchmarks/_peer.py) beside gptlib's at the same shape, bf16, compiled, in
  alternating rounds;
- `summary`: `summary.md` from the records, with the issue's thresholds checked.

`--dry-run` runs every stage on the CPU at toy sizes (the `tiny` model, fp32 where the GPU runs fp16,
nothing compiled), in a minute or two: it checks the script, not the figures. The run folders go under
`--work` (default: a folder under the system's temporary one), never under `--out`, which comes back
from the GPU machine: a `gpt-25m` checkpoint is a third of a gigabyte.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_section  # noqa: E402

from gptlib.files import write_json  # noqa: E402
from gptlib.model import GPT  # noqa: E402
from gptlib.optim import choose_precision, make_adamw, measure_matmul_flops, peak_flops  # noqa: E402
from gptlib.train import train, train_step  # noqa: E402
from gptlib.train_config import TrainConfig, make_model  # noqa: E402

STAGES = ("data", "loop", "budget", "recipe", "steps", "peer", "summary")
# the thresholds for an H100/H200-class GPU
MFU_AT_CHOSEN = 0.35  # the real loop at the chosen shape
LOOP_OF_BARE = 0.90  # the real loop against the bare step of the same configuration
BUDGET_USED = (0.90, 1.00)  # the share of its minutes a budget's run uses
RECIPE_BPB = 1.80  # held-out bits per byte within 3 minutes of training


@dataclass(frozen=True)
class Sizes:
    "What a check runs at: the GPU's sizes, or the dry run's toy ones."

    preset: str  # the seed's run
    seed: dict  # the seed's shape and precision, over the preset
    precisions: tuple[str, ...]  # the step table's precisions
    shapes: tuple[tuple[int, int], ...]  # the step table's eager shapes (micro-batch, accumulation)
    compiled: tuple[tuple[str, int, int], ...]  # the step table's compiled rows
    loop_steps: int
    bare_steps: int
    budget_min: float
    recipe_min: float
    peer_rounds: int
    peer_steps: int
    matmul_n: int
    vocabs: dict  # data name -> vocabulary size (None: the `--data` folder's)


GPU = Sizes(
    preset="gpt-25m",
    seed={"precision": "fp16", "micro_batch": 8, "grad_accum": 4, "compile": False},
    precisions=("fp16", "bf16"),
    shapes=((8, 4), (32, 1)),
    compiled=(("bf16", 32, 1), ("fp16", 32, 1), ("bf16", 8, 4), ("bf16", 64, 1)),
    loop_steps=400,
    bare_steps=60,
    budget_min=1.0,
    recipe_min=0.6,
    peer_rounds=3,
    peer_steps=20,
    matmul_n=8192,
    vocabs={"seed": 32768, "recipe": 4096},
)
DRY = Sizes(
    preset="tiny",
    seed={"precision": "fp32", "micro_batch": 2, "grad_accum": 4, "compile": False},
    precisions=("fp32", "bf16"),
    shapes=((2, 4), (8, 1)),
    compiled=(),
    loop_steps=20,
    bare_steps=3,
    # a quiet CPU sets the tiny run up in 2-3 s, a busy 2-core one took 25-30 s: a budget must fit that
    budget_min=0.5,
    recipe_min=0.5,
    peer_rounds=2,
    peer_steps=2,
    matmul_n=256,
    vocabs={"seed": None, "recipe": None},
)

# the recipe search: name -> (why, base preset, data, TrainConfig fields over the preset). Each trains bf16,
# eager (a compile would take a quarter of so short a budget), to the same budget; scored by its best
# validation over every window of the held-out plays
RECIPES = {
    "gpt-25m-wsd": (
        "the seed's model and 32,768 ids, 32 x 1, max_lr held until the last 30 % (warmup-stable-decay)",
        "gpt-25m",
        "seed",
        {"micro_batch": 32, "grad_accum": 1, "cooldown": 0.3},
    ),
    "gpt-25m-v4096": (
        "the seed's model on the `cpu` preset's 4,096 ids (more tokens a byte, a cheaper head), dropout 0.2",
        "gpt-25m",
        "recipe",
        {
            "vocab_size": 4096,
            "dropout": 0.2,
            "attn_dropout": 0.0,
            "micro_batch": 32,
            "grad_accum": 1,
            "max_lr": 1e-3,
            "min_lr": 1e-4,
            "cooldown": 0.3,
        },
    ),
    "6x384-rotary-v4096": (
        "the `cpu` preset deeper and wider (6 x 384, rotary, context 256, 4,096 ids), dropout 0.2, 64 x 1",
        "cpu",
        "recipe",
        {
            "n_layer": 6,
            "n_head": 6,
            "n_embd": 384,
            "dropout": 0.2,
            "micro_batch": 64,
            "grad_accum": 1,
            "eval_every": 200,
            "checkpoint_every": 200,
            "tied_head": True,  # lesson 04's GPT, as measured on the H200 (the preset took 07's pieces later)
            "mlp": "gelu",
        },
    ),
}


class Check:
    "One stage's surroundings: where records go, where runs are made, the device and the sizes."

    def __init__(self, args):
        self.out, self.dry = Path(args.out), args.dry_run
        self.sizes = DRY if self.dry else GPU
        self.device = torch.device("cpu" if self.dry else "cuda")
        work = Path(args.work) if args.work else Path(tempfile.gettempdir()) / "gptlib-gpu-check"
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.data_arg = args.data
        self.records: list[dict] = []

    def record(self, stage: str, record: dict) -> None:
        "Add `record` to `STAGE.json` (written again whole, under a temporary name: a kill keeps the last)."
        self.records.append({**record, "device": self.device_name(), "dry_run": self.dry})
        write_json(self.out / f"{stage}.json", self.records, durable=False)
        print(json.dumps(record), flush=True)

    def device_name(self) -> str:
        return torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"

    def data(self) -> dict:
        "The tokenizers and shards the `data` stage made (its record)."
        path = self.out / "data.json"
        if not path.is_file():
            raise SystemExit(f"error: {path} is missing: run the `data` stage first")
        return {r["name"]: r for r in json.loads(path.read_text())}

    def config(self, preset: str, data: str, folder: Path, **fields) -> TrainConfig:
        "A run of `preset` on the data named `data`, in `folder`, with `fields` over it."
        d = self.data()[data]
        fields = {"vocab_size": d["vocab_size"], **fields}
        if self.dry:  # the toy model, whatever the GPU's run is, with the toy data's vocabulary
            preset = "tiny"
            fields = {k: v for k, v in fields.items() if k not in _MODEL_FIELDS}
            fields["vocab_size"] = d["vocab_size"]
        return TrainConfig.preset(
            preset, shards=d["shards"], tokenizer=d["tokenizer"], out=str(folder), **fields
        )

    def run_folder(self, stage: str) -> Path:
        "A fresh folder for this stage's runs (removed at its end: a checkpoint of gpt-25m is 0.35 GB)."
        return Path(tempfile.mkdtemp(prefix=f"{stage}-", dir=self.work))


_MODEL_FIELDS = ("n_layer", "n_head", "n_embd", "context", "dropout", "attn_dropout", "positions", "bias")


# --- data ---------------------------------------------------------------------------------------------------


def stage_data(check: Check) -> None:
    if check.data_arg:  # a folder made already (the dry run's test hands in its fixture's)
        root = Path(check.data_arg)
        for name in ("seed", "recipe"):
            check.record("data", _data_record(name, root / "tokenizer", root / "shards"))
        return
    if check.dry:  # three plays and 300 ids: seconds
        from gptlib.corpus import fetch_shakespeare
        from gptlib.data import DataConfig, prepare
        from gptlib.pipeline import prepare_tokenizer

        root = check.work / "toy-data"
        texts = root / "texts"
        texts.mkdir(parents=True, exist_ok=True)
        for play in sorted(fetch_shakespeare().glob("*_gut.txt"))[:3]:
            shutil.copy(play, texts / play.name)
        tokenizer, _ = prepare_tokenizer(str(texts), 300, root / "tokenizer", progress=False)
        prepare(
            DataConfig(
                corpus=str(texts), tokenizer=root / "tokenizer", out=root / "shards", val_fraction=0.34
            ),
            progress=False,
            tokenizer=tokenizer,
        )
        for name in ("seed", "recipe"):
            check.record("data", _data_record(name, root / "tokenizer", root / "shards"))
        return
    from _budget import corpus_data  # the tokenizer and shards `make run` would use for a vocabulary

    for name, vocab in check.sizes.vocabs.items():
        began = time.perf_counter()
        tokenizer, shards = corpus_data(vocab)
        check.record(
            "data", {**_data_record(name, tokenizer, shards), "seconds": time.perf_counter() - began}
        )


def _data_record(name: str, tokenizer: Path, shards: Path) -> dict:
    from gptlib.data import open_split
    from gptlib.tokenizer import Tokenizer

    return {
        "name": name,
        "tokenizer": str(tokenizer),
        "shards": str(shards),
        "vocab_size": Tokenizer.load(tokenizer).n_vocab,
        "train_tokens": len(open_split(shards, "train")),
        "val_tokens": len(open_split(shards, "val")),
    }


# --- the bare step ------------------------------------------------------------------------------------------


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_step(cfg: TrainConfig, precision: str, compiled: bool, steps: int, device, *, static: bool) -> dict:
    """The training step alone: gptlib's `train_step` (autocast forward and backward over the micro-batches,
    the scaler, clipping, fused AdamW) of `cfg`'s model and shape, on random tokens held on the device (the
    same cost as real ones), `steps` of them after 5 untimed ones (compiling happens there). `static`:
    compiled for this shape alone (`dynamic=False`), as a run compiles for its one shape."""
    torch.manual_seed(0)
    model = make_model(cfg).to(device)  # lesson 07's pieces where the preset has them (the `cpu` one)
    optimizer, fused = make_adamw(
        model, lr=cfg.max_lr, weight_decay=cfg.weight_decay, betas=(cfg.beta1, cfg.beta2), device=device
    )
    chosen = choose_precision(device, precision)
    scaler = torch.amp.GradScaler(device.type, init_scale=cfg.init_scale, enabled=chosen.use_scaler)
    forward = model
    if compiled:
        forward = torch.compile(model, dynamic=False) if static else torch.compile(model)
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, cfg.vocab_size, (cfg.micro_batch, cfg.context), generator=g) for _ in range(2))
    batches = itertools.repeat((x.to(device), y.to(device)))

    def step():
        return train_step(
            forward,
            optimizer,
            scaler,
            batches,
            cfg.max_lr,
            precision=chosen,
            grad_accum=cfg.grad_accum,
            grad_clip=cfg.grad_clip,
        )

    began = time.perf_counter()
    for _ in range(5):
        step()
    sync(device)
    warm_s = time.perf_counter() - began
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    began = time.perf_counter()
    for _ in range(steps):
        loss = step()[0]
    sync(device)
    elapsed = time.perf_counter() - began
    assert math.isfinite(float(loss)), f"the bare step's loss is {float(loss)}"
    tokens_per_s = steps * cfg.micro_batch * cfg.grad_accum * cfg.context / elapsed
    flops = model.flops_per_token()
    peak, source = peak_flops(device, chosen.name)
    return {
        "precision": chosen.name,
        "compile": compiled,
        "micro_batch": cfg.micro_batch,
        "grad_accum": cfg.grad_accum,
        "tokens_per_s": tokens_per_s,
        "step_ms": elapsed / steps * 1e3,
        "mfu": tokens_per_s * flops / peak,
        "peak_tflops": peak / 1e12,
        "peak_source": source,
        "warm_s": warm_s,
        "fused_adamw": fused,
        "memory_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
    }


# --- the real loop ------------------------------------------------------------------------------------------


def loop_figures(history: list[dict]) -> dict:
    """The loop's tokens/s and MFU from a run's train records: the median of its log windows after the
    first two (the first steps allocate, pick kernels and finish compiling), and over the whole run from
    its second log line to its last (validations and checkpoints included)."""
    trains = [r for r in history if r["kind"] == "train"]
    windows = trains[2:] or trains
    first, last = (trains[1] if len(trains) > 1 else trains[0]), trains[-1]
    overall = None
    if last["elapsed_s"] > first["elapsed_s"]:
        overall = (last["step"] - first["step"]) / (last["elapsed_s"] - first["elapsed_s"])
    return {
        "loop_tokens_per_s": statistics.median(r["tokens_per_s"] for r in windows),
        "loop_mfu": statistics.median(r["mfu"] for r in windows),
        "loop_steps_per_s_overall": overall,
        "steps": last["step"],
    }


def start_record(history: list[dict]) -> dict:
    "The run's first line (the record with its `max_steps` that is not a budget's later line)."
    return next(r for r in history if r["kind"] == "event" and "max_steps" in r)


def stage_loop(check: Check) -> None:
    s, folder = check.sizes, check.run_folder("loop")
    try:
        shape = {"micro_batch": s.seed["micro_batch"], "grad_accum": s.seed["grad_accum"]}
        for name, fields in (("seed", s.seed), ("chosen", {**shape, "precision": "auto"})):
            # the preset's steps, stopped early: the probe decides compiling for the run the preset is
            cfg = check.config(s.preset, "seed", folder / name, **fields)
            history = train(cfg, until_step=s.loop_steps, log=print, progress=False)
            start = start_record(history)
            ran = TrainConfig.from_dict(json.loads((folder / name / "config.json").read_text()))
            bare = bare_step(ran, start["precision"], ran.compile, s.bare_steps, check.device, static=False)
            figures = loop_figures(history)
            tokens_per_step = ran.micro_batch * ran.grad_accum * ran.context
            check.record(
                "loop",
                {
                    "run": name,
                    "precision": start["precision"],
                    "micro_batch": ran.micro_batch,
                    "grad_accum": ran.grad_accum,
                    "compile": ran.compile,
                    **figures,
                    "loop_tokens_per_s_overall": (figures["loop_steps_per_s_overall"] or 0) * tokens_per_step,
                    "bare_tokens_per_s": bare["tokens_per_s"],
                    "bare_mfu": bare["mfu"],
                    "loop_of_bare": figures["loop_tokens_per_s"] / bare["tokens_per_s"],
                    "start": start["message"],
                },
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- a budget's use of its minutes --------------------------------------------------------------------------


def stage_budget(check: Check) -> None:
    s, folder = check.sizes, check.run_folder("budget")
    try:
        # the seed's schedule on a GPU (a whole-run cosine: the plan must be right from the start); a dry run
        # holds max_lr until its last half, so that a busy CPU's slower steps move its end (`Budget.replan`)
        held = {"cooldown": 0.5} if check.dry else {}
        cfg = check.config(s.preset, "seed", folder / "run", precision="auto", budget=s.budget_min, **held)
        began = time.perf_counter()
        history = train(cfg, log=print, progress=False)
        wall_s = time.perf_counter() - began
        plans = [r for r in history if r["kind"] == "event" and "max_steps" in r]
        vals = [r for r in history if r["kind"] == "val"]
        best = min(vals, key=lambda r: r["val_bpb"])
        check.record(
            "budget",
            {
                "budget_min": s.budget_min,
                "wall_s": wall_s,
                "used": wall_s / (s.budget_min * 60),
                "planned_steps": plans[0]["max_steps"],
                "final_steps": history[-1]["step"],
                "precision": plans[0]["precision"],
                "best_val_bpb": best["val_bpb"],
                "best_step": best["step"],
                "last_val_bpb": vals[-1]["val_bpb"],
                "start": plans[0]["message"],
                "end": history[-1].get("message", ""),
            },
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- the recipe search --------------------------------------------------------------------------------------


def stage_recipe(check: Check, only: list[str] | None) -> None:
    s, folder = check.sizes, check.run_folder("recipe")
    try:
        for name, (why, preset, data, fields) in RECIPES.items():
            if only and name not in only:
                continue
            common = {
                "precision": "auto" if check.dry else "bf16",
                "compile": False,
                "budget": s.recipe_min,
                "eval_batches": 4 if check.dry else 0,  # every window of the held-out plays
                "keep_last": 1,
                "log_every": 50,
            }
            if check.dry:  # the tiny model at its own shape: the schedule's fields alone
                fields = {k: v for k, v in fields.items() if k in ("cooldown", "max_lr", "min_lr")}
            cfg = check.config(preset, data, folder / name, **{**fields, **common})
            began = time.perf_counter()
            history = train(cfg, log=None, progress=False)
            wall_s = time.perf_counter() - began
            vals = [r for r in history if r["kind"] == "val"]
            best = min(vals, key=lambda r: r["val_bpb"])
            trains = [r for r in history if r["kind"] == "train"]
            check.record(
                "recipe",
                {
                    "name": name,
                    "why": why,
                    "config": {
                        k: v for k, v in cfg.to_dict().items() if k not in ("shards", "tokenizer", "out")
                    },
                    "budget_min": s.recipe_min,
                    "wall_s": wall_s,
                    "steps": history[-1]["step"],
                    "best_val_bpb": best["val_bpb"],
                    "best_step": best["step"],
                    "best_at_s": next((r["elapsed_s"] for r in trains if r["step"] >= best["step"]), None),
                    "last_val_bpb": vals[-1]["val_bpb"],
                    "last_train_loss": trains[-1]["loss"] if trains else None,
                },
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- the step table -----------------------------------------------------------------------------------------


def stage_steps(check: Check) -> None:
    s = check.sizes
    base = check.config(s.preset, "seed", check.work / "unused")
    measured = {p: measure_matmul_flops(check.device, p, n=s.matmul_n) for p in s.precisions}
    rows = [(p, mb, accum, False) for mb, accum in s.shapes for p in s.precisions]
    rows += [(p, mb, accum, True) for p, mb, accum in s.compiled]
    for precision, micro_batch, grad_accum, compiled in rows:
        cfg = replace(base, micro_batch=micro_batch, grad_accum=grad_accum)
        try:
            r = bare_step(cfg, precision, compiled, s.bare_steps, check.device, static=True)
        except Exception as e:  # one failing row (a compiler error, out of memory) must not lose the others
            r = {"precision": precision, "micro_batch": micro_batch, "grad_accum": grad_accum}
            r.update(compile=compiled, error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
        else:
            flops = r["tokens_per_s"] * make_model(cfg).flops_per_token()
            r.update(mfu_matmul=flops / measured[precision], matmul_tflops=measured[precision] / 1e12)
        check.record("steps", r)
        if check.device.type == "cuda":
            torch.cuda.empty_cache()


# --- nanoGPT's model beside gptlib's ------------------------------------------------------------------------


def stage_peer(check: Check) -> None:
    """gptlib's GPT and nanoGPT's (benchmarks/_peer.py: learned positions, no biases) at the seed's shape
    without dropout or biases, bf16 (fp32 in a dry run), compiled on a GPU, 32 x 1 sequences of full
    context; the same step for both (autocast forward, backward, clip, fused AdamW), in alternating rounds,
    so that a machine whose speed drifts slows both alike."""
    from _peer import PeerConfig, PeerGPT

    s, device = check.sizes, check.device
    base = check.config(s.preset, "seed", check.work / "unused", dropout=0.0, attn_dropout=0.0, bias=False)
    base = replace(base, dropout=0.0, attn_dropout=0.0, bias=False)  # the dry run's tiny model too
    c = base.model_config()
    precision = choose_precision(device, "fp32" if check.dry else "bf16")
    batch = 32 if not check.dry else 4
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, c.vocab_size, (batch, c.context), generator=g).to(device) for _ in range(2))
    models = {}
    for name in ("gptlib", "nanoGPT"):
        torch.manual_seed(0)
        if name == "gptlib":
            model = GPT(c).to(device)
        else:
            peer = PeerConfig(c.vocab_size, c.n_layer, c.n_head, c.n_embd, block_size=c.context)
            model = PeerGPT(peer).to(device)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
        fused = device.type == "cuda"
        optimizer = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), fused=fused)
        forward = model if check.dry else torch.compile(model)
        models[name] = (model, forward, optimizer)

    def steps(name: str, n: int) -> float:
        model, forward, optimizer = models[name]
        sync(device)
        began = time.perf_counter()
        for _ in range(n):
            with precision.autocast():
                _, loss = forward(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        sync(device)
        return time.perf_counter() - began

    for name in models:  # warm: compiling, kernels
        steps(name, 3)
    seconds = {name: 0.0 for name in models}
    for _ in range(s.peer_rounds):
        for name in models:
            seconds[name] += steps(name, s.peer_steps)
    tokens = s.peer_rounds * s.peer_steps * batch * c.context
    rates = {name: tokens / t for name, t in seconds.items()}
    check.record(
        "peer",
        {
            "shape": f"{batch} x {c.context}",
            "precision": precision.name,
            "compiled": not check.dry,
            "gptlib_tokens_per_s": rates["gptlib"],
            "nanogpt_tokens_per_s": rates["nanoGPT"],
            "gptlib_of_nanogpt": rates["gptlib"] / rates["nanoGPT"],
            "gptlib_params": models["gptlib"][0].num_params(False),
            "nanogpt_params": sum(p.numel() for p in models["nanoGPT"][0].parameters()),
        },
    )


# --- the summary --------------------------------------------------------------------------------------------


def _read(out: Path, stage: str) -> list[dict]:
    path = out / f"{stage}.json"
    return json.loads(path.read_text()) if path.is_file() else []


def _mark(ok: bool | None) -> str:
    return "" if ok is None else (" (meets the issue's bar)" if ok else " (**below the issue's bar**)")


def summary_markdown(out: Path) -> str:
    "The check's records as markdown: one table per stage, the issue's thresholds marked."
    records = {stage: _read(out, stage) for stage in STAGES[:-1]}
    everything = [r for rs in records.values() for r in rs]
    device = next((r["device"] for r in everything), "unknown")
    dry = any(r.get("dry_run") for r in everything)
    judge = not dry
    lines = [
        f"GPU check (`benchmarks/gpu_check.sh`) on {device}, torch {torch.__version__}, "
        f"{datetime.date.today().isoformat()}"
        + (": a **dry run** on the CPU, toy sizes, no figure" if dry else "."),
        "",
    ]
    if records["loop"]:
        lines += [
            "The real loop against the bare step of the same configuration (tokens/s: the median of the log "
            "windows after the first two; overall: validations and checkpoints included):",
            "",
            "| run | precision | shape | compile | loop tokens/s | loop MFU | overall tokens/s "
            "| bare tokens/s | bare MFU | loop / bare |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in records["loop"]:
            ok = r["loop_of_bare"] >= LOOP_OF_BARE if judge else None
            shape = f"{r['micro_batch']} x {r['grad_accum']}"
            lines.append(
                f"| {r['run']} | {r['precision']} | {shape} | {r['compile']} | "
                f"{r['loop_tokens_per_s']:,.0f} | {r['loop_mfu']:.1%} | "
                f"{r['loop_tokens_per_s_overall']:,.0f} | {r['bare_tokens_per_s']:,.0f} | "
                f"{r['bare_mfu']:.1%} | {r['loop_of_bare']:.2f}{_mark(ok)} |"
            )
        chosen = [r for r in records["loop"] if r["run"] == "chosen"]
        if chosen and judge:
            ok = chosen[0]["loop_mfu"] >= MFU_AT_CHOSEN
            lines += [
                "",
                f"MFU of the real loop at the chosen shape: {chosen[0]['loop_mfu']:.1%}{_mark(ok)}.",
            ]
        lines += ["", *(f"- {r['run']}'s first line: `{r['start']}`" for r in records["loop"]), ""]
    for r in records["budget"]:
        ok = BUDGET_USED[0] <= r["used"] <= BUDGET_USED[1] if judge else None
        lines += [
            f"A `--budget {r['budget_min']:g}` run ({r['precision']}): {r['wall_s']:.1f} s, "
            f"{r['used']:.0%} of its minutes{_mark(ok)}; planned {r['planned_steps']:,d} steps, ran "
            f"{r['final_steps']:,d}; best validation {r['best_val_bpb']:.4f} bits/byte at step "
            f"{r['best_step']:,d}, last {r['last_val_bpb']:.4f}.",
            f"- its first line: `{r['start']}`",
            "",
        ]
    if records["recipe"]:
        lines += [
            f"The recipe search: each candidate trained to {records['recipe'][0]['budget_min']:g} min "
            "(set-up and probe included), scored by its best validation over every held-out window:",
            "",
            "| candidate | why | steps | best bits/byte | at step | at s | last bits/byte |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in records["recipe"]:
            ok = r["best_val_bpb"] <= RECIPE_BPB if judge else None
            at_s = f"{r['best_at_s']:.0f}" if r["best_at_s"] is not None else "?"
            lines.append(
                f"| {r['name']} | {r['why']} | {r['steps']:,d} | {r['best_val_bpb']:.4f}{_mark(ok)} | "
                f"{r['best_step']:,d} | {at_s} | {r['last_val_bpb']:.4f} |"
            )
        lines.append("")
    if records["steps"]:
        lines += [
            "The step table (`train_step` alone, random tokens on the device; MFU against the datasheet's "
            "dense peak, and against a measured matrix product):",
            "",
            "| precision | shape | compile | tokens/s | step (ms) | MFU (datasheet) | MFU (matmul) "
            "| memory (GB) |",
            "|---|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in records["steps"]:
            shape = f"{r['micro_batch']} x {r['grad_accum']}"
            if "error" in r:
                lines.append(
                    f"| {r['precision']} | {shape} | {r['compile']} | failed: {r['error']} | | | | |"
                )
                continue
            memory = f"{r['memory_gb']:.1f}" if r["memory_gb"] is not None else "-"
            lines.append(
                f"| {r['precision']} | {shape} | {r['compile']} | {r['tokens_per_s']:,.0f} | "
                f"{r['step_ms']:.1f} | {r['mfu']:.1%} | {r['mfu_matmul']:.1%} | {memory} |"
            )
        first = next((r for r in records["steps"] if "error" not in r), None)
        if first:
            lines += [
                "",
                f"Peaks: {first['peak_tflops']:.3g} TFLOP/s ({first['peak_source']}); "
                f"measured matmul {first['matmul_tflops']:.3g} TFLOP/s ({first['precision']}).",
            ]
        lines.append("")
    for r in records["peer"]:
        lines += [
            f"gptlib's GPT against nanoGPT's model, {r['shape']}, {r['precision']}, "
            f"compiled: {r['compiled']}: "
            f"{r['gptlib_tokens_per_s']:,.0f} against {r['nanogpt_tokens_per_s']:,.0f} tokens/s, "
            f"{r['gptlib_of_nanogpt']:.3f}x.",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def stage_summary(check: Check) -> None:
    markdown = summary_markdown(check.out)
    (check.out / "summary.md").write_text(markdown, encoding="utf-8")
    print(markdown)


def write_results(out: Path) -> None:
    "RESULTS.md's `gpu-check` section from a check's folder (fetched from the GPU); a dry run's refused."
    markdown = summary_markdown(out)
    if "**dry run**" in markdown:
        raise SystemExit("error: a dry run's records measure nothing: RESULTS.md is left as it is")
    write_section("gpu-check", markdown)  # the section's heading stands outside its markers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=(*STAGES, "results"), help="the stage to run (see the docstring)")
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-check"), help="records and logs ($OUT)")
    parser.add_argument("--work", default=None, help="where runs are made (default: under the temp folder)")
    parser.add_argument("--dry-run", action="store_true", help="the CPU, toy sizes: checks the script")
    parser.add_argument("--data", default=None, help="a folder with tokenizer/ and shards/ (dry run)")
    parser.add_argument("--only", nargs="*", default=None, help="the recipe candidates to train")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.stage == "results":
        write_results(out)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU (--dry-run runs it on the CPU at toy sizes)")
        return 2
    if not args.dry_run:  # TF32 for fp32 products, as the peaks assume
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    check = Check(args)
    stage = {
        "data": stage_data,
        "loop": stage_loop,
        "budget": stage_budget,
        "recipe": lambda c: stage_recipe(c, args.only),
        "steps": stage_steps,
        "peer": stage_peer,
        "summary": stage_summary,
    }[args.stage]
    stage(check)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
