"""Checks of the pieces written in lesson 04 (the model), and what each piece must be.

Hand-written tooling of the course, not part of the installed package. The pieces, in the order the lesson
teaches them; a piece that passes its check is what the rest of the lesson runs, and what notebook 06 gets
from `course.collect()`:

- `cross_entropy(logits, targets) -> loss`: logits (N, V) and target ids (N,) -> the mean negative
  log-likelihood, a 0-dim tensor in nats that gradients flow through. The ladder's first rungs train with
  it. A lesson piece: gptlib computes its loss with `F.cross_entropy`.
- `causal_attention(q, k, v) -> (out, weights)`: (..., T, D) each, any leading dimensions -> the output
  (..., T, D) and the weights (..., T, T). The one-head rung and the attention maps use it. A lesson piece.
- `CausalSelfAttention(config)`: `__init__` is given (layers `qkv`, `proj`, `resid_dropout`, and the given
  method `attend(q, k, v, cache, layer)`); the learner writes `split_heads(t)` (B, T, C) -> (B, H, T, D),
  `merge_heads(y)` (B, H, T, D) -> (B, T, C) and `forward(x, cache=None, layer=0)` (B, T, C) -> (B, T, C).
- `sinusoidal_positions(context, n_embd) -> table`: the (context, C) float32 table of Vaswani et al.
- `rotate(x, cos, sin)`: (..., T, D) with channel pair (i, i + D/2) turned by row t of `cos`, `sin` (T, D/2),
  in x's dtype: rotary positions, which the given `attend` applies to q and k.
- `MLP(config)`: layers `fc`, `proj`, `dropout` given; `forward(x)` (B, T, C) -> (B, T, C).
- `Block(config)`: layers `ln_1`, `attn`, `ln_2`, `mlp` given; `forward(x, cache=None, layer=0)`.
- `_init_weights(module, n_layer, std)`: GPT-2's initialisation of one module, in place.
- `GPT(config)`: the learner ties the LM head in `__init__` and writes `hidden_states(idx, cache=None)`
  (B, T) -> (B, T, C) and `forward(idx, targets=None) -> (logits, loss)`.
- `sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None)`: (B, V) -> (B,).
- `KVCache(n_layer, max_len)`: `__init__`, `advance` and `reset` given; the learner writes `append(layer,
  k, v)`, which stores (B, H, T, D) after the cached keys and values and returns all of them.
- `generate(model, idx, max_new_tokens, *, temperature, top_k, top_p, eos_id, use_cache, generator)`:
  (B, T) -> (B, T + n).
- `param_counts(config) -> dict`: the parameters by component, from the formula (an appendix exercise).

The pieces compose through the names of the lesson's namespace (a kernel's globals, or the copy of
`gptlib.model`'s names that `course.load_pieces` runs the exercise cells in): `GPT.__init__` builds the
current `Block`, `sinusoidal_positions` and `_init_weights`, `Block` the current `CausalSelfAttention` and
`MLP`, `generate` calls the current `sample_next_token` and `KVCache`. So a learner's `GPT` whose
pieces all passed is the learner's model from the attention up; a piece that fell back to gptlib's
reference uses gptlib's pieces below it. Notebook 06 can train `pieces.GPT(config)` for any `GPTConfig`:
its parameters have gptlib's names, so gptlib's optimizer groups, checkpoints and evaluation read it, and
`pieces.generate(model, ...)` samples from it.

Each check runs on tiny inputs in well under a second, loads gptlib's weights into the learner's module
where there is one, compares with gptlib (or torch) and names the mistakes it recognises.
tests/test_course_model.py proves that each accepts gptlib's answer and rejects plausible wrong ones.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from course.pieces import exercise
from gptlib import model as gm

LESSON = "04_model"


# --- helpers ---------------------------------------------------------------------------------------------


def _expect(condition: bool, hint: str) -> None:
    "An assert that survives `python -O`: a check must fail even when asserts are stripped."
    if not condition:
        raise AssertionError(hint)


def _close(a, b, tol: float = 1e-5) -> bool:
    "Whether two tensors agree in shape and value, within `tol` absolute and relative."
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return False
    return bool(torch.allclose(a.detach().double(), b.detach().double(), rtol=tol, atol=tol))


def _in_bf16(got, name: str, advice: str) -> None:
    "That a piece given a bf16 `name` returned a bf16 tensor; else `advice` on keeping the input's dtype."
    _expect(
        isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16,
        f"a bf16 {name} came back as {getattr(got, 'dtype', type(got).__name__)}: {advice}",
    )


def _two_chunks_as_one(module, x, want, hint: str) -> None:
    """That `module(x, cache, layer)` over x's first 4 positions and then the rest, through a KV cache, gives
    `want`, the one pass over x; else `hint` (where the cache and the layer go)."""
    cache = gm.KVCache(1, 6)
    first = module(x[:, :4], cache, 0)
    cache.advance(4)
    chunks = torch.cat([first, module(x[:, 4:], cache, 0)], dim=1)
    _expect(_close(chunks, want), f"with a KV cache, two chunks differ from one pass: {hint}")


def _shape(x) -> tuple | str:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__


@contextmanager
def _refusing(module, names: tuple[str, ...], hint: str):
    "While the learner's code runs, `module.<name>` fails with `hint`: the exercise is to write it."
    saved = {name: getattr(module, name) for name in names}

    def refuse(*args, **kwargs):
        raise AssertionError(hint)

    for name in names:
        setattr(module, name, refuse)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(module, name, function)


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _config(**overrides) -> gm.GPTConfig:
    "A GPT that runs in milliseconds: V 64, context 16, 2 blocks of 2 heads, C 16, no dropout."
    fields = {"vocab_size": 64, "context": 16, "n_layer": 2, "n_head": 2, "n_embd": 16}
    return gm.GPTConfig(**{**fields, "dropout": 0.0, "attn_dropout": 0.0, **overrides})


def _pair(cls, reference_cls, config: gm.GPTConfig):
    """The learner's `cls(config)` and gptlib's `reference_cls(config)` in eval mode, gptlib's weights loaded
    into the learner's: their layers have the same names, since `__init__` is given."""
    torch.manual_seed(0)
    reference = _with_trained_norms(reference_cls(config))
    mine = cls(config)
    try:
        mine.load_state_dict(reference.state_dict())
    except RuntimeError as e:
        first = str(e).splitlines()[0]
        raise AssertionError(f"its layers are not gptlib's ({first}): keep the given __init__") from None
    return mine.eval(), reference.eval()


