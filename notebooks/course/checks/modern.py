"""Checks of the pieces written in lesson 07 (what changed since GPT-2), and the interface each piece keeps.

Hand-written tooling of the course, not part of the installed package. Each piece is an exercise region of
an exported cell of `notebooks/07_modern.ipynb`; the rest of 07 builds its models and its optimizer from
the learner's versions once they pass (`ModernBlock` builds the current `RMSNorm`, `QKNormAttention` and
`ReLU2MLP`, `RMSNorm` and `QKNormAttention` call the current `rms_norm`, `build_model` builds the current
`ModernGPT`, `Muon` the current `newton_schulz`), so each keeps the interface of gptlib's object:

- `rms_norm(x, eps=1e-6) -> Tensor`: x (..., C) divided by its root mean square over the last dimension,
  `torch.nn.functional.rms_norm(x, (C,), eps=eps)` without a weight, in x's dtype.
- `ReLU2MLP(config)`: lesson 04's `MLP` (layers `fc`, `proj`, `dropout`) whose `forward(x)` is
  dropout(proj(relu(fc(x))²)).
- `QKNormAttention(config)`: lesson 04's `CausalSelfAttention` whose `attend(q, k, v, cache, layer)`
  RMS-normalizes each head's q and k (over D) and then attends as 04's does (rotary positions, the cache).
- `ModernGPT(config)`: lesson 04's `GPT` with `ModernBlock`s, whose `__init__` gives the head an
  `nn.Linear(C, V, bias=False)` of its own where `config.tied_head` is false.
- `newton_schulz(g, steps=5, eps=1e-7, dtype=torch.float32) -> Tensor`: g (m, n) -> (m, n) in g's dtype,
  every singular value moved towards 1, the direction that of U V^T; gptlib's quintic iteration.
- `Muon(groups, lr, ...)`: gptlib's optimizer, whose `_muon(p, group, lr)` moves a matrix of a `muon`
  group by its Nesterov momentum orthogonalized, times `lr` (the schedule's rate times the group's
  `lr_ratio`) and 0.2 sqrt(max(m, n)), its momentum in `self.state[p]`.

Each check runs on small fixed inputs, compares with gptlib (or torch) and, on a difference, names the
mistake: the hints come from computing the usual wrong answers here. tests/test_course_modern.py proves that
each accepts gptlib's answer and rejects plausible wrong ones.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from course.checks.model import (
    _close,
    _config,
    _expect,
    _first_mismatch,
    _in_bf16,
    _pair,
    _randn,
    _shape,
    _two_chunks_as_one,
    mlp_check,
)
from course.checks.optim import _calling
from course.pieces import exercise
from gptlib import modern as gm

LESSON = "07_modern"


# --- rms_norm ----------------------------------------------------------------------------------------------


@exercise(LESSON, reference="gptlib.modern:rms_norm", minutes=5)
def rms_norm(fn) -> str:
    x = _randn(3, 5, 16) * 7 + 2  # an offset: a norm that subtracts the mean is then visibly a LayerNorm
    got = _calling("rms_norm(x)", fn, x)
    want = F.rms_norm(x, (16,), eps=1e-6)
    _expect(
        isinstance(got, torch.Tensor) and got.shape == x.shape,
        f"rms_norm gave {_shape(got)} for x of shape {tuple(x.shape)}: the same shape comes back",
    )
    if not _close(got, want):
        _first_mismatch(
            {
                "the mean is subtracted: that is a LayerNorm; RMSNorm only divides by sqrt(mean(x²))": (
                    F.layer_norm(x, (16,), eps=1e-6)
                ),
                "divided by the vector's length, ||x||: divide by the root of the *mean* square, "
                "sqrt(mean(x²)), which is ||x|| / sqrt(C)": x / x.norm(dim=-1, keepdim=True),
                "divided by mean(x²) without the square root": x / (x.pow(2).mean(-1, keepdim=True) + 1e-6),
                "the mean runs over every value of x: take it over the last dimension only, "
                "mean(dim=-1, keepdim=True)": x * torch.rsqrt(x.pow(2).mean() + 1e-6),
            },
            got,
        )
        raise AssertionError(
            f"rms_norm differs from torch.nn.functional.rms_norm by up to {(got - want).abs().max():.3g}: "
            "x * rsqrt(mean(x², last dimension) + eps)"
        )
    small = x * 1e-4  # mean(x²) about 1e-7: here eps matters
    got = _calling("rms_norm(x)", fn, small)
    _expect(
        _close(got, F.rms_norm(small, (16,), eps=1e-6), tol=1e-4),
        "for a tiny x it differs from torch's: eps goes inside the root, rsqrt(mean(x²) + eps), not "
        "1 / (sqrt(mean(x²)) + eps)",
    )
    low = _calling("rms_norm(x)", fn, x.bfloat16())
    _in_bf16(
        low,
        "x",
        "the result keeps x's dtype (compute the mean square in float32 if you like, and cast the factor "
        "back with .to(x.dtype))",
    )
    _expect(
        _close(low.float(), want, tol=3e-2),
        "a bf16 x gives a result far from the float32 one: compute the mean square in float32",
    )
    return "equal to torch.nn.functional.rms_norm, eps inside the root, in x's dtype"


# --- ReLU2MLP ----------------------------------------------------------------------------------------------


@exercise(LESSON, reference="gptlib.modern:ReLU2MLP", name="ReLU2MLP", minutes=5)
def check_relu2_mlp(cls) -> str:
    "`ReLU2MLP.forward`: dropout(proj(relu(fc(x))²)) against gptlib's module with the same weights."

    def mistakes(reference, h):
        return {
            "ReLU without the square: F.relu(h).square()": reference.proj(F.relu(h)),
            "the square without the ReLU: negative values come back positive; F.relu(h).square()": (
                reference.proj(h.square())
            ),
            "GELU squared: the activation is the ReLU squared": reference.proj(F.gelu(h).square()),
            "lesson 04's GELU: the activation is the ReLU squared": reference.proj(F.gelu(h)),
            "the square comes after proj: it goes between fc and proj": reference.proj(F.relu(h)).square(),
        }

    formula, forward = "dropout(proj(relu(fc(x))²))", lambda module, x: _calling("forward", module, x)
    return mlp_check(cls, gm.ReLU2MLP, mistakes, formula, "ReLU² MLP", call=forward)


# --- QKNormAttention ---------------------------------------------------------------------------------------


class _Variant(gm.CausalSelfAttention):
    "04's attention whose `attend` first applies `self.change(q, k, v)`: a wrong answer, computed."

    change = None

    def attend(self, q, k, v, cache=None, layer: int = 0):
        q, k, v = self.change(q, k, v)
        return super().attend(q, k, v, cache, layer)


def _variant(reference, config, change):
    "A copy of `reference`'s weights whose attend applies `change` to q, k, v."
    variant = _Variant(config)
    variant.change = change
    variant.load_state_dict(reference.state_dict())
    return variant.eval()


@exercise(LESSON, reference="gptlib.modern:QKNormAttention", name="QKNormAttention", minutes=10)
def check_qk_norm_attention(cls) -> str:
    "`QKNormAttention.attend`: q and k RMS-normalized per head, then 04's attend, with and without a cache."
    n = gm.rms_norm
    for positions in ("sinusoidal", "rotary"):
        config = _config(positions=positions)
        mine, reference = _pair(cls, gm.QKNormAttention, config)
        with torch.no_grad():
            for module in (mine, reference):  # queries and keys far from RMS 1, as trained weights make them
                module.qkv.weight.mul_(4.0)
            x = _randn(2, 6, 16) * 2
            got, want = _calling("forward", mine, x), reference(x)
            _expect(
                isinstance(got, torch.Tensor) and got.shape == x.shape,
                f"forward gave shape {_shape(got)}: (B, T, C) in, (B, T, C) out; attend returns (B, H, T, D)",
            )
            if not _close(got, want):
                wrong = {
                    "the values are normalized too: only q and k are, v keeps its size": (
                        lambda q, k, v: (n(q), n(k), n(v))
                    ),
                    "only the queries are normalized: rms_norm(q) and rms_norm(k)": (
                        lambda q, k, v: (n(q), k, v)
                    ),
                    "only the keys are normalized: rms_norm(q) and rms_norm(k)": (
                        lambda q, k, v: (q, n(k), v)
                    ),
                    "nothing is normalized: call rms_norm on q and k before super().attend": (
                        lambda q, k, v: (q, k, v)
                    ),
                    "normalized over the positions (dim -2): each head's vector of D values is normalized, "
                    "over the last dimension": lambda q, k, v: (
                        (n(q.transpose(-1, -2)).transpose(-1, -2),)
                        + (n(k.transpose(-1, -2)).transpose(-1, -2), v)
                    ),
                }
                hints = {}
                for hint, change in wrong.items():
                    hints[hint] = _variant(reference, config, change)(x)
                _first_mismatch(hints, got)
                raise AssertionError(
                    f"forward differs from gptlib's by up to {(got - want).abs().max().item():.3g} "
                    f"({positions} positions): super().attend(rms_norm(q), rms_norm(k), v, cache, layer)"
                )
            _two_chunks_as_one(mine, x, want, "pass `cache` and `layer` on to super().attend")
    return "equal to gptlib's QK-norm attention, with sinusoidal and rotary positions, with a KV cache"


# --- ModernGPT's untied head --------------------------------------------------------------------------------


@exercise(LESSON, reference="gptlib.modern:ModernGPT", name="ModernGPT", minutes=5)
def check_untied_head(cls) -> str:
    """`ModernGPT`'s untied head: an `nn.Linear(C, V, bias=False)` of its own, drawn as GPT-2 draws, and with
    gptlib's weights the logits gptlib's; with `tied_head` true the head stays the embedding's matrix. The
    lesson's random numbers after the check are those before it (its models draw from a forked generator)."""
    with torch.random.fork_rng():
        return _untied_head(cls)


