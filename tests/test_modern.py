"""Lesson 07's pieces (gptlib.modern): each equal to a reference, GPT-2's model unchanged when none is asked
for, and a modern run that resumes bit for bit."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from test_train import losses, tiny

from gptlib.config import ConfigError
from gptlib.model import GPT, GPTConfig
from gptlib.modern import ModernConfig, ModernGPT, Muon, build_model, muon_groups, newton_schulz, rms_norm
from gptlib.run_folder import load_trained
from gptlib.train import train

MODERN = {"norm": "rmsnorm", "qk_norm": True, "mlp": "relu2", "tied_head": False, "bias": False}


def modern_config(**overrides) -> ModernConfig:
    return ModernConfig.from_dict({**GPTConfig.preset("tiny").to_dict(), **MODERN, **overrides})


def test_rms_norm_equals_torchs():
    x = torch.randn(3, 5, 16) * 7
    assert torch.allclose(rms_norm(x), F.rms_norm(x, (16,), eps=1e-6), atol=1e-6)
    assert torch.allclose(rms_norm(x).pow(2).mean(-1), torch.ones(3, 5), atol=1e-4)


def test_no_modern_piece_builds_gpt2s_model_with_the_same_weights():
    config = GPTConfig.preset("tiny")
    torch.manual_seed(0)
    reference = GPT(config)
    torch.manual_seed(0)
    built = build_model(ModernConfig.from_dict(config.to_dict()))
    assert type(built) is GPT
    assert all(
        torch.equal(a, b) for a, b in zip(reference.state_dict().values(), built.state_dict().values())
    )


def test_the_modern_model_has_its_pieces_and_counts_its_parameters():
    model = build_model(modern_config())
    assert isinstance(model, ModernGPT)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())  # RMSNorm has no parameters
    assert model.lm_head.weight is not model.wte.weight  # untied: a matrix of its own
    assert all(p.ndim == 2 for p in model.parameters())  # no biases, no gains: only matrices are learned
    c = model.config
    blocks = c.n_layer * 12 * c.n_embd**2
    assert model.num_params(non_embedding=False) == blocks + 2 * c.vocab_size * c.n_embd
    # the embedding is a lookup: the matmuls are the blocks' and the head's
    assert (
        model.flops_per_token()
        == 6 * (blocks + c.vocab_size * c.n_embd) + 12 * c.n_layer * c.n_embd * c.context
    )


def test_generation_with_the_kv_cache_equals_the_full_forward_pass():
    "QK-norm normalizes the keys before they are cached: the cached and the full pass see the same keys."
    torch.manual_seed(0)
    model = build_model(modern_config(positions="rotary")).eval()
    idx = torch.randint(0, model.config.vocab_size, (2, 9))
    out = model.generate(idx, 6, temperature=0)
    for t in range(9, 15):  # each generated token is the argmax of the full forward pass over its prefix
        logits, _ = model(out[:, :t])
        assert torch.equal(logits[:, -1].argmax(-1), out[:, t])


def test_a_config_field_of_lesson_07_is_validated():
    with pytest.raises(ConfigError, match="norm"):
        modern_config(norm="batchnorm")


def test_newton_schulz_orthogonalizes():
    """Every singular value near 1 (the quintic leaves them in about 0.7-1.2, where the input's were within a
    factor of 10), the directions U V^T of the SVD."""
    torch.manual_seed(0)
    for shape in [(16, 48), (48, 16), (32, 32)]:
        k = min(shape)  # g = U S V^T with singular values S from 0.1 to 1
        u, v = torch.linalg.qr(torch.randn(shape[0], k))[0], torch.linalg.qr(torch.randn(shape[1], k))[0]
        g = u @ torch.diag(torch.logspace(-1, 0, k)) @ v.T
        o = newton_schulz(g)
        s = torch.linalg.svdvals(o)
        assert s.min() > 0.6 and s.max() < 1.25, s
        u, _, vt = torch.linalg.svd(g, full_matrices=False)
        assert F.cosine_similarity(o.flatten(), (u @ vt).flatten(), dim=0) > 0.9


def test_muons_adamw_groups_step_as_torchs_adamw():
    torch.manual_seed(0)
    model = build_model(modern_config(bias=True, norm="layernorm"))
    twin = build_model(modern_config(bias=True, norm="layernorm"))
    twin.load_state_dict(model.state_dict())
    groups = muon_groups(model, 0.1)
    assert [len(g["params"]) > 0 for g in groups] == [True, True, True]
    groups[0]["lr"] = 0.0  # the blocks' matrices held still in both models, so both see the same gradients
    muon = Muon(groups, lr=1e-2)
    others = [g for g in muon_groups(twin, 0.1) if not g.get("muon")]
    adamw = torch.optim.AdamW(others, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    idx = torch.randint(0, 512, (2, 16))
    for _ in range(3):
        for m, opt in ((model, muon), (twin, adamw)):
            opt.zero_grad()
            m(idx, idx)[1].backward()
            opt.step()
    names = dict(twin.named_parameters())
    for name, p in model.named_parameters():
        if not name.startswith("blocks.") or p.ndim == 1:  # the AdamW parameters agree
            assert torch.allclose(p, names[name], atol=1e-6), name


def test_a_modern_run_with_muon_resumes_bit_for_bit_and_samples(small_data, tmp_path):
    cfg = tiny(small_data, tmp_path / "a", optimizer="muon", muon_lr=1e-2, **MODERN)  # Muon at its own rate
    full = train(cfg, log=None, progress=False)
    resumed = replace(cfg, out=str(tmp_path / "b"))
    train(resumed, until_step=7, log=None, progress=False)
    second = train(resumed, log=None, progress=False)
    assert losses(second) == losses(full)
    assert losses(full)[-1][1] < losses(full)[0][1] - 0.3  # it learns
    a, b = (load_trained(tmp_path / run, "latest")[0] for run in ("a", "b"))
    assert isinstance(a, ModernGPT)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_muon_lr_needs_muon():
    "A Muon rate with AdamW would change the recipe (its band, a lab trial's key) and do nothing."
    from gptlib.train_config import TrainConfig

    with pytest.raises(ConfigError, match="needs optimizer=muon"):
        TrainConfig.preset("tiny", muon_lr=1e-2)


def test_muon_groups_are_the_blocks_matrices_also_through_torch_compile():
    model = build_model(modern_config())
    raw = muon_groups(model, 0.1)
    compiled = muon_groups(torch.compile(model), 0.1)  # its parameter names gain a prefix; its blocks do not
    assert len(raw[0]["params"]) == 4 * model.config.n_layer
    assert [[id(p) for p in g["params"]] for g in raw] == [[id(p) for p in g["params"]] for g in compiled]


def test_newton_schulz_in_fp16_keeps_a_small_gradients_direction():
    "Scaled to norm 1 before the cast: a gradient of norm 1e-5 would otherwise lose most entries to fp16."
    torch.manual_seed(0)
    g = torch.randn(64, 256)
    g = g / g.norm() * 1e-5
    exact = newton_schulz(g)
    half = newton_schulz(g, dtype=torch.float16).float()
    assert F.cosine_similarity(half.flatten(), exact.flatten(), dim=0) > 0.99
