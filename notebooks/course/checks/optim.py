"""Checks of the pieces written in lesson 05 (optimization), and the interface each piece keeps.

Hand-written tooling of the course, not part of the installed package. Each piece is defined by an
exercise cell of `notebooks/05_optim.ipynb`; the rest of 05 runs the learner's version once it passes (the
sweeps train with their `param_groups`, `AdamW`, `lr_at` and `clip_grad_norm`, the fp16 run with their
`DynamicLossScaler`), and workbook 06 may train with them, so each keeps the interface of the library
object it stands for:

- `param_groups(model, weight_decay=0.1) -> [decay, no_decay]`: two dicts with "params" (a list of
  tensors), "weight_decay" (`weight_decay`, then 0.0) and "name" ("decay", "no_decay"); the tensors with
  >= 2 dimensions decay, the others do not; every trainable tensor once (a tied one too), frozen ones in
  none. Reference: `gptlib.optim.param_groups`.
- `AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)`: a `torch.optim.Optimizer`
  whose `step()` is `torch.optim.AdamW`'s update (decoupled weight decay, bias-corrected moments), reading
  each group's lr, betas, eps and weight_decay at every step and keeping each parameter's step count and
  moments in `self.state[p]`, so that `state_dict()` resumes it exactly. Reference: the lesson's (training
  runs torch's fused AdamW, `gptlib.optim.make_adamw`).
- `counted_activations(config, half) -> (block, head)`: the bytes per token a block of a GPT of `config`
  keeps for its backward pass, and those kept after the last block; `half`: under bf16 autocast. Checked
  against what autograd saves (torch.autograd.graph.saved_tensors_hooks). Reference: the lesson's.
- `lr_at(step, *, max_lr, min_lr, warmup_steps, decay_steps) -> float`: linear warmup (step 0 at
  max_lr / warmup_steps), cosine to min_lr at decay_steps, min_lr after. Reference: `gptlib.optim.lr_at`.
- `clip_grad_norm(parameters, max_norm) -> Tensor`: the gradients of `parameters` (any iterable, a
  generator too) scaled in place so that their global L2 norm is at most `max_norm`; returns the norm before
  clipping, as `torch.nn.utils.clip_grad_norm_`. Reference: the lesson's.
- `accumulate_gradients(model, micro_batches) -> float`: forward and backward over each (x, y) of a list
  of equal-sized micro-batches, `.grad` ending as one big batch's gradient; returns the mean loss. `model(x,
  y)` returns `(logits, loss)`. Reference: the lesson's.
- `DynamicLossScaler(init_scale=2**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000)`: the
  methods of `torch.amp.GradScaler` a training step calls, `scale(loss)`, `unscale_(optimizer)`,
  `step(optimizer)`, `update()`, `get_scale()`, `state_dict()` / `load_state_dict()`, computing what
  GradScaler computes, bit for bit. Reference: the lesson's.

Each check runs the piece on small fixed inputs (float64 where the comparison is with torch's own
arithmetic), compares it with torch (AdamW, the schedulers, clip_grad_norm_, GradScaler) or with one big
batch, and on a difference names the mistake: the hints are found by comparing with the usual wrong
answers, computed here (`_adamw_with`).
"""

from __future__ import annotations

import copy
import math
import warnings

import torch

from course.pieces import exercise

LESSON = "05_optim"


def _fail(hint: str):
    raise AssertionError(hint)


def _expect(condition: bool, hint: str) -> None:
    "An assert that survives `python -O`: a check must fail even when asserts are stripped."
    if not condition:
        _fail(hint)


def _close(a, b, tol: float = 1e-9) -> bool:
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return a.shape == b.shape and torch.allclose(a, b, rtol=tol, atol=tol)


def _calling(what: str, fn, *args, **kwargs):
    "`fn(*args, **kwargs)`, an error turned into a hint (a stub's NotImplementedError passes through)."
    try:
        return fn(*args, **kwargs)
    except (AssertionError, NotImplementedError):
        raise
    except Exception as e:  # the learner's code crashed: say where, keep the message
        _fail(f"{what} raised {type(e).__name__}: {e}")