def _untied_head(cls) -> str:
    fields = {"vocab_size": 64, "context": 16, "n_layer": 2, "n_head": 2, "n_embd": 16}
    config = gm.ModernConfig(**fields, dropout=0.0, attn_dropout=0.0, tied_head=False)
    torch.manual_seed(0)
    reference = gm.ModernGPT(config).eval()
    mine = cls(config)
    head = getattr(mine, "lm_head", None)
    _expect(
        isinstance(head, nn.Linear),
        f"lm_head is {type(head).__name__}: an nn.Linear(config.n_embd, config.vocab_size, bias=False)",
    )
    _expect(
        head.weight is not mine.wte.weight,
        "the head still reads with the embedding's matrix: untied, it is a module of its own, "
        "self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)",
    )
    _expect(
        tuple(head.weight.shape) == (64, 16),
        f"the head's matrix is {_shape(head.weight)}: (V, C) = (64, 16), "
        "nn.Linear(n_embd, vocab_size) maps C to V",
    )
    _expect(head.bias is None, "the head has a bias: bias=False, as the tied head of lesson 04 has none")
    # drawn as GPT-2 draws (04): a head built after the model drew its weights keeps nn.Linear's own draw,
    # uniform in +-1/sqrt(C) (std 0.14 here); how the head is built (a new module, a new Parameter) is free
    std = head.weight.std().item()
    _expect(
        std < 2 * reference.init_std,
        f"the head's weights have std {std:.3f}, not GPT-2's {reference.init_std}: build it where the stub "
        "is, before the model draws all its weights again",
    )
    got, want = mine.state_dict(), reference.state_dict()
    _expect(
        sorted(got) == sorted(want),
        f"the model's parameters are not gptlib's ({sorted(set(got) ^ set(want))}): "
        "build the head, nothing else",
    )
    mine.load_state_dict(want)
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _expect(
            _close(mine.eval()(idx)[0], reference(idx)[0]),
            "with gptlib's weights the logits differ from gptlib's",
        )
    tied = cls(replace(config, tied_head=True))
    _expect(
        tied.lm_head.weight is tied.wte.weight,
        "with tied_head true the head must stay the embedding's matrix: "
        "untie it only when tied_head is false",
    )
    return "a (V, C) head of its own, no bias, drawn as gptlib's; the logits equal; tied when asked"


