"""gptlib.model: shapes, causality, attention against an explicit reference, the KV cache, counts, init,
dropout, determinism, precisions, torch.compile and clear errors."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
import torch.nn.functional as F

from gptlib.errors import ConfigError
from gptlib.model import (
    GPT,
    GPT_PRESETS,
    CausalSelfAttention,
    GPTConfig,
    KVCache,
    generate,
    param_counts,
    rotary_tables,
    rotate,
    sample_next_token,
    sinusoidal_positions,
)

POSITIONS = ["sinusoidal", "rotary"]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and the CI machine is shared: no spinning thread pools."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny(**overrides) -> GPTConfig:
    return GPTConfig.preset("tiny", **overrides)


def seeded_model(config: GPTConfig, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(config)


def random_tokens(config: GPTConfig, batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))


# --- forward ---------------------------------------------------------------------------------------------


def test_forward_returns_logits_of_every_position_and_a_scalar_loss():
    config = tiny()
    model = seeded_model(config).eval()
    idx = random_tokens(config, 3, 17)
    logits, loss = model(idx)
    assert logits.shape == (3, 17, config.vocab_size) and loss is None
    logits2, loss = model(idx, idx.roll(-1, dims=1))
    assert loss.shape == () and torch.isfinite(loss)
    assert torch.equal(logits, logits2)


def test_loss_is_the_mean_cross_entropy_and_ignores_minus_one():
    config = tiny()
    model = seeded_model(config).eval()
    idx, targets = random_tokens(config, 2, 9), random_tokens(config, 2, 9, seed=2)
    logits, loss = model(idx, targets)
    assert torch.allclose(loss, F.cross_entropy(logits.reshape(-1, config.vocab_size), targets.reshape(-1)))
    masked = targets.clone()
    masked[:, :4] = -1
    _, loss_masked = model(idx, masked)
    expected = F.cross_entropy(logits[:, 4:].reshape(-1, config.vocab_size), targets[:, 4:].reshape(-1))
    assert torch.allclose(loss_masked, expected)


@pytest.mark.parametrize("positions", POSITIONS)
def test_changing_a_future_token_leaves_earlier_logits_unchanged(positions):
    config = tiny(positions=positions)
    model = seeded_model(config).eval()
    idx = random_tokens(config, 2, config.context)
    changed = idx.clone()
    t = 40
    changed[:, t] = (changed[:, t] + 1) % config.vocab_size
    before, _ = model(idx)
    after, _ = model(changed)
    assert torch.equal(before[:, :t], after[:, :t])
    assert not torch.allclose(before[:, t:], after[:, t:])


def explicit_causal_attention(attn: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """The reference: every head by hand, an explicit lower-triangular mask, softmax, weighted sum."""
    B, T, C = x.shape
    H = attn.n_head
    D = C // H
    q, k, v = attn.qkv(x).split(C, dim=2)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    heads = []
    for h in range(H):
        qh, kh, vh = (t[:, :, h * D : (h + 1) * D] for t in (q, k, v))  # (B, T, D)
        scores = qh @ kh.transpose(1, 2) / math.sqrt(D)  # (B, T, T)
        scores = scores.masked_fill(~mask, float("-inf"))
        heads.append(scores.softmax(dim=-1) @ vh)  # (B, T, D)
    return attn.proj(torch.cat(heads, dim=-1))


def turned_by_hand(t: torch.Tensor) -> torch.Tensor:
    """Rotary positions as complex numbers (Su et al. 2021, 3.2): channel pair (i, i + D/2) of t (..., T, D)
    is a + ib, multiplied by e^(i p theta_i) at position p, theta_i = 10000^(-2i/D)."""
    T, D = t.shape[-2:]
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    turn = torch.polar(
        torch.ones(T, D // 2, dtype=torch.float64), torch.arange(T)[:, None] * theta
    )  # (T, D/2)
    z = torch.complex(t[..., : D // 2].double(), t[..., D // 2 :].double()) * turn
    return torch.cat([z.real, z.imag], dim=-1).float()


def explicit_rotary_attention(attn: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    "The reference with rotary positions: each head's q and k turned by hand, then masked softmax."
    B, T, C = x.shape
    H, D = attn.n_head, C // attn.n_head
    q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in attn.qkv(x).split(C, dim=2))  # (B, H, T, D)
    q, k = turned_by_hand(q), turned_by_hand(k)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~torch.ones(T, T).tril().bool(), -math.inf)
    return attn.proj((scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("n_head", [1, 2, 4])
def test_sdpa_attention_equals_explicit_masked_softmax(n_head):
    config = tiny(n_head=n_head)
    torch.manual_seed(3)
    attn = CausalSelfAttention(config).eval()
    x = torch.randn(2, 23, config.n_embd)
    assert torch.allclose(attn(x), explicit_causal_attention(attn, x), atol=1e-6)


@pytest.mark.parametrize("n_head", [1, 2, 4])
def test_rotary_attention_equals_q_and_k_turned_as_complex_numbers(n_head):
    config = tiny(n_head=n_head, positions="rotary")
    torch.manual_seed(3)
    attn = CausalSelfAttention(config).eval()
    x = torch.randn(2, 23, config.n_embd)
    assert torch.allclose(attn(x), explicit_rotary_attention(attn, x), atol=1e-5)


def test_rotary_scores_depend_on_the_distance_alone_and_lengths_are_kept():
    cos, sin = rotary_tables(40, 16)
    torch.manual_seed(0)
    q, k = (torch.randn(16).expand(40, 16) for _ in range(2))  # the same query (key) at every position
    q_at, k_at = rotate(q, cos, sin), rotate(k, cos, sin)
    assert torch.allclose(q_at.norm(dim=-1), q.norm(dim=-1), atol=1e-5)
    scores = q_at @ k_at.T  # (T, T): the query at p against the key at s
    for distance in (0, 1, 7):
        along = scores.diagonal(-distance)
        assert torch.allclose(along, along[0].expand_as(along), atol=1e-4), distance
    assert not torch.allclose(scores.diagonal(-1)[0], scores.diagonal(-7)[0])


def test_rotary_positions_add_nothing_to_the_tokens_and_keep_the_checkpoint_format():
    sinusoidal, rotary = (seeded_model(tiny(positions=p)) for p in POSITIONS)
    assert torch.equal(rotary.wpe, torch.zeros_like(sinusoidal.wpe))
    assert rotary.state_dict().keys() == sinusoidal.state_dict().keys()  # the angles are not saved
    assert rotary.num_params(non_embedding=False) == sinusoidal.num_params(non_embedding=False)


# --- KV cache and generation -------------------------------------------------------------------------------


@pytest.mark.parametrize("positions", POSITIONS)
def test_hidden_states_read_in_chunks_through_the_cache_equal_one_pass(positions):
    config = tiny(positions=positions)
    model = seeded_model(config).eval()
    idx = random_tokens(config, 2, 30)
    full = model.hidden_states(idx)
    cache = KVCache(config.n_layer, config.context)
    parts = [model.hidden_states(idx[:, a:b], cache) for a, b in [(0, 11), (11, 12), (12, 30)]]
    assert cache.length == 30
    assert torch.allclose(torch.cat(parts, dim=1), full, atol=1e-5)


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("temperature, top_k, top_p", [(0.0, None, None), (1.0, None, None), (0.8, 20, 0.9)])
def test_generation_with_and_without_the_kv_cache_gives_the_same_tokens(temperature, top_k, top_p, positions):
    config = tiny(positions=positions)
    model = seeded_model(config)
    prompt = random_tokens(config, 2, 7)
    # 7 + 70 tokens outgrow the context of 64: the window slides and the cache is refilled
    outs = [
        generate(
            model,
            prompt,
            70,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            use_cache=use_cache,
            generator=torch.Generator().manual_seed(5),
        )
        for use_cache in (True, False)
    ]
    assert outs[0].shape == (2, 77)
    assert torch.equal(outs[0], outs[1])
    assert torch.equal(outs[0][:, :7], prompt)


def test_generation_reads_only_the_latest_context_tokens_of_a_long_prompt():
    config = tiny()
    model = seeded_model(config)
    prompt = random_tokens(config, 1, 100)
    out = generate(model, prompt, 3, temperature=0.0)
    cropped = generate(model, prompt[:, -config.context :], 3, temperature=0.0)
    assert torch.equal(out[:, -3:], cropped[:, -3:])


def test_generation_stops_at_eos_and_pads_finished_rows_with_it():
    config = tiny()
    model = seeded_model(config)
    prompt = random_tokens(config, 2, 5)
    free = generate(model, prompt, 30, temperature=0.0)
    eos = int(free[0, 5 + 3])  # row 0 produces this token at its 4th new position
    out = generate(model, prompt, 30, temperature=0.0, eos_id=eos)
    first = [int((row[5:] == eos).nonzero()[0]) if (row[5:] == eos).any() else None for row in out]
    assert first[0] is not None and first[0] <= 3
    for row, stop in zip(out, first):
        if stop is not None:
            assert (row[5 + stop :] == eos).all()
    if all(stop is not None for stop in first):
        assert out.size(1) == 5 + max(first) + 1  # stops as soon as every row has finished
    assert torch.equal(out[:, : 5 + first[0] + 1][0], free[0, : 5 + first[0] + 1])


def test_generate_restores_the_training_mode_and_keeps_no_gradient():
    model = seeded_model(tiny(dropout=0.2)).train()
    out = generate(model, random_tokens(model.config, 1, 4), 5)
    assert model.training and not out.requires_grad
    model.eval()
    generate(model, random_tokens(model.config, 1, 4), 5)
    assert not model.training


def test_top_k_and_top_p_keep_only_the_likely_tokens():
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log().repeat(2000, 1)
    gen = torch.Generator().manual_seed(0)
    assert set(sample_next_token(logits, top_k=2, generator=gen).tolist()) == {0, 1}
    assert set(sample_next_token(logits, top_p=0.8, generator=gen).tolist()) == {0, 1}
    assert set(sample_next_token(logits, top_p=0.81, generator=gen).tolist()) == {0, 1, 2}
    assert set(sample_next_token(logits, top_p=1e-6, generator=gen).tolist()) == {0}
    assert set(sample_next_token(logits, generator=gen).tolist()) == {0, 1, 2, 3}
    assert torch.equal(sample_next_token(logits[:3], temperature=0.0), torch.zeros(3, dtype=torch.long))


def test_top_k_keeps_exactly_k_tokens_when_scores_tie():
    logits = torch.tensor([[2.0, 1.0, 1.0, 1.0, 0.0]]).repeat(4000, 1)
    drawn = set(sample_next_token(logits, top_k=2, generator=torch.Generator().manual_seed(0)).tolist())
    assert len(drawn) == 2 and 0 in drawn and drawn <= {0, 1, 2, 3}


@pytest.mark.parametrize("temperature", [1e-30, 1e-38, 1e-45, 5e-324])
def test_a_vanishing_temperature_samples_greedily_and_stays_finite(temperature):
    "Where logits / temperature overflows float32, sampling takes its limit: the most likely token."
    logits = torch.tensor([[3.0, -1.0, 2.5, 0.0], [-5.0, -7.0, -6.0, -9.0], [1.0, 4.0, 4.0, 0.0]])
    gen = torch.Generator().manual_seed(0)
    for top_k, top_p in [(None, None), (2, None), (None, 0.9)]:
        drawn = sample_next_token(logits.repeat(200, 1), temperature, top_k, top_p, generator=gen).view(
            200, 3
        )
        assert (drawn[:, 0] == 0).all() and (drawn[:, 1] == 0).all()
        assert set(drawn[:, 2].tolist()) == {1, 2}  # a tie for the best score shares the draws


def test_a_vanishing_temperature_leaves_ordinary_rows_as_they_were():
    "Only rows whose scaled scores overflowed are replaced: at an ordinary temperature nothing changes."
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(3)) * 4
    scaled = logits / 0.8
    expected = torch.multinomial(scaled.softmax(-1), 1, generator=torch.Generator().manual_seed(1)).squeeze(
        -1
    )
    got = sample_next_token(logits, 0.8, generator=torch.Generator().manual_seed(1))
    assert torch.equal(got, expected)


def test_generation_with_a_vanishing_temperature_is_greedy():
    model = seeded_model(tiny())
    prompt = random_tokens(model.config, 2, 5)
    assert torch.equal(
        generate(model, prompt, 12, temperature=1e-40), generate(model, prompt, 12, temperature=0.0)
    )


def test_low_temperature_concentrates_on_the_most_likely_token():
    logits = torch.tensor([[2.0, 1.0, 0.0]]).repeat(4000, 1)
    gen = torch.Generator().manual_seed(0)
    hot = (sample_next_token(logits, temperature=2.0, generator=gen) == 0).float().mean()
    cold = (sample_next_token(logits, temperature=0.25, generator=gen) == 0).float().mean()
    assert cold > 0.95 > hot


# --- counting and init -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GPT_PRESETS))
@pytest.mark.parametrize("bias", [True, False])
def test_parameter_formula_equals_the_modules_count(name, bias):
    config = GPTConfig.preset(name, bias=bias)
    model = GPT(config)
    counts = param_counts(config)
    assert sum(counts.values()) == model.num_params(non_embedding=False)
    assert (
        model.num_params(non_embedding=True)
        == model.num_params(non_embedding=False) - counts["token embedding (= LM head)"]
    )
    by_name = {
        "attention": sum(p.numel() for n, p in model.named_parameters() if ".attn." in n),
        "MLP": sum(p.numel() for n, p in model.named_parameters() if ".mlp." in n),
        "LayerNorm": sum(p.numel() for n, p in model.named_parameters() if "ln_" in n),
    }
    for component, n in by_name.items():
        assert counts[component] == n, component


def test_gpt_25m_really_has_29_4_million_parameters():
    model = GPT(GPTConfig.preset("gpt-25m"))
    assert model.num_params(non_embedding=False) == 29_387_776
    assert model.flops_per_token() == 6 * 29_387_776 + 12 * 4 * 512 * 512


def test_lm_head_is_tied_to_the_token_embedding_and_positions_are_not_parameters():
    model = GPT(tiny())
    assert model.lm_head.weight is model.wte.weight
    names = {n for n, _ in model.named_parameters()}
    assert not any("wpe" in n for n in names)
    assert "wpe" not in model.state_dict()
    assert torch.equal(model.wpe, sinusoidal_positions(64, 64))


def test_residual_projections_are_initialised_smaller_by_sqrt_2L():
    config = GPTConfig.preset("cpu")
    model = seeded_model(config)
    expected = 0.02 / math.sqrt(2 * config.n_layer)
    for block in model.blocks:
        assert abs(block.attn.proj.weight.std().item() - expected) < 0.1 * expected
        assert abs(block.mlp.proj.weight.std().item() - expected) < 0.1 * expected
        assert abs(block.mlp.fc.weight.std().item() - 0.02) < 0.002
        assert (block.mlp.fc.bias == 0).all()


def test_token_vectors_enter_at_the_scale_of_the_sinusoids():
    model = seeded_model(GPTConfig.preset("cpu", positions="sinusoidal"))  # the `cpu` preset's are rotary
    tokens = model.wte.weight * model.embed_scale
    assert abs(tokens.pow(2).mean().sqrt().item() - 1.0) < 0.02
    assert abs(model.wpe.pow(2).mean().sqrt().item() - 0.5**0.5) < 0.01


@pytest.mark.parametrize("name", ["tiny", "cpu"])
def test_untrained_model_loss_is_about_ln_vocab(name):
    config = GPTConfig.preset(name)
    model = seeded_model(config).eval()
    idx, targets = random_tokens(config, 4, config.context), random_tokens(config, 4, config.context, seed=9)
    _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(config.vocab_size)) < 0.15


def test_sinusoidal_positions_follow_the_formula_and_their_similarity_depends_only_on_offset():
    table = sinusoidal_positions(50, 16)
    p, i = 7, 3
    assert math.isclose(table[p, 2 * i].item(), math.sin(p / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    assert math.isclose(table[p, 2 * i + 1].item(), math.cos(p / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    gram = table @ table.T
    assert torch.allclose(gram[10, 13], gram[30, 33], atol=1e-5)
    assert sinusoidal_positions(5, 7).shape == (5, 7)  # odd widths work too


# --- modes, determinism, precisions ----------------------------------------------------------------------


def test_dropout_is_active_only_in_training_mode():
    config = tiny(dropout=0.3)
    model = seeded_model(config)
    idx = random_tokens(config, 2, 20)
    model.train()
    assert not torch.equal(model(idx)[0], model(idx)[0])
    model.eval()
    assert torch.equal(model(idx)[0], model(idx)[0])


def test_same_seed_gives_the_same_model_outputs_and_samples():
    config = tiny(dropout=0.1)
    a, b = seeded_model(config, seed=4), seeded_model(config, seed=4)
    idx = random_tokens(config, 2, 12)
    torch.manual_seed(0)
    out_a = a(idx, idx)
    torch.manual_seed(0)
    out_b = b(idx, idx)
    assert torch.equal(out_a[0], out_b[0]) and torch.equal(out_a[1], out_b[1])

    def sample(m):
        return generate(m, idx, 10, generator=torch.Generator().manual_seed(1))

    assert torch.equal(sample(a), sample(b))
    by_method = a.generate(idx, 10, generator=torch.Generator().manual_seed(1))
    assert torch.equal(by_method, sample(a)), "GPT.generate is generate(model, ...)"
    assert not torch.equal(seeded_model(config, seed=5)(idx)[0], a.eval()(idx)[0])


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_forward_backward_agrees_with_fp32(dtype, positions):
    config = tiny(positions=positions)
    model = seeded_model(config)
    idx, targets = random_tokens(config, 2, 32), random_tokens(config, 2, 32, seed=3)
    _, loss32 = model(idx, targets)
    try:
        with torch.autocast("cpu", dtype=dtype):
            logits, loss = model(idx, targets)
    except RuntimeError as e:  # older torch builds lack fp16 autocast on CPU
        pytest.skip(f"{dtype} autocast unavailable on this CPU build: {e}")
    assert logits.dtype == dtype and loss.dtype == torch.float32
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    assert abs(loss.item() - loss32.item()) < 0.05


def test_model_cast_to_bfloat16_generates():
    model = seeded_model(tiny()).to(torch.bfloat16)
    assert model.wpe.dtype == torch.bfloat16
    out = model.generate(random_tokens(model.config, 1, 4), 8, use_cache=True)
    assert out.shape == (1, 12)


@pytest.mark.parametrize(
    "device",
    [
        pytest.param(
            "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
        ),
        pytest.param(
            "mps", marks=pytest.mark.skipif(not torch.backends.mps.is_available(), reason="no MPS device")
        ),
    ],
)
def test_accelerator_forward_and_cached_generation_match_cpu(device):
    config = tiny()
    model = seeded_model(config).eval()
    idx = random_tokens(config, 2, 20)
    logits_cpu, _ = model(idx)
    moved = model.to(device)
    logits_dev, _ = moved(idx.to(device))
    assert torch.allclose(logits_dev.cpu(), logits_cpu, atol=1e-4)
    a = generate(moved, idx.to(device), 20, temperature=0.0, use_cache=True)
    b = generate(moved, idx.to(device), 20, temperature=0.0, use_cache=False)
    assert torch.equal(a, b)


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="torch.compile on CPU needs a C/C++ compiler (inductor generates C++)",
)
@pytest.mark.parametrize("positions", POSITIONS)
def test_torch_compile_matches_eager_forward_and_backward(positions):
    config = tiny(n_layer=1, positions=positions)
    model = seeded_model(config)
    idx, targets = random_tokens(config, 2, 32), random_tokens(config, 2, 32, seed=3)
    _, eager_loss = model(idx, targets)
    eager_loss.backward()
    eager_grad = model.wte.weight.grad.clone()
    model.zero_grad()
    _, loss = torch.compile(model)(idx, targets)
    loss.backward()
    assert torch.allclose(loss, eager_loss, atol=1e-5)
    assert torch.allclose(model.wte.weight.grad, eager_grad, atol=1e-5)


# --- errors ---------------------------------------------------------------------------------------------


def test_width_not_divisible_by_heads_names_both_values():
    with pytest.raises(ValueError, match=r"n_embd=100 .*n_head=3"):
        GPTConfig(n_embd=100, n_head=3)


def test_positions_default_to_the_table_that_checkpoints_before_the_field_were_trained_with():
    """A checkpoint saved before `positions` existed records no such field, and is loaded (`load_trained`),
    resumed and compared with the field's default: that default must stay the sinusoidal table they had."""
    assert GPTConfig().positions == "sinusoidal"
    old = {k: v for k, v in GPTConfig.preset("cpu").to_dict().items() if k != "positions"}
    assert GPTConfig.from_dict(old).positions == "sinusoidal"


