"""Model benchmark: one training step (forward + backward + AdamW) of gptlib's GPT against the same
network built from `torch.nn.TransformerEncoderLayer(norm_first=True, batch_first=True)` with a causal
mask, on this CPU, in fp32 and under bf16 autocast; achieved FLOP/s against a matmul peak measured here;
and sampling speed with and without the KV cache.

    .venv/bin/python benchmarks/model.py            # about three minutes on 2 cores
    .venv/bin/python benchmarks/model.py --quick    # a smoke run, results not written

It rewrites the `model` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import machine_line, write_section  # noqa: E402

from gptlib.model import GPT, GPTConfig, sinusoidal_positions  # noqa: E402
from gptlib.optim import measure_matmul_flops  # noqa: E402

# (batch, sequence length) per preset: a few thousand tokens a step, small enough for a 2-core CPU
SHAPES = {"tiny": (16, 64), "cpu": (8, 256), "gpt-25m": (2, 512)}
STEPS = {"tiny": 10, "cpu": 4, "gpt-25m": 2}  # timed steps per round (after one warm-up step)


class TorchEncoderGPT(nn.Module):
    """The peer: the same network (sizes, pre-norm, GELU MLP 4x, tied head, sinusoidal positions)
    assembled from PyTorch's own `TransformerEncoderLayer`, made causal with a mask."""

    def __init__(self, c: GPTConfig):
        super().__init__()
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.register_buffer("wpe", sinusoidal_positions(c.context, c.n_embd), persistent=False)
        layer = nn.TransformerEncoderLayer(
            c.n_embd,
            c.n_head,
            4 * c.n_embd,
            c.dropout,
            activation="gelu",
            batch_first=True,
            norm_first=True,
            bias=c.bias,
        )
        self.encoder = nn.TransformerEncoder(
            layer, c.n_layer, norm=nn.LayerNorm(c.n_embd, bias=c.bias), enable_nested_tensor=False
        )
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.register_buffer(
            "mask", nn.Transformer.generate_square_subsequent_mask(c.context), persistent=False
        )
        self.scale = math.sqrt(c.n_embd)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) * self.scale + self.wpe[:T]
        x = self.encoder(x, mask=self.mask[:T, :T], is_causal=True)
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def step_time(model: nn.Module, batch: tuple, precision: str, steps: int) -> float:
    """Seconds of the fastest of `steps` forward + backward + AdamW steps (the least disturbed one)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx, targets = batch
    times = []
    for i in range(steps + 1):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            _, loss = model(idx, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i:  # the first step warms up (allocations, AdamW state)
            times.append(time.perf_counter() - start)
    return min(times)


def bench_training(presets: list[str], precisions: list[str], rounds: int, peaks: dict) -> list[dict]:
    rows = []
    for name in presets:
        # the peer adds the sinusoidal table: gptlib's model with the same positions (the `cpu` preset's are
        # rotary, a different computation)
        config = GPTConfig.preset(name, positions="sinusoidal")
        B, T = SHAPES[name]
        gen = torch.Generator().manual_seed(0)
        batch = tuple(torch.randint(0, config.vocab_size, (B, T), generator=gen) for _ in range(2))
        torch.manual_seed(0)
        ours, peer = GPT(config).train(), TorchEncoderGPT(config).train()
        n_ours = ours.num_params(non_embedding=False)
        n_peer = sum(p.numel() for p in peer.parameters())
        assert n_ours == n_peer, f"the peer must be the same size: {n_ours} vs {n_peer} parameters"
        for precision in precisions:
            # alternate the two models round by round so that both see the same machine load
            ours_t, peer_t = [], []
            for _ in range(rounds):
                ours_t.append(step_time(ours, batch, precision, STEPS[name]))
                peer_t.append(step_time(peer, batch, precision, STEPS[name]))
            t_ours, t_peer = min(ours_t), min(peer_t)
            tokens = B * T
            flops = ours.flops_per_token() * tokens
            rows.append(
                dict(
                    preset=name,
                    precision=precision,
                    params=n_ours,
                    tokens=tokens,
                    ours=tokens / t_ours,
                    peer=tokens / t_peer,
                    flops=flops / t_ours,
                    peak=peaks[precision],
                )
            )
            r = rows[-1]
            print(
                f"{name:8s} {precision}: gptlib {r['ours']:9,.0f} tok/s, TransformerEncoderLayer "
                f"{r['peer']:9,.0f} tok/s ({r['ours'] / r['peer']:.2f}x), {r['flops'] / 1e9:.1f} GFLOP/s "
                f"= {r['flops'] / r['peak']:.0%} of the matmul peak",
                flush=True,
            )
    return rows


def bench_sampling(presets: list[str], new_tokens: int) -> list[dict]:
    rows = []
    for name in presets:
        config = GPTConfig.preset(name)
        torch.manual_seed(0)
        model = GPT(config).eval()
        prompt = torch.randint(0, config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
        n = min(new_tokens, config.context - 16)  # stay inside the context, where the cache saves work
        rate = {}
        for use_cache in (True, False):
            model.generate(prompt, 4, use_cache=use_cache)  # warm up
            start = time.perf_counter()
            out = model.generate(prompt, n, use_cache=use_cache, generator=torch.Generator().manual_seed(1))
            rate[use_cache] = n / (time.perf_counter() - start)
            assert out.size(1) == 16 + n
        rows.append(dict(preset=name, tokens=n, cached=rate[True], uncached=rate[False]))
        print(
            f"{name:8s} sampling {n} tokens: {rate[True]:,.0f} tok/s with the KV cache, "
            f"{rate[False]:,.0f} tok/s without ({rate[True] / rate[False]:.1f}x)",
            flush=True,
        )
    return rows


def measure_peaks() -> dict:
    peaks = {p: measure_matmul_flops("cpu", p, n=1024, repeats=10) for p in ("fp32", "bf16")}
    print(
        f"matmul peak: {peaks['fp32'] / 1e9:.0f} GFLOP/s fp32, {peaks['bf16'] / 1e9:.0f} GFLOP/s bf16",
        flush=True,
    )
    return peaks


def report(train_rows: list[dict], sample_rows: list[dict], peaks: dict, seconds: float, load: tuple) -> str:
    cores = os.cpu_count() or 1
    busy = max(load) > cores
    warning = (
        [
            "**Warning: the machine was oversubscribed during this run (1-minute load average "
            f"{load[0]:.1f} at the start, {load[1]:.1f} at the end, on {cores} cores): the figures below, "
            "even the ratios, are not reliable. Re-run on a quiet machine.**",
            "",
        ]
        if busy
        else []
    )
    lines = [
        "## Model step and sampling (`benchmarks/model.py`)",
        "",
        *warning,
        machine_line(),
        f"Measured in {seconds:.0f} s (load average {load[0]:.1f} at the start, {load[1]:.1f} at the end): "
        "expect some noise in the",
        "absolute rates; each figure is the best of alternating rounds, so both sides see the same load.",
        "",
        "**Training step** (forward + backward + AdamW, the fastest of a few steps): gptlib's `GPT`",
        "against the same network built from `torch.nn.TransformerEncoderLayer(norm_first=True,",
        "batch_first=True)` and a",
        "causal mask (same sizes, same parameter count, tied head). Model FLOP/s count `flops_per_token()`",
        "(6N + 12·L·C·T); the peak is the best 1024×1024 matmul measured in the same script, before and "
        f"after ({peaks['fp32'] / 1e9:.0f} GFLOP/s fp32, {peaks['bf16'] / 1e9:.0f} GFLOP/s bf16).",
        "",
        "| preset | params | batch | precision | gptlib tok/s | TransformerEncoderLayer tok/s | ratio | "
        "gptlib GFLOP/s | of matmul peak |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in train_rows:
        B, T = SHAPES[r["preset"]]
        lines.append(
            f"| `{r['preset']}` | {r['params'] / 1e6:.2f} M | {B}×{T} | {r['precision']} | "
            f"{r['ours']:,.0f} | {r['peer']:,.0f} | {r['ours'] / r['peer']:.2f}× | {r['flops'] / 1e9:.1f} | "
            f"{r['flops'] / r['peak']:.0%} |"
        )
    lines += [
        "",
        "**Sampling** (batch 1, a 16-token prompt, `generate` at temperature 1, untrained weights): tokens/s",
        "with and without the KV cache, inside the context window.",
        "",
        "| preset | new tokens | with KV cache tok/s | without tok/s | speed-up |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in sample_rows:
        lines.append(
            f"| `{r['preset']}` | {r['tokens']} | {r['cached']:,.0f} | {r['uncached']:,.0f} | "
            f"{r['cached'] / r['uncached']:.1f}× |"
        )
    lines += [
        "",
        "GPU figures (`gpt-25m` in fp16/bf16, with and without `torch.compile`, MFU against the datasheet",
        "peak) come from `benchmarks/gpu_model.py`, run on a CUDA machine; see its own section when present.",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny preset only, one round; write nothing")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per measurement")
    args = parser.parse_args(argv)
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    peaks = measure_peaks()
    presets = ["tiny"] if args.quick else ["tiny", "cpu", "gpt-25m"]
    train_rows = bench_training(presets, ["fp32", "bf16"], 1 if args.quick else args.rounds, peaks)
    sample_rows = bench_sampling(presets, 32 if args.quick else 100)
    # a busy machine depresses a single measurement: keep the best peak seen before and after
    again = measure_peaks()
    peaks = {p: max(v, again[p]) for p, v in peaks.items()}
    for row in train_rows:
        row["peak"] = peaks[row["precision"]]
    if not args.quick:
        load = (load_before, os.getloadavg()[0])
        write_section("model", report(train_rows, sample_rows, peaks, time.perf_counter() - started, load))
        print("wrote the model section of benchmarks/RESULTS.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
