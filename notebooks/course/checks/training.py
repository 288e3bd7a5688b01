"""Checks of the pieces written in lesson 06 (training), and the interface each piece keeps.

Hand-written tooling of the course, not part of the installed package. The pieces, in the order the lesson
builds them; the lesson's later cells and the "your GPT" run at the end of workbook 06 (`course.your_gpt`)
call them with exactly these signatures:

- `evaluate(model, batches, byte_lengths, precision, dist=None) -> {"val_loss", "val_bpb", "val_tokens"}`:
  over the (x, y) batches of the iterable `batches`, the mean cross-entropy per target token (nats), and the
  bits per byte of the targets that stand for text (`byte_lengths[id] > 0`); the model in eval mode while it
  runs and in the caller's mode after; the sums kept on the device, added over the ranks once with
  `dist.all_reduce_sum(tensor)` when `dist` is given, and read by the host once. Reference:
  `gptlib.train.evaluate` (the lesson's exported cell is the exercise).
- `train_step(model, optimizer, scaler, batches, lr, *, precision, grad_accum, grad_clip) -> (loss,
  grad_norm, scale, skipped)`: one optimizer step over `grad_accum` micro-batches taken with `next(batches)`,
  the forward under `precision.autocast()`, each loss divided by `grad_accum` and scaled by `scaler` before
  its backward (DDP syncing only on the last micro-batch), the gradients unscaled, clipped to `grad_clip`,
  the step taken through the scaler, the scaler updated, the gradients set to None. Returns the mean loss (a
  detached 0-dim tensor), the gradient norm before clipping (a tensor), the scale used (float) and whether
  the scaler skipped the step. Reference: `gptlib.train.train_step` (the exported cell is the exercise).
- `save_training(training, step, path) -> None`: the file `path`, written atomically and readable with
  `torch.load(weights_only=True)`, holding `{"model", "optimizer", "scaler", "rng", "loader", "step"}`: the
  state dicts of `training.model`, `.optimizer`, `.scaler` and `.loader`, `gptlib.runtime.rng_state()` and
  `step`. `training` is a `gptlib.train.Training` (what `setup` builds). A teaching piece: gptlib's own
  checkpoints are the run folder's (`gptlib.train.save`).
- `restore_training(training, path) -> int`: everything a file of `save_training` holds put back into
  `training` (the random generators with `set_rng_state`); returns its step. A teaching piece.
- `train_loop(cfg, training, path, *, stop_after=None, log=None) -> list[dict]`: from the checkpoint file
  `path` when it exists (else from step 0, every generator seeded with `seed_everything(cfg.seed)`), one
  `train_step` of `training.forward` a step at `cfg.lr(step)` up to `cfg.max_steps`; a record `{"step",
  "loss", "grad_norm", "lr"}` every `cfg.log_every` steps and at the last, a record `{"step", "val_loss",
  "val_bpb"}` (`evaluate` on `cfg.eval_batches` batches of `training.val`, all of it when 0) every
  `cfg.eval_every` steps and at the last; `save_training` every `cfg.checkpoint_every` steps, at the last and
  at `stop_after`, where it stops. Returns this call's records; `log(record)` sees each as it is made. A
  teaching piece; `gptlib.train.train` runs the same steps with a run folder, DDP and signals around them.

Each check runs the piece on a tiny GPT (milliseconds a step) against the reference: gptlib's functions, the
lesson's pieces, or an uninterrupted run; a difference becomes a hint that names the mistake it recognises.
Host syncs are counted by wrapping `Tensor.item` and its kin while the piece runs, against the reference's
count. tests/test_course_training.py shows each check accepting the reference and rejecting wrong answers.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import errno
import math
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn

from course.checks.data import _expect
from course.pieces import exercise

LESSON = "06_training"


def _fail(hint: str):
    raise AssertionError(hint)


def _calling(what: str, fn, *args, **kwargs):
    "`fn(*args, **kwargs)`, an error turned into a hint (a stub's NotImplementedError passes through)."
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise  # a stub's: "not done yet"; any other: shown as it is
    except Exception as e:  # the learner's code crashed (torch's asserts too): say where, keep the message
        _fail(f"{what} raised {type(e).__name__}: {e}")


def _close(a, b, tol: float = 1e-6) -> bool:
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=tol, atol=tol))


def _all_close(got: list, want: list, scale: float = 1.0, tol: float = 1e-5) -> bool:
    "Whether each tensor of `got` is `scale` times the one of `want`."
    return len(got) == len(want) and all(_close(g, scale * w, tol) for g, w in zip(got, want))


def _precision(name: str):
    "A `gptlib.optim.Precision` on the CPU, made directly: a check must not measure the machine."
    from gptlib.optim import Precision

    return Precision(name, "cpu", name == "fp16", f"{name} for a check")


def _tiny_gpt(seed: int = 0, dropout: float = 0.0):
    "A GPT of a few thousand parameters (V 64, T 16, one block of 2 heads, C 16): a step takes milliseconds."
    from gptlib.model import GPT, GPTConfig

    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=64, context=16, n_layer=1, n_head=2, n_embd=16)
    return GPT(config.__class__(**{**config.to_dict(), "dropout": dropout, "attn_dropout": 0.0}))


def _sharpened(model):
    "A copy of `model` with every weight 8 times larger: confident logits, on which bf16 and fp32 differ."
    sharp = copy.deepcopy(model)
    with torch.no_grad():
        for p in sharp.parameters():
            p.mul_(8)
    return sharp


def _token_batches(n: int, batch_size: int = 2, length: int = 16, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randint(64, (2, batch_size, length), generator=g)) for _ in range(n)]


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


_SYNCS = ("item", "tolist", "__bool__", "__float__", "__int__")  # what makes the host wait for the device


@contextlib.contextmanager
def _counting_syncs():
    "Count the calls that read a tensor's value on the host (`item`, `tolist`, `float(t)`...) in the block."
    count = [0]
    saved = {name: getattr(torch.Tensor, name) for name in _SYNCS}

    def counted(method):
        def wrapper(self, *args, **kwargs):
            count[0] += 1
            return method(self, *args, **kwargs)

        return wrapper

    for name, method in saved.items():
        setattr(torch.Tensor, name, counted(method))
    try:
        yield count
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


# --- evaluate -----------------------------------------------------------------------------------------------

_SPECIAL = (61, 62, 63)  # the ids the checks treat as special tokens: they stand for no text


def _byte_lengths() -> torch.Tensor:
    "(64,) raw bytes per id: 1 to 4 for text, 0 for the special ids."
    lengths = torch.randint(1, 5, (64,), generator=torch.Generator().manual_seed(7))
    lengths[list(_SPECIAL)] = 0
    return lengths


def _eval_batches() -> list:
    "Three batches of 3 windows and a last one of 1 (a split's last batch is short), with special targets."
    batches = _token_batches(3, batch_size=3, seed=4) + _token_batches(1, batch_size=1, seed=5)
    for _, y in batches:
        y[0, ::5] = _SPECIAL[0]  # an end-of-document, now and then
    return batches


class _FakeDist:
    "Two ranks holding the same numbers: `all_reduce_sum` doubles its tensor in place and counts its calls."

    def __init__(self):
        self.calls = 0

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return tensor.mul_(2)


def _evaluate_variants(model, batches, lengths) -> dict:
    "The figures of the usual wrong answers (nats, not bits; special tokens counted; ...), to name them."
    import torch.nn.functional as F

    sums = {"nll": 0.0, "text": 0.0, "tokens": 0, "bytes": 0, "all_bytes": 0, "x_bytes": 0, "means": []}
    model.eval()
    with torch.no_grad():
        for x, y in batches:
            logits, _ = model(x)
            nll = F.cross_entropy(logits.flatten(0, 1).double(), y.flatten(), reduction="none")
            nbytes = lengths[y.flatten()]
            sums["nll"] += nll.sum().item()
            sums["text"] += nll[nbytes > 0].sum().item()
            sums["tokens"] += y.numel()
            sums["bytes"] += nbytes.sum().item()
            sums["x_bytes"] += lengths[x.flatten()].sum().item()
            sums["means"].append(nll.mean().item())
    ln2 = math.log(2)
    return {
        "batch means": sum(sums["means"]) / len(sums["means"]),
        "nats per byte": sums["text"] / sums["bytes"],
        "specials counted": sums["nll"] / (ln2 * sums["bytes"]),
        "per token": sums["text"] / (ln2 * sums["tokens"]),
        "bytes of x": sums["text"] / (ln2 * sums["x_bytes"]),
    }


def _result(what: str, result) -> dict:
    _expect(
        isinstance(result, dict) and {"val_loss", "val_bpb", "val_tokens"} <= set(result),
        f"{what} returned {result!r:.80}: return a dict with val_loss, val_bpb and val_tokens",
    )
    return result


@exercise(LESSON, reference="gptlib.train:evaluate", minutes=20)
def evaluate(fn) -> str:
    from gptlib.train import evaluate as reference

    fp32, bf16, lengths, batches = _precision("fp32"), _precision("bf16"), _byte_lengths(), _eval_batches()
    model = _tiny_gpt(dropout=0.3).train()  # dropout on: evaluating with it would give noisy figures
    modes = []
    hook = model.register_forward_pre_hook(
        lambda m, args: modes.append((m.training, torch.is_grad_enabled()))
    )
    try:
        with _counting_syncs() as syncs:
            got = _result("evaluate", _calling("evaluate", fn, model, iter(batches), lengths, fp32))
    finally:
        hook.remove()
    _expect(bool(modes), "evaluate never called the model: run it on every (x, y) of `batches`")
    _expect(
        not any(training for training, _ in modes),
        "the model ran in training mode, with dropout on: call model.eval() first, so that the same "
        "weights always get the same score",
    )
    _expect(
        model.training,
        "evaluate left the model in eval mode: give the caller's mode back at the end "
        "(model.train(was_training)), or the training that follows runs without dropout",
    )
    with _counting_syncs() as reference_syncs:
        want = reference(model, iter(batches), lengths, fp32)
    tokens = sum(y.numel() for _, y in batches)
    _expect(
        int(got["val_tokens"]) == tokens,
        f"val_tokens is {got['val_tokens']}, but the batches hold {tokens} targets: count every one of them",
    )
    variants = _evaluate_variants(model, batches, lengths)
    model.train()
    if not _close(got["val_loss"], want["val_loss"]):
        _expect(
            not _close(got["val_loss"], variants["batch means"]),
            "val_loss is the mean of the batches' means, but the last batch is shorter: add the losses of "
            "all tokens and divide once by the number of tokens",
        )
        _fail(f"val_loss is {got['val_loss']:.6f}, expected {want['val_loss']:.6f}: the mean cross-entropy")
    if not _close(got["val_bpb"], want["val_bpb"]):
        hints = {
            "nats per byte": "val_bpb is in nats: divide by ln 2 to turn nats into bits",
            "specials counted": "val_bpb counts the loss of the special tokens: they stand for no bytes, so "
            "leave them out of the sum (the ids whose byte length is 0)",
            "per token": "val_bpb is divided by the tokens: divide by the raw bytes the targets stand for",
            "bytes of x": "val_bpb counts the bytes of the inputs x: the loss is the targets', so are the "
            "bytes",
        }
        for variant, hint in hints.items():
            _expect(not _close(got["val_bpb"], variants[variant]), hint)
        _fail(f"val_bpb is {got['val_bpb']:.6f}, expected {want['val_bpb']:.6f}")
    _expect(
        syncs[0] <= reference_syncs[0],
        f"evaluate read values on the host {syncs[0]} times, where {reference_syncs[0]} is enough: keep the "
        "running sums in a tensor on the device and read them once, at the end (.tolist()); each .item() "
        "makes the host wait for the device",
    )
    dist = _FakeDist()
    doubled = _result("evaluate", _calling("evaluate", fn, model, iter(batches), lengths, fp32, dist))
    _expect(
        dist.calls > 0 and int(doubled["val_tokens"]) == 2 * tokens,
        "with `dist` given, add the sums over the ranks with dist.all_reduce_sum(tensor), so that every rank "
        "reports the figures of the whole split",
    )
    _expect(
        dist.calls == 1, f"all_reduce_sum was called {dist.calls} times: once, with every sum in one tensor"
    )
    _expect(
        _close(doubled["val_loss"], want["val_loss"]) and _close(doubled["val_bpb"], want["val_bpb"]),
        "the figures change when two ranks add up: add the sums (losses, tokens, bytes) over the ranks, "
        "then divide, not the other way round",
    )
    sharp = _sharpened(model)  # logits far from 0, where bf16's rounding shows in the loss
    low = _result("evaluate", _calling("evaluate", fn, sharp, iter(batches), lengths, bf16))
    want_low, want_high = (reference(sharp, iter(batches), lengths, p) for p in (bf16, fp32))
    _expect(
        _close(low["val_loss"], want_low["val_loss"], 1e-5)
        or _close(want_low["val_loss"], want_high["val_loss"]),
        "in bf16 the loss is not the one autocast gives: run the forward under precision.autocast(), as "
        "training does",
    )
    return "nats and bits per byte, special tokens left out, eval mode, one host read, one all-reduce, bf16"


# --- train_step ---------------------------------------------------------------------------------------------


def _mean_grads(model, micro_batches) -> list:
    "The gradient of the mean loss over `micro_batches`, one per parameter (the model's own left alone)."
    twin = copy.deepcopy(model)
    for x, y in micro_batches:
        (twin(x, y)[1] / len(micro_batches)).backward()
    return [p.grad.detach().clone() for p in twin.parameters()]


def _disabled_scaler():
    return torch.amp.GradScaler("cpu", enabled=False)


def _step(fn, model, optimizer, scaler, batches, lr, precision, grad_accum, grad_clip):
    "One call of the learner's step; its result as (loss, grad_norm, scale, skipped), shape checked."
    result = _calling(
        "train_step",
        fn,
        model,
        optimizer,
        scaler,
        batches,
        lr,
        precision=precision,
        grad_accum=grad_accum,
        grad_clip=grad_clip,
    )
    _expect(
        isinstance(result, tuple) and len(result) == 4,
        f"train_step returned {result!r:.80}: return (loss, grad_norm, scale, skipped)",
    )
    return result


def _sgd_step(fn, model, micro, grad_clip: float):
    "The learner's step with SGD at lr 0.1 (the optimizer built at 0.5): what it returned, and each move."
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    batches = _Counted(micro + _token_batches(2, seed=9))  # two more than needed: taking them shows
    result = _step(
        fn, model, optimizer, _disabled_scaler(), batches, 0.1, _precision("fp32"), len(micro), grad_clip
    )
    _expect(
        batches.taken == len(micro),
        f"train_step took {batches.taken} batches with grad_accum={len(micro)}: take exactly grad_accum "
        "micro-batches with next(batches)",
    )
    _expect(
        all(p.grad is None or not p.grad.any() for p in model.parameters()),
        "the gradients are still there after the step: optimizer.zero_grad(set_to_none=True), or the next "
        "step adds onto them",
    )
    return result, [b - p.detach() for b, p in zip(before, model.parameters())]


def _check_sgd_moves(moved, want, micro, model) -> None:
    "The step of SGD at lr 0.1 moves each parameter by -0.1 * the mean gradient: name what changes that."
    k = len(micro)
    _expect(
        any(m.any() for m in moved), "the parameters did not move: call the step after the backward passes"
    )
    if _all_close(moved, want, 0.1):
        return
    _expect(
        not _all_close(moved, want, 0.5),
        "the step used the optimizer's old learning rate: set group['lr'] = lr in every group of "
        "optimizer.param_groups first",
    )
    _expect(
        not _all_close(moved, want, 0.1 * k),
        f"the step is {k} times too large: divide each micro-batch's loss by grad_accum before its backward",
    )
    last = _mean_grads(model, micro[-1:])
    _expect(
        not (_all_close(moved, last, 0.1 / k) or _all_close(moved, last, 0.1)),
        "only the last micro-batch counted: do not zero the gradients between micro-batches",
    )
    _fail("the step differs from one SGD step on the mean gradient of the micro-batches")


def _check_returned(result, micro, model, norm: float) -> None:
    "The returned loss (a detached tensor, the mean) and gradient norm (before clipping), scale and skipped."
    loss, grad_norm, scale, skipped = result
    with torch.no_grad():
        losses = [model(x, y)[1].item() for x, y in micro]
    _expect(
        isinstance(loss, torch.Tensor) and loss.dim() == 0,
        f"the loss returned is {loss!r:.60}: return it as a 0-dim tensor, kept on the device (the loop reads "
        "it only when it logs, so a step never waits for the device)",
    )
    _expect(
        not loss.requires_grad,
        "the loss returned still holds its graph: add loss.detach() to the running sum, or every "
        "micro-batch's activations stay in memory",
    )
    mean, value = sum(losses) / len(losses), loss.item()
    _expect(
        not math.isclose(value, sum(losses), rel_tol=1e-4),
        "the loss returned is the sum over the micro-batches: divide it by grad_accum",
    )
    _expect(
        math.isclose(value, mean, rel_tol=1e-4),
        f"the loss returned is {value:.5f}, expected {mean:.5f}: the mean of the grad_accum micro-batch "
        "losses (not the last one)",
    )
    _expect(
        isinstance(grad_norm, torch.Tensor) and math.isclose(float(grad_norm), norm, rel_tol=1e-4),
        f"the gradient norm returned is {grad_norm!r:.40}, expected {norm:.5f}: return what "
        "torch.nn.utils.clip_grad_norm_ returns, the global norm before clipping",
    )
    _expect(
        float(scale) == 1.0 and not skipped,
        f"with the scaler off, return scale 1.0 (scaler.get_scale()) and skipped False, got {scale!r}, "
        f"{skipped!r}",
    )


def _library_step(model, optimizer, scaler, batches, lr, *, precision, grad_accum, grad_clip):
    from gptlib.train import train_step

    return train_step(
        model, optimizer, scaler, batches, lr, precision=precision, grad_accum=grad_accum, grad_clip=grad_clip
    )


def _adamw_run(step, model, precision, n_steps: int = 2, scaler=None):
    "Two AdamW steps of `step` on a copy of `model`: the returned tuples and the parameters after."
    from gptlib.optim import make_adamw

    twin = copy.deepcopy(model)
    optimizer, _ = make_adamw(twin, lr=1e-3, weight_decay=0.1, fused=False)
    scaler = scaler if scaler is not None else _disabled_scaler()
    batches = iter(_token_batches(2 * n_steps, seed=1))
    results = [
        _step(step, twin, optimizer, scaler, batches, lr, precision, 2, 1.0) for lr in (2e-3, 1e-3)[:n_steps]
    ]
    return results, [p.detach().clone() for p in twin.parameters()], scaler


def _ddp(model):
    """`model` as DDP would wrap it for a step, without a process group: an instance of a subclass of
    `DistributedDataParallel` whose `no_sync()` is recorded (a forward under it would not average the
    gradients over the ranks). Its parameters are the model's."""
    from torch.nn.parallel import DistributedDataParallel

    class Wrapped(DistributedDataParallel):
        def __init__(self, module):
            nn.Module.__init__(self)  # DDP's own __init__ needs a process group: only its type is borrowed
            self.module, self.syncing, self.forwards = module, True, []

        @contextlib.contextmanager
        def no_sync(self):
            self.syncing = False
            try:
                yield
            finally:
                self.syncing = True

        def forward(self, *args, **kwargs):
            self.forwards.append(self.syncing)
            return self.module(*args, **kwargs)

    return Wrapped(model)


