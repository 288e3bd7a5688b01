"""Since GPT-2: RMSNorm, QK-norm, ReLU², an untied head and Muon, each an option of the model.

`ModernConfig` adds one field per piece to `GPTConfig` (every default is GPT-2's, lesson 04's model);
`build_model` makes lesson 04's `GPT` when none is asked for and `ModernGPT` otherwise; `Muon` updates the
blocks' weight matrices by their orthogonalized momentum (`newton_schulz`) and the rest as AdamW does."""

# Shape letters: B batch, T sequence length, C width of the residual stream, V vocabulary, H heads,
# D = C // H width of one head.
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import opt
from .model import GPT, MLP, CausalSelfAttention, GPTConfig, _init_weights

__all__ = [
    "ModernConfig",
    "rms_norm",
    "RMSNorm",
    "QKNormAttention",
    "ReLU2MLP",
    "ModernBlock",
    "ModernGPT",
    "build_model",
    "newton_schulz",
    "Muon",
]


@dataclass
class ModernConfig(GPTConfig):
    "`GPTConfig` and one field per modern piece; the defaults are GPT-2's (lesson 04)."

    norm: str = opt(
        "layernorm",
        "layernorm: centred, scaled, a learned gain (and bias); rmsnorm: scaled by its RMS, nothing learned",
        choices=("layernorm", "rmsnorm"),
    )
    qk_norm: bool = opt(False, "RMS-normalize each head's queries and keys before their dot products")
    mlp: str = opt(
        "gelu", "the MLP's activation: gelu, or relu2 (the ReLU squared)", choices=("gelu", "relu2")
    )
    tied_head: bool = opt(
        True, "the LM head reads with the token embedding's matrix (false: a matrix of its own)"
    )

    @property
    def modern(self) -> bool:
        "Whether any piece differs from GPT-2's."
        return self.norm != "layernorm" or self.qk_norm or self.mlp != "gelu" or not self.tied_head


def rms_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x (..., C) divided by its root mean square over the last dimension (Zhang & Sennrich 2019), with no
    learned gain: every vector leaves with an RMS of 1, whatever its size was."""
    return x * torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + eps).to(x.dtype)


class RMSNorm(nn.Module):
    "`rms_norm` as a module: the place of a LayerNorm, with no parameters."

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x)


class QKNormAttention(CausalSelfAttention):
    """Attention whose queries and keys are RMS-normalized per head before rotary positions turn them
    (Henry et al. 2020; Dehghani et al. 2023): the scores q·k / sqrt(D) stay bounded however weights grow."""

    def attend(self, q, k, v, cache=None, layer: int = 0) -> torch.Tensor:
        return super().attend(rms_norm(q), rms_norm(k), v, cache, layer)


class ReLU2MLP(MLP):
    "The MLP with the ReLU squared for its activation (So et al. 2021, Primer): C -> 4C -> relu(.)² -> C."

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.relu(self.fc(x)).square()))  # (B, T, C) -> (B, T, 4C) -> (B, T, C)


class ModernBlock(nn.Module):
    "Lesson 04's pre-norm block, each part chosen by the config: x + attn(norm(x)), then x + mlp(norm(x))."

    def __init__(self, config: ModernConfig):
        super().__init__()
        norm = (
            (lambda: RMSNorm())
            if config.norm == "rmsnorm"
            else (lambda: nn.LayerNorm(config.n_embd, bias=config.bias))
        )
        self.ln_1, self.ln_2 = norm(), norm()
        self.attn = (QKNormAttention if config.qk_norm else CausalSelfAttention)(config)
        self.mlp = (ReLU2MLP if config.mlp == "relu2" else MLP)(config)

    def forward(self, x: torch.Tensor, cache=None, layer: int = 0) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache, layer)
        return x + self.mlp(self.ln_2(x))


class ModernGPT(GPT):
    """Lesson 04's GPT with `ModernBlock`s, the final norm of the config's kind, and an LM head of its own
    where `tied_head` is false. Its forward pass, sampling and KV cache are GPT's."""

    def __init__(self, config: ModernConfig):
        super().__init__(config)
        self.blocks = nn.ModuleList(ModernBlock(config) for _ in range(config.n_layer))
        if config.norm == "rmsnorm":
            self.ln_f = RMSNorm()
        if not config.tied_head:  # a (V, C) matrix of its own: writing a token need not look like reading it
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # drawn again from GPT-2's initialisation: the new modules, and the old ones in the same order
        self.apply(lambda module: _init_weights(module, config.n_layer, self.init_std))

    def flops_per_token(self) -> int:
        "GPT's count; with an untied head, its matrix is in the matmuls and the embedding (a lookup) is not."
        lookup = 0 if self.config.tied_head else self.wte.weight.numel()  # a lookup, not a matmul
        return super().flops_per_token() - 6 * lookup