def _tiny_gpt(seed: int = 0):
    "A GPT small enough to step in milliseconds, without dropout, so that two copies compute the same."
    from gptlib.model import GPT, GPTConfig

    torch.manual_seed(seed)
    return GPT(
        GPTConfig(vocab_size=64, context=16, n_layer=1, n_head=2, n_embd=16, dropout=0.0, attn_dropout=0.0)
    )


def _token_batches(n: int, batch_size: int = 2, length: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randint(64, (2, batch_size, length), generator=g)) for _ in range(n)]


# --- param_groups ---------------------------------------------------------------------------------------


@exercise(LESSON, reference="gptlib.optim:param_groups", minutes=10)
def param_groups(fn) -> str:
    from torch import nn

    frozen = nn.Sequential(nn.Embedding(8, 4), nn.Linear(4, 4), nn.LayerNorm(4))
    frozen[1].bias.requires_grad_(False)
    for model, what in (
        (frozen, "an Embedding, a Linear with a frozen bias, a LayerNorm"),
        (_tiny_gpt(), "a GPT"),
    ):
        groups = _calling("param_groups", fn, model, 0.3)
        _expect(
            isinstance(groups, list) and len(groups) == 2 and all(isinstance(g, dict) for g in groups),
            "return a list of two dicts, the decay group and then the no_decay group",
        )
        decay, no_decay = groups
        _expect(
            (decay.get("weight_decay"), no_decay.get("weight_decay")) == (0.3, 0.0),
            "the first group decays by `weight_decay`, the second by 0.0: keep the dicts the cell builds",
        )
        ids = [id(p) for g in groups for p in g["params"]]
        trainable = {id(p) for p in model.parameters() if p.requires_grad}
        _expect(
            len(ids) == len(set(ids)),
            f"a tensor appears twice in the groups ({what}): the tied embedding and LM head are one tensor, "
            "and model.named_parameters() yields it once; twice, it would be updated twice a step",
        )
        _expect(
            set(ids) <= trainable,
            f"a frozen tensor (requires_grad False) is in a group ({what}): leave it out, it never trains",
        )
        _expect(
            set(ids) == trainable,
            f"{len(trainable - set(ids))} trainable tensors are in no group ({what}): each goes to decay or "
            "no_decay",
        )
        names = {id(p): name for name, p in model.named_parameters()}
        got = {"decay": [names.get(id(p), "?") for p in decay["params"]]}
        got["no_decay"] = [names.get(id(p), "?") for p in no_decay["params"]]
        trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        vectors = [name for name, p in trainable if p.ndim < 2 and name in got["decay"]]
        matrices = [name for name, p in trainable if p.ndim >= 2 and name in got["no_decay"]]
        _expect(
            not any(not name.endswith("weight") for name in vectors),
            f"{', '.join(vectors)} ({what}) are decayed: biases and gains are vectors (p.ndim == 1), "
            "they go to no_decay",
        )
        _expect(
            not vectors,
            f"{', '.join(vectors)} ({what}) are decayed: a LayerNorm's gain is called `weight` too, but it "
            "is a vector: decide by p.ndim, not by the name",
        )
        _expect(
            not matrices,
            f"{', '.join(matrices)} ({what}) are matrices and not decayed: every tensor with p.ndim >= 2 "
            "decays, the embedding (tied to the LM head) included",
        )
    return "decay on the matrices of a GPT and of a small stack, a tied matrix once, a frozen bias left out"


# --- AdamW ------------------------------------------------------------------------------------------------

_ADAMW_MISTAKES = {
    "l2": "weight decay is added to the gradient (Adam with L2): AdamW decouples it and shrinks the weight "
    "itself, p *= 1 - lr * weight_decay, before the Adam step (Loshchilov & Hutter 2019)",
    "no_bias_correction": "no bias correction: m and v start at 0, so divide m by 1 - beta1**t and v by "
    "1 - beta2**t, or the first steps are far too short",
    "eps_inside": "eps is inside the square root: the step is m_hat / (sqrt(v_hat) + eps)",
    "no_sqrt": "the step divides by v_hat: divide by its square root, sqrt(v_hat) + eps",
    "decay_without_lr": "the decay ignores the learning rate: p *= 1 - lr * weight_decay",
    "decay_after": "the decay comes after the Adam step: torch's AdamW shrinks the weight first, then "
    "subtracts the step (both use the weight as it was)",
    "step_from_zero": "the bias correction is one step off: t counts this update from 1, so the first update "
    "divides by 1 - beta1**1",
    "lr_fixed": "the learning rate did not follow the group: read group['lr'] at every step (the training "
    "loop changes it before each one), not the value given to __init__",
    "lr_initial": "the learning rate did not follow the group: read group['lr'] at every step (the training "
    "loop changes it before each one), not once at the first step",
    "defaults_decay": "a group's own weight_decay was ignored: read group['weight_decay'] (the no_decay "
    "group has 0.0), not the default given to __init__",
    "shared_step": "the step count is shared by all parameters: keep it per parameter, in self.state[p] (a "
    "parameter without a gradient in some step has had fewer updates than the others)",
}