@exercise(LESSON, reference="gptlib.train:train_step", minutes=30)
def train_step(fn) -> str:
    fp32, model, micro = _precision("fp32"), _tiny_gpt(), _token_batches(3)
    want = _mean_grads(model, micro)
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in want)).item()
    # plain SGD at lr 0.1: a mistake in the learning rate, the accumulation or the zeroing shows in the move
    result, moved = _sgd_step(fn, copy.deepcopy(model), micro, grad_clip=1e6)
    _check_sgd_moves(moved, want, micro, model)
    _check_returned(result, micro, model, norm)
    result, moved = _sgd_step(fn, copy.deepcopy(model), micro, grad_clip=norm / 10)  # clipping: a tenth
    _expect(
        isinstance(result[1], torch.Tensor) and math.isclose(float(result[1]), norm, rel_tol=1e-4),
        f"with grad_clip {norm / 10:.4f} the gradient norm returned is {result[1]!r:.40}: return the global "
        f"norm before clipping ({norm:.4f}), what torch.nn.utils.clip_grad_norm_ returns",
    )
    if not _all_close(moved, want, 0.01):
        _expect(
            not _all_close(moved, want, 0.1),
            "the gradient was not clipped: after the last backward, "
            "torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip), then the step",
        )
        _fail(
            "the clipped step is wrong: clip once, the global norm of all the summed gradients, after the "
            "last micro-batch's backward and before the step"
        )
    # AdamW, against gptlib's own step: the optimizer's state must carry from one step to the next
    with _counting_syncs() as syncs:
        got, got_params, _ = _adamw_run(fn, model, fp32)
    with _counting_syncs() as reference_syncs:
        want_steps, want_params, _ = _adamw_run(_library_step, model, fp32)
    _expect(
        all(_close(g[0], w[0], 1e-5) for g, w in zip(got, want_steps))
        and _all_close(got_params, want_params),
        "after two AdamW steps the parameters differ from gptlib.train.train_step's",
    )
    _expect(
        syncs[0] <= reference_syncs[0],
        f"the step read values on the host {syncs[0]} times, where {reference_syncs[0]} is enough: keep the "
        "loss on the device (add loss.detach() to a tensor); .item() makes the host wait for the device at "
        "every micro-batch",
    )
    # bf16: the forward under autocast, on confident logits (where bf16's rounding shows in the loss)
    sharp = _sharpened(model)
    (low, *_), _, _ = _adamw_run(fn, sharp, _precision("bf16"), n_steps=1)
    (want_low, *_), _, _ = _adamw_run(_library_step, sharp, _precision("bf16"), n_steps=1)
    (want_high, *_), _, _ = _adamw_run(_library_step, sharp, fp32, n_steps=1)
    _expect(
        _close(low[0], want_low[0], 1e-5) or _close(want_low[0], want_high[0]),
        "in bf16 the loss is not the one autocast gives: run the forward (model(x, y)) under "
        "precision.autocast()",
    )
    _check_scaler(fn, model)
    _check_ddp(fn, model)
    return "SGD steps (rate, accumulation, clipping), AdamW steps equal to gptlib's, bf16, fp16's scaler, DDP"