def test_rotary_positions_refuse_an_odd_head_width():
    with pytest.raises(ConfigError, match=r"head width .* = 3 must be even"):
        GPTConfig(n_embd=6, n_head=2, positions="rotary")
    GPTConfig(n_embd=6, n_head=2)  # the sinusoidal table has no such need


@pytest.mark.parametrize(
    "overrides, error, pattern",
    [
        ({"n_layer": 0}, ValueError, "n_layer"),
        ({"context": -4}, ValueError, "context"),
        ({"vocab_size": 3.5}, TypeError, "vocab_size"),
        ({"dropout": 1.0}, ValueError, "dropout"),
        ({"bias": "yes"}, TypeError, "bias"),
        ({"n_heads": 4}, ValueError, "n_heads"),
        ({"positions": "learned"}, ValueError, "positions"),
    ],
)
def test_bad_config_fields_raise_naming_the_field(overrides, error, pattern):
    with pytest.raises(error, match=pattern):
        GPTConfig.preset("tiny", **overrides)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="gpt-25m"):
        GPTConfig.preset("huge")


def test_the_cpu_training_preset_is_the_model_preset_with_two_modern_pieces():
    """One `cpu` shape: training it builds the model preset (no dropout, recipe search) with lesson 07's
    untied head and ReLU², and a run of it builds that model, not lesson 04's GPT of the same shape."""
    from gptlib.modern import ModernConfig, ModernGPT, ReLU2MLP
    from gptlib.train_config import TrainConfig, make_model

    preset = GPT_PRESETS["cpu"]
    assert preset.dropout == 0.0 and preset.attn_dropout == 0.0
    cfg = TrainConfig.preset("cpu", vocab_size=512)
    expected = ModernConfig.from_dict(
        {**preset.to_dict(), "vocab_size": 512, "tied_head": False, "mlp": "relu2"}
    )
    assert cfg.model_config() == expected
    model = make_model(cfg)
    assert isinstance(model, ModernGPT) and isinstance(model.blocks[0].mlp, ReLU2MLP)
    assert model.lm_head.weight.data_ptr() != model.wte.weight.data_ptr()  # a head of its own


