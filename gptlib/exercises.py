"""The exercises' checkers: in each notebook the learner writes a core piece of GPT pretraining (a BPE merge
step and encoding, a document read from a shard, a batch's x and y, an AdamW update, the learning-rate
schedule, gradient accumulation, the loss scaler's rule, a training step), and its checker says whether it
passes, what is wrong, or that it is not done yet.

Hand-written plumbing, not generated from a notebook: it stands on top of gptlib, like `cli`, and a checker
imports the modules it compares against only when it is called, so notebook 01 does not pay for torch.

Each `check_<name>(fn)` runs the learner's `fn` on small fixed inputs (well under a second) and:
- prints "<name>: passed (...)" and returns True when it agrees with the reference;
- raises AssertionError with a hint naming what is wrong and the idea to revisit;
- while `fn` is still the stub (it raises `NotImplementedError("your code here")`), prints "not done yet"
  with how to see the reference answer (notebooks/solutions/) and returns False, so that a notebook run
  with the stubs untouched (CI, under nbval) passes.
"""

from __future__ import annotations

import math
import sys

STUB_MESSAGE = "your code here"  # what every stub raises: NotImplementedError(STUB_MESSAGE)


def _fail(hint: str):
    raise AssertionError(hint)


def _expect(condition: bool, hint: str) -> None:
    "An assert that survives `python -O`: checkers must fail even when asserts are stripped."
    if not condition:
        _fail(hint)


def _check(name: str, solutions: str, body) -> bool:
    """Run `body()` (the checks of one exercise, returning a summary of what passed). A stub turns into a
    printed "not done yet" and False; a wrong answer raises AssertionError from `body`. Torch runs on one
    thread meanwhile: the tensors are tiny, and on a busy machine a thread pool turns 40 ms into seconds."""
    torch = sys.modules.get("torch")  # imported by the checkers that use it, before they get here
    threads = torch.get_num_threads() if torch is not None else None
    try:
        if torch is not None:
            torch.set_num_threads(1)
        summary = body()
    except NotImplementedError as e:
        if e.args and e.args[0] != STUB_MESSAGE:
            raise  # not the stub: something the learner's code (or a library) does not support
        print(
            f"{name}: not done yet. Replace `raise NotImplementedError(...)` with your code, then run the cell again.\n"
            f"  To read the reference answer: `%load -s {name} solutions/{solutions}.py` in a new cell.\n"
            f"  To use it: `from solutions.{solutions} import {name}`, then run this check again."
        )
        return False
    finally:
        if torch is not None:
            torch.set_num_threads(threads)
    print(f"{name}: passed ({summary})")
    return True


def _close(a, b, tol: float = 1e-6) -> bool:
    "Whether two tensors (or numbers) agree in shape and value, within `tol` absolute and relative."
    import torch

    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=tol, atol=tol, equal_nan=False))


# ------------------------------------------------------------------------------------------------------
# 01 · byte-level BPE

# A few lines of Hamlet: enough for a tokenizer of 40 merges whose ids the learner's encoder must match.
_HAMLET = """To be, or not to be, that is the question:
Whether 'tis nobler in the mind to suffer
The slings and arrows of outrageous fortune,
Or to take arms against a sea of troubles
And by opposing end them. To die, to sleep;
No more; and by a sleep to say we end
The heart-ache and the thousand natural shocks
That flesh is heir to: 'tis a consummation
Devoutly to be wish'd."""
# single chunks under the GPT-4 split pattern (a word with its leading space), so that bytes in = text in
_WORDS = (
    " the",
    " to",
    " slings",
    " question",
    "Whether",
    " outrageous",
    " consummation",
    " thousand",
    " naïve",
)


