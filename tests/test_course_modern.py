"""The checks of lesson 07's pieces (notebooks/course/checks/modern.py): each accepts gptlib's reference, says
"not done" for an untouched stub, and rejects plausible wrong answers with the hint that names the mistake."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from course import pieces
from tools.checking import reference, rejects
from tools.checking import stub as _stub

from gptlib import modern as gm

LESSON_PIECES = ["rms_norm", "QKNormAttention", "ReLU2MLP", "ModernGPT", "newton_schulz", "Muon"]


def test_the_lesson_teaches_these_pieces():
    taught = [name for name, piece in pieces._registry().items() if piece.notebook == "07_modern"]
    assert sorted(taught) == sorted(LESSON_PIECES)


def test_workbook_06_gathers_the_pieces_of_01_to_06_only():
    assert pieces.YOUR_GPT_LESSONS[-1] == "06_training"
    assert "07_modern" in pieces.LESSONS and "07_modern" not in pieces.YOUR_GPT_LESSONS


@pytest.mark.parametrize("name", LESSON_PIECES)
def test_each_check_accepts_the_reference(name):
    outcome = pieces.run_check(name, reference(name))
    assert outcome.passed, outcome.detail


class StubAttention(gm.CausalSelfAttention):
    def attend(self, q, k, v, cache=None, layer=0):
        _stub()


class StubMLP(gm.MLP):
    def forward(self, x):
        _stub()


class StubMuon(gm.Muon):
    def _muon(self, p, group, lr):
        _stub()


def gpt_with_head(head):
    "ModernGPT whose `__init__` builds `head(config, model)` where the stub is (None: the tied head left)."

    class GPTWithHead(gm.ModernGPT):
        def __init__(self, config):
            gm.GPT.__init__(self, config)
            self.blocks = torch.nn.ModuleList(gm.ModernBlock(config) for _ in range(config.n_layer))
            if not config.tied_head and head is not None:
                self.lm_head = head(config, self)
            self.apply(lambda module: gm._init_weights(module, config.n_layer, self.init_std))

    return GPTWithHead


StubGPT = gpt_with_head(lambda config, model: _stub())


@pytest.mark.parametrize("name", LESSON_PIECES)
def test_an_untouched_stub_is_not_done(name):
    stubs = {"QKNormAttention": StubAttention, "ReLU2MLP": StubMLP, "ModernGPT": StubGPT, "Muon": StubMuon}
    stub = stubs.get(name, _stub)
    assert pieces.run_check(name, stub).status == "not done"


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda x, eps=1e-6: F.layer_norm(x, x.shape[-1:], eps=eps), "that is a LayerNorm"),
        (lambda x, eps=1e-6: x / x.norm(dim=-1, keepdim=True), "the vector's length"),
        (lambda x, eps=1e-6: x * torch.rsqrt(x.pow(2).mean() + eps), "over the last dimension only"),
        (lambda x, eps=1e-6: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps), "eps goes inside the root"),
        (lambda x, eps=1e-6: F.rms_norm(x.float(), x.shape[-1:], eps=eps), "the result keeps x's dtype"),
    ],
)
def test_rms_norm_check_names_the_mistake(wrong, hint):
    rejects("rms_norm", wrong, hint)


def mlp_with(activation):
    class WrongMLP(gm.MLP):
        def forward(self, x):
            return self.dropout(self.proj(activation(self.fc(x))))

    return WrongMLP


class NoDropoutMLP(gm.MLP):
    def forward(self, x):
        return self.proj(torch.relu(self.fc(x)).square())


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (mlp_with(torch.relu), "ReLU without the square"),
        (mlp_with(torch.square), "the square without the ReLU"),
        (mlp_with(F.gelu), "lesson 04's GELU"),
        (NoDropoutMLP, "not dropped out"),
    ],
)
def test_relu2_mlp_check_names_the_mistake(wrong, hint):
    rejects("ReLU2MLP", wrong, hint)


class UntiedAlways(gm.ModernGPT):  # the head's own matrix whatever the config asks
    def __init__(self, config):
        super().__init__(replace(config, tied_head=False))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (gpt_with_head(None), "still reads with the embedding's matrix"),
        (
            gpt_with_head(lambda c, m: torch.nn.Linear(c.vocab_size, c.n_embd, bias=False)),
            "(V, C) = (64, 16)",
        ),
        (gpt_with_head(lambda c, m: torch.nn.Linear(c.n_embd, c.vocab_size)), "the head has a bias"),
        (gpt_with_head(lambda c, m: torch.nn.Embedding(c.vocab_size, c.n_embd)), "lm_head is Embedding"),
        (UntiedAlways, "with tied_head true the head must stay the embedding's matrix"),
    ],
)
def test_untied_head_check_names_the_mistake(wrong, hint):
    rejects("ModernGPT", wrong, hint)


def test_untied_head_check_rejects_a_head_drawn_after_the_weights():
    "A head built after the model drew its weights again keeps nn.Linear's own draw, not GPT-2's."

    class LateHead(gm.ModernGPT):
        def __init__(self, config):
            super().__init__(replace(config, tied_head=True))
            if not config.tied_head:
                self.lm_head = torch.nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.config = config

    rejects("ModernGPT", LateHead, "not GPT-2's 0.02: build it where the stub is")


@pytest.mark.parametrize(
    "head",
    [
        lambda c, m: torch.nn.Linear(c.n_embd, c.vocab_size, False),
        lambda c, m: (
            setattr(m.lm_head, "weight", torch.nn.Parameter(torch.empty(c.vocab_size, c.n_embd))) or m.lm_head
        ),
        lambda c, m: (
            setattr(m.lm_head, "weight", torch.nn.Parameter(m.wte.weight.detach().clone())) or m.lm_head
        ),
    ],
)
def test_untied_head_check_accepts_other_ways_to_build_the_head(head):
    "A new Parameter on 04's head module is a head of its own too, though it draws no random numbers."
    outcome = pieces.run_check("ModernGPT", gpt_with_head(head))
    assert outcome.passed, outcome.detail


def attention_with(change, *, cache=True):
    class WrongAttention(gm.CausalSelfAttention):
        def attend(self, q, k, v, c=None, layer=0):
            q, k, v = change(q, k, v)
            return super().attend(q, k, v, c if cache else None, layer)

    return WrongAttention


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (
            attention_with(lambda q, k, v: (gm.rms_norm(q), gm.rms_norm(k), gm.rms_norm(v))),
            "values are normalized",
        ),
        (attention_with(lambda q, k, v: (gm.rms_norm(q), k, v)), "only the queries"),
        (attention_with(lambda q, k, v: (q, k, v)), "nothing is normalized"),
        (attention_with(lambda q, k, v: (gm.rms_norm(q), gm.rms_norm(k), v), cache=False), "KV cache"),
    ],
)
def test_qk_norm_check_names_the_mistake(wrong, hint):
    rejects("QKNormAttention", wrong, hint)


def ns_with(*, normalize=True, coefficients=(3.4445, -4.7750, 2.0315), fixed_steps=None, keep_dtype=True):
    "A Newton-Schulz iteration with one mistake built in, the rest of it right."

    def newton_schulz(g, steps=5, eps=1e-7, dtype=torch.float32):
        a, b, c = coefficients
        x = g.to(dtype)
        if normalize:
            x = x / (x.norm() + eps)
        for _ in range(fixed_steps or steps):
            s = x @ x.T
            x = a * x + (b * s + c * s @ s) @ x
        return x.to(g.dtype) if keep_dtype else x

    return newton_schulz


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (ns_with(normalize=False), "divide g by its norm first"),
        (ns_with(coefficients=(2.0315, -4.7750, 3.4445)), "check the coefficients"),
        (ns_with(coefficients=(1.0, 0.0, 0.0)), "the small ones did not grow"),
        (ns_with(fixed_steps=5), "run `steps` iterations"),
        (ns_with(keep_dtype=False), "return in g's dtype"),
    ],
)
def test_newton_schulz_check_names_the_mistake(wrong, hint):
    rejects("newton_schulz", wrong, hint)


def muon_with(update):
    return type("WrongMuon", (gm.Muon,), {"_muon": update})


def _momentum(self, p, group):
    buf = self.state[p].setdefault("momentum", torch.zeros_like(p))
    buf.lerp_(p.grad, 1 - group["momentum"])
    return buf


def without_nesterov(self, p, group, lr):
    buf = _momentum(self, p, group)
    p.add_(gm.newton_schulz(buf, group["ns_steps"]), alpha=-lr * 0.2 * math.sqrt(max(p.shape)))


def unscaled(self, p, group, lr):
    buf = _momentum(self, p, group)
    p.add_(gm.newton_schulz(p.grad.lerp(buf, group["momentum"]), group["ns_steps"]), alpha=-lr)


def with_the_groups_rate(self, p, group, lr):
    gm.Muon._muon(self, p, group, group["lr"])


def classic_momentum(self, p, group, lr):
    "Momentum as a sum (buf = mu buf + g) and Nesterov as g + mu buf: the same direction, so it passes."
    buf = self.state[p].setdefault("momentum", torch.zeros_like(p))
    buf.mul_(group["momentum"]).add_(p.grad)
    update = gm.newton_schulz(p.grad + group["momentum"] * buf, group["ns_steps"])
    p.add_(update, alpha=-lr * 0.2 * math.sqrt(max(p.shape)))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (muon_with(without_nesterov), "leaves out Nesterov's look-ahead"),
        (muon_with(unscaled), "the update is not scaled"),
        (muon_with(with_the_groups_rate), "use the `lr` _muon is given"),
    ],
)
def test_muon_check_names_the_mistake(wrong, hint):
    rejects("Muon", wrong, hint)


def test_muon_check_accepts_momentum_written_as_a_sum():
    outcome = pieces.run_check("Muon", muon_with(classic_momentum))
    assert outcome.passed, outcome.detail


def test_the_untied_head_check_leaves_the_lessons_random_numbers_as_they_were():
    "The lesson's cells after the check draw what they drew before it: the check seeds a forked generator."
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    assert pieces.run_check("ModernGPT", reference("ModernGPT")).passed
    assert torch.equal(torch.rand(3), before)
