"""Training on this CPU: throughput and MFU, bf16 against fp32, and the `cpu` recipe against the best small
character-level recipe at equal CPU time.

    .venv/bin/python benchmarks/train.py [--budget-s 480] [--skip-compile] [--skip-quality] [--skip-precision]

1. Tokens/s and MFU of the training step (forward under autocast, backward, clip, AdamW) for the `tiny` and
   `cpu` model shapes: fp32 vs bf16 autocast, torch.compile off vs on. MFU is against the matmul peak
   measured on this machine in the same precision (gptlib.optim.peak_flops).
2. bf16 against fp32 at equal steps: the `cpu` preset trained for the same steps in each, two seeds each,
   validation loss over the whole held-out split (is bf16's loss within the seed-to-seed noise of fp32's?).
3. Quality at equal CPU time: the `cpu` preset (BPE) against the best-known small character-level recipe
   (4 layers, 4 heads, 128 wide, context 64, batch 12, learning rate 1e-3 cosine to 1e-4, beta2 0.99, warmup
   100, no dropout: nanoGPT's shakespeare_char shrunk for a CPU), here on bytes (the corpus is ASCII, so bytes
   are characters), each for the same CPU time (`--budget-s`), in the precision `auto` picks, on the same 40
   plays; bits per byte over every window of the 2 held-out plays and sample quality over 3 seeds, by the
   same code (benchmarks/_budget.py).
4. What `make run` reached: read from its run folder (data_dir()/runs/shakespeare-cpu), if it exists.

Writes the `train` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _budget import corpus_data, train_for_budget  # noqa: E402
from _results import machine_line, write_section  # noqa: E402

from gptlib.corpus import data_dir  # noqa: E402
from gptlib.model import GPT  # noqa: E402
from gptlib.optim import choose_precision, make_adamw, mfu, peak_flops  # noqa: E402
from gptlib.pipeline import PROMPT, SAMPLING  # noqa: E402
from gptlib.run_folder import read_metrics  # noqa: E402
from gptlib.train import TrainConfig, train  # noqa: E402


def step_throughput(preset: str, precision: str, compile_model: bool, steps: int) -> dict:
    """Tokens/s of the training step on random tokens, after warm-up steps (which include any compilation)."""
    cfg = TrainConfig.preset(preset)
    torch.manual_seed(0)
    model = GPT(cfg.model_config())
    optimizer, fused = make_adamw(model, lr=1e-3)
    prec = choose_precision("cpu", precision)
    forward = model
    if compile_model:
        try:
            forward = torch.compile(model)
        except Exception as e:  # report, do not crash the benchmark
            return {"error": f"{type(e).__name__}: {e}"}
    x = torch.randint(0, cfg.vocab_size, (cfg.micro_batch, cfg.context))

    def one_step():
        with prec.autocast():
            _, loss = forward(x, x)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    started = time.perf_counter()
    try:
        for _ in range(2):
            one_step()
    except Exception as e:
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"}
    warmup_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(steps):
        one_step()
    elapsed = time.perf_counter() - started
    tokens_per_s = steps * x.numel() / elapsed
    peak, source = peak_flops("cpu", prec.name)
    return {
        "tokens_per_s": tokens_per_s,
        "mfu": mfu(tokens_per_s, model.flops_per_token(), peak),
        "peak_gflops": peak / 1e9,
        "warmup_s": warmup_s,
    }


def make_run_summary() -> str:
    run = data_dir() / "runs" / "shakespeare-cpu"
    records = read_metrics(run)
    if not any(r["kind"] == "val" for r in records):
        return (
            "No finished `make run` found (no validation in its run folder yet): run `make run`, then this "
            "script.\n"
        )
    val = [r for r in records if r["kind"] == "val"]
    done = [r for r in records if r["kind"] == "event" and r["message"].startswith("finished")]
    sample = (run / "sample.txt").read_text() if (run / "sample.txt").is_file() else "(no sample)"
    train_s = sum(float(r["message"].split(" in ")[1].split(" s")[0]) for r in done) if done else None
    shown = run.relative_to(data_dir().parent) if run.is_relative_to(data_dir().parent) else run
    lines = [
        f"Run folder `{shown}`: "
        f"{val[-1]['step'] if val else '?'} steps, final val loss **{val[-1]['val_loss']:.3f}** nats/token, "
        f"**{val[-1]['val_bpb']:.3f} bits per byte** on the 2 held-out plays"
        + (f"; training wall time {train_s / 60:.1f} min (the last session of the run)." if train_s else "."),
        "",
        f"Sample (prompt {PROMPT!r}, temperature {SAMPLING['temperature']}, top-k {SAMPLING['top_k']}):",
        "",
        "```text",
        sample.strip()[:1500],
        "```",
    ]
    return "\n".join(lines) + "\n"


CHARACTER_RECIPE = {
    "vocab_size": 259,
    "n_layer": 4,
    "n_head": 4,
    "n_embd": 128,
    "context": 64,
    "micro_batch": 12,
    "grad_accum": 1,
    "max_lr": 1e-3,
    "min_lr": 1e-4,
    "beta2": 0.99,
    "warmup_steps": 100,
    "dropout": 0.0,
    "attn_dropout": 0.0,
}


def quality_at_equal_time(budget_s: float, work: Path) -> list[dict]:
    """The `cpu` preset and the character recipe, each trained for `budget_s` of this CPU's time; their
    scores."""
    results = []
    for name, fields in (("cpu preset (BPE)", {}), ("character recipe (bytes)", CHARACTER_RECIPE)):
        cfg = TrainConfig.preset("cpu", **fields)
        tok_dir, shards = corpus_data(cfg.vocab_size)
        cfg = replace(cfg, tokenizer=str(tok_dir), shards=str(shards))
        results.append(train_for_budget(name.split()[0], cfg, budget_s, work))
        results[-1]["name"] = name
        print(json.dumps({k: v for k, v in results[-1].items() if k != "sample"}), flush=True)
    return results


def precision_at_equal_steps(steps: int, work: Path) -> list[dict]:
    """The `cpu` preset for `steps` steps in fp32 and in bf16, two seeds each; loss over the whole held-out
    split."""
    tok_dir, shards = corpus_data(TrainConfig.preset("cpu").vocab_size)
    rows = []
    for precision in ("fp32", "bf16"):
        for seed in (1337, 1338):
            cfg = TrainConfig.preset(
                "cpu",
                precision=precision,
                seed=seed,
                tokenizer=str(tok_dir),
                shards=str(shards),
                out=str(work / f"{precision}-{seed}"),
                max_steps=steps,
                eval_every=steps,
                eval_batches=0,
                checkpoint_every=steps,
                log_every=steps,
            )
            started = time.perf_counter()
            val = [r for r in train(cfg, log=None, progress=False) if r["kind"] == "val"][-1]
            rows.append(
                {
                    "precision": precision,
                    "seed": seed,
                    "val_loss": val["val_loss"],
                    "val_bpb": val["val_bpb"],
                    "wall_s": time.perf_counter() - started,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def quality_table(results: list[dict], budget_s: float) -> list[str]:
    md = [
        "### The `cpu` recipe against the character recipe, at equal CPU time",
        "",
        f"Each trained for {budget_s / 60:.0f} minutes of this CPU's time (step time measured first, see "
        "`benchmarks/_budget.py`), on the same 40 plays; scored at its best validation over every window of "
        "the 2 held-out plays (bits per byte, the same code for both), and its samples (prompt "
        f"{PROMPT!r}, temperature {SAMPLING['temperature']}, top-k {SAMPLING['top_k']}, seeds 0-2) against "
        "the training text.",
        "",
        "| model | params | steps | tokens seen (epochs) | best val bits/byte | known words | known speakers "
        "| longest blank run | stuttered words |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        q = r["quality"]
        speakers = "-" if q["known_speakers"] is None else f"{q['known_speakers']:.0%}"
        md.append(
            f"| {r['name']} | {r['params'] / 1e6:.2f} M | {r['steps']:,d} | "
            f"{r['tokens_seen']:,d} ({r['epochs']:.1f}) | "
            f"**{r['best_val_bpb']:.3f}** | {q['known_words']:.1%} | {speakers} | {q['longest_blank_run']} | "
            f"{len(q['stutters'])} |"
        )
    bpe, chars = results
    md += [
        "",
        f"The `cpu` recipe is **{(1 - bpe['best_val_bpb'] / chars['best_val_bpb']):.1%} better** in bits per "
        f"byte ({bpe['best_val_bpb']:.3f} against {chars['best_val_bpb']:.3f}).",
        "",
    ]
    for r in results:
        md += [f"Sample of the {r['name']} (seed 0):", "", "```text", r["sample"].strip()[:1200], "```", ""]
    return md


def precision_table(rows: list[dict], steps: int) -> list[str]:
    md = [
        "### bf16 against fp32 at equal steps",
        "",
        f"The `cpu` preset trained for {steps} steps in each precision, two seeds each (the seed sets the "
        "initial weights and the order of the batches); validation over every window of the held-out plays.",
        "",
        "| precision | seed | val loss (nats/token) | val bits/byte | wall (s, on a shared machine) |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        md.append(
            f"| {r['precision']} | {r['seed']} | {r['val_loss']:.4f} | {r['val_bpb']:.4f} | "
            f"{r['wall_s']:.0f} |"
        )
    by = {p: [r["val_loss"] for r in rows if r["precision"] == p] for p in ("fp32", "bf16")}
    noise = max(abs(v[0] - v[1]) for v in by.values())
    gap = abs(sum(by["bf16"]) / 2 - sum(by["fp32"]) / 2)
    md += [
        "",
        f"Mean difference bf16 - fp32: {sum(by['bf16']) / 2 - sum(by['fp32']) / 2:+.4f} nats/token; the two "
        f"seeds of one precision differ by up to {noise:.4f}: bf16 is "
        f"{'within' if gap <= noise else 'outside'} the seed noise.",
        "",
    ]
    return md


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--budget-s",
        type=float,
        default=480.0,
        help="CPU seconds of training per model in the quality comparison",
    )
    parser.add_argument(
        "--precision-steps", type=int, default=600, help="steps of each run in the bf16/fp32 comparison"
    )
    parser.add_argument("--steps", type=int, default=6, help="timed steps per throughput measurement")
    parser.add_argument(
        "--skip-compile", action="store_true", help="leave out the torch.compile rows (slow to compile)"
    )
    parser.add_argument(
        "--skip-quality", action="store_true", help="leave out the comparison with the character recipe"
    )
    parser.add_argument("--skip-precision", action="store_true", help="leave out the bf16/fp32 comparison")
    parser.add_argument("--skip-throughput", action="store_true", help="leave out the throughput table")
    args = parser.parse_args()

    rows = []
    for preset in ("tiny", "cpu") if not args.skip_throughput else ():
        for precision in ("fp32", "bf16"):
            for compiled in (False, True) if not args.skip_compile else (False,):
                steps = args.steps * (4 if preset == "tiny" else 1)
                r = step_throughput(preset, precision, compiled, steps)
                rows.append((preset, precision, compiled, r))
                print(preset, precision, "compile" if compiled else "eager", r, flush=True)

    md = [
        "## Training (`benchmarks/train.py`)",
        "",
        machine_line(),
        "The machine was shared with other work while this ran: absolute throughputs are noisy, ratios less "
        "so.",
        "",
        "### Training step throughput on this CPU",
        "",
        "Forward under autocast, backward, clipping and a fused AdamW step on random tokens; MFU against the "
        "matmul peak measured here in the same precision (`gptlib.optim.peak_flops`). `precision=auto` picks "
        "bf16 on this CPU: its bf16 matrix products run several times faster than fp32 ones.",
        "",
        "| preset | precision | torch.compile | tokens/s | MFU | vs fp32 eager | warm-up (s) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for preset, precision, compiled, r in rows:
        if "error" in r:
            md.append(
                f"| {preset} | {precision} | {'on' if compiled else 'off'} | failed: {r['error']} | | | |"
            )
            continue
        ref = next(x for p, q, c, x in rows if p == preset and q == "fp32" and not c)
        md.append(
            f"| {preset} | {precision} | {'on' if compiled else 'off'} | {r['tokens_per_s']:,.0f} | "
            f"{r['mfu']:.0%} | {r['tokens_per_s'] / ref['tokens_per_s']:.2f}x | {r['warmup_s']:.1f} |"
        )
    if args.skip_throughput:
        md[-4:] = ["Not measured in this run (`--skip-throughput`).", ""]
    peaks = {q: x["peak_gflops"] for p, q, c, x in rows if "peak_gflops" in x}
    if peaks:
        md += [
            "",
            "Measured matmul peaks: " + ", ".join(f"{q} {v:,.0f} GFLOP/s" for q, v in peaks.items()) + ".",
            "",
        ]
    with tempfile.TemporaryDirectory(prefix="gptlib-bench-") as tmp:
        if not args.skip_precision:
            md += precision_table(
                precision_at_equal_steps(args.precision_steps, Path(tmp)), args.precision_steps
            )
        if not args.skip_quality:
            md += quality_table(quality_at_equal_time(args.budget_s, Path(tmp)), args.budget_s)
    md += ["### What `make run` reaches", "", make_run_summary()]
    md += [
        "### GPU",
        "",
        "`benchmarks/gpu_train.py` measures `gpt-25m` in fp16 + GradScaler and bf16, with and without "
        "torch.compile (tokens/s and MFU against the datasheet's dense peak); it needs a CUDA machine and "
        "has not been run for these results.",
    ]
    write_section("train", "\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