def check_merge_step(merge_step) -> bool:
    """`merge_step(ids, new_id) -> (pair, new_ids)`: the most frequent adjacent pair of `ids`, counted at
    every position, ties going to the smallest pair (a, b); and `ids` with each occurrence of the pair,
    left to right without overlaps, replaced by `new_id`. Also checked against `Tokenizer.train`."""

    def run(ids, new_id):
        given = list(ids)
        pair, new_ids = merge_step(given, new_id)
        _expect(
            given == list(ids),
            f"merge_step changed the list it was given ({list(ids)} became {given}): "
            "build a new list instead",
        )
        return tuple(pair), list(new_ids)

    def body():
        pair, new_ids = run([1, 2, 3, 1, 2], 256)
        _expect(
            pair == (1, 2),
            f"in [1, 2, 3, 1, 2] the pair (1, 2) occurs twice and every other pair once, but "
            f"merge_step picked {pair}: count adjacent pairs with zip(ids, ids[1:])",
        )
        _expect(
            new_ids != [256, 3, 1, 2],
            "only the first (1, 2) was replaced: replace every occurrence of the pair",
        )
        _expect(
            new_ids == [256, 3, 256],
            f"merging (1, 2) into 256 in [1, 2, 3, 1, 2] gives [256, 3, 256], not "
            f"{new_ids}: keep every other id, in order",
        )

        pair, _ = run([7, 8, 7, 8, 2, 3, 2, 3], 300)
        _expect(
            pair == (2, 3),
            f"(7, 8) and (2, 3) both occur twice in [7, 8, 7, 8, 2, 3, 2, 3], and merge_step "
            f"picked {pair}: ties go to the smallest pair, (2, 3), as in rustbpe "
            "(max(counts, key=counts.get) and Counter.most_common keep the first one seen)",
        )

        pair, new_ids = run([5, 5, 5], 256)
        _expect(
            new_ids != [256, 256],
            "the pair (5, 5) in [5, 5, 5] is merged once, left to right, not twice: "
            "after a merge, move on past both ids (the last 5 stays)",
        )
        _expect(new_ids != [5, 256], "merge left to right: [5, 5, 5] becomes [256, 5], not [5, 256]")
        _expect(
            (pair, new_ids) == ((5, 5), [256, 5]),
            f"merge_step([5, 5, 5], 256) gave {(pair, new_ids)}, expected ((5, 5), [256, 5])",
        )

        pair, new_ids = run([1, 1, 1, 1, 3, 4, 3, 4, 3, 4], 256)
        _expect(
            pair == (1, 1),
            f"merge_step picked {pair} in [1, 1, 1, 1, 3, 4, 3, 4, 3, 4]: count pairs at every "
            "position, so [1, 1, 1, 1] holds (1, 1) three times; that ties with (3, 4) and the "
            "smaller pair wins",
        )
        _expect(
            new_ids == [256, 256, 3, 4, 3, 4, 3, 4],
            f"merging (1, 1) in [1, 1, 1, 1, 3, 4, ...] gave {new_ids}",
        )

        from gptlib.tokenizer import Tokenizer

        word = "aaabdaaabac"  # one chunk: training on it sees exactly these bytes
        merges = Tokenizer.train([word], 256 + 3 + 5).merges
        ids = list(word.encode("utf-8"))
        for k, expected in enumerate(merges):
            pair, ids = run(ids, 256 + k)
            _expect(
                pair == tuple(expected),
                f"training on {word!r}, merge {k} is {tuple(expected)} for "
                f"Tokenizer.train, but merge_step picked {pair}",
            )
        return f"4 hand-made cases, and {len(merges)} merges in a row equal to Tokenizer.train's"

    return _check("merge_step", "bpe", body)


