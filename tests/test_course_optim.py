"""The checks of lesson 05's pieces (notebooks/course/checks/optim.py): each accepts the lesson's reference,
says "not done" for an untouched stub, and rejects plausible wrong answers with the hint that names the
mistake."""

from __future__ import annotations

import math

import pytest
import torch
from course import pieces
from tools.checking import reference, rejects
from tools.checking import stub as _stub

LESSON_PIECES = [
    "param_groups",
    "AdamW",
    "counted_activations",
    "lr_at",
    "clip_grad_norm",
    "accumulate_gradients",
    "DynamicLossScaler",
]


def test_the_lesson_teaches_these_pieces():
    taught = [name for name, piece in pieces._registry().items() if piece.notebook == "05_optim"]
    assert sorted(taught) == sorted(LESSON_PIECES)


@pytest.mark.parametrize("name", LESSON_PIECES)
def test_each_check_accepts_the_reference(name):
    outcome = pieces.run_check(name, reference(name))
    assert outcome.passed, outcome.detail


class StubAdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def step(self):
        _stub()


class StubScaler:
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.scale_value = init_scale

    def get_scale(self):
        return self.scale_value

    scale = unscale_ = step = update = _stub


@pytest.mark.parametrize("name", LESSON_PIECES)
def test_an_untouched_stub_is_not_done(name):
    stub = {"AdamW": StubAdamW, "DynamicLossScaler": StubScaler}.get(name, _stub)
    assert pieces.run_check(name, stub).status == "not done"


# --- param_groups -----------------------------------------------------------------------------------------


def groups_by(rule, *, skip_frozen=True, remove_duplicate=True):
    "A param_groups that sorts by `rule(name, p)`, the rest of it right."

    def param_groups(model, weight_decay=0.1):
        decay, no_decay = [], []
        for name, p in model.named_parameters(remove_duplicate=remove_duplicate):
            if p.requires_grad or not skip_frozen:
                (decay if rule(name, p) else no_decay).append(p)
        return [
            {"params": decay, "weight_decay": weight_decay, "name": "decay"},
            {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"},
        ]

    return param_groups


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (groups_by(lambda name, p: name.endswith("weight")), "a LayerNorm's gain is called `weight` too"),
        (groups_by(lambda name, p: True), "biases and gains are vectors"),
        (groups_by(lambda name, p: p.ndim >= 2 and "0." not in name[:2]), "are matrices and not decayed"),
    ],
)
def test_param_groups_check_names_the_mistake(wrong, hint):
    rejects("param_groups", wrong, hint)


def keep_only_matrices(model, weight_decay=0.1):
    decay = [p for p in model.parameters() if p.ndim >= 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": [], "weight_decay": 0.0}]


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (groups_by(lambda name, p: p.ndim >= 2, skip_frozen=False), "a frozen tensor (requires_grad False)"),
        (groups_by(lambda name, p: p.ndim >= 2, remove_duplicate=False), "a tensor appears twice"),
        (keep_only_matrices, "trainable tensors are in no group"),
    ],
)
def test_param_groups_check_wants_each_trainable_tensor_once(wrong, hint):
    rejects("param_groups", wrong, hint)


# --- AdamW ------------------------------------------------------------------------------------------------


def adamw_class(
    *,
    l2=False,
    bias_correction=True,
    eps_inside=False,
    lr_from_init=False,
    shared_step=False,
    counts_outside_state=False,
):
    "An AdamW with one mistake built in, the rest of it right."

    class WrongAdamW(torch.optim.Optimizer):
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
            super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
            self.calls, self.initial_lr, self.counts = 0, lr, {}

        @torch.no_grad()
        def step(self):
            self.calls += 1
            for group in self.param_groups:
                lr = self.initial_lr if lr_from_init else group["lr"]
                (beta1, beta2), decay = group["betas"], group["weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["step"], state["m"], state["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                    state["step"] += 1
                    self.counts[id(p)] = self.counts.get(id(p), 0) + 1
                    t = (
                        self.calls
                        if shared_step
                        else self.counts[id(p)]
                        if counts_outside_state
                        else state["step"]
                    )
                    g = p.grad + decay * p if l2 else p.grad
                    if not l2:
                        p.mul_(1 - lr * decay)
                    state["m"].mul_(beta1).add_(g, alpha=1 - beta1)
                    state["v"].mul_(beta2).addcmul_(g, g, value=1 - beta2)
                    m, v = state["m"], state["v"]
                    if bias_correction:
                        m, v = m / (1 - beta1**t), v / (1 - beta2**t)
                    denom = (v + group["eps"]).sqrt() if eps_inside else v.sqrt() + group["eps"]
                    p.sub_(lr * m / denom)

    return WrongAdamW


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (adamw_class(l2=True), "weight decay is added to the gradient (Adam with L2)"),
        (adamw_class(bias_correction=False), "no bias correction"),
        (adamw_class(eps_inside=True), "eps is inside the square root"),
        (adamw_class(lr_from_init=True), "the learning rate did not follow the group"),
        (adamw_class(shared_step=True), "the step count is shared by all parameters"),
        (adamw_class(counts_outside_state=True), "a resume from state_dict() continues differently"),
    ],
)
def test_adamw_check_names_the_mistake(wrong, hint):
    rejects("AdamW", wrong, hint)