# --- newton_schulz ------------------------------------------------------------------------------------------


def _with_singular_values(m: int, n: int, low: float = 0.1, seed: int = 0) -> tuple:
    "g = U S V^T (m, n) with singular values from `low` to 1, and its U V^T."
    k = min(m, n)
    generator = torch.Generator().manual_seed(seed)
    u = torch.linalg.qr(torch.randn(m, k, generator=generator))[0]
    v = torch.linalg.qr(torch.randn(n, k, generator=generator))[0]
    return u @ torch.diag(torch.logspace(math.log10(low), 0, k)) @ v.T, u @ v.T


@exercise(LESSON, reference="gptlib.modern:newton_schulz", minutes=15)
def newton_schulz(fn) -> str:
    for m, n in ((16, 48), (48, 16), (32, 32)):
        g, direction = _with_singular_values(m, n)
        g = g * 30  # the iteration must not depend on g's size: it starts from g / ||g||
        got = _calling(f"newton_schulz(g) of a ({m}, {n}) g", fn, g)
        _expect(
            isinstance(got, torch.Tensor) and got.shape == g.shape,
            f"a ({m}, {n}) g gave {_shape(got)}: the result has g's shape (a tall g: iterate on g.T, "
            "transpose back)",
        )
        _expect(
            bool(torch.isfinite(got).all()),
            f"a ({m}, {n}) g gave inf or nan: divide g by its norm first (x / (x.norm() + eps)), so that "
            "every singular value starts at most 1, where the iteration converges",
        )
        s = torch.linalg.svdvals(got.double())
        want = gm.newton_schulz(g)
        if not _close(got, want, tol=1e-4):
            _expect(
                s.max() < 1.5,
                f"singular values up to {s.max():.3g} for a ({m}, {n}) g: the iteration blows up; start from "
                "g / ||g|| and check the coefficients: a = 3.4445 on x, b = -4.7750 on s @ x, c = 2.0315 on "
                "s @ s @ x, with s = x @ x.T",
            )
            _expect(
                s.min() > 0.5,
                f"singular values down to {s.min():.3g} for a ({m}, {n}) g (they were 0.1 to 1 times "
                "||g||): the small ones did not grow; run `steps` iterations, each x = a x + (b s + c s²) x",
            )
            raise AssertionError(
                f"for a ({m}, {n}) g it differs from gptlib's by up to {(got - want).abs().max():.3g}: "
                "x = g / (||g|| + eps), then `steps` times s = x @ x.T, x = a x + (b s + c s @ s) @ x; "
                "check the coefficients: a = 3.4445 on x, b = -4.7750 on s @ x, c = 2.0315 on s @ s @ x"
            )
        cosine = F.cosine_similarity(got.flatten().double(), direction.flatten().double(), dim=0)
        _expect(cosine > 0.9, f"its direction is far from U V^T (cosine {cosine:.2f})")
    g, _ = _with_singular_values(24, 40, seed=1)
    fewer = _calling("newton_schulz(g, steps=2)", fn, g, 2)
    _expect(
        _close(fewer, gm.newton_schulz(g, 2), tol=1e-4),
        "newton_schulz(g, steps=2) differs from gptlib's: run `steps` iterations, not a fixed number",
    )
    low = _calling("newton_schulz(g) of a bf16 g", fn, g.bfloat16())
    _in_bf16(low, "g", "compute in `dtype`, return in g's dtype (.to(g.dtype))")
    return "equal to gptlib's iteration: singular values near 1, the direction of U V^T, g's shape and dtype"