def check_encode_with_merges(encode_with_merges) -> bool:
    """`encode_with_merges(data, merges) -> ids`: the bytes `data` encoded with the merge list `merges`
    (merge i makes id 256 + i), the earliest merge (lowest rank) first wherever it is, until no adjacent
    pair is in the list. Checked on hand-made cases and against `Tokenizer.encode`."""

    def run(data: bytes, merges) -> list[int]:
        return list(encode_with_merges(data, [tuple(m) for m in merges]))

    def body():
        for data in (b"", b"a"):
            try:
                ids = run(data, [(97, 98)])
            except NotImplementedError:
                raise
            except Exception as e:
                _fail(
                    f"encode_with_merges({data!r}, [(97, 98)]) raised {e!r}: with fewer than two ids there "
                    "is nothing to merge; stop and return them"
                )
            _expect(ids == list(data), f"encode_with_merges({data!r}, ...) gave {ids}, expected {list(data)}")

        ids = run(b"ab", [(97, 98)])
        _expect(
            ids == [256],
            f"with merges [(97, 98)], b'ab' gave {ids}: merge i makes id 256 + i "
            "(ids 0..255 are the bytes), so b'ab' is [256]",
        )

        ids = run(b"abc", [(98, 99), (97, 98)])
        _expect(
            ids == [97, 256],
            f"with merges [(98, 99), (97, 98)], b'abc' gave {ids}, expected [97, 256]: the "
            "merge made first (lowest rank, earliest in the list) applies first, wherever "
            "it sits; here (b, c) before (a, b), so a is left alone",
        )

        ids = run(b"aaa", [(97, 97), (256, 97)])
        _expect(
            ids == [257],
            f"with merges [(97, 97), (256, 97)], b'aaa' gave {ids}, expected [257]: keep "
            "merging while some adjacent pair is in the list, since merges build on earlier "
            "merges",
        )

        for data, expected in ((b"aaa", [256, 97]), (b"aaaa", [256, 256])):
            ids = run(data, [(97, 97)])
            _expect(
                ids == expected,
                f"with merges [(97, 97)], {data!r} gave {ids}, expected {expected}: each "
                "pair is replaced left to right, without overlaps",
            )

        from gptlib.tokenizer import Tokenizer

        tok = Tokenizer.train([_HAMLET], 256 + 3 + 40)
        for word in _WORDS:
            ids, expected = run(word.encode("utf-8"), tok.merges), tok.encode(word)
            _expect(
                ids == expected,
                f"{word!r} gave {ids}, but Tokenizer.encode gives {expected} with the same "
                f"{len(tok.merges)} merges",
            )
        return f"7 hand-made cases, and {len(_WORDS)} words encoded as Tokenizer.encode does"

    return _check("encode_with_merges", "bpe", body)


# ------------------------------------------------------------------------------------------------------
# 02 · token shards

_BOS, _EOS = 510, 511


def _framed_documents():
    "Four framed documents, every token distinct, concatenated as in a `.ds` file, and their `.ds.index` ends."
    import numpy as np

    docs = [
        [_BOS, 11, 12, _EOS],
        [_BOS, 21, 22, 23, 24, 25, _EOS],
        [_BOS, 31, _EOS],
        [_BOS, 41, 42, 43, 44, _EOS],
    ]
    tokens = np.array([t for doc in docs for t in doc], dtype=np.uint16)
    ends = np.cumsum([len(doc) for doc in docs]).astype(np.uint64)
    return docs, tokens, ends


def check_read_document(read_document) -> bool:
    """`read_document(tokens, ends, i)`: document `i` (0-based) of the concatenated `tokens`, where `ends`
    holds the cumulative document ends of a `.ds.index` file: `[len(d0), len(d0) + len(d1), ...]`."""
    import numpy as np

    def body():
        docs, tokens, ends = _framed_documents()
        for i in (1, 3, 0, 2):
            got = [int(t) for t in np.asarray(read_document(tokens, ends, i)).reshape(-1)]
            want = docs[i]
            if got == want:
                continue
            where = f"read_document(tokens, ends={ends.tolist()}, i={i}) gave {got}, expected {want}"
            if i == 0:
                _fail(
                    f"{where}: document 0 starts at offset 0 (there is no end before it; in Python ends[-1] "
                    "is the last end)"
                )
            if i + 1 < len(docs) and got == docs[i + 1]:
                _fail(
                    f"{where}, which is document {i + 1}: ends[i] is where document i ends, so it starts at "
                    "ends[i - 1]"
                )
            start, end = int(ends[i - 1]), int(ends[i])
            if got in (
                tokens[start + 1 : end + 1].tolist(),
                tokens[start - 1 : end - 1].tolist(),
                tokens[start : end + 1].tolist(),
                tokens[start : end - 1].tolist(),
            ):
                _fail(
                    f"{where}: off by one; document i is tokens[ends[i - 1] : ends[i]] (the end is "
                    "exclusive), <|bos|> first and <|eos|> last"
                )
            _fail(f"{where}: document i is tokens[ends[i - 1] : ends[i]], and document 0 starts at 0")
        return "the first, middle and last documents of four"

    return _check("read_document", "data", body)


# ------------------------------------------------------------------------------------------------------
# 03 · the batch loader


