"""The exercises' checkers: in each notebook the learner writes a core piece of GPT pretraining (a BPE merge
step and encoding, one causal attention head, cross-entropy, top-k, an AdamW update, the learning-rate
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
