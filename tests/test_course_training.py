"""The checks of lesson 06's pieces (notebooks/course/checks/training.py): each accepts its reference, says
"not done" for an untouched stub, and rejects plausible wrong answers with the hint that names the mistake;
and the "your GPT" run of `course.your_gpt` trains from the pieces it is given."""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from course import pieces
from tools.checking import reference, rejects
from tools.checking import stub as _stub
from torch.nn.parallel import DistributedDataParallel

from gptlib.files import atomic_open
from gptlib.loader import eval_batches
from gptlib.runtime import rng_state, seed_everything, set_rng_state

LESSON_PIECES = ["evaluate", "train_step", "save_training", "restore_training", "train_loop"]


def test_the_lesson_teaches_these_pieces():
    taught = [name for name, piece in pieces._registry().items() if piece.notebook == "06_training"]
    assert sorted(taught) == sorted(LESSON_PIECES)


@pytest.mark.parametrize("name", LESSON_PIECES)
def test_each_check_accepts_the_reference(name):
    outcome = pieces.run_check(name, reference(name))
    assert outcome.passed, outcome.detail


@pytest.mark.parametrize("name", LESSON_PIECES)
def test_an_untouched_stub_is_not_done(name):
    assert pieces.run_check(name, _stub).status == "not done"


def test_a_not_implemented_error_that_is_not_the_stub_propagates():
    def half_done(*args, **kwargs):
        raise NotImplementedError("fp16 is not supported here")

    with pytest.raises(NotImplementedError, match="fp16"):
        pieces.run_check("train_step", half_done)


# --- evaluate -----------------------------------------------------------------------------------------------


def evaluate_with(
    *,
    eval_mode=True,
    give_back=True,
    per_batch_mean=False,
    bits=True,
    specials=False,
    sync_each=False,
    reduce="once",
    autocast=True,
):
    "An evaluate with one mistake (or none, with the defaults)."

    @torch.no_grad()
    def evaluate(model, batches, byte_lengths, precision, dist=None):
        was_training = model.training
        if eval_mode:
            model.eval()
        totals, means = torch.zeros(4, dtype=torch.float64), []
        for x, y in batches:
            with precision.autocast() if autocast else nullcontext():
                logits, _ = model(x)
            nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
            nbytes = byte_lengths[y.flatten()]
            text = nll if specials else torch.where(nbytes > 0, nll, 0.0)
            part = torch.stack([nll.sum(), text.sum(), torch.tensor(y.numel()), nbytes.sum()]).double()
            if sync_each or per_batch_mean:
                means.append(nll.mean().item())  # a host read at every batch
            if dist is not None and reduce == "each":
                dist.all_reduce_sum(part)
            totals += part
        if give_back:
            model.train(was_training)
        if dist is not None and reduce == "once":
            dist.all_reduce_sum(totals)
        nll_sum, nll_text, n_tokens, n_bytes = totals.tolist()
        return {
            "val_loss": sum(means) / len(means) if per_batch_mean else nll_sum / n_tokens,
            "val_bpb": nll_text / ((math.log(2) if bits else 1.0) * n_bytes),
            "val_tokens": int(n_tokens),
        }

    return evaluate


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (evaluate_with(eval_mode=False), "call model.eval() first"),
        (evaluate_with(give_back=False), "give the caller's mode back"),
        (evaluate_with(per_batch_mean=True), "the mean of the batches' means"),
        (evaluate_with(bits=False), "divide by ln 2"),
        (evaluate_with(specials=True), "leave them out of the sum"),
        (evaluate_with(sync_each=True), "read them once, at the end"),
        (evaluate_with(reduce="never"), "add the sums over the ranks with dist.all_reduce_sum"),
        (evaluate_with(reduce="each"), "once, with every sum in one tensor"),
        (evaluate_with(autocast=False), "run the forward under precision.autocast()"),
    ],
)
def test_evaluate_check_names_the_mistake(wrong, hint):
    rejects("evaluate", wrong, hint)


def test_the_evaluate_variant_without_mistakes_passes():
    assert pieces.run_check("evaluate", evaluate_with()).passed


# --- train_step ---------------------------------------------------------------------------------------------