def check_windows_to_xy(windows_to_xy) -> bool:
    """`windows_to_xy(tokens, starts, T) -> (x, y)`: for a 1-D uint16 token array and B window starts, the
    inputs x (B, T) and the targets y (B, T), one token ahead, as int64 torch tensors."""
    import numpy as np
    import torch

    def body():
        tokens = np.arange(100, 140, dtype=np.uint16)  # 40 distinct tokens, so any shift shows
        starts, T = np.array([0, 9, 31], dtype=np.int64), 8  # the last window ends at the last token
        x, y = windows_to_xy(tokens, starts, T)
        want_x = torch.tensor(np.stack([tokens[s : s + T] for s in starts]).astype(np.int64))
        want_y = torch.tensor(np.stack([tokens[s + 1 : s + T + 1] for s in starts]).astype(np.int64))
        for name, got in (("x", x), ("y", y)):
            _expect(
                isinstance(got, torch.Tensor),
                f"{name} is a {type(got).__name__}: return torch tensors (torch.from_numpy or torch.tensor)",
            )
            _expect(
                tuple(got.shape) != (len(starts), T + 1),
                f"{name} has shape {tuple(got.shape)}: x and y are "
                "(B, T); a window is T + 1 tokens, x its first T and y its last T",
            )
            _expect(
                tuple(got.shape) == (len(starts), T),
                f"{name} has shape {tuple(got.shape)}, expected (B, T) = {(len(starts), T)}",
            )
            _expect(
                got.dtype == torch.int64,
                f"{name} is {got.dtype}: token ids go to nn.Embedding and "
                "cross_entropy as int64 (torch.long); uint16 is only how they are stored on disk",
            )
        _expect(torch.equal(x, want_x), f"x = {x.tolist()}: row b of x is tokens[starts[b] : starts[b] + T]")
        _expect(
            not torch.equal(y, x),
            "y equals x: y holds the next token of each input, tokens[starts[b] + 1 : starts[b] + T + 1]",
        )
        _expect(
            torch.equal(y, want_y),
            f"y = {y.tolist()}: y is x shifted one token ahead, "
            "y[b] = tokens[starts[b] + 1 : starts[b] + T + 1]",
        )
        return "3 windows of 8, the last ending at the last token"

    return _check("windows_to_xy", "loader", body)


# ------------------------------------------------------------------------------------------------------
# 05 · optimization

_ADAMW_MISTAKES = {
    "l2": "weight decay is added to the gradient (Adam with L2): in AdamW it is decoupled, the parameter "
    "itself shrinks, param *= 1 - lr * weight_decay (Loshchilov & Hutter 2019)",
    "no_bias_correction": "no bias correction: divide m by (1 - beta1**step) and v by (1 - beta2**step), or "
    "the first steps are too small (m and v start at zero)",
    "eps_inside": "eps is inside the square root: the update is m_hat / (sqrt(v_hat) + eps)",
    "no_sqrt": "the update divides by v_hat: divide by its square root, sqrt(v_hat) + eps",
    "decay_without_lr": "the decay ignores the learning rate: param *= 1 - lr * weight_decay",
    "decay_after": "the decay comes after the Adam step: torch.optim.AdamW shrinks the parameter first "
    "(param *= 1 - lr * weight_decay), then subtracts the update",
    "step_from_zero": "the bias correction uses step + 1: `step` is already the number of this update, "
    "counting from 1, so use 1 - beta**step",
}


def _adamw_variant(param, grad, m, v, step, lr, betas, eps, weight_decay, mistake=None):
    "One AdamW step with one of the usual mistakes built in: the hints name what each of them gets wrong."
    beta1, beta2 = betas
    if mistake == "l2":
        grad = grad + weight_decay * param
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    t = step + 1 if mistake == "step_from_zero" else step
    m_hat, v_hat = (m, v) if mistake == "no_bias_correction" else (m / (1 - beta1**t), v / (1 - beta2**t))
    if mistake == "eps_inside":
        update = m_hat / (v_hat + eps).sqrt()
    elif mistake == "no_sqrt":
        update = m_hat / (v_hat + eps)
    else:
        update = m_hat / (v_hat.sqrt() + eps)
    shrink = {"l2": 1.0, "decay_without_lr": 1 - weight_decay}.get(mistake, 1 - lr * weight_decay)
    if mistake == "decay_after":
        return (param - lr * update) * shrink, m, v
    return param * shrink - lr * update, m, v