def _adamw_with(p, grad, m, v, t, lr, betas, eps, weight_decay, mistake=None):
    "One AdamW update of the tensor `p` with one of the usual mistakes built in (None: the right one)."
    beta1, beta2 = betas
    if mistake == "l2":
        grad = grad + weight_decay * p
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    t = t + 1 if mistake == "step_from_zero" else t
    m_hat, v_hat = (m, v) if mistake == "no_bias_correction" else (m / (1 - beta1**t), v / (1 - beta2**t))
    if mistake == "eps_inside":
        update = m_hat / (v_hat + eps).sqrt()
    elif mistake == "no_sqrt":
        update = m_hat / (v_hat + eps)
    else:
        update = m_hat / (v_hat.sqrt() + eps)
    shrink = {"l2": 1.0, "decay_without_lr": 1 - weight_decay}.get(mistake, 1 - lr * weight_decay)
    if mistake == "decay_after":
        return (p - lr * update) * shrink, m, v
    return p * shrink - lr * update, m, v


_GROUPS = [  # two groups as param_groups makes them: a matrix that decays, a vector that does not
    {"lr": 0.1, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.5},
    {"lr": 0.05, "betas": (0.8, 0.99), "eps": 1e-3, "weight_decay": 0.0},
]
_LR_FACTORS = [1.0, 0.5, 0.25, 1.0]  # the loop changes group["lr"] between steps, as a schedule does
_DEFAULTS = {"lr": 0.3, "betas": (0.5, 0.5), "eps": 1e-8, "weight_decay": 0.2}  # never the groups' values


def _adamw_run(cls, start, grads, steps, state=None):
    "The parameters after `steps` updates by `cls` from `start` (two groups, a changing lr), and the state."
    params = [t.clone().requires_grad_(True) for t in start]
    groups = [{"params": [p], **settings} for p, settings in zip(params, _GROUPS)]
    optimizer = cls(groups, **_DEFAULTS)
    if state is not None:
        optimizer.load_state_dict(state)
    for step in steps:
        for group, settings in zip(optimizer.param_groups, _GROUPS):
            group["lr"] = settings["lr"] * _LR_FACTORS[step]
        for p, g in zip(params, grads[step]):
            p.grad = None if g is None else g.clone()
        _calling("AdamW.step()", optimizer.step)
    return [p.detach() for p in params], optimizer.state_dict()


def _adamw_diagnosis(got, start, grads) -> str:
    "The hint naming the mistake whose trajectory the learner's parameters follow."
    for mistake, hint in _ADAMW_MISTAKES.items():
        params = []
        for index, (p, settings) in enumerate(zip(start, _GROUPS)):
            m = v = torch.zeros_like(p)
            t = 0
            for step, step_grads in enumerate(grads):
                if step_grads[index] is None:
                    continue
                t = step + 1 if mistake == "shared_step" else t + 1
                lr = {"lr_fixed": _DEFAULTS["lr"], "lr_initial": settings["lr"]}.get(
                    mistake, settings["lr"] * _LR_FACTORS[step]
                )
                decay = _DEFAULTS["weight_decay"] if mistake == "defaults_decay" else settings["weight_decay"]
                p, m, v = _adamw_with(
                    p, step_grads[index], m, v, t, lr, settings["betas"], settings["eps"], decay, mistake
                )
            params.append(p)
        if all(_close(a, b) for a, b in zip(got, params)):
            return hint
    return (
        "the weights differ from torch.optim.AdamW's: per parameter, t += 1; p *= 1 - lr * weight_decay; "
        "m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2; "
        "then p -= lr * m_hat / (sqrt(v_hat) + eps)"
    )