def step_with(
    *,
    set_lr=True,
    divide=True,
    zero_between=False,
    clip=True,
    zero_after=True,
    report="mean",
    scale=True,
    unscale=True,
    through_scaler=True,
    update=True,
    autocast=True,
    no_sync=True,
    detach=True,
    item=False,
    clipped_norm=False,
):
    "A train_step with one mistake (or none, with the defaults)."

    def train_step(model, optimizer, scaler, batches, lr, *, precision, grad_accum, grad_clip):
        if set_lr:
            for group in optimizer.param_groups:
                group["lr"] = lr
        losses = []
        for micro in range(grad_accum):
            if zero_between:
                optimizer.zero_grad()
            x, y = next(batches)
            last = micro == grad_accum - 1
            ddp = isinstance(model, DistributedDataParallel)
            with nullcontext() if last or not ddp or not no_sync else model.no_sync():
                with precision.autocast() if autocast else nullcontext():
                    _, loss = model(x, y)
                loss_to_grad = loss / grad_accum if divide else loss
                (scaler.scale(loss_to_grad) if scale else loss_to_grad).backward()
            losses.append(loss.item() if item else (loss.detach() if detach else loss))
        if unscale:
            scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip if clip else 1e30)
        used = scaler.get_scale()
        scaler.step(optimizer) if through_scaler else optimizer.step()
        if update:
            scaler.update()
        skipped = precision.use_scaler and scaler.get_scale() < used
        if zero_after:
            optimizer.zero_grad(set_to_none=True)
        total = sum(losses) if item else torch.stack(losses).sum()
        mean = {"mean": total / grad_accum, "sum": total, "last": losses[-1]}[report]
        if clipped_norm:
            norm = torch.clamp(norm, max=grad_clip)
        return mean, norm, used, bool(skipped)

    return train_step


def step_reading_every_batch(model, optimizer, scaler, batches, lr, *, precision, grad_accum, grad_clip):
    "Runs the iterator dry instead of taking grad_accum micro-batches."
    for group in optimizer.param_groups:
        group["lr"] = lr
    losses = []
    for x, y in batches:
        _, loss = model(x, y)
        (loss / grad_accum).backward()
        losses.append(loss.detach())
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return torch.stack(losses).mean(), norm, 1.0, False


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (step_reading_every_batch, "take exactly grad_accum micro-batches with next(batches)"),
        (step_with(set_lr=False), "the step used the optimizer's old learning rate"),
        (step_with(divide=False), "the step is 3 times too large"),
        (step_with(zero_between=True), "only the last micro-batch counted"),
        (step_with(clip=False), "the gradient was not clipped"),
        (step_with(zero_after=False), "the gradients are still there after the step"),
        (step_with(report="sum"), "the loss returned is the sum over the micro-batches"),
        (step_with(report="last"), "the mean of the grad_accum micro-batch losses (not the last one)"),
        (step_with(detach=False), "the loss returned still holds its graph"),
        (step_with(item=True), "return it as a 0-dim tensor, kept on the device"),
        (step_with(clipped_norm=True), "the global norm before clipping"),
        (step_with(autocast=False), "run the forward (model(x, y)) under precision.autocast()"),
        (step_with(unscale=False), "call scaler.unscale_(optimizer) before clipping"),
        (step_with(scale=False), "did not use scaler.scale"),  # torch's own assert says it
        (step_with(through_scaler=False), "step through scaler.step(optimizer)"),
        (step_with(update=False), "call scaler.update() after the step"),
        (step_with(no_sync=False), "run all but the last micro-batch inside model.no_sync()"),
    ],
)
def test_train_step_check_names_the_mistake(wrong, hint):
    rejects("train_step", wrong, hint)


def test_the_train_step_variant_without_mistakes_passes():
    assert pieces.run_check("train_step", step_with()).passed


def test_train_step_check_compares_with_gptlibs_own_step():
    "A step that is right with SGD but wrong with AdamW (its moments reset) is caught by the comparison."

    def fresh_optimizer_state(model, optimizer, scaler, batches, lr, **kwargs):
        result = reference("train_step")(model, optimizer, scaler, batches, lr, **kwargs)
        optimizer.state.clear()  # forgets m and v: harmless for SGD, not for AdamW
        return result

    rejects("train_step", fresh_optimizer_state, "after two AdamW steps the parameters differ")


# --- checkpoints --------------------------------------------------------------------------------------------

HOLDERS = ("model", "optimizer", "scaler", "loader")


def save_with(*, atomic=True, rng=True, pickled=False, forward=False):
    "A save_training with one mistake (or none)."

    def save_training(training, step, path):
        state = {name: getattr(training, name).state_dict() for name in HOLDERS}
        if forward:
            state["model"] = {f"_orig_mod.{k}": v for k, v in state["model"].items()}
        state["rng"], state["step"] = (rng_state() if rng else {}), step
        if pickled:
            state["loader"] = training.loader  # the object itself: torch.load(weights_only=True) refuses it
        if atomic:
            with atomic_open(path) as f:
                torch.save(state, f)
        else:
            torch.save(state, path)

    return save_training


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (save_with(atomic=False), "write to a temporary file and rename it into place"),
        (save_with(rng=False), "the random generators as they are"),
        (save_with(pickled=True), "torch.load(path, weights_only=True) cannot read the file"),
        (save_with(forward=True), "the weights: training.model.state_dict()"),
    ],
)
def test_save_training_check_names_the_mistake(wrong, hint):
    rejects("save_training", wrong, hint)