def check_adamw_update(adamw_update) -> bool:
    """`adamw_update(param, grad, m, v, step, lr, betas, eps, weight_decay) -> (param, m, v)`: one AdamW
    step (`step` counts from 1) with bias correction and decoupled weight decay. Checked against
    `torch.optim.AdamW` over three steps, in float64."""
    import torch

    def body():
        g = torch.Generator().manual_seed(0)
        start = torch.randn(4, 3, generator=g, dtype=torch.float64)
        grads = [torch.randn(4, 3, generator=g, dtype=torch.float64) * 0.1 for _ in range(3)]
        settings = [
            dict(lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.5),
            dict(lr=0.05, betas=(0.8, 0.99), eps=1e-2, weight_decay=0.0),
        ]
        for s in settings:
            p = start.clone().requires_grad_(True)
            reference = torch.optim.AdamW([p], foreach=False, **s)
            param, m, v = start.clone(), torch.zeros_like(start), torch.zeros_like(start)
            variants = {
                name: (start.clone(), torch.zeros_like(start), torch.zeros_like(start))
                for name in _ADAMW_MISTAKES
            }
            for step, grad in enumerate(grads, start=1):
                p.grad = grad.clone()
                reference.step()
                state = reference.state[p]
                out = adamw_update(
                    param.clone(),
                    grad.clone(),
                    m.clone(),
                    v.clone(),
                    step,
                    s["lr"],
                    s["betas"],
                    s["eps"],
                    s["weight_decay"],
                )
                _expect(isinstance(out, tuple) and len(out) == 3, "return the tuple (param, m, v)")
                param, m, v = (torch.as_tensor(t, dtype=torch.float64) for t in out)
                variants = {
                    name: _adamw_variant(vp, grad, vm, vv, step, **s, mistake=name)
                    for name, (vp, vm, vv) in variants.items()
                }
                where = f"at step {step} with {s}"
                if not _close(param, p.detach(), 1e-9):
                    for name, (variant, _, _) in variants.items():
                        _expect(not _close(param, variant, 1e-9), f"{where}: {_ADAMW_MISTAKES[name]}")
                    _fail(
                        f"{where}, the parameter differs from torch.optim.AdamW's by up to "
                        f"{(param - p.detach()).abs().max().item():.3g}: param *= 1 - lr * weight_decay, then "
                        "param -= lr * m_hat / (sqrt(v_hat) + eps)"
                    )
                _expect(
                    _close(m, state["exp_avg"], 1e-9),
                    f"{where}, m is wrong: it is the running mean of the "
                    "gradient, m = beta1 * m + (1 - beta1) * grad (with the raw gradient)",
                )
                _expect(
                    _close(v, state["exp_avg_sq"], 1e-9),
                    f"{where}, v is wrong: it is the running mean of "
                    "the squared gradient, v = beta2 * v + (1 - beta2) * grad**2",
                )
        return "3 steps equal to torch.optim.AdamW's, with and without weight decay"

    return _check("adamw_update", "optim", body)