def _with_trained_norms(module: nn.Module) -> nn.Module:
    """`module` with its LayerNorms' weights and biases moved off 1 and 0, as training leaves them: otherwise
    every LayerNorm computes the same, and a check could not tell which one the learner's code used."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for norm in (m for m in module.modules() if isinstance(m, nn.LayerNorm)):
            norm.weight.add_(0.3 * torch.randn(norm.weight.shape, generator=generator))
            if norm.bias is not None:
                norm.bias.add_(0.3 * torch.randn(norm.bias.shape, generator=generator))
    return module


def _dropout_check(cls, reference_cls, config: gm.GPTConfig, inputs: tuple, hint: str) -> None:
    """In training mode, with dropout on and the same seed, the learner's module must draw the same masks
    as gptlib's: the same dropout layers, applied once each, in the same order."""
    mine, reference = _pair(cls, reference_cls, config)
    mine.train(), reference.train()

    def output(module):
        result = module(*inputs)
        return result[0] if isinstance(result, tuple) else result  # a GPT returns (logits, loss)

    torch.manual_seed(1)
    got = output(mine)
    torch.manual_seed(1)
    want = output(reference)
    if _close(got, want):
        return
    with torch.no_grad():
        _expect(not _close(got, output(reference.eval())), hint)
    raise AssertionError(
        "in training mode its dropout differs from gptlib's: use the module's own nn.Dropout layers, "
        "each once, where the docstring says"
    )


def _first_mismatch(hints: dict, got: torch.Tensor) -> None:
    "Raise the hint of the first wrong answer `got` equals (each hint maps to what that mistake gives)."
    for hint, value in hints.items():
        _expect(not _close(got, value), hint)


# --- scoring -----------------------------------------------------------------------------------------------


@exercise(LESSON, reference="lesson", name="cross_entropy", minutes=10)
def check_cross_entropy(cross_entropy) -> str:
    """`cross_entropy(logits, targets)`: the mean of -log_softmax(logits)[i, targets[i]], compared with
    `F.cross_entropy` (switched off while the learner's code runs), also for logits in the hundreds."""

    def run(logits, targets):
        with _refusing(
            F,
            ("cross_entropy", "nll_loss"),
            "write cross_entropy from torch.log_softmax, without F.cross_entropy or F.nll_loss",
        ):
            got = cross_entropy(logits, targets)
        _expect(
            isinstance(got, torch.Tensor),
            f"cross_entropy returned {type(got).__name__}: return the mean loss as a tensor (no .item()), "
            "so that training can take its gradient",
        )
        return got

    logits, targets = _randn(6, 10), torch.tensor([3, 0, 9, 3, 5, 1])
    got, want = run(logits, targets), F.cross_entropy(logits, targets)
    N = len(targets)
    _expect(
        got.shape != (N, N),
        f"the result has shape {(N, N)}: logp[:, targets] takes every target for every row; take row i's "
        "own target, logp[torch.arange(N), targets]",
    )
    _expect(
        got.shape != (N,), f"the result has shape {(N,)}: return the mean over the N positions, one number"
    )
    _expect(got.shape == (), f"the result has shape {tuple(got.shape)}: return one number, the mean loss")
    if not _close(got, want):
        logp = logits.log_softmax(dim=-1)
        rows = torch.arange(N)
        _first_mismatch(
            {
                "the result is negative: the loss is minus the log-probability of the target": -want,
                "the result is the sum over the positions: return their mean": want * N,
                "the log-softmax runs over the positions (dim 0): take it over the vocabulary, dim=-1": (
                    -logits.log_softmax(dim=0)[rows, targets].mean()
                ),
                "the result averages the log-probabilities of the whole vocabulary: take each row's own "
                "target, logp[torch.arange(N), targets]": -logp.mean(),
                "the result is in bits: the loss is in nats, with the natural logarithm": want / math.log(2),
            },
            got,
        )
        raise AssertionError(
            f"cross_entropy gave {got.item():.6f}, expected {want.item():.6f}: "
            "-log_softmax(logits, dim=-1)[torch.arange(N), targets].mean()"
        )
    big = logits * 300  # scores hundreds apart: exp(300) overflows float32, softmax underflows to 0
    got, want = run(big, targets), F.cross_entropy(big, targets)
    _expect(
        bool(torch.isfinite(got)),
        f"with logits in the hundreds the loss is {got.item()}: exp overflows (inf) or the softmax "
        "underflows to 0 (log 0 = -inf); use torch.log_softmax, which subtracts each row's maximum first",
    )
    _expect(
        _close(got, want),
        f"with logits in the hundreds the loss is {got.item():.4f}, expected {want.item():.4f}",
    )
    trainable = logits.clone().requires_grad_()
    run(trainable, targets).backward()
    _expect(
        trainable.grad is not None
        and _close(trainable.grad, (logits.softmax(-1) - F.one_hot(targets, 10)) / N),
        "no (or a wrong) gradient reaches the logits: compute the loss with torch operations on the logits",
    )
    return "equal to F.cross_entropy, also with logits in the hundreds, and its gradient"


# --- attention ---------------------------------------------------------------------------------------------


def _attention(q, k, v, scale: float, fill: float = float("-inf"), diagonal: int = 1):
    "Softmax attention with the given score scale and masked fill: the reference and its usual mistakes."
    T = q.size(-2)
    hidden = torch.ones(T, T, dtype=torch.bool).triu(diagonal)  # (T, T): the keys a query must not see
    weights = (q @ k.transpose(-2, -1) * scale).masked_fill(hidden, fill).softmax(dim=-1)
    return weights @ v, weights