@exercise(LESSON, reference="lesson", name="AdamW", minutes=25)
def adamw(cls) -> str:
    _expect(
        isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer),
        "AdamW must be a class derived from torch.optim.Optimizer (keep the cell's class line)",
    )
    g = torch.Generator().manual_seed(0)
    start = [
        torch.randn(4, 3, generator=g, dtype=torch.float64),
        torch.randn(5, generator=g, dtype=torch.float64),
    ]
    grads = [
        [torch.randn(t.shape, generator=g, dtype=torch.float64) * 0.1 for t in start] for _ in _LR_FACTORS
    ]
    grads[2][1] = None  # the vector has no gradient at step 2: it must not move, nor its step count advance
    want, _ = _adamw_run(torch.optim.AdamW, start, grads, range(len(grads)))
    got, _ = _adamw_run(cls, start, grads, range(len(grads)))
    if not all(_close(a, b) for a, b in zip(got, want)):
        _expect(
            not all(_close(a, b) for a, b in zip(got, start)),
            "the parameters did not move: update every p whose p.grad is not None, in place (p.sub_, p.mul_)",
        )
        _fail(_adamw_diagnosis(got, start, grads))
    halfway, state = _adamw_run(cls, start, grads, range(2))
    resumed, _ = _adamw_run(cls, halfway, grads, range(2, 4), state)
    _expect(
        all(_close(a, b) for a, b in zip(resumed, want)),
        "a resume from state_dict() continues differently: keep the step count and m, v in self.state[p] "
        "(state_dict() saves self.state and the groups, nothing else of the optimizer)",
    )
    return "4 steps equal to torch.optim.AdamW's: two groups, a changing lr, a missing gradient, and a resume"


# --- counted_activations --------------------------------------------------------------------------------


def _measured_per_token(config, half: bool) -> float:
    """What autograd keeps per token for one forward pass of a fresh GPT of `config` (each storage once, the
    parameters and, under bf16 autocast, their bf16 copies left out): the measurement the count must match."""
    from gptlib.model import GPT

    torch.manual_seed(0)
    model = GPT(config)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(config.vocab_size, (2, 2, config.context), generator=g)
    params, saved = {p.untyped_storage().data_ptr() for p in model.parameters()}, {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=half):
            model(x, y)[1].backward()
    copies = 2 * sum(p.numel() for p in model.parameters() if p.ndim >= 2) if half else 0
    return (sum(saved.values()) - copies) / x.numel()


def _count_with(c, half: bool, mistake=None) -> int:
    "The count per token for `c`, with one of the usual mistakes built in (None: the right one)."
    C, H, V, product = c.n_embd, c.n_head, c.vocab_size, 2 if half else 4
    vectors = 17 if mistake == "attention_output_twice" else 16
    residual = product if mistake == "residual_in_half" else 4
    block = 2 * C * residual + (vectors - 2) * C * product + (0 if mistake == "no_stats" else 16 + 4 * H)
    if mistake == "attention_matrix":
        block += H * c.context * 4  # a row of T scores per head and token
    logits = {"no_logits": 0, "logits_in_half": V * product}.get(mistake, V * 4)
    head = C * 4 + (0 if mistake == "no_stats" else 8) + C * product + logits
    head += 0 if mistake == "no_ids" else 16
    return c.n_layer * block + head


_COUNT_MISTAKES = {
    "attention_output_twice": "the attention's output is counted twice: it is also the input of the next "
    "product, one tensor, so a block keeps 16 vectors of width C",
    "attention_matrix": "the T x T attention matrix is counted: the fused kernel recomputes it in the "
    "backward pass and keeps only a log-sum-exp per head and token",
    "no_logits": "the log-probabilities are missing: V values per token, kept for the loss's backward pass",
    "logits_in_half": "the log-probabilities are counted in 2 bytes: the loss computes in fp32, so they "
    "take 4 bytes even under autocast",
    "residual_in_half": "the LayerNorms' inputs are counted in 2 bytes: they are the residual stream, "
    "fp32 even under autocast (only what enters or leaves a matrix product is bf16)",
    "no_stats": "the LayerNorms' statistics are missing: a mean and a standard deviation per token each "
    "(and the attention's log-sum-exp per head)",
    "no_ids": "the ids and the targets are missing: int64, 8 bytes per token each (the embedding's and the "
    "loss's backward passes need them)",
}