def test_config_round_trips_through_a_dict():
    config = GPTConfig.preset("cpu", vocab_size=1000)
    assert GPTConfig.from_dict(config.to_dict()) == config
    assert config.vocab_size == 1000 and GPT_PRESETS["cpu"].vocab_size == 4096


def test_sequence_longer_than_the_context_names_both_lengths():
    model = GPT(tiny())
    with pytest.raises(ConfigError, match=r"65 exceeds .* context of 64"):
        model(torch.zeros(1, 65, dtype=torch.long))


@pytest.mark.parametrize(
    "idx, error",
    [
        (torch.zeros(4, dtype=torch.long), ValueError),
        (torch.zeros(1, 4), TypeError),
        (torch.full((1, 4), 512), ConfigError),
        (torch.full((1, 4), -1), ConfigError),
    ],
)
def test_bad_token_ids_raise_a_clear_error(idx, error):
    "Ids outside the vocabulary: model and data do not fit (ConfigError); a wrong dtype or shape: a bug."
    with pytest.raises(error, match="token ids|shape"):
        GPT(tiny())(idx)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"max_new_tokens": 2.0}, "max_new_tokens"),
        ({"max_new_tokens": True}, "max_new_tokens"),
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"eos_id": 512}, "eos_id"),
        ({"eos_id": -1}, "eos_id"),
    ],
)
def test_bad_generation_arguments_raise_a_config_error_naming_the_argument(kwargs, pattern):
    "They come from the command line's flags: a user's error (one line), not a bug (a traceback)."
    model = GPT(tiny())
    args = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(ConfigError, match=pattern):
        generate(model, torch.zeros(1, 2, dtype=torch.long), **args)