def test_adamw_check_wants_an_optimizer_class():
    rejects("AdamW", lambda params, **settings: None, "a class derived from torch.optim.Optimizer")


# --- counted_activations --------------------------------------------------------------------------------


def count(*, vectors=16, residual_bytes=4, logit_bytes=4, attention_matrix=False, ids=True):
    "A counted_activations with one mistake built in, the rest of it right."

    def counted_activations(c, half):
        product = 2 if half else 4
        block = 2 * c.n_embd * residual_bytes + (vectors - 2) * c.n_embd * product + 16 + 4 * c.n_head
        block += c.n_head * c.context * 4 if attention_matrix else 0
        head = c.n_embd * 4 + 8 + c.n_embd * product + c.vocab_size * logit_bytes + (16 if ids else 0)
        return block, head

    return counted_activations


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (count(vectors=17), "the attention's output is counted twice"),
        (count(attention_matrix=True), "the T x T attention matrix is counted"),
        (count(logit_bytes=0), "the log-probabilities are missing"),
        (count(ids=False), "the ids and the targets are missing"),
    ],
)
def test_counted_activations_check_names_the_mistake(wrong, hint):
    rejects("counted_activations", wrong, hint)


def test_counted_activations_check_sees_what_autocast_keeps_in_16_bits():
    "Right in fp32, wrong under autocast: the residual stream, or the log-probabilities, counted in 2 bytes."
    right = count()

    def residual_in_half(c, half):
        block, head = right(c, half)
        return block - (2 * c.n_embd * 2 if half else 0), head

    def logits_in_half(c, half):
        block, head = right(c, half)
        return block, head - (c.vocab_size * 2 if half else 0)

    rejects("counted_activations", residual_in_half, "the LayerNorms' inputs are counted in 2 bytes")
    rejects("counted_activations", logits_in_half, "the log-probabilities are counted in 2 bytes")


# --- lr_at ------------------------------------------------------------------------------------------------


def schedule(*, warmup_from_zero=False, cosine_from_zero=False, floor=True, to_zero=False):
    def lr_at(step, *, max_lr=6e-4, min_lr=6e-5, warmup_steps=50, decay_steps=10_000):
        if step < warmup_steps:
            return max_lr * (step if warmup_from_zero else step + 1) / warmup_steps
        if step >= decay_steps and floor:
            return min_lr
        start = 0 if cosine_from_zero else warmup_steps
        progress = (step - start) / (decay_steps - start)  # past 1 without the floor: the cosine climbs back
        low = 0.0 if to_zero else min_lr
        return low + 0.5 * (max_lr - low) * (1 + math.cos(math.pi * progress))

    return lr_at


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (schedule(warmup_from_zero=True), "the warmup is one step late"),
        (schedule(cosine_from_zero=True), "the cosine starts where the warmup ends"),
        (schedule(floor=False), "from decay_steps on the rate stays at min_lr"),
        (schedule(to_zero=True), "the cosine ends at min_lr, not at 0"),
    ],
)
def test_lr_at_check_names_the_mistake(wrong, hint):
    rejects("lr_at", wrong, hint)


# --- clip_grad_norm ---------------------------------------------------------------------------------------


def clip_per_tensor(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = torch.sqrt(sum((g**2).sum() for g in grads))
    for g in grads:
        g.mul_(min(1.0, max_norm / (float(g.norm()) + 1e-6)))
    return total


def clip_returning_the_clipped_norm(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.sqrt(sum((g**2).sum() for g in grads))
    factor = min(1.0, max_norm / (float(norm) + 1e-6))
    for g in grads:
        g.mul_(factor)
    return norm * factor


def clip_walking_twice(parameters, max_norm):
    norm = torch.sqrt(sum((p.grad**2).sum() for p in parameters if p.grad is not None))
    for p in parameters:  # a generator is empty by now
        p.grad.mul_(min(1.0, max_norm / (float(norm) + 1e-6)))
    return norm


def clip_always(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.sqrt(sum((g**2).sum() for g in grads))
    for g in grads:
        g.mul_(max_norm / (norm + 1e-6))
    return norm


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (clip_per_tensor, "each tensor was clipped on its own"),
        (clip_returning_the_clipped_norm, "return the norm before clipping, not after"),
        (clip_walking_twice, "a generator is empty the second time"),
        (clip_always, "gradients already below max_norm were scaled"),
    ],
)
def test_clip_grad_norm_check_names_the_mistake(wrong, hint):
    rejects("clip_grad_norm", wrong, hint)


# --- accumulate_gradients ---------------------------------------------------------------------------------


def accumulate(*, divide_by=None, zero_between=False, report="mean"):
    def accumulate_gradients(model, micro_batches):
        k, losses = len(micro_batches), []
        for x, y in micro_batches:
            if zero_between:
                model.zero_grad()
            _, loss = model(x, y)
            (loss / (k if divide_by is None else divide_by(k))).backward()
            losses.append(loss.item())
        return {"mean": sum(losses) / k, "sum": sum(losses)}[report]

    return accumulate_gradients


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (accumulate(divide_by=lambda k: 1), "the gradients are 4 times too large"),
        (accumulate(divide_by=lambda k: k * k), "the loss was divided twice"),
        (accumulate(zero_between=True), "only the last micro-batch's gradient is left"),
        (accumulate(report="sum"), "the returned loss is the sum over the micro-batches"),
    ],
)
def test_accumulate_gradients_check_names_the_mistake(wrong, hint):
    rejects("accumulate_gradients", wrong, hint)