def build_model(config: GPTConfig) -> GPT:
    "Lesson 04's `GPT` where the config asks for nothing modern (the same weights as ever), else `ModernGPT`."
    if isinstance(config, ModernConfig) and config.modern:
        return ModernGPT(config)
    return GPT(config)


def newton_schulz(g: torch.Tensor, steps: int = 5, eps: float = 1e-7, dtype=torch.float32) -> torch.Tensor:
    """The nearest semi-orthogonal matrix to g (m, n), approximately: U V^T of g = U S V^T, every singular
    value moved towards 1 by `steps` iterations of a quintic polynomial (Jordan et al. 2024, Muon; the
    coefficients make the small singular values grow fastest). Computed in `dtype`: bf16 is enough for a
    direction, and 2-3x faster where matrix units run it."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.to(dtype)
    tall = x.size(0) > x.size(1)
    if tall:  # iterate on the wide orientation: X X^T is then the smaller square
        x = x.T
    x = x / (x.norm() + eps)  # singular values <= 1: the iteration converges from there
    for _ in range(steps):
        s = x @ x.T  # (m, m)
        x = a * x + (b * s + c * s @ s) @ x
    return (x.T if tall else x).to(g.dtype)


class Muon(torch.optim.Optimizer):
    """Muon (Jordan et al. 2024) for the parameter groups marked `muon=True`, AdamW for the others, in one
    optimizer (one step, one state dict, one learning rate schedule). A Muon matrix moves by its Nesterov
    momentum orthogonalized (`newton_schulz`), scaled by 0.2 sqrt(max(m, n)) so that its RMS matches AdamW's
    typical update (Liu et al. 2025, Moonlight): the same learning rate and weight decay serve both."""

    def __init__(
        self,
        groups,
        lr: float,
        betas=(0.9, 0.95),
        eps: float = 1e-8,
        momentum: float = 0.95,
        ns_steps: int = 5,
        ns_dtype=torch.float32,
    ):
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=0.0,
            momentum=momentum,
            ns_steps=ns_steps,
            muon=False,
            lr_ratio=1.0,
        )
        super().__init__(groups, defaults)
        self.ns_dtype = ns_dtype  # Newton-Schulz's dtype: the run's matmul precision

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                lr = group["lr"] * group["lr_ratio"]  # the schedule's rate, times the group's own ratio
                p.mul_(1 - lr * group["weight_decay"])  # decoupled weight decay, as AdamW's
                (self._muon if group["muon"] else self._adamw)(p, group, lr)
        return loss

    def _muon(self, p: torch.Tensor, group: dict, lr: float) -> None:
        state = self.state[p]
        if not state:
            state["momentum"] = torch.zeros_like(p)
        buf, mu = state["momentum"], group["momentum"]
        buf.lerp_(p.grad, 1 - mu)  # a running mean of the gradients
        # Nesterov's momentum (the gradient a step further along the mean), orthogonalized
        update = newton_schulz(p.grad.lerp(buf, mu), group["ns_steps"], dtype=self.ns_dtype)
        p.add_(update, alpha=-lr * 0.2 * math.sqrt(max(p.shape)))

    def _adamw(self, p: torch.Tensor, group: dict, lr: float) -> None:
        state = self.state[p]
        if not state:
            state["step"], state["exp_avg"], state["exp_avg_sq"] = (
                torch.tensor(0.0),
                torch.zeros_like(p),
                torch.zeros_like(p),
            )
        (b1, b2), g = group["betas"], p.grad
        state["step"] += 1
        state["exp_avg"].lerp_(g, 1 - b1)
        state["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (state["exp_avg_sq"] / (1 - b2 ** state["step"])).sqrt_().add_(group["eps"])
        p.addcdiv_(state["exp_avg"], denom, value=-lr / (1 - b1 ** state["step"]))


def muon_groups(model: nn.Module, weight_decay: float, lr_ratio: float = 1.0) -> list[dict]:
    """The blocks' weight matrices for Muon (decayed); the embedding and an untied head for AdamW (decayed);
    vectors (gains, biases) for AdamW without decay. Embeddings and the head are not hidden linear maps:
    Muon's orthogonal update does not suit a lookup table or the read-out (Jordan et al. 2024). The Muon
    group's learning rate is the schedule's times `lr_ratio`."""
    muon, decay, no_decay = [], [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (
                muon if p.ndim >= 2 and name.startswith("blocks.") else decay if p.ndim >= 2 else no_decay
            ).append(p)
    return [
        {"params": muon, "weight_decay": weight_decay, "muon": True, "lr_ratio": lr_ratio, "name": "muon"},
        {"params": decay, "weight_decay": weight_decay, "name": "decay"},
        {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"},
    ]