@exercise(LESSON, reference="lesson", minutes=10)
def counted_activations(fn) -> str:
    from gptlib.model import GPTConfig

    configs = [
        GPTConfig(vocab_size=96, context=32, n_layer=2, n_head=2, n_embd=32, dropout=0.0, attn_dropout=0.0),
        GPTConfig(vocab_size=64, context=8, n_layer=1, n_head=4, n_embd=48, dropout=0.0, attn_dropout=0.0),
    ]
    for c in configs:
        for half in (False, True):
            out = _calling("counted_activations", fn, c, half)
            _expect(
                isinstance(out, tuple) and len(out) == 2,
                "return the tuple (bytes per token in each block, bytes per token after the last block)",
            )
            got, measured = c.n_layer * out[0] + out[1], _measured_per_token(c, half)
            if abs(got - measured) <= 1e-3 * measured:
                continue
            where = (
                f"for {c.n_layer} blocks of width {c.n_embd}, {c.n_head} heads, {c.vocab_size} tokens"
                f"{' under bf16 autocast' if half else ''}: {got:,.0f} bytes per token counted, "
                f"{measured:,.0f} kept by autograd"
            )
            for mistake, hint in _COUNT_MISTAKES.items():
                _expect(got != _count_with(c, half, mistake), f"{where}; {hint}")
            _fail(
                f"{where}; count 16 vectors of width C per block, 4 bytes each (2 under autocast for the 14 "
                "that enter or leave a matrix product)"
            )
    return "what autograd keeps, for two shapes, in fp32 and under bf16 autocast"


# --- lr_at ------------------------------------------------------------------------------------------------


def _torch_schedule(max_lr, min_lr, warmup, decay, steps) -> list[float]:
    "Each step's rate by torch's schedulers: LinearLR over the warmup, CosineAnnealingLR, then min_lr."
    sgd = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=max_lr)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(sgd, T_max=decay - warmup, eta_min=min_lr)
    with warnings.catch_warnings():  # SequentialLR warns about stepping order, irrelevant here
        warnings.simplefilter("ignore")
        if warmup > 1:
            linear = torch.optim.lr_scheduler.LinearLR(sgd, start_factor=1 / warmup, total_iters=warmup - 1)
            schedule = torch.optim.lr_scheduler.SequentialLR(sgd, [linear, cosine], milestones=[warmup])
        else:
            schedule = cosine
        rates = []
        for _ in range(steps):
            rates.append(sgd.param_groups[0]["lr"])
            sgd.step()
            schedule.step()
    return [rate if step < decay else min_lr for step, rate in enumerate(rates)]


@exercise(LESSON, reference="gptlib.optim:lr_at", minutes=10)
def lr_at(fn) -> str:
    for max_lr, min_lr, warmup, decay in ((1e-3, 1e-4, 10, 100), (6e-4, 6e-5, 0, 50), (3e-3, 3e-3, 5, 20)):
        for step, want in enumerate(_torch_schedule(max_lr, min_lr, warmup, decay, decay + 20)):
            got = float(
                _calling(
                    "lr_at", fn, step, max_lr=max_lr, min_lr=min_lr, warmup_steps=warmup, decay_steps=decay
                )
            )
            if math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15):
                continue
            where = (
                f"lr_at({step}, max_lr={max_lr}, min_lr={min_lr}, warmup_steps={warmup}, "
                f"decay_steps={decay}) = {got:.6g}, expected {want:.6g}"
            )
            if step < warmup:
                _expect(
                    not math.isclose(got, max_lr * step / warmup, rel_tol=1e-9),
                    f"{where}: the warmup is one step late; step 0 already trains, so the rate is "
                    "max_lr * (step + 1) / warmup_steps and reaches max_lr at step warmup_steps - 1",
                )
                _fail(f"{where}: the warmup rises linearly to max_lr, max_lr * (step + 1) / warmup_steps")
            if step >= decay:
                _fail(
                    f"{where}: from decay_steps on the rate stays at min_lr (the cosine would climb back up)"
                )
            progress = (step - warmup) / (decay - warmup)
            _expect(
                not math.isclose(got, 0.5 * max_lr * (1 + math.cos(math.pi * progress)), rel_tol=1e-9),
                f"{where}: the cosine ends at min_lr, not at 0: "
                "min_lr + (max_lr - min_lr) * (1 + cos(pi * progress)) / 2",
            )
            _fail(
                f"{where}: the cosine starts where the warmup ends: progress = (step - warmup_steps) / "
                "(decay_steps - warmup_steps) runs from 0 to 1, and the rate is "
                "min_lr + (max_lr - min_lr) * (1 + cos(pi * progress)) / 2"
            )
    return "every step of three schedules equal to torch's LinearLR and CosineAnnealingLR, warmup or none"