# --- DynamicLossScaler ------------------------------------------------------------------------------------


def scaler_with(**methods):
    "The lesson's scaler with some methods replaced by wrong ones."
    return type("WrongScaler", (reference("DynamicLossScaler"),), methods)


def update_by(rule):
    "An update() whose scale and count follow `rule(scaler)`, found_inf reset as it should be."

    def update(self):
        rule(self)
        self.found_inf = None

    return update


def never_grows(s):
    s.scale_value, s.clean_steps = (
        (s.scale_value / 2, 0) if s.found_inf else (s.scale_value, s.clean_steps + 1)
    )


def keeps_the_count_on_overflow(s):
    if s.found_inf:
        s.scale_value /= 2
        return
    s.clean_steps += 1
    if s.clean_steps == s.growth_interval:
        s.scale_value, s.clean_steps = s.scale_value * 2, 0


def doubles_one_step_early(s):
    if s.found_inf:
        s.scale_value, s.clean_steps = s.scale_value / 2, 0
        return
    s.clean_steps += 1
    if s.clean_steps == s.growth_interval - 1:
        s.scale_value, s.clean_steps = s.scale_value * 2, 0


def halves_every_step(s):
    s.scale_value, s.clean_steps = s.scale_value / 2, 0


def step_always(self, optimizer):
    if self.found_inf is None:
        self.unscale_(optimizer)
    optimizer.step()


def step_unscaling_again(self, optimizer):
    self.unscale_(optimizer)
    if not self.found_inf:
        optimizer.step()


def unscale_checking_inf_only(self, optimizer):
    self.found_inf = False
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                p.grad.div_(self.scale_value)
                self.found_inf |= bool(torch.isinf(p.grad).any())


def unscale_without_dividing(self, optimizer):
    self.found_inf = any(
        not bool(torch.isfinite(p.grad).all())
        for g in optimizer.param_groups
        for p in g["params"]
        if p.grad is not None
    )


def update_without_forgetting(self):
    if self.found_inf:
        self.scale_value, self.clean_steps = self.scale_value / 2, 0
    else:
        self.clean_steps += 1
        if self.clean_steps == self.growth_interval:
            self.scale_value, self.clean_steps = self.scale_value * 2, 0


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (
            scaler_with(update=update_by(never_grows)),
            "the growth_interval-th clean step in a row doubles the scale",
        ),
        (scaler_with(update=update_by(keeps_the_count_on_overflow)), "an overflow also restarts the count"),
        (scaler_with(update=update_by(doubles_one_step_early)), "the scale doubled one step early"),
        (scaler_with(update=update_by(halves_every_step)), "a clean step never lowers the scale"),
        (scaler_with(step=step_always), "skip optimizer.step() when a gradient is inf or NaN"),
        (scaler_with(step=step_unscaling_again), "the gradients were divided twice"),
        (scaler_with(unscale_=unscale_checking_inf_only), "NaN counts too"),
        (scaler_with(unscale_=unscale_without_dividing), "the gradients were not divided by the scale"),
        (scaler_with(update=update_without_forgetting), "found_inf = None"),
        (
            scaler_with(scale=lambda self, loss: loss),
            "scale(loss) must return the loss times the current scale",
        ),
    ],
)
def test_dynamic_loss_scaler_check_names_the_mistake(wrong, hint):
    rejects("DynamicLossScaler", wrong, hint)


def test_the_reference_scaler_follows_torchs_own_update_rule():
    "The rule the lesson teaches is GradScaler's (torch._amp_update_scale_), over overflows and growth."
    ours = reference("DynamicLossScaler")(init_scale=2.0**16, growth_interval=3)
    scale, growth_tracker = torch.tensor([2.0**16]), torch.tensor([0], dtype=torch.int32)
    for found_inf in [True, True] + [False] * 7 + [True] + [False] * 4:
        ours.found_inf = found_inf
        ours.update()
        torch._amp_update_scale_(scale, growth_tracker, torch.tensor([float(found_inf)]), 2.0, 0.5, 3)
        assert (ours.get_scale(), ours.clean_steps) == (scale.item(), growth_tracker.item())
