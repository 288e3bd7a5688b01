"""The exercises' checkers still to move to the course's checks (lessons 04 and 06):

In each notebook the learner writes a core piece of GPT pretraining (
a causal attention head, cross-entropy, top-k, a training step; the others have moved to the course's
checks, notebooks/course/checks/), and its checker says whether it passes, what is wrong, or that it is not
done yet.

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
from contextlib import contextmanager

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


@contextmanager
def _refusing(module, names: tuple[str, ...], hint: str):
    "While the learner's function runs, `module.<name>` fails with `hint`: the exercise is to write it."
    saved = {name: getattr(module, name) for name in names}

    def refuse(*args, **kwargs):
        _fail(hint)

    for name in names:
        setattr(module, name, refuse)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(module, name, function)


def _close(a, b, tol: float = 1e-6) -> bool:
    "Whether two tensors (or numbers) agree in shape and value, within `tol` absolute and relative."
    import torch

    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=tol, atol=tol, equal_nan=False))


# ------------------------------------------------------------------------------------------------------
# 04 · the model


def _head_inputs():
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 8, generator=g)  # (B, T, C)
    w_q, w_k, w_v = (torch.randn(8, 4, generator=g) * 0.7 for _ in range(3))  # (C, D) each
    return x, w_q, w_k, w_v


def _scaled_head(x, w_q, w_k, w_v, scale: float):
    "One causal head whose scores are multiplied by `scale`: the usual mistakes of scaling, for the hints."
    import torch

    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (B, T, D)
    T = x.size(1)
    scores = (q @ k.transpose(-2, -1) * scale).masked_fill(
        ~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf")
    )
    return scores.softmax(dim=-1) @ v  # (B, T, D)


def check_causal_head(causal_head) -> bool:
    """`causal_head(x, w_q, w_k, w_v)`: one causal attention head, x (B, T, C) and projections (C, D) ->
    (B, T, D), with scores q kᵀ / sqrt(D), an explicit mask hiding later positions, a softmax over the keys.
    Checked against `torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)`."""
    import torch
    import torch.nn.functional as F

    def head(x, w_q, w_k, w_v):
        with _refusing(
            F,
            ("scaled_dot_product_attention",),
            "write the attention yourself (scores, mask, "
            "softmax, weighted sum), without F.scaled_dot_product_attention",
        ):
            return causal_head(x, w_q, w_k, w_v)

    def body():
        x, w_q, w_k, w_v = _head_inputs()
        out = head(x, w_q, w_k, w_v)
        B, T, C = x.shape
        D = w_q.size(1)
        _expect(
            isinstance(out, torch.Tensor) and tuple(out.shape) == (B, T, D),
            f"the output has shape {tuple(getattr(out, 'shape', ()))}: one D-wide vector per position, "
            f"(B, T, D) = {(B, T, D)}",
        )
        _expect(
            not out.isnan().any(),
            "the output holds NaN: a position whose scores are all -inf sees nothing; "
            "each position sees itself and the past (keep the diagonal: torch.tril)",
        )
        changed = x.clone()
        changed[:, 4] += 1.0  # change the token at position 4: positions 0..3 must not notice
        _expect(
            torch.allclose(head(changed, w_q, w_k, w_v)[:, :4], out[:, :4], atol=1e-6),
            "the output at position t changes when a later token changes: before the softmax, set the "
            "scores of keys s > t to -inf (a score of 0 would still get weight)",
        )
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if torch.allclose(out, want, atol=1e-5):
            return "shape, causality, and equal to scaled_dot_product_attention(is_causal=True)"
        mistakes = {
            "the scores are not scaled: divide q kᵀ by sqrt(D), the head's width, so the softmax does not "
            "saturate as D grows": 1.0,
            "the scores are divided by sqrt(C), the input width: use sqrt(D), the head's width": C**-0.5,
            "the scores are divided by D: divide by sqrt(D)": 1 / D,
        }
        for hint, scale in mistakes.items():
            _expect(not torch.allclose(out, _scaled_head(x, w_q, w_k, w_v, scale), atol=1e-5), hint)
        _fail(
            f"the output differs from softmax(q kᵀ / sqrt(D), future masked) v by up to "
            f"{(out - want).abs().max().item():.3g}: q = x @ w_q, k = x @ w_k, v = x @ w_v"
        )

    return _check("causal_head", "model", body)


def check_cross_entropy(cross_entropy) -> bool:
    """`cross_entropy(logits, targets)`: logits (N, V) and target ids (N,) -> the mean negative
    log-likelihood of the targets, from `log_softmax`. Checked against `F.cross_entropy`, also with
    logits in the hundreds, where exp overflows and softmax underflows."""
    import torch
    import torch.nn.functional as F

    def run(logits, targets):
        with _refusing(
            F,
            ("cross_entropy", "nll_loss"),
            "write cross_entropy from torch.log_softmax, without F.cross_entropy or F.nll_loss",
        ):
            got = cross_entropy(logits, targets)
        _expect(got is not None, "cross_entropy returned None: return the mean loss")
        return torch.as_tensor(got, dtype=logits.dtype)

    def body():
        g = torch.Generator().manual_seed(0)
        logits, targets = torch.randn(6, 10, generator=g), torch.tensor([3, 0, 9, 3, 5, 1])
        got, want = run(logits, targets), F.cross_entropy(logits, targets)
        N = len(targets)
        _expect(
            got.shape != (N, N),
            f"the result has shape {(N, N)}: logp[:, targets] takes every target for "
            "every row; take row i's own target, logp[torch.arange(N), targets] (or gather)",
        )
        _expect(
            got.shape != (N,),
            f"the result has shape {(N,)}: return the mean over the N positions, one number",
        )
        _expect(got.shape == (), f"the result has shape {tuple(got.shape)}: return one number, the mean loss")
        if not _close(got, want, 1e-5):
            logp = logits.log_softmax(dim=-1)
            mistakes = {
                "the result is negative: the loss is minus the log-probability of the target": -want,
                "the result is the sum over positions: return the mean": want * N,
                "the log-softmax runs over the positions (dim 0): take it over the vocabulary, dim=-1": -logits.log_softmax(
                    dim=0
                )[torch.arange(N), targets].mean(),
                "the result averages the log-probabilities of the whole vocabulary: take each row's target, "
                "logp[torch.arange(N), targets]": -logp.mean(),
            }
            for hint, value in mistakes.items():
                _expect(not _close(got, value, 1e-5), hint)
            _fail(
                f"cross_entropy gave {got.item():.6f}, expected {want.item():.6f}: "
                "-log_softmax(logits, dim=-1)[torch.arange(N), targets].mean()"
            )

        big = logits * 300  # scores hundreds apart: exp(300) overflows float32, softmax underflows to 0
        got, want = run(big, targets), F.cross_entropy(big, targets)
        _expect(
            bool(torch.isfinite(got)),
            f"with logits in the hundreds the loss is {got.item()}: exp overflows "
            "(inf) or softmax underflows to 0 (log 0 = -inf); use torch.log_softmax, which subtracts each "
            "row's maximum first (log-sum-exp)",
        )
        _expect(
            _close(got, want, 1e-5),
            f"with logits in the hundreds the loss is {got.item():.4f}, expected {want.item():.4f}",
        )
        return "equal to F.cross_entropy, also with logits in the hundreds"

    return _check("cross_entropy", "model", body)


def check_keep_top_k(keep_top_k) -> bool:
    """`keep_top_k(logits, k)`: logits (B, V) with all but the k largest scores of each row set to -inf, the
    kept scores unchanged, a new tensor (the input untouched)."""
    import torch

    def body():
        logits = torch.randn(4, 20, generator=torch.Generator().manual_seed(0))
        logits[2] += 3.0  # one row well above the others: a threshold over the whole batch shows
        original = logits.clone()
        B, V = logits.shape
        for k in (5, 1, V):
            kept = keep_top_k(logits, k)
            _expect(
                torch.equal(logits, original),
                "keep_top_k changed its input: return a new tensor (masked_fill, not masked_fill_)",
            )
            _expect(
                isinstance(kept, torch.Tensor) and kept.shape == logits.shape,
                f"keep_top_k returned shape {tuple(getattr(kept, 'shape', ()))}: keep the shape (B, V)",
            )
            _expect(
                k == V or not bool(((kept == 0).sum(dim=-1) == V - k).all()),
                "the dropped scores became 0: "
                "set them to -inf, whose probability after the softmax is 0 (a score of 0 still has some)",
            )
            kept_mask = torch.isfinite(kept)  # (B, V)
            per_row = kept_mask.sum(dim=-1).tolist()
            _expect(
                per_row not in ([k - 1] * B, [k + 1] * B),
                f"keep_top_k(logits, {k}) keeps {per_row[0]} scores "
                "per row: off by one; the k-th largest is at index k - 1 of the descending sort "
                "(or torch.topk(logits, k).values[:, -1:])",
            )
            _expect(
                per_row == [k] * B,
                f"keep_top_k(logits, {k}) keeps {per_row} scores per row, expected {k} in "
                "each: take the k-th largest of each row (dim=-1), not of the whole batch",
            )
            largest = logits >= logits.topk(k, dim=-1).values[:, -1:]  # (B, V)
            _expect(
                torch.equal(kept_mask, largest) and torch.equal(kept[kept_mask], logits[kept_mask]),
                "the kept scores must be the k largest of each row, unchanged",
            )
        return "k = 5, 1 and V on 4 rows"

    return _check("keep_top_k", "model", body)


# ------------------------------------------------------------------------------------------------------
# helpers of the 06 checker (tiny models and batches)


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
    "`gptlib.train.train_step` in one process, fp32, the loss scaler off."
    import torch

    from gptlib.optim import choose_precision
    from gptlib.train import train_step

    scaler, precision = torch.amp.GradScaler("cpu", enabled=False), choose_precision("cpu", "fp32")
    step = train_step(
        model, optimizer, scaler, batches, lr, precision=precision, grad_accum=grad_accum, grad_clip=grad_clip
    )
    return step[0]


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