@exercise(LESSON, reference="lesson", name="causal_attention", minutes=20)
def check_causal_attention(causal_attention) -> str:
    """`causal_attention(q, k, v) -> (out, weights)`: compared with `F.scaled_dot_product_attention(...,
    is_causal=True)` (switched off while the learner's code runs) for (B, T, D) and (B, H, T, D) inputs."""

    def run(q, k, v):
        with _refusing(
            F,
            ("scaled_dot_product_attention",),
            "write the attention yourself (scores, mask, softmax, weighted sum), without "
            "F.scaled_dot_product_attention",
        ):
            result = causal_attention(q, k, v)
        _expect(
            isinstance(result, tuple) and len(result) == 2,
            "return two tensors: the output (..., T, D) and the weights (..., T, T)",
        )
        return result

    B, T, D = 2, 6, 4
    q, k, v = (_randn(B, T, D, seed=s) * 1.5 for s in range(3))
    out, weights = run(q, k, v)
    _expect(
        isinstance(out, torch.Tensor) and out.shape == (B, T, D),
        f"the output has shape {_shape(out)}: one D-wide vector per position, (B, T, D) = {(B, T, D)}",
    )
    _expect(
        isinstance(weights, torch.Tensor) and weights.shape == (B, T, T),
        f"the weights have shape {_shape(weights)}: one row of T weights per query, (B, T, T) = {(B, T, T)}",
    )
    _expect(
        not out.isnan().any(),
        "the output holds NaN: a query whose scores are all -inf has nothing to attend to; each query sees "
        "itself and the past, so mask only the keys s > t (keep the diagonal)",
    )
    _expect(
        torch.allclose(weights.sum(-1), torch.ones(B, T), atol=1e-5),
        "a query's weights do not sum to 1: the softmax runs over the keys, the last dimension (dim=-1)",
    )
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    _expect(
        bool((weights[:, future] == 0).all()),
        "a query gives weight to keys after it: before the softmax, set the scores of keys s > t to -inf "
        "(a score of 0 would still get weight)",
    )
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if not _close(out, want):
        _first_mismatch(
            {
                "the scores are not scaled: divide q kᵀ by sqrt(D), so that the softmax does not saturate as "
                "D grows": _attention(q, k, v, 1.0)[0],
                "the scores are divided by D: divide them by sqrt(D)": _attention(q, k, v, 1 / D)[0],
                "the output multiplies the transposed weights: it is weights @ v": (
                    _attention(q, k, v, D**-0.5)[1].transpose(-2, -1) @ v
                ),
            },
            out,
        )
        raise AssertionError(
            f"the output differs from softmax(q kᵀ / sqrt(D), future masked) v by up to "
            f"{(out - want).abs().max().item():.3g}"
        )
    q4, k4, v4 = (_randn(2, 3, T, D, seed=s) for s in range(3, 6))
    try:
        out4, _ = run(q4, k4, v4)
    except (RuntimeError, IndexError) as e:
        raise AssertionError(
            f"with q, k, v of shape (B, H, T, D) = (2, 3, {T}, {D}) it fails ({str(e).splitlines()[0]}): "
            "work on the last two dimensions, q.size(-2) and k.transpose(-2, -1)"
        ) from None
    _expect(
        _close(out4, F.scaled_dot_product_attention(q4, k4, v4, is_causal=True)),
        "it works for (B, T, D) but not for (B, H, T, D): write it for any leading dimensions, on the last "
        "two (size(-2), size(-1), transpose(-2, -1))",
    )
    return "equal to scaled_dot_product_attention(is_causal=True), for (B, T, D) and (B, H, T, D)"


@exercise(LESSON, reference="gptlib.model:CausalSelfAttention", name="CausalSelfAttention", minutes=20)
def check_attention_module(cls) -> str:
    """`CausalSelfAttention`: `split_heads`, `merge_heads` and `forward` against gptlib's module with the same
    weights, in eval mode, through a KV cache, and with dropout in training mode."""
    B, T, C, H = 2, 6, 16, 4
    D = C // H
    mine, reference = _pair(cls, gm.CausalSelfAttention, _config(n_head=H))
    t = torch.arange(B * T * C, dtype=torch.float32).view(B, T, C)
    split = mine.split_heads(t)
    _expect(
        isinstance(split, torch.Tensor) and split.shape == (B, H, T, D),
        f"split_heads gave shape {_shape(split)}: (B, T, C) -> (B, H, T, D) = {(B, H, T, D)}",
    )
    heads = reference.split_heads(t)
    if not torch.equal(split, heads):
        _expect(
            not torch.equal(split, t.view(B, H, T, D)),
            "split_heads mixes the heads up: view(B, H, T, D) cuts each sequence's (T, C) block in the wrong "
            "places; view(B, T, H, D) first (a position's C channels are H heads of D), then transpose(1, 2)",
        )
        _expect(
            not torch.equal(split, t.view(B, T, D, H).permute(0, 3, 1, 2)),
            "split_heads gives head h every H-th channel: head h's channels are the D consecutive ones "
            "h*D .. (h+1)*D - 1, so view(B, T, H, D)",
        )
        raise AssertionError("split_heads(t)[b, h, s] must be t[b, s, h*D:(h+1)*D]")
    merged = mine.merge_heads(heads)
    _expect(
        isinstance(merged, torch.Tensor) and merged.shape == (B, T, C),
        f"merge_heads gave shape {_shape(merged)}: (B, H, T, D) -> (B, T, C) = {(B, T, C)}",
    )
    if not torch.equal(merged, t):
        _expect(
            not torch.equal(merged, heads.reshape(B, T, C)),
            "merge_heads reshapes (B, H, T, D) straight to (B, T, C), which mixes positions and heads: "
            "transpose(1, 2) back to (B, T, H, D) first",
        )
        raise AssertionError("merge_heads(split_heads(t)) must give t back")
    x = _randn(B, T, C)
    with torch.no_grad():
        got, want = mine(x), reference(x)
        _expect(
            isinstance(got, torch.Tensor) and got.shape == (B, T, C),
            f"forward gave shape {_shape(got)}: (B, T, C) in, (B, T, C) out",
        )
        if not _close(got, want):
            q, k, v = (reference.split_heads(z) for z in reference.qkv(x).split(C, dim=2))
            _first_mismatch(
                {
                    "the heads' outputs skip proj: merge them, then self.proj (C -> C) mixes them": (
                        reference.merge_heads(reference.attend(q, k, v))
                    ),
                    "q, k and v are taken in the wrong order: qkv's outputs are q, then k, then v": (
                        reference.proj(reference.merge_heads(reference.attend(k, q, v)))
                    ),
                },
                got,
            )
            raise AssertionError(
                f"forward differs from gptlib's by up to {(got - want).abs().max().item():.3g}: qkv(x) split "
                "in three, split_heads, attend, merge_heads, proj, resid_dropout"
            )
        cache = gm.KVCache(1, T)
        first = mine(x[:, :4], cache, 0)
        cache.advance(4)
        chunks = torch.cat([first, mine(x[:, 4:], cache, 0)], dim=1)
    _expect(
        _close(chunks, want),
        "with a KV cache, reading the positions in two chunks differs from one pass: pass `cache` and "
        "`layer` on to self.attend(q, k, v, cache, layer)",
    )
    _dropout_check(
        cls,
        gm.CausalSelfAttention,
        _config(n_head=H, dropout=0.5),
        (x,),
        "the output is not dropped out in training: the last step is self.resid_dropout(...)",
    )
    return "split_heads, merge_heads and forward equal gptlib's, with and without a KV cache"


# --- positions ---------------------------------------------------------------------------------------------