def restore_with(*, skip=(), rng=True, returns=True):
    "A restore_training with one mistake (or none)."

    def restore_training(training, path):
        state = torch.load(path, map_location="cpu", weights_only=True)
        for name in HOLDERS:
            if name not in skip:
                getattr(training, name).load_state_dict(state[name])
        if rng:
            set_rng_state(state["rng"])
        return state["step"] if returns else None

    return restore_training


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (restore_with(skip=("loader",)), "the loader's place"),
        (restore_with(skip=("optimizer",)), "AdamW's moments"),
        (restore_with(skip=("scaler",)), "the loss scaler's scale"),
        (restore_with(rng=False), "the random generators were not restored"),
        (restore_with(returns=False), "return the step the checkpoint was saved at"),
    ],
)
def test_restore_training_check_names_the_mistake(wrong, hint):
    rejects("restore_training", wrong, hint)


def save_training(training, step, path):  # what the loops below save and resume with: the lesson's
    return reference("save_training")(training, step, path)


def restore_training(training, path):
    return reference("restore_training")(training, path)


def train_step(*args, **kwargs):
    return reference("train_step")(*args, **kwargs)


def evaluate(*args, **kwargs):
    return reference("evaluate")(*args, **kwargs)


def loop_with(*, resume=True, seed="new", stop_save=True, lr_shift=0, first_record=1, save_every=True):
    "A train_loop with one mistake (or none)."

    def train_loop(cfg, training, path, *, stop_after=None, log=None):
        step = 0
        if resume and Path(path).exists():
            step = restore_training(training, path)
        if seed == "always" or (seed == "new" and step == 0):
            seed_everything(cfg.seed)
        batches, history = iter(training.loader), []
        training.model.train()
        while step < cfg.max_steps:
            lr = cfg.lr(step + lr_shift)
            loss, grad_norm, _, _ = train_step(
                training.forward,
                training.optimizer,
                training.scaler,
                batches,
                lr,
                precision=training.precision,
                grad_accum=cfg.grad_accum,
                grad_clip=cfg.grad_clip,
            )
            step += 1
            last = step == cfg.max_steps
            if step % cfg.log_every == 0 or last:
                history.append(
                    {"step": step - 1 + first_record, "loss": loss.item(), "grad_norm": 0.0, "lr": lr}
                )
            if step % cfg.eval_every == 0 or last:
                n = cfg.eval_batches or None
                val = eval_batches(training.val.tokens, cfg.micro_batch, cfg.context, n)
                result = evaluate(training.model, val, training.val.byte_lengths, training.precision)
                history.append({"step": step, "val_loss": result["val_loss"], "val_bpb": result["val_bpb"]})
            if (
                (save_every and step % cfg.checkpoint_every == 0)
                or last
                or (stop_save and step == stop_after)
            ):
                save_training(training, step, path)
            if step == stop_after:
                break
        return history

    return train_loop


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (loop_with(resume=False), "continue from it (restore_training), not from step 0"),
        (loop_with(seed="always"), "seed the generators only when the run is new"),
        (loop_with(seed="never"), "a new run seeds every generator"),
        (loop_with(stop_save=False), "save at step stop_after, then stop"),
        (loop_with(lr_shift=1), "step s (counted from 0) trains at cfg.lr(s)"),
        (loop_with(first_record=0), "steps counted from 1"),
        (loop_with(save_every=False), "save every cfg.checkpoint_every steps (4)"),
    ],
)
def test_train_loop_check_names_the_mistake(wrong, hint):
    rejects("train_loop", wrong, hint)


def test_the_train_loop_variant_without_mistakes_passes():
    assert pieces.run_check("train_loop", loop_with()).passed


# --- your GPT -----------------------------------------------------------------------------------------------


def test_yours_line_counts_the_pieces_that_passed():
    from course.your_gpt import yours_line

    collected = pieces.Pieces(
        outcomes=[pieces.Outcome("evaluate", "passed", ""), pieces.Outcome("merge", "not done", "")]
    )
    # the pieces of the lessons 06's run is made of (01-06), not those of later lessons (07)
    total = sum(piece.notebook in pieces.YOUR_GPT_LESSONS for piece in pieces._registry().values())
    assert total < len(pieces._registry())
    assert yours_line(collected) == f"1 of {total} pieces are yours"


def test_the_learners_schedule_sets_the_rate_of_every_step():
    "The run's config keeps every field and method of the preset, but its learning rate is the learner's."
    from course.your_gpt import _with_schedule

    from gptlib.train_config import TrainConfig

    cfg = TrainConfig.preset("tiny", max_steps=10)
    scheduled = _with_schedule(cfg, lambda step, **kw: 0.5 * step)
    assert isinstance(scheduled, TrainConfig) and scheduled.to_dict() == cfg.to_dict()
    assert scheduled.lr(3) == 1.5 and cfg.lr(3) != 1.5


def test_the_course_setup_is_the_cpu_preset_s_data():
    "Every lesson's losses compare with `make run`'s: the course's tokenizer is the `cpu` preset's size."
    from course.setup import CORPUS, VOCAB_SIZE

    from gptlib.train_config import TrainConfig

    assert (CORPUS, VOCAB_SIZE) == ("shakespeare", TrainConfig.preset("cpu").vocab_size)