def _check_scaler(fn, model) -> None:
    "fp16 with a loss scaler: the scale used, unscaling before the clip, a step skipped on an overflow."
    fp16 = _precision("fp16")

    def scaler(scale: float):
        return torch.amp.GradScaler("cpu", init_scale=scale, enabled=True)

    (got, *_), got_params, _ = _adamw_run(fn, model, fp16, n_steps=1, scaler=scaler(2.0**10))
    (want, *_), want_params, _ = _adamw_run(_library_step, model, fp16, n_steps=1, scaler=scaler(2.0**10))
    _expect(
        not _close(got[1], want[1] * 2**10, 1e-3),
        "the gradient norm is the scaled gradients': call scaler.unscale_(optimizer) before clipping, so "
        "that clipping measures the true gradients",
    )
    _expect(
        _all_close(got_params, want_params, tol=1e-4),
        "in fp16 the step differs from gptlib's: scale each loss before its backward "
        "(scaler.scale(loss / grad_accum).backward()), unscale before clipping, step with scaler.step",
    )
    _expect(float(got[2]) == 2.0**10, f"the scale returned is {got[2]!r}: the scale this step used, 1024.0")
    # a scale of 2**100 overflows fp16's gradients: the scaler must skip the step and halve the scale
    (got, *_), got_params, used = _adamw_run(fn, model, fp16, n_steps=1, scaler=scaler(2.0**100))
    _expect(
        all(torch.isfinite(p).all() for p in got_params) and _all_close(got_params, list(model.parameters())),
        "a step whose fp16 gradients overflowed changed the weights: step through scaler.step(optimizer), "
        "which skips the update when a gradient is inf or nan",
    )
    _expect(
        used.get_scale() == 2.0**99,
        "after an overflow the scale stays where it was: call scaler.update() after the step (it halves the "
        "scale after an overflow and doubles it after a run of good steps)",
    )
    _expect(
        bool(got[3]) and float(got[2]) == 2.0**100,
        f"after an overflow train_step returned scale {got[2]!r}, skipped {got[3]!r}: return the scale the "
        "step used and skipped=True (the scale fell, so the step was skipped)",
    )