def check_warmup_cosine(warmup_cosine) -> bool:
    """`warmup_cosine(step, max_lr, min_lr, warmup_steps, decay_steps)`: linear warmup to `max_lr` (step 0
    already at max_lr / warmup_steps), cosine decay to `min_lr` at `decay_steps`, then `min_lr`. Checked
    against `gptlib.optim.lr_at` at every step."""
    from gptlib.optim import lr_at

    def body():
        for max_lr, min_lr, warmup, decay in ((1e-3, 1e-4, 10, 100), (6e-4, 6e-5, 0, 50)):
            for step in range(decay + 20):
                got = float(warmup_cosine(step, max_lr, min_lr, warmup, decay))
                want = lr_at(step, max_lr=max_lr, min_lr=min_lr, warmup_steps=warmup, decay_steps=decay)
                if math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15):
                    continue
                where = (
                    f"warmup_cosine({step}, max_lr={max_lr}, min_lr={min_lr}, warmup_steps={warmup}, "
                    f"decay_steps={decay}) = {got:.6g}, expected {want:.6g}"
                )
                if step < warmup:
                    _expect(
                        not math.isclose(got, max_lr * step / warmup, rel_tol=1e-9),
                        f"{where}: step 0 "
                        "already trains, so warmup gives max_lr * (step + 1) / warmup_steps and reaches max_lr "
                        "at step warmup_steps - 1",
                    )
                    _fail(f"{where}: warmup rises linearly, max_lr * (step + 1) / warmup_steps")
                if step >= decay:
                    _fail(
                        f"{where}: from decay_steps on the rate stays at min_lr (the cosine would climb back up)"
                    )
                progress = (step - warmup) / (decay - warmup)
                _expect(
                    not math.isclose(got, 0.5 * max_lr * (1 + math.cos(math.pi * progress)), rel_tol=1e-9),
                    f"{where}: the cosine ends at min_lr, not 0: "
                    "min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * progress))",
                )
                _fail(
                    f"{where}: the cosine starts where the warmup ends, progress = (step - warmup_steps) / "
                    "(decay_steps - warmup_steps) runs from 0 to 1, and the rate is "
                    "min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * progress))"
                )
        return "every step of two schedules equal to gptlib.optim.lr_at, with and without warmup"

    return _check("warmup_cosine", "optim", body)


def _tiny_gpt(seed: int = 0):
    "A GPT small enough to step in milliseconds, without dropout, so that two copies compute the same."
    import torch

    from gptlib.model import GPT, GPTConfig

    torch.manual_seed(seed)
    return GPT(
        GPTConfig(vocab_size=64, context=16, n_layer=1, n_head=2, n_embd=16, dropout=0.0, attn_dropout=0.0)
    )


def _token_batches(n: int, batch_size: int = 2, length: int = 16, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randint(64, (2, batch_size, length), generator=g)) for _ in range(n)]


def _grads_of(model, micro_batches, divide: bool = True):
    "The gradients (a list, one per parameter) of the mean loss over `micro_batches` on a copy of `model`."
    import copy

    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        _, loss = twin(x, y)
        (loss / len(micro_batches) if divide else loss).backward()
    return [p.grad.clone() for p in twin.parameters()]


def _all_close(got: list, want: list, scale: float = 1.0) -> bool:
    import torch

    return all(
        g is not None and torch.allclose(g, w * scale, rtol=1e-4, atol=1e-6) for g, w in zip(got, want)
    )


def check_accumulate_gradients(accumulate_gradients) -> bool:
    """`accumulate_gradients(model, micro_batches) -> loss`: forward and backward over each (x, y), leaving in
    `.grad` the gradient of one big batch made of them all, and returning the mean loss (that batch's loss)."""
    import torch

    def body():
        model = _tiny_gpt()
        micro = _token_batches(4)
        big_x, big_y = torch.cat([x for x, _ in micro]), torch.cat([y for _, y in micro])
        with torch.no_grad():
            want_loss = model(big_x, big_y)[1].item()
        want = _grads_of(model, [(big_x, big_y)])
        model.zero_grad(set_to_none=True)
        loss = accumulate_gradients(model, micro)
        got = [p.grad for p in model.parameters()]
        _expect(
            all(g is not None for g in got),
            "some parameters have no gradient: call .backward() on each micro-batch's loss",
        )
        if not _all_close(got, want):
            k = len(micro)
            _expect(
                not _all_close(got, want, k),
                f"the gradients are {k} times too large: the loss is a mean, so "
                "divide each micro-batch's loss by the number of micro-batches before .backward()",
            )
            last = _grads_of(model, micro[-1:])
            _expect(
                not (_all_close(got, last, 1 / k) or _all_close(got, last)),
                "only the last micro-batch's "
                "gradient is left: do not zero the gradients between micro-batches, .backward() adds into .grad",
            )
            _fail(
                "the gradients differ from one batch made of all the micro-batches: for each (x, y), "
                "_, loss = model(x, y); (loss / len(micro_batches)).backward()"
            )
        _expect(loss is not None, "accumulate_gradients returned None: return the mean loss")
        loss = float(loss)
        _expect(
            not math.isclose(loss, want_loss * len(micro), rel_tol=1e-4),
            "the returned loss is the sum over micro-batches: return their mean, the loss of the whole batch",
        )
        _expect(
            math.isclose(loss, want_loss, rel_tol=1e-4),
            f"the returned loss is {loss:.5f}, expected {want_loss:.5f}: the mean of the micro-batch losses",
        )
        return "4 micro-batches give the gradient and the loss of one batch of 8"

    return _check("accumulate_gradients", "optim", body)