# --- Muon ---------------------------------------------------------------------------------------------------


def _muon_steps(cls, steps: int = 3, **options):
    """Three steps of an optimizer of class `cls` over a (24, 40) matrix in a Muon group (at half the
    schedule's rate) and a vector in an AdamW group, each step with gradients of its own: the parameters
    after them, and the optimizer."""
    generator = torch.Generator().manual_seed(0)
    matrix = torch.nn.Parameter(torch.randn(24, 40, generator=generator) * 0.1)
    vector = torch.nn.Parameter(torch.randn(40, generator=generator) * 0.1)
    groups = [
        {"params": [matrix], "weight_decay": 0.1, "muon": True, "lr_ratio": 0.5, "name": "muon"},
        {"params": [vector], "weight_decay": 0.0, "name": "no_decay"},
    ]
    optimizer = cls(groups, lr=0.02, **options)
    for _ in range(steps):
        matrix.grad = torch.randn(matrix.shape, generator=generator)
        vector.grad = torch.randn(vector.shape, generator=generator)
        optimizer.step()
    return matrix.detach(), vector.detach(), optimizer


def _wrong_muon(update):
    "gptlib's Muon whose matrix update is `update(self, p, group, lr)`: a wrong answer, computed."
    return type("WrongMuon", (gm.Muon,), {"_muon": update})


def _nesterov(self, p, group) -> torch.Tensor:
    "gptlib's momentum and Nesterov step: the matrix Newton-Schulz is given."
    buf = self.state[p].setdefault("momentum", torch.zeros_like(p))
    buf.lerp_(p.grad, 1 - group["momentum"])
    return p.grad.lerp(buf, group["momentum"])