def _check_ddp(fn, model) -> None:
    "Under DDP, the gradients are averaged over the ranks once a step: on the last micro-batch only."
    from gptlib.optim import make_adamw

    wrapped = _ddp(copy.deepcopy(model))
    optimizer, _ = make_adamw(wrapped.module, lr=1e-3, fused=False)
    batches = iter(_token_batches(3, seed=2))
    _step(fn, wrapped, optimizer, _disabled_scaler(), batches, 1e-3, _precision("fp32"), 3, 1.0)
    _expect(
        wrapped.forwards[-1:] == [True],
        "under DDP the last micro-batch must sync (average the gradients over the ranks): run it outside "
        "model.no_sync()",
    )
    _expect(
        wrapped.forwards == [False, False, True],
        "under DDP every backward averages the gradients over the ranks: run all but the last micro-batch "
        "inside model.no_sync() (when isinstance(model, DistributedDataParallel)), once a step is enough",
    )


# --- checkpoints and the loop ------------------------------------------------------------------------------

_RUN: list[tuple] = []  # (folder, tokenizer): the tiny corpus the loop checks train on, made once per process


def _tiny_run():
    "A byte-level tokenizer (259 ids) and shards of a few lines of Hamlet in a temporary folder, made once."
    from course.checks.bpe import HAMLET
    from gptlib.data import DataConfig, prepare
    from gptlib.tokenizer import Tokenizer

    if not _RUN:
        folder = Path(tempfile.mkdtemp(prefix="gptlib-check-training-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        (folder / "texts").mkdir()
        for i, line in enumerate(HAMLET.splitlines()):  # ten documents, one a line, repeated to some length
            (folder / "texts" / f"line{i:02d}.txt").write_text((line + "\n") * 8, encoding="utf-8")
        tokenizer = Tokenizer([])  # no merges: the 256 bytes and the special tokens
        tokenizer.save(folder / "tokenizer")
        data = DataConfig(corpus=str(folder / "texts"), tokenizer=folder / "tokenizer", out=folder / "shards")
        prepare(
            DataConfig.from_dict({**data.to_dict(), "val_fraction": 0.3}), progress=False, tokenizer=tokenizer
        )
        _RUN.append((folder, tokenizer))
    return _RUN[0]


def _tiny_config(**overrides):
    "The loop checks' run: 6 steps of 2 x 2 windows of 16 bytes, dropout on (the generators matter)."
    from gptlib.train_config import TrainConfig

    folder, tokenizer = _tiny_run()
    fields = dict(
        vocab_size=tokenizer.n_vocab,
        context=16,
        n_layer=1,
        n_head=2,
        n_embd=16,
        dropout=0.1,
        attn_dropout=0.0,
        micro_batch=2,
        grad_accum=2,
        max_steps=6,
        warmup_steps=2,
        max_lr=3e-3,
        min_lr=3e-4,
        log_every=1,
        eval_every=3,
        eval_batches=2,
        checkpoint_every=4,
        seed=5,
        precision="fp32",
        device="cpu",
    )
    shards, tok = str(folder / "shards"), str(folder / "tokenizer")
    return TrainConfig.from_dict(
        {**fields, "shards": shards, "tokenizer": tok, "out": str(folder), **overrides}
    )


def _training(cfg, scaler=None):
    "What `gptlib.train.setup` builds for `cfg` in one process on the CPU, as a fresh process would."
    from gptlib.runtime import Distributed
    from gptlib.train import setup

    _, tokenizer = _tiny_run()
    dist = Distributed(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    training = setup(cfg, dist, tokenizer, {}, "fp32")
    if scaler is not None:
        training.scaler = scaler
    return training


def _advance(training, cfg, steps: int) -> None:
    "Take `steps` steps of gptlib's own train_step: the optimizer, the loader and the generators move on."
    batches = iter(training.loader)
    for step in range(steps):
        _library_step(
            training.forward,
            training.optimizer,
            training.scaler,
            batches,
            cfg.lr(step),
            precision=training.precision,
            grad_accum=cfg.grad_accum,
            grad_clip=cfg.grad_clip,
        )


def _next_loss(training, cfg, step: int) -> torch.Tensor:
    "The loss of the step `step` (counted from 0) of `training`, taken with gptlib's train_step."
    loss, *_ = _library_step(
        training.forward,
        training.optimizer,
        training.scaler,
        iter(training.loader),
        cfg.lr(step),
        precision=training.precision,
        grad_accum=cfg.grad_accum,
        grad_clip=cfg.grad_clip,
    )
    return loss


def _same_tree(a, b) -> bool:
    "Whether two nested state dicts (dicts, lists, tensors, numbers) hold the same values."
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_tree(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_tree(x, y) for x, y in zip(a, b))
    return a == b


def _scratch() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="gptlib-check-ckpt-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


_KEYS = {"model", "optimizer", "scaler", "rng", "loader", "step"}


@contextlib.contextmanager
def _full_disk_in_torch_save():
    "Within the block, `torch.save` writes a few bytes of its file, then fails as a full disk would."
    saved = torch.save

    def failing(obj, f, *args, **kwargs):
        if isinstance(f, (str, Path)):
            Path(f).write_bytes(b"half a checkpoint")
        else:
            f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device (a check's simulated full disk)")

    torch.save = failing
    try:
        yield
    finally:
        torch.save = saved


@exercise(LESSON, reference="lesson", minutes=15)
def save_training(fn) -> str:
    from gptlib.runtime import rng_state

    cfg, folder = _tiny_config(), _scratch()
    training = _training(cfg, torch.amp.GradScaler("cpu", init_scale=1024.0, enabled=True))
    _advance(training, cfg, 2)  # moments in the optimizer, a loader two batches on
    path, rng = folder / "step-2.pt", rng_state()
    _calling("save_training", fn, training, 2, path)
    _expect(path.is_file(), f"save_training(training, 2, path) wrote no file at {path.name}")
    try:
        state = torch.load(path, weights_only=True)
    except Exception as e:
        _fail(
            f"torch.load(path, weights_only=True) cannot read the file ({type(e).__name__}): save only "
            "tensors and plain values (state dicts, rng_state(), the loader's state dict, ints)"
        )
    _expect(
        isinstance(state, dict) and set(state) == _KEYS,
        f"the file holds {sorted(state) if isinstance(state, dict) else type(state).__name__}: save a dict "
        f"with exactly the keys {sorted(_KEYS)}",
    )
    parts = {
        "model": (training.model.state_dict(), "the weights: training.model.state_dict()"),
        "optimizer": (training.optimizer.state_dict(), "AdamW's moments: training.optimizer.state_dict()"),
        "scaler": (training.scaler.state_dict(), "the loss scaler's scale: training.scaler.state_dict()"),
        "rng": (rng, "the random generators as they are: gptlib.runtime.rng_state()"),
        "loader": (training.loader.state_dict(), "where the batches stand: training.loader.state_dict()"),
        "step": (2, "the step: the `step` argument"),
    }
    for key, (want, what) in parts.items():
        _expect(_same_tree(state[key], want), f"state[{key!r}] is not {what}")
    with _full_disk_in_torch_save():
        try:
            fn(training, 3, path)
        except Exception:
            pass  # the failure is expected: what matters is the file it leaves behind
    try:
        intact = torch.load(path, weights_only=True)["step"] == 2
    except Exception:
        intact = False
    _expect(
        intact,
        "a save that failed half way (a full disk, a kill) broke the checkpoint that was there: write to a "
        "temporary file and rename it into place once complete (gptlib.files.atomic_open does both)",
    )
    return "model, optimizer, scaler, generators, loader and step; weights_only; atomic"


@exercise(LESSON, reference="lesson", minutes=10)
def restore_training(fn) -> str:
    from course.pieces import _registry

    cfg, folder = _tiny_config(), _scratch()
    saved = _training(cfg, torch.amp.GradScaler("cpu", init_scale=1024.0, enabled=True))
    _advance(saved, cfg, 2)
    path = folder / "step-2.pt"
    _registry()["save_training"].reference_object()(saved, 2, path)  # the lesson's format, written
    state = torch.load(path, weights_only=True)
    # a fresh process: other weights, optimizer, scale, generators and place in the batches
    fresh = _training(_tiny_config(seed=9), torch.amp.GradScaler("cpu", init_scale=8.0, enabled=True))
    _advance(fresh, cfg, 1)
    torch.manual_seed(12345)
    step = _calling("restore_training", fn, fresh, path)
    parts = {
        "model": (fresh.model.state_dict(), "the weights: training.model.load_state_dict(...)"),
        "optimizer": (fresh.optimizer.state_dict(), "AdamW's moments and step counts"),
        "scaler": (fresh.scaler.state_dict(), "the loss scaler's scale"),
        "loader": (fresh.loader.state_dict(), "the loader's place: a resumed run would read other batches"),
    }
    for key, (now, what) in parts.items():
        _expect(_same_tree(now, state[key]), f"{what} were not restored from state[{key!r}]")
    _expect(
        torch.equal(torch.get_rng_state(), state["rng"]["torch"]),
        "the random generators were not restored (gptlib.runtime.set_rng_state(state['rng'])): dropout "
        "would draw other masks than the saved run",
    )
    _expect(step == 2, f"restore_training returned {step!r}: return the step the checkpoint was saved at, 2")
    # the proof: the next step of the restored run is the saved run's next step, bit for bit
    from gptlib.runtime import set_rng_state

    set_rng_state(state["rng"])  # the saved run goes on from where it was saved
    loss_saved = _next_loss(saved, cfg, 2)
    fn(fresh, path)  # restored again: the check's own steps moved the generators since
    loss_restored = _next_loss(fresh, cfg, 2)
    _expect(
        torch.equal(loss_saved, loss_restored),
        "after restoring, the next step differs from the saved run's: put back everything the file holds",
    )
    return "weights, moments, scaler, generators and loader back; the next step equal to the saved run's"


def _records(history, kind: str) -> list:
    "The (step, figure) pairs of `history`: its train records' losses, or its validations' losses."
    key = "loss" if kind == "train" else "val_loss"
    return [(r.get("step"), r.get(key)) for r in history if isinstance(r, dict) and key in r]


@contextlib.contextmanager
def _recording(fn, name: str, calls: list):
    "While the block runs, the global `name` of `fn` (its cell's names) records the steps it is called at."
    names = fn.__globals__
    original = names.get(name)
    if original is None:
        yield
        return

    def recorder(*args, **kwargs):
        calls.append(kwargs.get("step", args[1] if len(args) > 1 else None))
        return original(*args, **kwargs)

    names[name] = recorder
    try:
        yield
    finally:
        names[name] = original


@exercise(LESSON, reference="lesson", minutes=25)
def train_loop(fn) -> str:
    from course.pieces import _registry

    reference, folder = _registry()["train_loop"].reference_object(), _scratch()
    cfg = _tiny_config()
    torch.manual_seed(777)  # whatever the generators hold before: a new run must seed them itself
    want = reference(cfg, _training(cfg), folder / "reference.pt")
    torch.manual_seed(778)
    saves = []
    with _recording(fn, "save_training", saves):
        got = _calling("train_loop", fn, cfg, _training(cfg), folder / "whole.pt")
    _expect(isinstance(got, list), f"train_loop returned {got!r:.60}: return the list of its records")
    steps = [s for s, _ in _records(want, "train")]
    _expect(
        [s for s, _ in _records(got, "train")] == steps,
        f"the loss records are at steps {[s for s, _ in _records(got, 'train')]}, expected {steps}: one "
        "{'step', 'loss', 'grad_norm', 'lr'} every cfg.log_every steps (and at the last), steps counted from "
        "1",
    )
    val_steps = [s for s, _ in _records(want, "val")]
    _expect(
        [s for s, _ in _records(got, "val")] == val_steps,
        f"the validations are at steps {[s for s, _ in _records(got, 'val')]}, expected {val_steps}: every "
        "cfg.eval_every steps and at the last",
    )
    lrs = [r.get("lr") for r in got if "loss" in r]
    _expect(
        all(
            isinstance(a, float) and math.isclose(a, r["lr"])
            for a, r in zip(lrs, (r for r in want if "loss" in r))
        ),
        f"the learning rates are {lrs}: step s (counted from 0) trains at cfg.lr(s)",
    )
    got_losses, want_losses = _records(got, "train"), _records(want, "train")
    if not math.isclose(got_losses[0][1], want_losses[0][1], rel_tol=1e-5):
        _fail(
            "the first step's loss differs from the reference loop's: a new run seeds every generator "
            "(seed_everything(cfg.seed)) and trains with dropout on (training.model.train())"
        )
    _expect(
        all(math.isclose(g, w, rel_tol=1e-5) for (_, g), (_, w) in zip(got_losses, want_losses)),
        "the losses differ from the reference loop's: each step is one train_step of training.forward at "
        "cfg.lr(step), with cfg.grad_accum and cfg.grad_clip, on the batches of iter(training.loader)",
    )
    _expect(
        all(
            math.isclose(g, w, rel_tol=1e-5)
            for (_, g), (_, w) in zip(_records(got, "val"), _records(want, "val"))
        ),
        "the validation losses differ: evaluate training.model on cfg.eval_batches batches of "
        "eval_batches(training.val.tokens, ...) (all of them when cfg.eval_batches is 0)",
    )
    _expect(
        saves in ([4, 6], []),
        f"checkpoints were saved at steps {saves}: save every cfg.checkpoint_every steps (4) and at the "
        "last step (6)",
    )
    # stopped after step 3, then resumed by a new process: the same losses, bit for bit
    path = folder / "stopped.pt"
    torch.manual_seed(779)
    first = _calling("train_loop", fn, cfg, _training(cfg), path, stop_after=3)
    _expect(
        [s for s, _ in _records(first, "train")] == steps[:3],
        f"with stop_after=3 the run logged steps {[s for s, _ in _records(first, 'train')]}: stop after "
        "step 3",
    )
    _expect(path.is_file(), "with stop_after=3 no checkpoint was saved: save at step stop_after, then stop")
    torch.manual_seed(780)  # the new process's generators, before the checkpoint's are put back
    second = _calling("train_loop", fn, cfg, _training(cfg), path)
    resumed = [s for s, _ in _records(second, "train")]
    _expect(
        resumed == steps[3:],
        f"the resumed run logged steps {resumed}, expected {steps[3:]}: when the file `path` exists, "
        "continue from it (restore_training), not from step 0",
    )
    for kind in ("train", "val"):
        _expect(
            _records(first, kind) + _records(second, kind) == _records(got, kind),
            "the resumed run's losses differ from the uninterrupted run's: restore everything from the "
            "checkpoint, and seed the generators only when the run is new",
        )
    return "records, rates, validations and checkpoints as specified; stopped at 3 and resumed, bit for bit"
