"""The checks of lesson 04's pieces (notebooks/course/checks/model.py): each accepts gptlib's answer (or the
lesson's own), reports an untouched stub as "not done", and rejects plausible wrong answers with the hint
that names the mistake."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from course.pieces import STUB_MESSAGE, _registry, run_check
from tools.checking import reference, rejects
from torch import nn

from gptlib import model as gm

PIECES = [
    "cross_entropy",
    "causal_attention",
    "CausalSelfAttention",
    "sinusoidal_positions",
    "rotate",
    "MLP",
    "Block",
    "_init_weights",
    "GPT",
    "sample_next_token",
    "KVCache",
    "generate",
    "param_counts",
]


@pytest.fixture(autouse=True)
def one_thread():
    "Tiny tensors run fastest on one thread, and the CI machine is shared."
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- every piece --------------------------------------------------------------------------------------------


def stub(*args, **kwargs):
    raise NotImplementedError(STUB_MESSAGE)


class StubAttention(gm.CausalSelfAttention):
    split_heads = merge_heads = forward = stub


class StubMLP(gm.MLP):
    forward = stub


class StubBlock(gm.Block):
    forward = stub


class StubCache(gm.KVCache):
    append = stub


class StubGPT(gm.GPT):
    "As in a workbook: the tie in `__init__` is the stub, so building the model raises it."

    def __init__(self, config):
        stub()


STUBS = {
    "cross_entropy": stub,
    "causal_attention": stub,
    "CausalSelfAttention": StubAttention,
    "sinusoidal_positions": stub,
    "rotate": stub,
    "MLP": StubMLP,
    "Block": StubBlock,
    "_init_weights": stub,
    "GPT": StubGPT,
    "sample_next_token": stub,
    "KVCache": StubCache,
    "generate": stub,
    "param_counts": stub,
}


def test_lesson_04_teaches_these_pieces_in_this_order():
    assert [name for name, piece in _registry().items() if piece.notebook == "04_model"] == PIECES


@pytest.mark.parametrize("name", PIECES)
def test_the_check_accepts_the_reference(name):
    outcome = run_check(name, reference(name))
    assert outcome.passed, outcome.detail


@pytest.mark.parametrize("name", PIECES)
def test_an_untouched_stub_is_not_done_yet(name):
    assert run_check(name, STUBS[name]).status == "not done"


def test_the_checks_give_the_library_functions_back():
    "The functions a check switches off while the learner's code runs work again afterwards, pass or fail."
    saved = F.cross_entropy, F.nll_loss, F.scaled_dot_product_attention
    rejects(
        "cross_entropy", lambda logits, targets: F.cross_entropy(logits, targets), "without F.cross_entropy"
    )
    assert run_check("causal_attention", reference("causal_attention")).passed
    assert (F.cross_entropy, F.nll_loss, F.scaled_dot_product_attention) == saved


# --- cross-entropy ------------------------------------------------------------------------------------------


def rows(logits, targets):
    return torch.arange(len(targets)), targets


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (
            lambda lg, t: -(lg.exp() / lg.exp().sum(-1, keepdim=True))[rows(lg, t)].log().mean(),
            "exp overflows (inf) or the softmax underflows",
        ),
        (lambda lg, t: F.cross_entropy(lg, t), "without F.cross_entropy or F.nll_loss"),
        (lambda lg, t: -lg.log_softmax(-1)[rows(lg, t)].sum(), "the sum over the positions"),
        (lambda lg, t: -lg.log_softmax(-1)[rows(lg, t)], "return the mean over the N positions"),
        (lambda lg, t: -lg.log_softmax(-1)[:, t], "takes every target for every row"),
        (lambda lg, t: lg.log_softmax(-1)[rows(lg, t)].mean(), "minus the log-probability"),
        (lambda lg, t: -lg.log_softmax(0)[rows(lg, t)].mean(), "take it over the vocabulary, dim=-1"),
        (lambda lg, t: -lg.log_softmax(-1)[rows(lg, t)].mean().item(), "no .item()"),
    ],
)
def test_cross_entropy_check_names_the_mistake(wrong, hint):
    rejects("cross_entropy", wrong, hint)


# --- causal attention ---------------------------------------------------------------------------------------


def attention(q, k, v, *, scale=None, fill=float("-inf"), diagonal=1, dim=-1, three_dims=False):
    "Causal attention with one of the usual mistakes."
    T, D = q.size(-2), q.size(-1)
    keys = k.transpose(1, 2) if three_dims else k.transpose(-2, -1)
    scores = q @ keys * (D**-0.5 if scale is None else scale)
    if diagonal is not None:
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(diagonal), fill)
    weights = scores.softmax(dim=dim)
    return weights @ v, weights


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda q, k, v: attention(q, k, v, diagonal=None), "gives weight to keys after it"),
        (lambda q, k, v: attention(q, k, v, fill=0.0), "a score of 0 would still get weight"),
        (lambda q, k, v: attention(q, k, v, diagonal=0), "the output holds NaN"),
        (lambda q, k, v: attention(q, k, v, scale=1.0), "the scores are not scaled"),
        (lambda q, k, v: attention(q, k, v, scale=1 / q.size(-1)), "divided by D"),
        (lambda q, k, v: attention(q, k, v, dim=-2), "do not sum to 1"),
        (lambda q, k, v: attention(q, k, v, three_dims=True), "(B, H, T, D)"),
        (lambda q, k, v: attention(q, k, v)[0], "return two tensors"),
        (
            lambda q, k, v: (F.scaled_dot_product_attention(q, k, v, is_causal=True), None),
            "without F.scaled_dot_product_attention",
        ),
    ],
)
def test_causal_attention_check_names_the_mistake(wrong, hint):
    rejects("causal_attention", wrong, hint)


# --- the attention module -----------------------------------------------------------------------------------


class HeadsCutWrongly(gm.CausalSelfAttention):
    def split_heads(self, t):
        B, T, C = t.shape
        return t.view(B, self.n_head, T, C // self.n_head)


class StridedHeads(gm.CausalSelfAttention):
    def split_heads(self, t):
        B, T, C = t.shape
        return t.view(B, T, C // self.n_head, self.n_head).permute(0, 3, 1, 2)


class MergedWithoutTranspose(gm.CausalSelfAttention):
    def merge_heads(self, y):
        B, H, T, D = y.shape
        return y.reshape(B, T, H * D)


class NoProjection(gm.CausalSelfAttention):
    def forward(self, x, cache=None, layer=0):
        q, k, v = (self.split_heads(t) for t in self.qkv(x).split(x.size(-1), dim=2))
        return self.resid_dropout(self.merge_heads(self.attend(q, k, v, cache, layer)))


class KeysFirst(gm.CausalSelfAttention):
    def forward(self, x, cache=None, layer=0):
        k, q, v = (self.split_heads(t) for t in self.qkv(x).split(x.size(-1), dim=2))
        return self.resid_dropout(self.proj(self.merge_heads(self.attend(q, k, v, cache, layer))))


class CacheDropped(gm.CausalSelfAttention):
    def forward(self, x, cache=None, layer=0):
        return super().forward(x)


class NoResidualDropout(gm.CausalSelfAttention):
    def forward(self, x, cache=None, layer=0):
        q, k, v = (self.split_heads(t) for t in self.qkv(x).split(x.size(-1), dim=2))
        return self.proj(self.merge_heads(self.attend(q, k, v, cache, layer)))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (HeadsCutWrongly, "split_heads mixes the heads up"),
        (StridedHeads, "every H-th channel"),
        (MergedWithoutTranspose, "straight to (B, T, C)"),
        (NoProjection, "skip proj"),
        (KeysFirst, "the wrong order"),
        (CacheDropped, "pass `cache` and `layer` on"),
        (NoResidualDropout, "self.resid_dropout"),
    ],
)
def test_attention_module_check_names_the_mistake(wrong, hint):
    rejects("CausalSelfAttention", wrong, hint)


# --- positions ----------------------------------------------------------------------------------------------


def sinusoids(T, C, *, swapped=False, halves=False, exponent=2.0, first=0, dtype=torch.float32):
    position = torch.arange(first, first + T, dtype=torch.float64)[:, None]
    angles = position / 10000.0 ** (exponent * torch.arange((C + 1) // 2, dtype=torch.float64) / C)
    even, odd = (angles.cos(), angles.sin()) if swapped else (angles.sin(), angles.cos())
    odd = odd[:, : C // 2]
    if halves:
        return torch.cat([even, odd], dim=1).to(dtype)
    table = torch.zeros(T, C, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = even, odd
    return table.to(dtype)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda T, C: sinusoids(T, C, swapped=True), "sin and cos are swapped"),
        (lambda T, C: sinusoids(T, C, halves=True), "two halves"),
        (lambda T, C: sinusoids(T, C, exponent=1.0), "the exponent 2i / C"),
        (lambda T, C: sinusoids(T, C, first=1), "the positions start at 1"),
        (lambda T, C: sinusoids(T, C, dtype=torch.float64), "return float32"),
        (lambda T, C: sinusoids(T, C)[:, : C - 1], "one row per position"),
    ],
)
def test_positions_check_names_the_mistake(wrong, hint):
    rejects("sinusoidal_positions", wrong, hint)


def test_positions_computed_in_float32_pass():
    "A table computed in float32 differs from gptlib's in the last bits only: the check accepts it."

    def in_float32(T, C):
        angles = torch.arange(T, dtype=torch.float32)[:, None] / 10000 ** (torch.arange(0, C, 2) / C)
        table = torch.zeros(T, C)
        table[:, 0::2], table[:, 1::2] = angles.sin(), angles.cos()[:, : C // 2]
        return table

    assert run_check("sinusoidal_positions", in_float32).passed


def halves(x):
    return x.chunk(2, dim=-1)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (
            lambda x, cos, sin: torch.cat(
                [x[..., 0::2] * cos - x[..., 1::2] * sin, x[..., 0::2] * sin + x[..., 1::2] * cos], dim=-1
            ),
            "neighbouring channels",
        ),
        (
            lambda x, cos, sin: torch.cat(
                [halves(x)[0] * cos + halves(x)[1] * sin, -halves(x)[0] * sin + halves(x)[1] * cos], dim=-1
            ),
            "the other way",
        ),
        (
            lambda x, cos, sin: torch.cat(
                [halves(x)[0] * sin + halves(x)[1] * cos, halves(x)[0] * cos - halves(x)[1] * sin], dim=-1
            ),
            "the other order",
        ),
        (
            lambda x, cos, sin: torch.stack(
                [x[..., 0::2] * cos - x[..., 1::2] * sin, x[..., 0::2] * sin + x[..., 1::2] * cos], dim=-1
            ).flatten(-2),
            "neighbouring channels",
        ),
        (lambda x, cos, sin: gm.rotate(x.float(), cos, sin), "cast cos and sin to x.dtype"),
        (lambda x, cos, sin: x.copy_(gm.rotate(x, cos, sin)), "changed x in place"),
        (lambda x, cos, sin: gm.rotate(x, cos, sin)[..., :-1], "the same shape out"),
        (lambda x, cos, sin: gm.rotate(x, cos.flip(0), sin.flip(0)), "differs from gptlib's turn"),
    ],
)
def test_rotate_check_names_the_mistake(wrong, hint):
    rejects("rotate", wrong, hint)


# --- the MLP and the block ----------------------------------------------------------------------------------


def mlp_with(activation, dropout=True):
    class WrongMLP(gm.MLP):
        def forward(self, x):
            y = self.proj(activation(self.fc(x)))
            return self.dropout(y) if dropout else y

    return WrongMLP


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (mlp_with(F.relu), "ReLU in place of GELU"),
        (mlp_with(lambda h: F.gelu(h, approximate="tanh")), "the tanh approximation"),
        (mlp_with(lambda h: h), "no nonlinearity"),
        (mlp_with(F.gelu, dropout=False), "self.dropout"),
    ],
)
def test_mlp_check_names_the_mistake(wrong, hint):
    rejects("MLP", wrong, hint)


def block_with(forward):
    return type("WrongBlock", (gm.Block,), {"forward": forward})


def post_norm(self, x, cache=None, layer=0):
    x = self.ln_1(x + self.attn(x, cache, layer))
    return self.ln_2(x + self.mlp(x))


def no_attention_residual(self, x, cache=None, layer=0):
    x = self.attn(self.ln_1(x), cache, layer)
    return x + self.mlp(self.ln_2(x))


def no_mlp_residual(self, x, cache=None, layer=0):
    x = x + self.attn(self.ln_1(x), cache, layer)
    return self.mlp(self.ln_2(x))


def one_norm(self, x, cache=None, layer=0):
    x = x + self.attn(self.ln_1(x), cache, layer)
    return x + self.mlp(self.ln_1(x))


def mlp_first(self, x, cache=None, layer=0):
    x = x + self.mlp(self.ln_2(x))
    return x + self.attn(self.ln_1(x), cache, layer)


def cache_not_passed(self, x, cache=None, layer=0):
    x = x + self.attn(self.ln_1(x))
    return x + self.mlp(self.ln_2(x))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (post_norm, "post-norm"),
        (no_attention_residual, "no residual around the attention"),
        (no_mlp_residual, "no residual around the MLP"),
        (one_norm, "ln_1 normalises both branches"),
        (mlp_first, "the MLP runs before the attention"),
        (cache_not_passed, "pass `cache` and `layer` on to self.attn"),
    ],
)
def test_block_check_names_the_mistake(wrong, hint):
    rejects("Block", block_with(wrong), hint)


# --- initialisation -----------------------------------------------------------------------------------------


def init_with(*, divide=lambda n_layer: math.sqrt(2 * n_layer), zero_bias=True, embedding=True, norm=False):
    def init(module, n_layer, std):
        if isinstance(module, nn.Linear):
            if getattr(module, "is_residual_projection", False):
                std /= divide(n_layer)
            nn.init.normal_(module.weight, std=std)
            if zero_bias and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding) and embedding:
            nn.init.normal_(module.weight, std=std)
        elif isinstance(module, nn.LayerNorm) and norm:
            nn.init.normal_(module.weight, std=std)

    return init


def init_with_a_constant(module, n_layer, std):
    init_with()(module, n_layer, 0.02)


def init_crashing_without_bias(module, n_layer, std):
    if isinstance(module, nn.Linear):
        nn.init.zeros_(module.bias)
    init_with()(module, n_layer, std)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (init_with(divide=lambda n_layer: 1.0), "keep std: divide it by sqrt(2 L)"),
        (init_with(divide=math.sqrt), "divided by sqrt(L)"),
        (init_with(divide=lambda n_layer: 2 * n_layer), "divided by 2 L"),
        (init_with(zero_bias=False), "the biases must start at zero"),
        (init_with(embedding=False), "initialise nn.Embedding with N(0, std) too"),
        (init_with(norm=True), "a LayerNorm was changed"),
        (init_with_a_constant, "use the argument `std`"),
        (init_crashing_without_bias, "a linear layer without bias fails"),
    ],
)
def test_init_check_names_the_mistake(wrong, hint):
    rejects("_init_weights", wrong, hint)


# --- the GPT ------------------------------------------------------------------------------------------------


class Untied(gm.GPT):
    def __init__(self, config):
        super().__init__(config)
        self.lm_head.weight = nn.Parameter(self.wte.weight.detach().clone())


def gpt_with(*, positions=True, scale=True, final_norm=True, offset=True, drop=True, ignore=True, mean=True):
    "A GPT whose `hidden_states` / `forward` make one of the usual mistakes."

    class WrongGPT(gm.GPT):
        def hidden_states(self, idx, cache=None):
            past = 0 if cache is None or not offset else cache.length
            T = idx.size(1)
            x = self.wte(idx) * (self.embed_scale if scale else 1.0)
            if positions:
                x = x + self.wpe[past : past + T]
            x = self.drop(x) if drop else x
            for layer, block in enumerate(self.blocks):
                x = block(x, cache, layer)
            if cache is not None:
                cache.advance(T)
            return self.ln_f(x) if final_norm else x

        def forward(self, idx, targets=None):
            logits = self.lm_head(self.hidden_states(idx))
            if targets is None:
                return logits, None
            loss = F.cross_entropy(
                logits.flatten(0, 1), targets.flatten(), ignore_index=-1 if ignore else -100
            )
            return logits, loss if mean else loss * (targets >= 0).sum()

    return WrongGPT


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (Untied, "untied head"),
        (gpt_with(positions=False), "the positions are not added"),
        (gpt_with(scale=False), "the token embeddings are not scaled"),
        (gpt_with(final_norm=False), "no final LayerNorm"),
        (gpt_with(ignore=False), "ignore_index=-1"),
        (gpt_with(mean=False), "the loss is summed"),
        (gpt_with(offset=False), "positions past .. past + T - 1"),
        (gpt_with(drop=False), "the embeddings are not dropped out"),
    ],
)
def test_gpt_check_names_the_mistake(wrong, hint):
    rejects("GPT", wrong, hint)


# --- sampling -----------------------------------------------------------------------------------------------


def sampler_with(
    *,
    after_softmax=False,
    multiply=False,
    ties=False,
    zero=False,
    batch=False,
    sorted_mask=False,
    p_inclusive=False,
    in_place=False,
):
    "`sample_next_token` with one of the usual mistakes (top-k and top-p as the reference otherwise)."

    def sample(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        if temperature == 0:
            return logits.argmax(dim=-1)
        scaled = logits if in_place else logits.float()
        if in_place:
            scaled /= temperature
        elif not after_softmax:
            scaled = scaled * temperature if multiply else scaled / temperature
        if top_k is not None and top_k < scaled.size(-1):
            fill = 0.0 if zero else float("-inf")
            if batch:
                kth = torch.topk(scaled.flatten(), top_k * scaled.size(0)).values[-1]
                scaled = scaled.masked_fill(scaled < kth, fill)
            elif ties or zero:
                kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
                scaled = scaled.masked_fill(scaled < kth, fill)
            else:
                best = torch.topk(scaled, top_k, dim=-1)
                scaled = torch.full_like(scaled, fill).scatter(-1, best.indices, best.values)
        if top_p is not None and top_p < 1.0:
            sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
            probs = sorted_logits.softmax(dim=-1)
            mass = probs.cumsum(dim=-1) - (0 if p_inclusive else probs)  # inclusive: one too few kept
            drop = mass >= top_p
            mask = drop if sorted_mask else drop.scatter(-1, order, drop)
            scaled = scaled.masked_fill(mask, float("-inf"))
        probs = scaled.softmax(dim=-1)
        if after_softmax:
            probs = probs / temperature
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    return sample


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (sampler_with(after_softmax=True), "the temperature changes nothing"),
        (sampler_with(multiply=True), "multiplied by the temperature"),
        (sampler_with(ties=True), "keeps k + 1 tokens when two share the k-th score"),
        (sampler_with(zero=True), "a score of 0 still has some probability"),
        (sampler_with(batch=True), "the k best of each row"),
        (sampler_with(sorted_mask=True), "the mask is computed in sorted order"),
        (sampler_with(p_inclusive=True), "one too few"),
        (sampler_with(in_place=True), "changed its input"),
    ],
)
def test_sampler_check_names_the_mistake(wrong, hint):
    rejects("sample_next_token", wrong, hint)


def sampler_loop(*, crop=True, cache_reads=True, last=True, pass_generator=True, refill=True):
    "`generate` with one of the usual mistakes in its loop (no eos handling: the check uses none)."

    @torch.no_grad()
    def generate(
        model,
        idx,
        max_new_tokens,
        *,
        temperature=1.0,
        top_k=None,
        top_p=None,
        eos_id=None,
        use_cache=True,
        generator=None,
    ):
        context = model.config.context
        model.eval()
        cache = gm.KVCache(model.config.n_layer, context) if use_cache else None
        for step in range(max_new_tokens):
            window = idx[:, -context:] if crop else idx
            if cache is None or not cache_reads:
                hidden = model.hidden_states(window)
            elif step == 0 or (refill and cache.length == context):
                cache.reset()
                hidden = model.hidden_states(window, cache)
            else:
                hidden = model.hidden_states(idx[:, -1:], cache)
            logits = model.lm_head(hidden[:, -1 if last else 0])
            next_id = gm.sample_next_token(
                logits, temperature, top_k, top_p, generator if pass_generator else None
            )
            idx = torch.cat([idx, next_id[:, None]], dim=1)
        return idx

    return generate


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (sampler_loop(crop=False), "more than `context` tokens"),
        (sampler_loop(cache_reads=False), "with the cache the model read"),
        (sampler_loop(last=False), "the logits of the last position"),
        (sampler_loop(pass_generator=False), "pass `generator` on"),
        (sampler_loop(refill=False), "the KV cache overflows"),
    ],
)
def test_generate_check_names_the_mistake(wrong, hint):
    rejects("generate", wrong, hint)


# --- the KV cache and the parameter count ----------------------------------------------------------------


def cache_with(append):
    return type("WrongCache", (gm.KVCache,), {"append": append})


def returns_only_the_new(self, layer, k, v):
    gm.KVCache.append(self, layer, k, v)
    return k, v


def writes_at_the_start(self, layer, k, v):
    if self.keys[layer] is None:
        self.keys[layer] = k.new_empty(*k.shape[:2], self.max_len, k.shape[3])
        self.values[layer] = v.new_empty(*v.shape[:2], self.max_len, v.shape[3])
    end = self.length + k.size(2)
    self.keys[layer][:, :, : k.size(2)], self.values[layer][:, :, : v.size(2)] = k, v
    return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


def allocates_at_every_append(self, layer, k, v):
    self.keys[layer] = None
    return gm.KVCache.append(self, layer, k, v)


def one_storage_for_all_blocks(self, layer, k, v):
    return gm.KVCache.append(self, 0, k, v)


def storage_in_float32(self, layer, k, v):
    return gm.KVCache.append(self, layer, k.float(), v.float())


def no_overflow_check(self, layer, k, v):
    start, end = self.length, min(self.length + k.size(2), self.max_len)
    if self.keys[layer] is None:
        self.keys[layer] = k.new_empty(*k.shape[:2], self.max_len, k.shape[3])
        self.values[layer] = v.new_empty(*v.shape[:2], self.max_len, v.shape[3])
    self.keys[layer][:, :, start:end] = k[:, :, : end - start]
    self.values[layer][:, :, start:end] = v[:, :, : end - start]
    return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (returns_only_the_new, "return all of them"),
        (writes_at_the_start, "written at the start, over the cached ones"),
        (allocates_at_every_append, "allocate the storage once"),
        (one_storage_for_all_blocks, "one storage per block"),
        (storage_in_float32, "in the keys' dtype"),
        (no_overflow_check, "assert end <= max_len"),
    ],
)
def test_kv_cache_check_names_the_mistake(wrong, hint):
    rejects("KVCache", cache_with(wrong), hint)


def counts_with(*, tied_twice=False, no_final_norm=False, no_bias=False):
    def param_counts(config):
        counts = gm.param_counts(
            config.__class__.from_dict({**config.to_dict(), "bias": config.bias and not no_bias})
        )
        if tied_twice:
            counts["token embedding (= LM head)"] *= 2
        if no_final_norm:
            counts["LayerNorm"] -= counts["LayerNorm"] // (2 * config.n_layer + 1)
        return counts

    return param_counts


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (counts_with(tied_twice=True), "counted twice"),
        (counts_with(no_final_norm=True), "the final LayerNorm (ln_f) is missing"),
        (counts_with(no_bias=True), "the biases are missing"),
    ],
)
def test_param_counts_check_names_the_mistake(wrong, hint):
    rejects("param_counts", wrong, hint)