def _sinusoids(T: int, C: int, *, swapped=False, halves=False, exponent=2.0, first=0, sign=-1.0):
    "The sinusoidal table and its usual mistakes: sin and cos swapped, in two halves, a wrong frequency..."
    position = torch.arange(first, first + T, dtype=torch.float64)[:, None]  # (T, 1)
    i = torch.arange((C + 1) // 2, dtype=torch.float64)
    angles = position * 10000.0 ** (sign * exponent * i / C)  # (T, ceil(C/2))
    even, odd = (angles.cos(), angles.sin()) if swapped else (angles.sin(), angles.cos())
    odd = odd[:, : C // 2]
    if halves:
        return torch.cat([even, odd], dim=1).float()
    table = torch.zeros(T, C, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = even, odd
    return table.float()


@exercise(LESSON, reference="gptlib.model:sinusoidal_positions", name="sinusoidal_positions", minutes=15)
def check_positions(sinusoidal_positions) -> str:
    "`sinusoidal_positions(context, n_embd)`: equal to gptlib's table, for an even and an odd width."
    for T, C in ((32, 16), (5, 7)):
        got, want = sinusoidal_positions(T, C), gm.sinusoidal_positions(T, C)
        _expect(
            isinstance(got, torch.Tensor) and got.shape == (T, C),
            f"sinusoidal_positions({T}, {C}) has shape {_shape(got)}: one row per position, {(T, C)}",
        )
        _expect(
            got.dtype == torch.float32,
            f"the table is {got.dtype}: return float32 (.float()), the dtype of the model's weights",
        )
        if _close(got, want):
            continue
        _first_mismatch(
            {
                "sin and cos are swapped: sin in the even columns (0, 2, ...), cos in the odd ones": (
                    _sinusoids(T, C, swapped=True)
                ),
                "the sines and cosines sit in two halves: interleave them, table[:, 0::2] = sin and "
                "table[:, 1::2] = cos": _sinusoids(T, C, halves=True),
                "the frequencies use i / C: column pair i has the exponent 2i / C (arange(0, C, 2) / C)": (
                    _sinusoids(T, C, exponent=1.0)
                ),
                "the frequencies grow with i: the angle is position / 10000^(2i/C), a division": (
                    _sinusoids(T, C, sign=1.0)
                ),
                "the positions start at 1: the first row is position 0 (sin 0 = 0, cos 0 = 1)": (
                    _sinusoids(T, C, first=1)
                ),
            },
            got,
        )
        raise AssertionError(
            f"sinusoidal_positions({T}, {C}) differs from sin / cos of position / 10000^(2i/C) by up to "
            f"{(got - want).abs().max().item():.3g}"
        )
    return "equal to gptlib's table, for an even and an odd width"


def _turned(x, cos, sin, *, pairs="halves", sign=1.0) -> torch.Tensor:
    """x turned as `rotate` turns it, and its usual mistakes: RoFormer's neighbouring pairs (2i, 2i + 1),
    written back as halves or interleaved, and the turn the other way."""
    if pairs == "halves":
        x1, x2 = x.chunk(2, dim=-1)
    else:  # channels (2i, 2i + 1), the pairs of the sinusoidal table and of the paper
        x1, x2 = x[..., 0::2], x[..., 1::2]
    first, second = x1 * cos - sign * x2 * sin, sign * x1 * sin + x2 * cos
    if pairs == "interleaved":
        return torch.stack([first, second], dim=-1).flatten(-2)
    return torch.cat([first, second], dim=-1)


@exercise(LESSON, reference="gptlib.model:rotate", name="rotate", minutes=10)
def check_rotate(rotate) -> str:
    """`rotate(x, cos, sin)`: equal to gptlib's turn of q or k (B, H, T, D) by gptlib's tables, x left as it
    was, and in x's dtype under bf16."""
    B, H, T, D = 2, 3, 5, 8
    cos, sin = gm.rotary_tables(T, D)  # (T, D/2) each
    x = _randn(B, H, T, D)
    want = gm.rotate(x, cos, sin)
    given = x.clone()
    got = rotate(given, cos, sin)
    _expect(torch.equal(given, x), "rotate changed x in place: return a new tensor, x is still needed")
    _expect(
        isinstance(got, torch.Tensor) and got.shape == (B, H, T, D),
        f"rotate gave shape {_shape(got)}: x (B, H, T, D) = {(B, H, T, D)} in, the same shape out",
    )
    if not _close(got, want):
        neighbours = (
            "the pairs are neighbouring channels (2i, 2i + 1), as in the paper: gptlib pairs channel i with "
            "i + D/2, the two halves of x.chunk(2, dim=-1) (the same turn up to an order of the channels, "
            "but the weights trained with gptlib's layout expect it)"
        )
        for layout in ("neighbours", "interleaved"):  # written back as halves, or in place of each pair
            _expect(not _close(got, _turned(x, cos, sin, pairs=layout)), neighbours)
        _first_mismatch(
            {
                "the turn goes the other way: the first half becomes x1*cos - x2*sin, the second "
                "x1*sin + x2*cos": _turned(x, cos, sin, sign=-1.0),
                "the halves come back in the other order: torch.cat([first, second], dim=-1), the first "
                "from x1*cos - x2*sin": torch.cat(want.chunk(2, dim=-1)[::-1], dim=-1),
            },
            got,
        )
        raise AssertionError(
            f"rotate differs from gptlib's turn by up to {(got - want).abs().max().item():.3g}: pair i is "
            "(x[..., i], x[..., i + D/2]), turned by the angle whose cos and sin are cos[t, i], sin[t, i]"
        )
    _in_bf16(
        rotate(x.bfloat16(), cos, sin),
        "x",
        "cast cos and sin to x.dtype, so that under autocast q and k stay in the dtype of v",
    )
    return "equal to gptlib's turn, x untouched, in x's dtype"


# --- the block ---------------------------------------------------------------------------------------------


def mlp_check(cls, reference_cls, mistakes, formula: str, name: str, call=None) -> str:
    """An MLP's `forward` against `reference_cls`'s with the same weights (lesson 04's MLP, lesson 07's ReLU²
    one): the shape, then the first of `mistakes(reference, h)` (a dict of hint -> the wrong answer computed
    from h = fc(x)) that the learner's output equals, else the largest difference and `formula`; then dropout
    in training. `call(module, x)` runs the learner's forward (default: module(x))."""
    mine, reference = _pair(cls, reference_cls, _config())
    x = _randn(2, 5, 16) * 2
    with torch.no_grad():
        got, want = (call or (lambda module, t: module(t)))(mine, x), reference(x)
        _expect(
            isinstance(got, torch.Tensor) and got.shape == x.shape,
            f"forward gave shape {_shape(got)}: (B, T, C) in, (B, T, C) out (fc to 4C, proj back to C)",
        )
        if not _close(got, want):
            _first_mismatch(mistakes(reference, reference.fc(x)), got)  # h: (B, T, 4C)
            raise AssertionError(
                f"forward differs from gptlib's by up to {(got - want).abs().max().item():.3g}: {formula}"
            )
    _dropout_check(
        cls,
        reference_cls,
        _config(dropout=0.5),
        (x,),
        "the output is not dropped out in training: the last step is self.dropout(...)",
    )
    return f"equal to gptlib's {name} on the same weights, dropout included"


@exercise(LESSON, reference="gptlib.model:MLP", name="MLP", minutes=5)
def check_mlp(cls) -> str:
    "`MLP.forward`: dropout(proj(gelu(fc(x)))) against gptlib's module with the same weights."

    def mistakes(reference, h):
        return {
            "ReLU in place of GELU: F.gelu between fc and proj": reference.proj(F.relu(h)),
            "the tanh approximation of GELU: use the exact one, F.gelu(x)": (
                reference.proj(F.gelu(h, approximate="tanh"))
            ),
            "no nonlinearity: two linear maps in a row are one; F.gelu between fc and proj": reference.proj(
                h
            ),
            "GELU comes after proj: it goes between fc and proj": F.gelu(reference.proj(h)),
        }

    return mlp_check(cls, gm.MLP, mistakes, "dropout(proj(gelu(fc(x))))", "MLP")


@exercise(LESSON, reference="gptlib.model:Block", name="Block", minutes=10)
def check_block(cls) -> str:
    "`Block.forward`: pre-norm with residuals, against gptlib's block on the same weights, also with a cache."
    mine, reference = _pair(cls, gm.Block, _config())
    x = _randn(2, 6, 16) * 3
    with torch.no_grad():
        got, want = mine(x), reference(x)
        _expect(
            isinstance(got, torch.Tensor) and got.shape == x.shape,
            f"forward gave shape {_shape(got)}: (B, T, C) in, (B, T, C) out",
        )
        if not _close(got, want):
            attn, mlp, ln_1, ln_2 = reference.attn, reference.mlp, reference.ln_1, reference.ln_2
            h = ln_1(x + attn(x))
            post_norm = ln_2(h + mlp(h))
            h = attn(ln_1(x))
            no_attention_residual = h + mlp(ln_2(h))
            h = x + attn(ln_1(x))
            no_mlp_residual = mlp(ln_2(h))
            one_norm = h + mlp(ln_1(h))
            h = ln_1(x)
            h = h + attn(h)
            normalised_stream = h + mlp(ln_2(h))
            h = x + mlp(ln_2(x))
            mlp_first = h + attn(ln_1(h))
            _first_mismatch(
                {
                    "post-norm: the LayerNorm comes after the addition; in a pre-norm block each branch "
                    "reads a normalised copy, x + attn(ln_1(x)), and the stream is never normalised": (
                        post_norm
                    ),
                    "no residual around the attention: x = x + self.attn(self.ln_1(x), ...), the branch is "
                    "added to the stream, not put in its place": no_attention_residual,
                    "no residual around the MLP: return x + self.mlp(self.ln_2(x))": no_mlp_residual,
                    "ln_1 normalises both branches: the MLP reads ln_2(x)": one_norm,
                    "the residual stream carries ln_1(x) instead of x: add the attention's output to x": (
                        normalised_stream
                    ),
                    "the MLP runs before the attention: attention first (communicate), then the MLP": (
                        mlp_first
                    ),
                },
                got,
            )
            raise AssertionError(
                f"forward differs from gptlib's by up to {(got - want).abs().max().item():.3g}: "
                "x = x + attn(ln_1(x)); x + mlp(ln_2(x))"
            )
        _two_chunks_as_one(mine, x, want, "pass `cache` and `layer` on to self.attn")
    return "pre-norm with residual connections, equal to gptlib's block, with and without a KV cache"


# --- the GPT -----------------------------------------------------------------------------------------------


@exercise(LESSON, reference="gptlib.model:_init_weights", name="_init_weights", minutes=10)
def check_init(init_weights) -> str:
    "`_init_weights(module, n_layer, std)` on linear layers (flagged or not, with and without bias) and more."
    n_layer, std = 3, 0.02
    torch.manual_seed(0)
    plain, flagged, embedding = nn.Linear(512, 512), nn.Linear(512, 512), nn.Embedding(1024, 256)
    flagged.is_residual_projection = True
    unbiased, wider, norm = nn.Linear(512, 256, bias=False), nn.Linear(256, 256), nn.LayerNorm(64)
    with torch.no_grad():
        norm.weight.fill_(1.5), norm.bias.fill_(0.5)  # a trained LayerNorm: initialisation leaves it alone
    for module in (plain, flagged, embedding, norm):
        init_weights(module, n_layer, std)
    try:
        init_weights(unbiased, n_layer, std)
    except (AttributeError, TypeError) as e:
        raise AssertionError(
            f"a linear layer without bias fails ({e}): its bias is None (the LM head has none); skip it"
        ) from None
    init_weights(wider, n_layer, 0.05)

    def near(tensor, value):
        return abs(tensor.std().item() - value) < 0.03 * value and abs(tensor.mean().item()) < 0.1 * value

    _expect(near(plain.weight, std), f"a linear layer's weights have std {plain.weight.std():.4f}: N(0, std)")
    _expect(
        near(wider.weight, 0.05), "with std=0.05 the weights do not have std 0.05: use the argument `std`"
    )
    _expect(bool((plain.bias == 0).all()), "the biases must start at zero: nn.init.zeros_(module.bias)")
    got, expected = flagged.weight.std().item(), std / math.sqrt(2 * n_layer)
    if abs(got - expected) > 0.03 * expected:
        mistakes = {
            "the residual projections (is_residual_projection) keep std: divide it by sqrt(2 L)": std,
            "the residual projections are divided by sqrt(L): each block has two of them, so 2 L add into "
            "the stream; divide by sqrt(2 L)": std / math.sqrt(n_layer),
            "the residual projections are divided by 2 L: the variances add up, so the std divides by "
            "sqrt(2 L)": std / (2 * n_layer),
        }
        for hint, value in mistakes.items():
            _expect(abs(got - value) > 0.03 * value, hint)
        raise AssertionError(
            f"a residual projection's weights have std {got:.4f}, expected std / sqrt(2 L) = {expected:.4f}"
        )
    _expect(
        near(embedding.weight, std),
        f"an embedding's weights have std {embedding.weight.std():.3f}: initialise nn.Embedding with "
        "N(0, std) too (PyTorch's default is N(0, 1))",
    )
    _expect(
        bool((norm.weight == 1.5).all() and (norm.bias == 0.5).all()),
        "a LayerNorm was changed: only nn.Linear and nn.Embedding are initialised here",
    )
    return "linear layers N(0, std), residual projections std / sqrt(2 L), zero biases, embeddings N(0, std)"


def _positions_restarted(model: gm.GPT, idx: torch.Tensor, split: int) -> torch.Tensor:
    "Hidden states read in two chunks through a KV cache, the second chunk wrongly given positions 0, 1, ..."
    cache = gm.KVCache(model.config.n_layer, model.config.context)
    first = model.hidden_states(idx[:, :split], cache)
    rest = idx[:, split:]
    x = model.wte(rest) * model.embed_scale + model.wpe[: rest.size(1)]  # (B, T - split, C)
    for layer, block in enumerate(model.blocks):
        x = block(x, cache, layer)
    return torch.cat([first, model.ln_f(x)], dim=1)


def _embedding_dropout_check(cls, config: gm.GPTConfig, idx: torch.Tensor) -> None:
    """In training mode, with dropout on the embeddings only (the blocks' switched off), the learner's GPT
    must draw gptlib's mask: `self.drop` applied once, to the sum of token embeddings and positions."""
    mine, reference = _pair(cls, gm.GPT, config)
    for model in (mine, reference):
        model.train()
        for module in model.blocks.modules():
            if isinstance(module, nn.Dropout):
                module.p = 0.0
    torch.manual_seed(1)
    got = mine(idx)[0]
    torch.manual_seed(1)
    want = reference(idx)[0]
    if not _close(got, want):
        with torch.no_grad():
            _expect(
                not _close(got, reference.eval()(idx)[0]),
                "the embeddings are not dropped out in training: x = self.drop(token embeddings + positions)",
            )
        raise AssertionError(
            "in training mode the embeddings' dropout differs from gptlib's: self.drop, once"
        )


@exercise(LESSON, reference="gptlib.model:GPT", name="GPT", minutes=25)
def check_gpt(cls) -> str:
    """`GPT`: the tied head, `hidden_states` and `forward` (logits and loss, targets of -1 left out) against
    gptlib's model with the same weights, through a KV cache, and with dropout in training mode."""
    config = _config()
    torch.manual_seed(0)
    reference = _with_trained_norms(gm.GPT(config)).eval()
    mine = cls(config)
    _expect(
        mine.lm_head.weight is mine.wte.weight,
        "untied head: in __init__, self.lm_head.weight = self.wte.weight (one (V, C) matrix reads and "
        "writes the tokens)",
    )
    mine.load_state_dict(reference.state_dict())
    mine.eval()
    idx = torch.randint(0, config.vocab_size, (2, config.context), generator=torch.Generator().manual_seed(1))
    targets = idx.roll(-1, dims=1)
    targets[:, :3] = -1  # positions to leave out
    with torch.no_grad():
        out = mine(idx)
        _expect(
            isinstance(out, tuple) and len(out) == 2 and out[1] is None,
            "forward(idx) without targets returns (logits, None)",
        )
        logits, want = out[0], reference(idx)[0]
        _expect(
            isinstance(logits, torch.Tensor) and logits.shape == want.shape,
            f"the logits have shape {_shape(logits)}: (B, T, V) = {tuple(want.shape)}",
        )
        if not _close(logits, want):
            r = reference
            tokens = r.wte(idx)  # (B, T, C)
            positions = r.wpe[: idx.size(1)]

            def through(x, final=True):
                for layer, block in enumerate(r.blocks):
                    x = block(x, None, layer)
                return r.lm_head(r.ln_f(x) if final else x)

            _first_mismatch(
                {
                    "the positions are not added: x = wte(idx) * embed_scale + wpe[past : past + T]": through(
                        tokens * r.embed_scale
                    ),
                    "the token embeddings are not scaled: multiply them by self.embed_scale (x50)": through(
                        tokens + positions
                    ),
                    "no final LayerNorm: hidden_states returns self.ln_f(x)": through(
                        tokens * r.embed_scale + positions, final=False
                    ),
                    "the positions are scaled with the tokens: only the token embeddings get embed_scale": (
                        through((tokens + positions) * r.embed_scale)
                    ),
                },
                logits,
            )
            raise AssertionError(
                f"the logits differ from gptlib's by up to {(logits - want).abs().max().item():.3g}: "
                "lm_head(ln_f(blocks(drop(wte(idx) * embed_scale + wpe[past : past + T]))))"
            )
        try:
            loss = mine(idx, targets)[1]
        except (IndexError, RuntimeError) as e:
            raise AssertionError(
                f"with targets of -1 the loss fails ({str(e).splitlines()[0]}): leave those positions out, "
                "F.cross_entropy(..., ignore_index=-1)"
            ) from None
        want_loss = reference(idx, targets)[1]
        _expect(
            isinstance(loss, torch.Tensor) and loss.shape == (),
            f"the loss has shape {_shape(loss)}: one number, the mean over the positions",
        )
        if not _close(loss, want_loss):
            flat, kept = want.flatten(0, 1), targets.flatten() >= 0
            _first_mismatch(
                {
                    "the loss is summed: return the mean over the positions": want_loss * kept.sum(),
                    "the loss counts the positions whose target is -1: ignore_index=-1": (
                        F.cross_entropy(flat, targets.flatten().clamp(min=0))
                    ),
                },
                loss,
            )
            raise AssertionError(
                f"the loss is {loss.item():.5f}, expected {want_loss.item():.5f}: the mean cross-entropy of "
                "the logits (B*T, V) against the targets (B*T,), ignore_index=-1"
            )
        cache = gm.KVCache(config.n_layer, config.context)
        chunks = torch.cat(
            [mine.hidden_states(idx[:, :10], cache), mine.hidden_states(idx[:, 10:], cache)], 1
        )
        if not _close(chunks, reference.hidden_states(idx)):
            _expect(
                not _close(chunks, _positions_restarted(reference, idx, 10)),
                "the second chunk through the KV cache gets the positions 0, 1, ... again: it sits at "
                "positions past .. past + T - 1, self.wpe[past : past + T]",
            )
            raise AssertionError(
                "hidden states read in two chunks through a KV cache differ from one pass: give every block "
                "the cache and its index, block(x, cache, layer)"
            )
    _embedding_dropout_check(cls, _config(dropout=0.5), idx)
    return "tied head; logits, loss (targets of -1 left out) and cached hidden states equal gptlib's"


# --- generation --------------------------------------------------------------------------------------------


@exercise(LESSON, reference="gptlib.model:sample_next_token", name="sample_next_token", minutes=20)
def check_sampler(sample_next_token) -> str:
    """`sample_next_token`: the frequencies of 20,000 draws against the expected distribution, for two
    temperatures, top-k with a tie at the k-th score, top-k per row, and top-p (also out of sorted order)."""
    N = 20_000

    def frequencies(row: torch.Tensor, **kwargs) -> torch.Tensor:
        logits = row.repeat(N, 1)
        original = logits.clone()
        ids = sample_next_token(logits, generator=torch.Generator().manual_seed(0), **kwargs)
        _expect(
            torch.equal(logits, original), "sample_next_token changed its input logits: work on a new tensor"
        )
        _expect(
            isinstance(ids, torch.Tensor) and ids.shape == (N,),
            f"it returned {_shape(ids)}: one id per row, (B,) = {(N,)}",
        )
        return torch.bincount(ids, minlength=len(row)).double() / N

    def near(freq, probs) -> bool:
        return bool((freq - probs).abs().max() < 0.015)  # about 4 standard deviations at N draws

    row = torch.tensor([2.0, 1.5, 1.0, 0.0, -1.0, -3.0])
    for temperature in (0.5, 2.0):
        freq = frequencies(row, temperature=temperature)
        if not near(freq, (row / temperature).softmax(-1).double()):
            _expect(
                not near(freq, row.softmax(-1).double()),
                "the temperature changes nothing: divide the logits by it, before the softmax (dividing the "
                "probabilities after it is undone when sampling normalises them)",
            )
            _expect(
                not near(freq, (row * temperature).softmax(-1).double()),
                "the logits are multiplied by the temperature: divide them (a temperature below 1 sharpens)",
            )
            raise AssertionError(
                f"at temperature {temperature} the draws do not follow softmax(logits / temperature)"
            )
    kept = set(frequencies(row, top_k=2).nonzero().flatten().tolist())
    _expect(
        kept <= {0, 1},
        f"top-k with k = 2 drew the tokens {sorted(kept)}: set every other score to -inf (a score of 0 still "
        "has some probability)",
    )
    rows = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0, -2.0], [5.0, 4.0, 3.0, 2.5, 2.2, 2.1]])
    ids = sample_next_token(rows.repeat(N // 2, 1), top_k=3, generator=torch.Generator().manual_seed(0))
    first, second = set(ids[0::2].tolist()), set(ids[1::2].tolist())
    _expect(
        first == {0, 1, 2} and second == {0, 1, 2},
        f"with top_k=3 the two rows drew {sorted(first)} and {sorted(second)}: take the k best of each row "
        "(dim=-1), not of the whole batch",
    )
    tied = torch.tensor([2.0, 1.0, 1.0, 0.5, 0.0, -1.0])  # the 2nd and 3rd scores are equal
    kept = set(frequencies(tied, top_k=2).nonzero().flatten().tolist())
    _expect(
        len(kept) != 3,
        "top-k keeps k + 1 tokens when two share the k-th score: keep exactly k, the indices torch.topk "
        "returns (scatter their scores into a row of -inf), not every score >= the k-th",
    )
    _expect(
        kept <= {0, 1, 2} and len(kept) == 2,
        f"top-k with k = 2 and a tie at the 2nd score drew {sorted(kept)}: the best one and one of the tied",
    )
    shuffled = torch.tensor([0.05, 0.5, 0.15, 0.3]).log()  # sorted order: 1, 3, 2, 0
    for top_p, want in ((0.8, {1, 3}), (0.81, {1, 3, 2}), (1e-6, {1})):
        try:
            kept = set(frequencies(shuffled, top_p=top_p).nonzero().flatten().tolist())
        except RuntimeError as e:  # torch.multinomial of a row without any probability left
            raise AssertionError(
                f"with top_p={top_p} sampling fails ({str(e).splitlines()[0]}): every token was masked; the "
                "most likely token always stays, a token goes once the tokens likelier than it reach p"
            ) from None
        if kept == want:
            continue
        _expect(
            kept != set(range(len(want))),
            f"with top_p={top_p} the draws come from the wrong tokens {sorted(kept)}, expected "
            f"{sorted(want)}: the mask is computed in sorted order; put it back in vocabulary order "
            "(scatter with the sort's indices) before masking the logits",
        )
        for wrong, which in ((len(want) - 1, "few"), (len(want) + 1, "many")):
            _expect(
                len(kept) != wrong,
                f"with top_p={top_p} the draws come from {sorted(kept)}, expected {sorted(want)}: one too "
                f"{which}; a token goes when the probability of the strictly likelier tokens reaches p (the "
                "cumulative sum minus its own probability)",
            )
        raise AssertionError(
            f"with top_p={top_p} the draws come from {sorted(kept)}, expected {sorted(want)}: keep the "
            "smallest set of likeliest tokens whose probability reaches p"
        )
    return "temperature, top-k (exactly k on ties, per row) and top-p, on 20,000 draws"


@exercise(LESSON, reference="gptlib.model:KVCache", name="KVCache", minutes=10)
def check_kv_cache(cls) -> str:
    """`KVCache.append`: chunks appended to two blocks come back whole, each block's own, in the keys' dtype;
    after `reset` the next chunk is written at the start; a chunk that does not fit is refused."""
    B, H, D = 2, 2, 4
    k1, v1, k2, v2, k3 = (_randn(B, H, T, D, seed=s) for s, T in enumerate((3, 3, 2, 2, 5)))
    cache = cls(2, 6)
    got = cache.append(0, k1, v1)
    _expect(
        isinstance(got, tuple) and len(got) == 2,
        "append returns two tensors: every key and every value stored so far",
    )
    _expect(
        all(isinstance(t, torch.Tensor) and t.shape == (B, H, 3, D) for t in got),
        f"append of 3 tokens to an empty cache returned shapes {[_shape(t) for t in got]}: (B, H, 3, D)",
    )
    _expect(
        torch.equal(got[0], k1) and torch.equal(got[1], v1), "the first append must return k and v as given"
    )
    cache.append(1, -k1, -v1)  # the second block's keys and values
    cache.advance(3)
    keys, values = cache.append(0, k2, v2)
    _expect(
        keys.shape == (B, H, 5, D),
        f"after 3 cached tokens, appending 2 returned {tuple(keys.shape)} keys: return all of them, "
        "positions 0 .. length + T - 1, (B, H, 5, D)",
    )
    _expect(
        not torch.equal(keys[:, :, :2], k2),
        "the new keys were written at the start, over the cached ones: write them at positions "
        "length .. length + T - 1",
    )
    _expect(
        not torch.equal(keys, torch.cat([-k1, k2], dim=2)),
        "the first block got the second block's keys back: keep one storage per block (layer)",
    )
    _expect(
        torch.equal(keys, torch.cat([k1, k2], dim=2)) and torch.equal(values, torch.cat([v1, v2], dim=2)),
        "after 3 cached tokens, appending 2 must return the 3 cached ones followed by the 2 new: allocate "
        "the storage once (on the first write), not at every append",
    )
    keys, _ = cache.append(1, k2, v2)
    _expect(
        torch.equal(keys, torch.cat([-k1, k2], dim=2)),
        "the second block got the first block's keys back: keep one storage per block (layer)",
    )
    cache.reset()
    keys, _ = cache.append(0, k2.to(torch.bfloat16), v2.to(torch.bfloat16))
    _expect(
        keys.shape == (B, H, 2, D) and torch.equal(keys, k2.to(torch.bfloat16)),
        "after reset, an append must return only the new tokens, written at position 0",
    )
    fresh = cls(1, 4)
    fresh.append(0, k2.to(torch.bfloat16), v2.to(torch.bfloat16))
    _expect(
        fresh.keys[0].dtype == torch.bfloat16,
        f"the storage is {fresh.keys[0].dtype} for bfloat16 keys: allocate it in the keys' dtype, "
        "k.new_empty",
    )
    fresh.advance(2)
    try:
        fresh.append(0, k3[:, :, :3], k3[:, :, :3])  # 2 + 3 tokens in a cache of 4
    except AssertionError:
        pass
    else:
        raise AssertionError(
            "appending 3 tokens after 2 to a cache of 4 raised nothing: assert end <= max_len, so that an "
            "overflow is an error, not keys silently cut off"
        )
    return "chunks come back whole, one storage per block in the keys' dtype, reset, overflow refused"


@exercise(LESSON, reference="gptlib.model:generate", name="generate", minutes=20)
def check_generate(generate) -> str:
    """`generate`: greedy tokens equal gptlib's with and without the KV cache, past the context; the model
    reads one new token at a time through the cache; a seeded sample is the same with and without it."""
    config = _config()  # context 16: a prompt of 5 and 20 new tokens outgrow it, so the window slides
    torch.manual_seed(0)
    model = gm.GPT(config)
    prompt = torch.randint(0, config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(2))
    reads: list[int] = []

    def recorded(idx, cache=None):
        reads.append(idx.size(1))
        _expect(
            idx.size(1) <= config.context,
            "the model was given more than `context` tokens: it reads the window idx[:, -context:]",
        )
        _expect(
            cache is None or cache.length + idx.size(1) <= config.context,
            "the KV cache overflows: once it holds the window, read only the newest token (idx[:, -1:]); "
            "when it is full (cache.length == context), reset it and read the window again",
        )
        return gm.GPT.hidden_states(model, idx, cache)

    def run(function, **kwargs) -> torch.Tensor:
        reads.clear()
        model.hidden_states = recorded  # each call's length: what the model was given to read
        try:
            return function(model, prompt, 20, **kwargs)
        finally:
            del model.hidden_states

    for use_cache in (False, True):
        got = run(generate, temperature=0.0, use_cache=use_cache)
        mine = list(reads)
        want = run(gm.generate, temperature=0.0, use_cache=use_cache)
        where = "with" if use_cache else "without"
        _expect(
            isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(got[:, :5], prompt),
            f"{where} the cache it returned {_shape(got)}: the prompt (2, 5) followed by 20 new tokens",
        )
        _expect(
            torch.equal(got, want),
            f"greedy tokens {where} the KV cache differ from gptlib's: the next token comes from the "
            "logits of the last position, model.lm_head(hidden[:, -1]), passed to sample_next_token",
        )
        if use_cache:
            _expect(
                mine == reads,
                f"with the cache the model read {mine} tokens at each step, gptlib's {reads}: read the "
                "window when nothing is cached or the cache is full (reset it first), else the newest token",
            )
    sampled = [
        run(generate, temperature=1.0, top_k=10, use_cache=use, generator=torch.Generator().manual_seed(0))
        for use in (True, False, True)
    ]
    _expect(
        torch.equal(sampled[0], sampled[2]),
        "two runs with generators seeded the same sample different tokens: pass `generator` on to "
        "sample_next_token",
    )
    _expect(
        torch.equal(sampled[0], sampled[1]),
        "with a seeded generator, sampling with and without the cache gives different tokens: both must draw "
        "from the same logits with sample_next_token(logits, temperature, top_k, top_p, generator)",
    )
    return "greedy tokens equal gptlib's with and without the KV cache, one new token read at a time"


@exercise(LESSON, reference="gptlib.model:param_counts", name="param_counts", minutes=10)
def check_param_counts(param_counts) -> str:
    "`param_counts(config)`: by component, equal to the parameters of a real GPT, with and without biases."
    for bias in (True, False):
        config = _config(vocab_size=100, n_layer=3, n_embd=24, n_head=2, bias=bias)
        got = param_counts(config)
        model = gm.GPT(config)
        want = {
            "token embedding (= LM head)": model.wte.weight.numel(),
            "attention": sum(p.numel() for n, p in model.named_parameters() if ".attn." in n),
            "MLP": sum(p.numel() for n, p in model.named_parameters() if ".mlp." in n),
            "LayerNorm": sum(p.numel() for n, p in model.named_parameters() if "ln_" in n),
        }
        _expect(
            isinstance(got, dict) and set(got) == set(want),
            f"param_counts returned {sorted(got) if isinstance(got, dict) else type(got).__name__}: a dict "
            f"with the keys {sorted(want)}",
        )
        where = "with biases" if bias else "without biases"
        C, L = config.n_embd, config.n_layer
        for part, n in want.items():
            if got[part] == n:
                continue
            _expect(
                not (part == "token embedding (= LM head)" and got[part] == 2 * n),
                "the tied embedding is counted twice: the LM head shares its (V, C) matrix, count it once",
            )
            _expect(
                not (part == "LayerNorm" and got[part] == n - n // (2 * L + 1)),
                "the final LayerNorm (ln_f) is missing: two per block plus one, 2 L + 1",
            )
            _expect(
                not (
                    bias
                    and part != "token embedding (= LM head)"
                    and got[part] < n
                    and n - got[part] < 10 * C * L
                ),
                f"{part} {where}: {got[part]:,d}, expected {n:,d}: the biases are missing (one per output of "
                "every linear layer, and a LayerNorm's bias)",
            )
            raise AssertionError(f"{part} {where}: {got[part]:,d}, expected {n:,d}")
    return "equal to the parameters of real models, with and without biases"