# --- clip_grad_norm ---------------------------------------------------------------------------------------


def _with_grads(scale: float):
    "Three parameters, two with gradients (global norm about 3 * scale), one without."
    g = torch.Generator().manual_seed(1)
    params = [torch.zeros(n, requires_grad=True) for n in (3, 4, 2)]
    params[0].grad = torch.randn(3, generator=g) * scale
    params[1].grad = torch.randn(4, generator=g) * 2 * scale
    return params


@exercise(LESSON, reference="lesson", minutes=10)
def clip_grad_norm(fn) -> str:
    for scale, max_norm in ((1.0, 0.5), (1.0, 1e6), (1.0, math.inf), (100.0, 1.0)):
        mine, theirs = _with_grads(scale), _with_grads(scale)
        got = _calling(
            "clip_grad_norm", fn, (p for p in mine), max_norm
        )  # a generator, as model.parameters()
        norms = [torch.linalg.vector_norm(p.grad) for p in theirs if p.grad is not None]  # before clipping
        want = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
        _expect(got is not None, "clip_grad_norm returned None: return the global norm before clipping")
        where = f"with max_norm={max_norm} and gradients of global norm {float(want):.4g}"
        if not math.isclose(float(got), float(want), rel_tol=1e-5):
            _expect(
                not math.isclose(float(got), float(want) ** 2, rel_tol=1e-5),
                f"{where} it returned {float(got):.4g}, the sum of squares: the norm is its square root",
            )
            _expect(
                not math.isclose(float(got), min(max_norm, float(want)), rel_tol=1e-5),
                f"{where} it returned {float(got):.4g}: return the norm before clipping, not after",
            )
            _expect(
                not math.isclose(float(got), float(max(norms)), rel_tol=1e-5),
                f"{where} it returned one tensor's norm: the global norm is over all gradients as one vector",
            )
            _fail(
                f"{where} it returned {float(got):.4g}: the global norm is the square root of the sum of "
                "every gradient value squared"
            )
        if all(_close(a.grad, b.grad, 1e-5) for a, b in zip(mine[:2], theirs[:2])):
            continue
        _expect(
            all(torch.isfinite(p.grad).all() for p in mine[:2]),
            f"{where} the gradients became inf or NaN: with max_norm = inf nothing is clipped; take "
            "min(1, max_norm / (norm + 1e-6)) as the factor",
        )
        unchanged = _with_grads(scale)
        if all(_close(a.grad, b.grad, 1e-5) for a, b in zip(mine[:2], unchanged[:2])):
            _fail(
                f"{where} the gradients were not scaled: multiply each p.grad in place "
                "(p.grad.mul_(factor)); and walk `parameters` once (make a list first), a generator is empty "
                "the second time"
            )
        per_tensor = [b.grad * min(1.0, max_norm / float(n)) for b, n in zip(unchanged[:2], norms)]
        _expect(
            not all(_close(a.grad, b, 1e-5) for a, b in zip(mine[:2], per_tensor)),
            f"{where} each tensor was clipped on its own: one factor for all, from the global norm, keeps "
            "the direction of the step",
        )
        _expect(
            max_norm < float(want),
            f"{where} gradients already below max_norm were scaled: clipping only ever shrinks, the factor "
            "is at most 1",
        )
        _fail(f"{where} the clipped gradients differ from torch.nn.utils.clip_grad_norm_'s")
    return "the norm and the gradients of torch.nn.utils.clip_grad_norm_, from a generator, max_norm inf too"


# --- accumulate_gradients ---------------------------------------------------------------------------------


