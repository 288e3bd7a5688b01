"""`gpt-25m` training throughput and MFU on one CUDA GPU: fp16 + GradScaler vs bf16, torch.compile off vs on.

    python benchmarks/gpu_train.py [--steps 200] [--budget-s 480] [--out DIR]

A prepared script for a machine with a GPU (it exits with a message on a machine without one). It needs no
data: the step runs on random tokens, which costs the same as real ones. Each configuration runs the real
training step of gptlib.train (autocast forward, loss / accumulation, scaler.scale(loss).backward(), unscale_,
clip at 1.0, scaler.step, update, zero_grad) with a fused AdamW; warm-up steps (and compilation) are not
timed. MFU is against the datasheet's dense peak for the precision (gptlib.optim.GPU_PEAK_FLOPS), else a
measured matmul peak. Two shapes of the same global batch (16,384 tokens a step): the original design's
micro-batch 8 x 4 accumulation steps, and 32 x 1, which keeps the GPU busier.

Prints a markdown table and writes gpu_train.json and gpu_train.md to --out (default: $OUT, else ./).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from gptlib.model import GPT
from gptlib.optim import choose_precision, make_adamw, mfu, peak_flops
from gptlib.train_config import TrainConfig


def measure(precision: str, compiled: bool, micro_batch: int, grad_accum: int, steps: int) -> dict:
    cfg = TrainConfig.preset("gpt-25m")
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = GPT(cfg.model_config()).to(device)
    optimizer, fused = make_adamw(model, lr=cfg.max_lr, device=device)
    prec = choose_precision(device, precision)
    scaler = torch.amp.GradScaler("cuda", enabled=prec.use_scaler)
    forward = torch.compile(model) if compiled else model
    x = torch.randint(0, cfg.vocab_size, (grad_accum, micro_batch, cfg.context), device=device)
    y = torch.randint(0, cfg.vocab_size, (grad_accum, micro_batch, cfg.context), device=device)

    def step():
        for micro in range(grad_accum):
            with prec.autocast():
                _, loss = forward(x[micro], y[micro])
            scaler.scale(loss / grad_accum).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    started = time.perf_counter()
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    tokens_per_s = steps * grad_accum * micro_batch * cfg.context / elapsed
    peak, source = peak_flops(device, prec.name)
    return {
        "precision": prec.name,
        "scaler": prec.use_scaler,
        "compile": compiled,
        "micro_batch": micro_batch,
        "grad_accum": grad_accum,
        "steps": steps,
        "tokens_per_s": tokens_per_s,
        "step_ms": 1000 * elapsed / steps,
        "mfu": mfu(tokens_per_s, model.flops_per_token(), peak),
        "peak_tflops": peak / 1e12,
        "peak_source": source,
        "fused_adamw": fused,
        "warmup_s": warmup_s,
        "max_memory_gb": torch.cuda.max_memory_allocated() / 1e9,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="timed optimizer steps per configuration")
    parser.add_argument(
        "--budget-s", type=float, default=480, help="skip the remaining configurations after this"
    )
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT", ".")), help="where the results go"
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs a GPU")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    name = torch.cuda.get_device_name()
    print(f"{name}, torch {torch.__version__}, CUDA {torch.version.cuda}", flush=True)
    configs = [
        (p, c, mb, ga) for mb, ga in ((8, 4), (32, 1)) for c in (False, True) for p in ("fp16", "bf16")
    ]
    results, began = [], time.perf_counter()
    for precision, compiled, micro_batch, grad_accum in configs:
        if time.perf_counter() - began > args.budget_s:
            print(
                f"budget spent: skipping {precision} compile={compiled} {micro_batch}x{grad_accum}",
                flush=True,
            )
            continue
        try:
            r = measure(precision, compiled, micro_batch, grad_accum, args.steps)
        except Exception as e:  # one failing configuration (a compiler error) must not lose the others
            r = {
                "precision": precision,
                "compile": compiled,
                "micro_batch": micro_batch,
                "grad_accum": grad_accum,
                "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}",
            }
        results.append(r)
        print(json.dumps(r), flush=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

    lines = [
        f"`gpt-25m` on {name} (torch {torch.__version__}), {args.steps} timed steps of 16,384 tokens each.",
        "",
        "| precision | compile | micro-batch x accumulation | tokens/s | step (ms) | MFU | peak used "
        "| memory (GB) |",
        "|---|---|---|---:|---:|---:|---|---:|",
    ]
    for r in results:
        shape = f"{r['micro_batch']} x {r['grad_accum']}"
        if "error" in r:
            compiled = "on" if r["compile"] else "off"
            lines.append(f"| {r['precision']} | {compiled} | {shape} | failed: {r['error']} | | | | |")
            continue
        lines.append(
            f"| {r['precision']}{' + scaler' if r['scaler'] else ''} | {'on' if r['compile'] else 'off'} | "
            f"{shape} | {r['tokens_per_s']:,.0f} | {r['step_ms']:.1f} | **{r['mfu']:.1%}** | "
            f"{r['peak_tflops']:.0f} TFLOP/s ({r['peak_source']}) | {r['max_memory_gb']:.1f} |"
        )
    markdown = "\n".join(lines)
    print(markdown)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_train.json").write_text(json.dumps({"device": name, "results": results}, indent=1))
    (args.out / "gpu_train.md").write_text(markdown + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