def _scaled_by(factor, rate=lambda lr, group: lr):
    "An update scaled by `factor(p)` instead of Moonlight's, at the rate `rate(lr, group)`."

    def update(self, p, group, lr):
        ortho = gm.newton_schulz(_nesterov(self, p, group), group["ns_steps"])
        p.add_(ortho, alpha=-rate(lr, group) * factor(p))

    return update


def _moonlight(p) -> float:
    return 0.2 * math.sqrt(max(p.shape))


def _plain_momentum(self, p, group, lr):
    _nesterov(self, p, group)
    buf = self.state[p]["momentum"]
    p.add_(gm.newton_schulz(buf, group["ns_steps"]), alpha=-lr * _moonlight(p))


def _no_momentum(self, p, group, lr):
    p.add_(gm.newton_schulz(p.grad, group["ns_steps"]), alpha=-lr * _moonlight(p))


def _decayed_again(self, p, group, lr):
    p.mul_(1 - lr * group["weight_decay"])
    gm.Muon._muon(self, p, group, lr)


@exercise(LESSON, reference="gptlib.modern:Muon", name="Muon", minutes=15)
def check_muon(cls) -> str:
    "`Muon._muon`: three steps of a matrix and a vector against gptlib's Muon, from the same gradients."
    got, vector, optimizer = _calling("three steps of your Muon", _muon_steps, cls)
    want, want_vector, _ = _muon_steps(gm.Muon)
    _expect(
        _close(vector, want_vector, tol=1e-6),
        "the AdamW group's vector moved differently from gptlib's: keep the given step() and _adamw",
    )
    if not _close(got, want, tol=1e-5):
        hints = {
            "the update leaves out Nesterov's look-ahead: orthogonalize p.grad.lerp(buf, momentum), the mean "
            "updated once more with the same gradient, not the mean buf itself": _plain_momentum,
            "no momentum: the gradient is orthogonalized alone; keep a running mean in self.state[p] "
            "(buf.lerp_(p.grad, 1 - momentum)) and use Nesterov's p.grad.lerp(buf, momentum)": _no_momentum,
            "the update is not scaled: an orthogonal matrix has an RMS of about 1/sqrt(max(m, n)); multiply "
            "the rate by 0.2 * sqrt(max(m, n)) (Moonlight's scale, AdamW's typical RMS)": (
                _scaled_by(lambda p: 1.0)
            ),
            "the rate is group['lr']: use the `lr` _muon is given, the schedule's rate times the group's "
            "lr_ratio": _scaled_by(_moonlight, rate=lambda lr, group: group["lr"]),
            "scaled by sqrt(min(m, n)): Moonlight's scale is 0.2 * sqrt(max(m, n)), the larger side": (
                _scaled_by(lambda p: 0.2 * math.sqrt(min(p.shape)))
            ),
            "scaled without the 0.2: 0.2 * sqrt(max(m, n)) matches the RMS of AdamW's typical update": (
                _scaled_by(lambda p: math.sqrt(max(p.shape)))
            ),
            "the weight decay is applied twice: step() already shrinks p before calling _muon": (
                _decayed_again
            ),
            "the matrix moves uphill: subtract the update, p.add_(update, alpha=-lr * scale)": (
                _scaled_by(lambda p: -_moonlight(p))
            ),
        }
        for hint, update in hints.items():
            wrong, _, _ = _muon_steps(_wrong_muon(update))
            _expect(not _close(got, wrong, tol=1e-5), hint)
        raise AssertionError(
            "after three steps the matrix differs from gptlib's Muon's by up to "
            f"{(got - want).abs().max():.3g}: "
            "buf.lerp_(grad, 1 - momentum); p -= lr * 0.2 sqrt(max(m, n)) * newton_schulz(grad.lerp(buf, "
            "momentum), ns_steps)"
        )
    state = optimizer.state_dict()["state"]
    _expect(
        any(isinstance(v, torch.Tensor) and v.shape == (24, 40) for s in state.values() for v in s.values()),
        "the momentum is not in the optimizer's state: keep it in self.state[p], so that a checkpoint "
        "resumes it",
    )
    return "three steps equal to gptlib's Muon: momentum, Nesterov, Newton-Schulz, Moonlight's scale"