def _grads_of(model, micro_batches, factor: float = 1.0):
    "The gradients of the mean loss over `micro_batches` on a copy of `model`, times `factor`."
    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        (twin(x, y)[1] / len(micro_batches)).backward()
    return [p.grad.clone() * factor for p in twin.parameters()]


def _all_close(got: list, want: list) -> bool:
    return all(g is not None and torch.allclose(g, w, rtol=1e-4, atol=1e-6) for g, w in zip(got, want))


@exercise(LESSON, reference="lesson", minutes=5)
def accumulate_gradients(fn) -> str:
    model, micro = _tiny_gpt(), _token_batches(4)
    big_x, big_y = torch.cat([x for x, _ in micro]), torch.cat([y for _, y in micro])
    with torch.no_grad():
        want_loss = model(big_x, big_y)[1].item()
    want = _grads_of(model, [(big_x, big_y)])
    model.zero_grad(set_to_none=True)
    loss = _calling("accumulate_gradients", fn, model, micro)
    got = [p.grad for p in model.parameters()]
    _expect(
        all(g is not None for g in got),
        "some parameters have no gradient: call .backward() on each micro-batch's loss",
    )
    k = len(micro)
    if not _all_close(got, want):
        _expect(
            not _all_close(got, [w * k for w in want]),
            f"the gradients are {k} times too large: the loss is a mean, so divide each micro-batch's loss "
            "by the number of micro-batches before .backward()",
        )
        _expect(
            not _all_close(got, [w / k for w in want]),
            f"the gradients are {k} times too small: the loss was divided twice; divide each micro-batch's "
            "loss once, by the number of micro-batches",
        )
        last = _grads_of(model, micro[-1:])
        _expect(
            not (_all_close(got, [w / k for w in last]) or _all_close(got, last)),
            "only the last micro-batch's gradient is left: do not zero the gradients between micro-batches, "
            ".backward() adds into .grad",
        )
        _fail(
            "the gradients differ from one batch made of all the micro-batches: for each (x, y), "
            "_, loss = model(x, y); (loss / len(micro_batches)).backward()"
        )
    _expect(loss is not None, "accumulate_gradients returned None: return the mean loss")
    loss = float(loss)
    _expect(
        not math.isclose(loss, want_loss * k, rel_tol=1e-4),
        "the returned loss is the sum over the micro-batches: return their mean, the loss of the whole batch",
    )
    _expect(
        math.isclose(loss, want_loss, rel_tol=1e-4),
        f"the returned loss is {loss:.5f}, expected {want_loss:.5f}: the mean of the micro-batch losses",
    )
    return f"{k} micro-batches give the gradient and the loss of one batch of {big_x.shape[0]}"


# --- DynamicLossScaler ------------------------------------------------------------------------------------

# With growth_interval 3 the scale halves at 0, 1, 7 and 14 and doubles at 4, 10 and 13: a scaler that keeps
# its count through an overflow doubles at 8, one that doubles a step early at 9, one that never restarts
# its count after doubling misses 13.
_OVERFLOWS = {0: "inf", 1: "inf", 7: "nan", 14: "inf"}  # steps whose gradient holds an inf or a NaN
_UNSCALED_FIRST = {2, 3, 5, 7, 9, 14}  # steps that call unscale_ (to clip) before step()
_INTERVAL = 3


def _scaler_run(scaler, n_steps: int = 16):
    "A scripted loop on one parameter with planted overflows: each step's scale, and the parameter after it."
    # small weights and steps of 1e-2: float32 resolves the steps (and a step 256 times smaller) well
    p = torch.nn.Parameter(torch.tensor([0.01, -0.02, 0.03]))
    optimizer = torch.optim.SGD([p], lr=1.0)
    weights = torch.tensor([0.5, -1.0, 2.0])
    trace = []
    for step in range(n_steps):
        scale = _calling("get_scale()", scaler.get_scale)
        loss = _calling("scale(loss)", scaler.scale, (p * weights).sum() * 1e-2)
        loss.backward()
        if step in _OVERFLOWS:
            p.grad[step % 3] = float(_OVERFLOWS[step])
        if step in _UNSCALED_FIRST:
            _calling("unscale_(optimizer)", scaler.unscale_, optimizer)
        _calling("step(optimizer)", scaler.step, optimizer)
        _calling("update()", scaler.update)
        trace.append((float(scale), p.detach().clone()))
        optimizer.zero_grad(set_to_none=True)
    return trace


