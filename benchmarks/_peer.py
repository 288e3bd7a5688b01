"""The peer of benchmarks/train.py: nanoGPT's character-level Shakespeare recipe, as nanoGPT trains it.

Written here from nanoGPT's `model.py` and `train.py` (karpathy/nanoGPT) and the CPU command of its README
(`config/train_shakespeare_char.py --device=cpu --compile=False --block_size=64 --batch_size=12 --n_layer=4
--n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0`), so that the comparison
needs no checkout of nanoGPT and runs in the same process and on the same split as gptlib:

- the model: learned position embeddings, pre-norm blocks with LayerNorm (no biases: `bias=False`, the
  default of nanoGPT's train.py), causal attention through `scaled_dot_product_attention`, a 4x GELU MLP,
  the LM head tied to the token embedding, weights drawn from N(0, 0.02) and the residual projections from
  N(0, 0.02 / sqrt(2 L));
- the training: AdamW (decay 0.1 on tensors of 2 or more dimensions, betas 0.9 and 0.99), the learning rate
  1e-3 warmed up over 100 steps as nanoGPT warms it (`lr * (it + 1) / (warmup + 1)`) then cosine to 1e-4 at
  the last step, gradients clipped to 1.0, batches of 12 windows of 64 bytes at random offsets of the
  training text (nanoGPT's `get_batch`), no dropout, no gradient accumulation;
- held to minutes of wall time (`train_for`), the cosine's clock is the time (`learning_rate_in_time`): the
  same curve, reaching 1e-4 when the minutes run out (a budget shorter than the 100 warmup iterations ends
  inside the warmup). nanoGPT fixes its last step ahead (`max_iters`); set from the median of 20 timed
  iterations here, that overran the minutes by a fifth to two fifths (the host slows, and the median misses
  the iterations' stalls), which gave the peer more time than gptlib. The price: the peer's learning rates
  follow the clock, so a rerun of the same seed is not the same run bit for bit (gptlib's budget keeps that,
  `gptlib.probe.Budget.replan`);
- what differs, each in the peer's favour: no periodic evaluation inside its time (nanoGPT would spend
  some), the faster of fp32 (what nanoGPT runs on a CPU) and bf16 autocast, all the machine's threads, and
  torch.compile where it pays for itself within the minutes (nanoGPT's CPU command turns it off).

The forward returns the logits of every position, so that gptlib's own `evaluate` scores the peer over
the same windows of the held-out plays as gptlib's model (bits per byte).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

RECIPE = {  # nanoGPT's README CPU command over config/train_shakespeare_char.py
    "n_layer": 4,
    "n_head": 4,
    "n_embd": 128,
    "block_size": 64,
    "batch_size": 12,
    "learning_rate": 1e-3,
    "min_lr": 1e-4,
    "warmup_iters": 100,
    "beta1": 0.9,
    "beta2": 0.99,
    "weight_decay": 0.1,
    "grad_clip": 1.0,
}


@dataclass
class PeerConfig:
    vocab_size: int
    n_layer: int = RECIPE["n_layer"]
    n_head: int = RECIPE["n_head"]
    n_embd: int = RECIPE["n_embd"]
    block_size: int = RECIPE["block_size"]


class _Attention(nn.Module):
    def __init__(self, c: PeerConfig):
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (
            t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in self.c_attn(x).split(C, 2)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class _Block(nn.Module):
    def __init__(self, c: PeerConfig):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(c.n_embd, bias=False), nn.LayerNorm(c.n_embd, bias=False)
        self.attn = _Attention(c)
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=False)
        self.mlp_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=False)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class PeerGPT(nn.Module):
    "nanoGPT's GPT at the character recipe's size (see the module docstring)."

    def __init__(self, c: PeerConfig):
        super().__init__()
        self.config = c
        self.wte, self.wpe = nn.Embedding(c.vocab_size, c.n_embd), nn.Embedding(c.block_size, c.n_embd)
        self.blocks = nn.ModuleList(_Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd, bias=False)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as nanoGPT ties them
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, 0.02)
        for name, p in self.named_parameters():
            if name.endswith(("c_proj.weight", "mlp_proj.weight")):  # the residual projections
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c.n_layer))

    def forward(self, idx, targets=None):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = (
            None
            if targets is None
            else F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-1)
        )
        return logits, loss

    def num_params(self) -> int:
        "Parameters as nanoGPT counts them (the tied matrix once, the position table left out)."
        return sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()

    @torch.no_grad()
    def generate(self, idx, max_new_tokens: int, *, temperature: float, top_k: int, generator):
        "nanoGPT's `generate`: the context cropped to the block, temperature, top-k, one token at a time."
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size :])
            logits = logits[:, -1, :] / temperature
            kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
            logits[logits < kth] = -float("inf")
            idx = torch.cat([idx, torch.multinomial(F.softmax(logits, -1), 1, generator=generator)], 1)
        return idx


def make_optimizer(model: PeerGPT) -> torch.optim.AdamW:
    "nanoGPT's `configure_optimizers`: decay on 2-D tensors only (its fused kernel is for CUDA alone)."
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": RECIPE["weight_decay"]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=RECIPE["learning_rate"], betas=(RECIPE["beta1"], RECIPE["beta2"]))


def learning_rate(it: int, max_iters: int) -> float:
    "nanoGPT's `get_lr` with lr_decay_iters = max_iters."
    lr, min_lr, warmup = RECIPE["learning_rate"], RECIPE["min_lr"], RECIPE["warmup_iters"]
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > max_iters:
        return min_lr
    ratio = (it - warmup) / (max_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def learning_rate_in_time(it: int, elapsed_s: float, warmed_s: float, budget_s: float) -> float:
    """`learning_rate` with the wall time as the cosine's clock, for a run held to `budget_s` seconds: the
    same warmup over the first iterations, then the cosine from `warmed_s` (when the warmup ended, before
    `budget_s`) to min_lr at `budget_s`."""
    lr, min_lr, warmup = RECIPE["learning_rate"], RECIPE["min_lr"], RECIPE["warmup_iters"]
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if not warmed_s < budget_s:
        raise ValueError(f"the warmup ended at {warmed_s} s, not before the budget's {budget_s} s")
    ratio = min(1.0, (elapsed_s - warmed_s) / (budget_s - warmed_s))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def get_batch(data: np.ndarray, generator: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    "nanoGPT's `get_batch`: `batch_size` windows at uniform random offsets of the training tokens."
    block = RECIPE["block_size"]
    ix = generator.integers(0, len(data) - block, RECIPE["batch_size"])
    x = torch.from_numpy(np.stack([data[i : i + block] for i in ix]).astype(np.int64))
    y = torch.from_numpy(np.stack([data[i + 1 : i + 1 + block] for i in ix]).astype(np.int64))
    return x, y


class PeerRun:
    "One run of the peer: model, optimizer, batches; `step(lr, autocast)` is one iteration at rate `lr`."

    def __init__(self, vocab_size: int, data: np.ndarray, seed: int):
        torch.manual_seed(seed)
        self.model = PeerGPT(PeerConfig(vocab_size))
        self.forward = self.model  # what a step calls: the model, or the model compiled (`compile`)
        self.optimizer = make_optimizer(self.model)
        self.data, self.rng = data, np.random.default_rng(seed)

    def compile(self) -> None:
        "nanoGPT's `--compile=True`: the steps call the model compiled; the raw one evaluates and samples."
        self.forward = torch.compile(self.model)

    def step(self, lr: float, autocast) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(self.data, self.rng)
        with autocast():
            _, loss = self.forward(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), RECIPE["grad_clip"])
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


def step_seconds(vocab_size: int, data: np.ndarray, autocast, steps: int = 20) -> float:
    "The median seconds of a peer iteration after 3 warm-up ones (a throwaway run, its own seed)."
    run = PeerRun(vocab_size, data, seed=0)
    for it in range(3):
        run.step(learning_rate(it, 1000), autocast)
    times = []
    for it in range(steps):
        began = time.perf_counter()
        run.step(learning_rate(it, 1000), autocast)
        times.append(time.perf_counter() - began)
    return sorted(times)[len(times) // 2]


def train_for(run: PeerRun, budget_s: float, autocast) -> tuple[int, float, float]:
    """Iterations of `run` until `budget_s` seconds of wall time have passed, the learning rate clocked by
    that time: (iterations, wall seconds, the last training loss)."""
    started = time.perf_counter()
    it, warmed_s, loss = 0, 0.0, math.nan
    while (elapsed_s := time.perf_counter() - started) < budget_s:
        if it == RECIPE["warmup_iters"]:
            warmed_s = elapsed_s
        loss = run.step(learning_rate_in_time(it, elapsed_s, warmed_s, budget_s), autocast)
        it += 1
    return it, time.perf_counter() - started, loss
