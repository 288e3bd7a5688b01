"""GPU model benchmark, prepared for a CUDA machine: one training step (forward + backward + fused AdamW)
of `gpt-25m` under fp16 and bf16 autocast, eager and `torch.compile`d, with model FLOPs utilization (MFU)
against the GPU's datasheet dense peak; plus the `TransformerEncoderLayer` peer of benchmarks/model.py,
eager, at the same sizes.

    python benchmarks/gpu_model.py                 # about 3 minutes on an H100/H200, most of it compiling
    python benchmarks/gpu_model.py --batch 32 --steps 30

Datasheet peaks come from `gptlib.optim.GPU_PEAK_FLOPS` (dense, without sparsity: H100 SXM and H200 SXM
989.4 TFLOP/s bf16/fp16 per NVIDIA's H100 and H200 datasheets, whose 1,979 figures assume 2:4 sparsity).
For a GPU missing from that table the script measures a large matmul instead and says so. It rewrites the
`model-gpu` section of benchmarks/RESULTS.md (`--no-write` to only print).
"""

from __future__ import annotations

import argparse
import time

import torch

# Run as a script, its own folder is the first on the import path: benchmarks/_results.py and
# benchmarks/model.py (the peer network) import as top-level modules.
from _results import write_section
from model import TorchEncoderGPT

from gptlib.model import GPT, GPTConfig
from gptlib.optim import datasheet_peak_flops, measure_matmul_flops

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def time_steps(model, batch, precision: str, steps: int, warmup: int) -> float:
    """Seconds per training step: the mean of `steps` steps after `warmup` (compilation happens there)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")  # fp16 needs loss scaling
    idx, targets = batch
    start = None
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        with torch.autocast("cuda", dtype=DTYPES[precision]):
            _, loss = model(idx, targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    assert torch.isfinite(loss), f"the {precision} loss is not finite: {loss.item()}"
    return (time.perf_counter() - start) / steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt-25m", help="model preset (default gpt-25m)")
    parser.add_argument("--batch", type=int, default=32, help="sequences per step (each of full context)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation, autotuning)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs a GPU (benchmarks/model.py measures the CPU)")
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device = torch.device("cuda")
    name = torch.cuda.get_device_name(device)
    config = GPTConfig.preset(args.preset)
    T = config.context
    gen = torch.Generator().manual_seed(0)
    batch = tuple(
        torch.randint(0, config.vocab_size, (args.batch, T), generator=gen).to(device) for _ in range(2)
    )
    tokens = args.batch * T
    peaks = {}
    for precision in DTYPES:
        peak = datasheet_peak_flops(name, precision)
        source = "datasheet dense"
        if peak is None:
            peak, source = measure_matmul_flops(device, precision, n=8192), "measured 8192² matmul"
        peaks[precision] = (peak, source)

    flops = GPT(config).flops_per_token()  # the peer is the same network: the same FLOPs
    rows = []

    def run(label: str, model, precision: str, compiled: bool) -> None:
        torch.manual_seed(0)
        step = time_steps(
            torch.compile(model) if compiled else model, batch, precision, args.steps, args.warmup
        )
        rate = tokens / step
        peak, source = peaks[precision]
        rows.append((label, precision, compiled, rate, rate * flops, rate * flops / peak))
        print(
            f"{label:6s} {precision} compile={compiled!s:5s}: {step * 1e3:7.1f} ms/step, "
            f"{rate:12,.0f} tok/s, {rate * flops / 1e12:6.1f} TFLOP/s, "
            f"MFU {rate * flops / peak:.1%} of {peak / 1e12:.0f} ({source})",
            flush=True,
        )

    for precision in DTYPES:
        for compiled in (False,) if args.no_compile else (False, True):
            run("gptlib", GPT(config).to(device).train(), precision, compiled)
    run("peer", TorchEncoderGPT(config).to(device).train(), "bf16", False)

    lines = [
        "## Model step on a GPU (`benchmarks/gpu_model.py`)",
        "",
        f"Machine: {name}, torch {torch.__version__}, CUDA {torch.version.cuda}. Preset `{args.preset}`, "
        f"batch {args.batch}×{T} = {tokens:,d} tokens a step, fp32 weights under autocast, fused AdamW "
        f"(GradScaler for fp16), mean of {args.steps} steps after {args.warmup} warm-up steps.",
        "MFU = tokens/s × `flops_per_token()` / peak; peaks: "
        + ", ".join(f"{p} {v[0] / 1e12:.1f} TFLOP/s ({v[1]})" for p, v in peaks.items())
        + ". The peer is the same network built from `torch.nn.TransformerEncoderLayer`.",
        "",
        "| model | precision | torch.compile | tokens/s | TFLOP/s | MFU |",
        "|---|---|---|---:|---:|---:|",
    ]
    for label, precision, compiled, rate, flops, util in rows:
        model_name = "gptlib `GPT`" if label == "gptlib" else "`TransformerEncoderLayer` stack"
        lines.append(
            f"| {model_name} | {precision} | {'yes' if compiled else 'no'} | {rate:,.0f} | "
            f"{flops / 1e12:.1f} | {util:.1%} |"
        )
    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        write_section("model-gpu", markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