def check_scaler_update(scaler_update) -> bool:
    """`scaler_update(scale, found_inf, clean_steps, growth_interval) -> (scale, clean_steps)`: after an
    overflow halve the scale and restart the count; after `growth_interval` clean steps in a row double it
    and restart the count. Checked against `gptlib.optim.DynamicLossScaler` (torch.amp.GradScaler's rule)."""
    from gptlib.optim import DynamicLossScaler

    def body():
        interval = 3
        overflows = [True, True] + [False] * 7 + [True] + [False] * 4
        reference = DynamicLossScaler(init_scale=2.0**16, growth_interval=interval)
        scale, clean = 2.0**16, 0
        for n, found_inf in enumerate(overflows):
            before = (scale, clean)
            out = scaler_update(scale, found_inf, clean, interval)
            _expect(isinstance(out, tuple) and len(out) == 2, "return the tuple (scale, clean_steps)")
            scale, clean = float(out[0]), int(out[1])
            reference.found_inf = found_inf
            reference.update()
            if (scale, clean) == (reference.scale_value, reference.clean_steps):
                continue
            where = (
                f"update {n} (scale {before[0]:g}, clean_steps {before[1]}, found_inf={found_inf}, "
                f"growth_interval={interval}) gave {(scale, clean)}, expected "
                f"{(reference.scale_value, reference.clean_steps)}"
            )
            if found_inf:
                _expect(
                    scale == reference.scale_value,
                    f"{where}: an overflow halves the scale (the gradients "
                    "held inf or NaN, so the scale was too high and the step was skipped)",
                )
                _fail(f"{where}: an overflow also restarts the count of clean steps at 0")
            if before[1] + 1 < interval:
                _expect(
                    scale == before[0],
                    f"{where}: a clean step leaves the scale alone until growth_interval "
                    "clean steps in a row",
                )
                _fail(f"{where}: a clean step adds one to clean_steps")
            _expect(
                scale == 2 * before[0],
                f"{where}: the growth_interval-th clean step in a row doubles the scale",
            )
            _fail(f"{where}: after doubling, the count of clean steps starts again from 0")
        return f"{len(overflows)} updates equal to DynamicLossScaler's: halvings, doublings and the counter"

    return _check("scaler_update", "optim", body)


# ------------------------------------------------------------------------------------------------------
# 06 · training


class _Counted:
    "An iterator over `items` that counts how many were taken."

    def __init__(self, items):
        self.items, self.taken = list(items), 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.taken == len(self.items):
            raise StopIteration
        self.taken += 1
        return self.items[self.taken - 1]


def _library_step(model, optimizer, batches, grad_accum: int, grad_clip: float, lr: float):
    "`gptlib.train.train_step` on a bare state: one process, fp32, the loss scaler off."
    from types import SimpleNamespace

    import torch

    from gptlib.optim import choose_precision
    from gptlib.train import train_step

    state = SimpleNamespace(
        cfg=SimpleNamespace(grad_accum=grad_accum, grad_clip=grad_clip),
        model=model,
        forward=model,
        optimizer=optimizer,
        precision=choose_precision("cpu", "fp32"),
        scaler=torch.amp.GradScaler("cpu", enabled=False),
        dist=SimpleNamespace(device=torch.device("cpu"), world_size=1),
    )
    return train_step(state, batches, lr)[0]


