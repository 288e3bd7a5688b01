"""Training on this CPU: throughput and MFU, what `make run` reaches, and BPE vs characters per CPU minute.

    .venv/bin/python benchmarks/train.py [--minutes 4] [--skip-compile] [--skip-quality]

1. Tokens/s and MFU of the training step (forward under autocast, backward, clip, AdamW) for the `tiny` and
   `cpu` model shapes: fp32 vs bf16 autocast, torch.compile off vs on. MFU is against the matmul peak
   measured on this machine in the same precision (gptlib.optim.peak_flops).
2. What `make run` reached: read from its run folder (data_dir()/runs/shakespeare-cpu), if it exists.
3. Quality per CPU minute: the `cpu` preset's BPE model and a character-level (byte) model of the same shape,
   each trained for the same wall time on the same train/val plays; bits per byte on the held-out plays.

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
from _results import machine_line, write_section  # noqa: E402

from gptlib.checkpoint import read_metrics  # noqa: E402
from gptlib.corpus import data_dir  # noqa: E402
from gptlib.data import DataConfig, prepare  # noqa: E402
from gptlib.model import GPT  # noqa: E402
from gptlib.optim import choose_precision, make_adamw, mfu, peak_flops  # noqa: E402
from gptlib.pipeline import prepare_tokenizer  # noqa: E402
from gptlib.train import TrainConfig, train  # noqa: E402


def step_throughput(preset: str, precision: str, compile_model: bool, steps: int) -> dict:
    """Tokens/s of the training step on random tokens, after warm-up steps (which include any compilation)."""
    cfg = TrainConfig.preset(preset)
    torch.manual_seed(0)
    model = GPT(cfg.model_config(cfg.vocab_size))
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
    return {"tokens_per_s": tokens_per_s, "mfu": mfu(tokens_per_s, model.flops_per_token(), peak),
            "peak_gflops": peak / 1e9, "warmup_s": warmup_s}  # fmt: skip


def make_run_summary() -> str:
    run = data_dir() / "runs" / "shakespeare-cpu"
    records = read_metrics(run)
    if not any(r["kind"] == "val" for r in records):
        return "No finished `make run` found (no validation in its run folder yet): run `make run`, then this script.\n"
    val = [r for r in records if r["kind"] == "val"]
    done = [r for r in records if r["kind"] == "event" and r["message"].startswith("finished")]
    sample = (run / "sample.txt").read_text() if (run / "sample.txt").is_file() else "(no sample)"
    train_s = sum(float(r["message"].split(" in ")[1].split(" s")[0]) for r in done) if done else None
    lines = [
        f"Run folder `{run.relative_to(data_dir().parent) if run.is_relative_to(data_dir().parent) else run}`: "
        f"{val[-1]['step'] if val else '?'} steps, final val loss **{val[-1]['val_loss']:.3f}** nats/token, "
        f"**{val[-1]['val_bpb']:.3f} bits per byte** on the 2 held-out plays"
        + (f"; training wall time {train_s / 60:.1f} min (the last session of the run)." if train_s else "."),
        "",
        "Sample (prompt `ROMEO:`, temperature 0.8, top-k 50):",
        "",
        "```text",
        sample.strip()[:1500],
        "```",
    ]
    return "\n".join(lines) + "\n"


def quality_per_minute(minutes: float, work: Path) -> list[dict]:
    """Train the `cpu` shape with the BPE tokenizer and with bytes for the same wall time; bits per byte."""
    root = data_dir()
    results = []
    base = TrainConfig.preset("cpu")
    for name, vocab in (("BPE", base.vocab_size), ("bytes", 259)):
        tok_dir = root / "tokenizers" / f"shakespeare-{vocab}"
        tokenizer, _ = prepare_tokenizer("shakespeare", vocab, tok_dir, progress=False)
        shards = root / "shards" / f"shakespeare-{vocab}"
        prepare(DataConfig(corpus="shakespeare", tokenizer=tok_dir, out=shards, val_fraction=0.05), progress=False,
                tokenizer=tokenizer)  # fmt: skip
        cfg = replace(base, shards=str(shards), tokenizer=str(tok_dir), out=str(work / f"{name}-probe"), max_steps=6,
                      log_every=1, eval_every=1000, checkpoint_every=1000)  # fmt: skip
        probe = [r for r in train(cfg, log=None, progress=False) if r["kind"] == "train"]
        step_s = (probe[-1]["elapsed_s"] - probe[1]["elapsed_s"]) / (len(probe) - 2)
        steps = max(10, int(minutes * 60 / step_s))
        cfg = replace(cfg, out=str(work / name), max_steps=steps, eval_every=steps, eval_batches=1000,
                      warmup_steps=min(base.warmup_steps, steps // 10))  # fmt: skip
        started = time.perf_counter()
        history = train(cfg, log=None, progress=False)
        wall = time.perf_counter() - started
        val = [r for r in history if r["kind"] == "val"][-1]
        results.append({"name": name, "vocab": tokenizer.n_vocab, "steps": steps, "wall_s": wall,
                        "tokens": steps * cfg.micro_batch * cfg.context, "val_loss": val["val_loss"],
                        "val_bpb": val["val_bpb"]})  # fmt: skip
        print(json.dumps(results[-1]), flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--minutes", type=float, default=4.0, help="wall time of each model in the quality comparison"
    )
    parser.add_argument("--steps", type=int, default=6, help="timed steps per throughput measurement")
    parser.add_argument(
        "--skip-compile", action="store_true", help="leave out the torch.compile rows (slow to compile)"
    )
    parser.add_argument("--skip-quality", action="store_true", help="leave out the BPE vs bytes comparison")
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

    md = ["## Training (`benchmarks/train.py`)", "", machine_line(),
          "The machine was shared with other work while this ran: absolute figures are noisy, ratios less so.", "",
          "### Training step throughput on this CPU", "",
          "Forward under autocast, backward, clipping and a fused AdamW step on random tokens; MFU against the "
          "matmul peak measured here in the same precision (`gptlib.optim.peak_flops`).", "",
          "| preset | precision | torch.compile | tokens/s | MFU | vs fp32 eager | warm-up (s) |",
          "|---|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for preset, precision, compiled, r in rows:
        if "error" in r:
            md.append(
                f"| {preset} | {precision} | {'on' if compiled else 'off'} | failed: {r['error']} | | | |"
            )
            continue
        ref = next(x for p, q, c, x in rows if p == preset and q == "fp32" and not c)
        md.append(f"| {preset} | {precision} | {'on' if compiled else 'off'} | {r['tokens_per_s']:,.0f} | "
                  f"{r['mfu']:.0%} | {r['tokens_per_s'] / ref['tokens_per_s']:.2f}x | {r['warmup_s']:.1f} |")  # fmt: skip
    if args.skip_throughput:
        md[-4:] = ["Not measured in this run (`--skip-throughput`).", ""]
    peaks = {q: x["peak_gflops"] for p, q, c, x in rows if "peak_gflops" in x}
    md += [
        "",
        "Measured matmul peaks: " + ", ".join(f"{q} {v:,.0f} GFLOP/s" for q, v in peaks.items()) + "."
        if peaks
        else "",
        "",
    ]
    md += ["### What `make run` reaches", "", make_run_summary()]
    if args.skip_quality:
        md += [
            "### Quality per CPU minute: BPE vs characters",
            "",
            "Not measured in this run (`--skip-quality`).",
        ]
    if not args.skip_quality:
        with tempfile.TemporaryDirectory(prefix="gptlib-bench-") as tmp:
            results = quality_per_minute(args.minutes, Path(tmp))
        bpe, chars = results
        md += ["### Quality per CPU minute: BPE vs characters", "",
               "The `cpu` preset's model and batch trained for the same wall time "
               f"(about {args.minutes:g} min each) on the same 40 plays, evaluated on the same 2 held-out plays. Bits "
               "per byte makes the two vocabularies comparable.", "",
               "| tokens | vocab | steps | wall (min) | tokens seen | val loss (nats/token) | val bits/byte |",
               "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for r in results:
            md.append(f"| {r['name']} | {r['vocab']} | {r['steps']} | {r['wall_s'] / 60:.1f} | {r['tokens']:,d} | "
                      f"{r['val_loss']:.3f} | **{r['val_bpb']:.3f}** |")  # fmt: skip
        winner = "BPE" if bpe["val_bpb"] < chars["val_bpb"] else "bytes"
        md += ["", f"Winner at equal wall time: **{winner}** ({bpe['val_bpb']:.3f} vs {chars['val_bpb']:.3f} bits/byte, "
               f"ratio {chars['val_bpb'] / bpe['val_bpb']:.2f}x). Each BPE token carries several bytes, so the same "
               "compute covers several times more text."]  # fmt: skip
    md += ["", "### GPU", "",
           "`benchmarks/gpu_train.py` measures `gpt-25m` in fp16 + GradScaler and bf16, with and without "
           "torch.compile (tokens/s and MFU against the datasheet's dense peak); it needs a CUDA machine and "
           "has not been run for these results."]  # fmt: skip
    write_section("train", "\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