def _scale_hint(step: int, got: list, want: list) -> str:
    "Why the learner's scale after `step` differs from GradScaler's (`got`, `want`: the scales of each step)."
    before, after, expected = want[step], got[step + 1], want[step + 1]
    where = f"after step {step} (scale {before:g}, {'an overflow' if step in _OVERFLOWS else 'a clean step'})"
    where += f" the scale is {after:g}, expected {expected:g}"
    if step in _OVERFLOWS:
        if after == before:
            return f"{where}: an overflow halves the scale (the step was skipped: the scale was too high)"
        return f"{where}: an overflow multiplies the scale by backoff_factor (0.5), once"
    if expected > before:
        return (
            f"{where}: the growth_interval-th clean step in a row doubles the scale (count the clean steps "
            "since the last overflow or the last doubling)"
        )
    if after < before:
        return f"{where}: a clean step never lowers the scale, only an overflow does"
    last_change = max((s for s in range(step) if s in _OVERFLOWS or want[s + 1] > want[s]), default=-1)
    if step - last_change == _INTERVAL - 1:
        return (
            f"{where}: the scale doubled one step early: it doubles on the growth_interval-th clean step "
            "in a row, this one counted"
        )
    if last_change in _OVERFLOWS:
        return f"{where}: an overflow also restarts the count of clean steps at 0"
    return f"{where}: after doubling, the count of clean steps starts again from 0"


@exercise(LESSON, reference="lesson", name="DynamicLossScaler", minutes=20)
def dynamic_loss_scaler(cls) -> str:
    _expect(isinstance(cls, type), "DynamicLossScaler must be a class (keep the cell's class line)")
    scaler = _calling("DynamicLossScaler(...)", cls, init_scale=2.0**10, growth_interval=_INTERVAL)
    loss = _calling("scale(loss)", scaler.scale, torch.tensor(3.0))
    _expect(
        loss is not None and float(loss) == 3.0 * 2**10,
        "scale(loss) must return the loss times the current scale (and leave the scale as it is)",
    )
    scaler = cls(init_scale=2.0**10, growth_interval=_INTERVAL)
    got = _scaler_run(scaler)
    want = _scaler_run(torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=_INTERVAL))
    got_scales, want_scales = [s for s, _ in got], [s for s, _ in want]
    for step, ((_, p), (_, q)) in enumerate(zip(got, want)):
        if step + 1 < len(got) and got_scales[step + 1] != want_scales[step + 1] and torch.equal(p, q):
            _fail(_scale_hint(step, got_scales, want_scales))
        if torch.equal(p, q):
            continue
        before = want[step - 1][1] if step else torch.tensor([0.01, -0.02, 0.03])
        where = f"at step {step} ({'an overflow' if step in _OVERFLOWS else 'a clean step'})"
        _expect(
            torch.isfinite(p).all(),
            f"{where} the weights became inf or NaN: skip optimizer.step() when a gradient is inf or NaN"
            + (
                " (NaN counts too: torch.isfinite is False for both)" if _OVERFLOWS.get(step) == "nan" else ""
            ),
        )
        _expect(
            step not in _OVERFLOWS,
            f"{where} the weights changed: a step whose gradients overflowed is skipped",
        )
        moved, expected_move = p - before, q - before
        _expect(
            not torch.allclose(moved, expected_move * want_scales[step], rtol=1e-3),
            f"{where} the step was {want_scales[step]:g} times too large: the gradients were not divided by "
            "the scale. step() unscales when unscale_ was not called this step, so update() must forget this "
            "step's unscaling (found_inf = None)",
        )
        _expect(
            not torch.allclose(moved, expected_move / want_scales[step], rtol=1e-3, atol=0),
            f"{where} the step was {want_scales[step]:g} times too small: the gradients were divided twice; "
            "step() unscales only when unscale_ was not called since the last update()",
        )
        _fail(f"{where} the weights differ from torch.amp.GradScaler's")
    _expect(
        got_scales == want_scales,
        f"the scales {got_scales} differ from GradScaler's {want_scales}: halve on an overflow, double after "
        "growth_interval clean steps in a row",
    )
    return f"{len(got)} steps, {len(_OVERFLOWS)} overflows: GradScaler's scales and weights, bit for bit"