def check_training_step(training_step) -> bool:
    """`training_step(model, optimizer, batches, grad_accum, grad_clip, lr) -> loss`: one optimizer step: set
    the learning rate, take `grad_accum` micro-batches from the iterator `batches` (their gradients summed, each
    loss divided by `grad_accum`), clip the gradient norm to `grad_clip`, step, zero the gradients; return the
    mean loss. Checked with plain SGD (where each mistake shows in the step) and against gptlib's own
    `train_step` over two AdamW steps."""
    import copy

    import torch

    def sgd_step(model, micro, grad_clip):
        "The learner's step with SGD at lr 0.1 (the optimizer built at 0.5): the parameters' change and the loss."
        before = [p.detach().clone() for p in model.parameters()]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        batches = _Counted(micro + _token_batches(2, seed=9))  # two more than needed: taking them shows
        loss = training_step(model, optimizer, batches, len(micro), grad_clip, 0.1)
        _expect(
            batches.taken == len(micro),
            f"training_step took {batches.taken} batches with grad_accum="
            f"{len(micro)}: take exactly grad_accum micro-batches with next(batches)",
        )
        _expect(
            all(p.grad is None or not p.grad.any() for p in model.parameters()),
            "the gradients are still "
            "there after the step: zero them (optimizer.zero_grad(set_to_none=True)), or the next step adds "
            "onto them",
        )
        return [(b - p.detach()) for b, p in zip(before, model.parameters())], loss

    def body():
        model, micro = _tiny_gpt(), _token_batches(3)
        k = len(micro)
        want = _grads_of(model, micro)  # SGD at lr 0.1 moves each parameter by -0.1 * grad
        with torch.no_grad():
            losses = [model(x, y)[1].item() for x, y in micro]
        moved, loss = sgd_step(copy.deepcopy(model), micro, grad_clip=1e6)
        _expect(
            any(m.any() for m in moved),
            "the parameters did not move: call optimizer.step() after the backward passes",
        )
        if not _all_close(moved, want, 0.1):
            _expect(
                not _all_close(moved, want, 0.5),
                "the step used the optimizer's old learning rate: set "
                "group['lr'] = lr for every group in optimizer.param_groups before optimizer.step()",
            )
            _expect(
                not _all_close(moved, want, 0.1 * k),
                f"the step is {k} times too large: divide each "
                "micro-batch's loss by grad_accum before .backward()",
            )
            last = _grads_of(model, micro[-1:])
            _expect(
                not (_all_close(moved, last, 0.1 / k) or _all_close(moved, last, 0.1)),
                "only the last micro-batch counted: do not zero the gradients between micro-batches",
            )
            _fail("the step differs from one SGD step on the mean gradient of the micro-batches")
        _expect(loss is not None, "training_step returned None: return the mean loss of the micro-batches")
        loss, mean = float(loss), sum(losses) / k
        _expect(
            not math.isclose(loss, sum(losses), rel_tol=1e-4),
            "the returned loss is the sum over micro-batches: divide it by grad_accum",
        )
        _expect(
            math.isclose(loss, mean, rel_tol=1e-4),
            f"the returned loss is {loss:.5f}, expected {mean:.5f}: the "
            "mean of the grad_accum micro-batch losses (not the last one)",
        )

        norm = torch.sqrt(sum((g**2).sum() for g in want)).item()
        moved, _ = sgd_step(
            copy.deepcopy(model), micro, grad_clip=norm / 10
        )  # clipping divides the step by 10
        if not _all_close(moved, want, 0.01):
            _expect(
                not _all_close(moved, want, 0.1),
                "the gradient was not clipped: after the last backward, "
                "torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip), then the step",
            )
            _fail(
                "the clipped step is wrong: clip once, the global norm of all the summed gradients, after the "
                "last micro-batch's backward and before optimizer.step()"
            )

        from gptlib.optim import make_adamw

        runs = []
        for step in (training_step, _library_step):
            twin = copy.deepcopy(model)
            optimizer, _ = make_adamw(twin, lr=1e-3, weight_decay=0.1, fused=False)
            batches = iter(_token_batches(4, seed=1))
            step_losses = [float(step(twin, optimizer, batches, 2, 1.0, lr)) for lr in (2e-3, 1e-3)]
            runs.append((step_losses, [p.detach() for p in twin.parameters()]))
        (got_losses, got_params), (want_losses, want_params) = runs
        _expect(
            all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(got_losses, want_losses)),
            f"over two AdamW steps the losses are {got_losses}, gptlib.train.train_step's {want_losses}",
        )
        _expect(
            _all_close(got_params, want_params),
            "after two AdamW steps the parameters differ from gptlib.train.train_step's",
        )
        return "SGD steps with and without clipping, and two AdamW steps equal to gptlib.train.train_step's"

    return _check("training_step", "training", body)