@pytest.mark.parametrize(
    "prompt, pattern",
    [
        (torch.zeros(1, 0, dtype=torch.long), "the prompt is empty"),
        (torch.full((1, 3), 512), "outside the vocabulary"),
    ],
)
def test_a_prompt_the_model_cannot_read_raises_a_config_error(prompt, pattern):
    with pytest.raises(ConfigError, match=pattern):
        generate(GPT(tiny()), prompt, 3)


def test_targets_of_the_wrong_shape_are_refused():
    model = GPT(tiny())
    with pytest.raises(ValueError, match="targets"):
        model(torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long))


def test_numpy_integers_are_accepted_and_stored_as_plain_ints():
    import numpy as np

    config = GPTConfig.preset("tiny", vocab_size=np.int64(300), dropout=np.float32(0.25))
    assert type(config.vocab_size) is int and config.vocab_size == 300
    assert type(config.dropout) is float


def test_cli_model_show_prints_the_exact_parameter_count(capsys):
    from gptlib.cli import main

    assert main(["model", "show", "--preset", "gpt-25m"]) == 0
    assert "29,387,776 parameters" in capsys.readouterr().out
    assert main(["model", "show", "--preset", "huge"]) == 2
    assert "invalid choice: 'huge'" in capsys.readouterr().err  # the choices are GPT_PRESETS' names
