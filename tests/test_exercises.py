"""The exercises' checkers (gptlib.exercises): each one accepts the reference answer in notebooks/solutions/,
reports an untouched stub as "not done yet" without raising (so CI can run the notebooks with the stubs in
place), and rejects plausible wrong answers with the hint that names the mistake."""

from __future__ import annotations

import ast
import importlib.util
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from gptlib import exercises

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "notebooks" / "solutions"
# (exercise, the solutions file holding its reference answer)
EXERCISES = [
    ("causal_head", "model"),
    ("cross_entropy", "model"),
    ("keep_top_k", "model"),
    ("training_step", "training"),
]


def solution(name: str):
    "The reference answer `name`, loaded from its file in notebooks/solutions/ (as a notebook would import it)."
    module = dict(EXERCISES)[name]
    spec = importlib.util.spec_from_file_location(f"solutions_{module}", SOLUTIONS / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return getattr(loaded, name)


def check(name: str):
    return getattr(exercises, f"check_{name}")


def rejects(name: str, wrong, hint: str) -> None:
    "The checker of `name` fails `wrong` with an AssertionError whose message contains `hint`."
    with pytest.raises(AssertionError, match=re.escape(hint)):
        check(name)(wrong)


# ------------------------------------------------------------------------------------------------------
# every checker


def test_every_checker_is_tested_here():
    checkers = {name[len("check_") :] for name in dir(exercises) if name.startswith("check_")}
    assert checkers == {name for name, _ in EXERCISES}


@pytest.mark.parametrize("name", [name for name, _ in EXERCISES])
def test_checker_accepts_the_reference_answer(name, capsys):
    assert check(name)(solution(name)) is True
    assert f"{name}: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name, module", EXERCISES)
def test_checker_reports_an_untouched_stub_without_raising(name, module, capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError("your code here")

    assert check(name)(stub) is False
    out = capsys.readouterr().out
    assert f"{name}: not done yet" in out
    assert f"%load -s {name} solutions/{module}.py" in out and f"from solutions.{module} import {name}" in out


def test_a_not_implemented_error_that_is_not_the_stub_propagates():
    def half_done(*args):
        raise NotImplementedError("uint16 is not supported by this op")

    with pytest.raises(NotImplementedError, match="uint16"):
        exercises.check_training_step(half_done)


def test_checkers_leave_torch_threads_as_they_found_them():
    threads = torch.get_num_threads()
    exercises.check_cross_entropy(solution("cross_entropy"))
    with pytest.raises(AssertionError):
        exercises.check_cross_entropy(lambda logits, targets: torch.tensor(0.0))
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("[a-z]*.py")), ids=lambda p: p.stem)
def test_solution_files_say_what_they_hold_and_import_only_what_the_notebooks_have(path):
    tree = ast.parse(path.read_text())
    assert "Reference answer" in (ast.get_docstring(tree) or ""), (
        f"{path.name} must say it holds reference answers"
    )
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    # `%load -s NAME` copies one function without the file's imports: it must run on the notebook's own
    assert imported <= {"math", "numpy", "torch"}, f"{path.name} imports {imported}"


# ------------------------------------------------------------------------------------------------------
# 04 · model


def head_with(x, w_q, w_k, w_v, *, scale=None, mask="causal"):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    T, D = x.size(1), q.size(-1)
    scores = q @ k.transpose(-2, -1) * (D**-0.5 if scale is None else scale)
    if mask == "causal":
        scores = scores.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
    elif mask == "zeros":
        scores = scores.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), 0.0)
    elif mask == "strict":  # hides the diagonal too: position 0 sees nothing
        scores = scores.masked_fill(
            ~torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1), float("-inf")
        )
    return scores.softmax(dim=-1) @ v


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda x, q, k, v: head_with(x, q, k, v, mask="none"), "changes when a later token changes"),
        (lambda x, q, k, v: head_with(x, q, k, v, mask="zeros"), "a score of 0 would still get weight"),
        (lambda x, q, k, v: head_with(x, q, k, v, mask="strict"), "each position sees itself and the past"),
        (lambda x, q, k, v: head_with(x, q, k, v, scale=1.0), "the scores are not scaled"),
        (
            lambda x, q, k, v: head_with(x, q, k, v, scale=x.size(-1) ** -0.5),
            "divided by sqrt(C), the input width",
        ),
        (lambda x, q, k, v: head_with(x, q, k, v)[..., :-1], "one D-wide vector per position"),
        (
            lambda x, q, k, v: F.scaled_dot_product_attention(x @ q, x @ k, x @ v, is_causal=True),
            "without F.scaled_dot_product_attention",
        ),
    ],
)
def test_causal_head_checker_names_the_mistake(wrong, hint):
    rejects("causal_head", wrong, hint)


def ce_from_softmax(logits, targets):
    probs = logits.exp() / logits.exp().sum(dim=-1, keepdim=True)  # exp(300) is inf in float32
    return -probs[torch.arange(len(targets)), targets].log().mean()


def ce_from_library(logits, targets):
    return F.cross_entropy(logits, targets)


def ce_summed(logits, targets):
    return -logits.log_softmax(dim=-1)[torch.arange(len(targets)), targets].sum()


def ce_per_position(logits, targets):
    return -logits.log_softmax(dim=-1)[torch.arange(len(targets)), targets]


def ce_every_target_for_every_row(logits, targets):
    return -logits.log_softmax(dim=-1)[:, targets]


def ce_without_minus(logits, targets):
    return logits.log_softmax(dim=-1)[torch.arange(len(targets)), targets].mean()


def ce_over_positions(logits, targets):
    return -logits.log_softmax(dim=0)[torch.arange(len(targets)), targets].mean()


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (ce_from_softmax, "exp overflows (inf) or softmax underflows to 0"),
        (ce_from_library, "without F.cross_entropy or F.nll_loss"),
        (ce_summed, "the sum over positions: return the mean"),
        (ce_per_position, "return the mean over the N positions, one number"),
        (ce_every_target_for_every_row, "logp[:, targets] takes every target for every row"),
        (ce_without_minus, "the loss is minus the log-probability of the target"),
        (ce_over_positions, "take it over the vocabulary, dim=-1"),
    ],
)
def test_cross_entropy_checker_names_the_mistake(wrong, hint):
    rejects("cross_entropy", wrong, hint)


def test_checkers_give_the_library_functions_back():
    "The functions a checker refuses while the learner's code runs work again afterwards, pass or fail."
    saved = F.cross_entropy, F.nll_loss, F.scaled_dot_product_attention
    with pytest.raises(AssertionError):
        exercises.check_cross_entropy(ce_from_library)
    exercises.check_causal_head(solution("causal_head"))
    assert (F.cross_entropy, F.nll_loss, F.scaled_dot_product_attention) == saved


def top_k_zeroing(logits, k):
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, 0.0)


def top_k_one_too_many(logits, k):
    kth = logits.sort(dim=-1, descending=True).values[:, k : k + 1]  # the (k+1)-th largest
    return logits.masked_fill(logits < kth, float("-inf")) if k < logits.size(-1) else logits.clone()


def top_k_of_the_batch(logits, k):
    kth = torch.topk(logits.flatten(), k * logits.size(0)).values[-1]  # one threshold for every row
    return logits.masked_fill(logits < kth, float("-inf"))


def top_k_in_place(logits, k):
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]
    return logits.masked_fill_(logits < kth, float("-inf"))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (top_k_zeroing, "the dropped scores became 0"),
        (top_k_one_too_many, "keeps 6 scores per row: off by one"),
        (top_k_of_the_batch, "take the k-th largest of each row (dim=-1), not of the whole batch"),
        (top_k_in_place, "keep_top_k changed its input"),
    ],
)
def test_keep_top_k_checker_names_the_mistake(wrong, hint):
    rejects("keep_top_k", wrong, hint)


# ------------------------------------------------------------------------------------------------------
# 06 · training


def step_with(*, set_lr=True, divide=True, zero_between=False, clip=True, zero_after=True, report="mean"):
    def training_step(model, optimizer, batches, grad_accum, grad_clip, lr):
        if set_lr:
            for group in optimizer.param_groups:
                group["lr"] = lr
        losses = []
        for _ in range(grad_accum):
            if zero_between:
                optimizer.zero_grad()
            x, y = next(batches)
            _, loss = model(x, y)
            (loss / grad_accum if divide else loss).backward()
            losses.append(loss.item())
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        if zero_after:
            optimizer.zero_grad(set_to_none=True)
        return {"mean": sum(losses) / grad_accum, "sum": sum(losses), "last": losses[-1]}[report]

    return training_step


def step_reading_every_batch(model, optimizer, batches, grad_accum, grad_clip, lr):
    for group in optimizer.param_groups:
        group["lr"] = lr
    losses = []
    for x, y in batches:  # runs the iterator dry instead of taking grad_accum micro-batches
        _, loss = model(x, y)
        (loss / grad_accum).backward()
        losses.append(loss.item())
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return sum(losses) / len(losses)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (step_reading_every_batch, "take exactly grad_accum micro-batches with next(batches)"),
        (step_with(set_lr=False), "the step used the optimizer's old learning rate"),
        (step_with(divide=False), "the step is 3 times too large"),
        (step_with(zero_between=True), "only the last micro-batch counted"),
        (step_with(clip=False), "the gradient was not clipped"),
        (step_with(zero_after=False), "the gradients are still there after the step"),
        (step_with(report="sum"), "the returned loss is the sum over micro-batches"),
        (step_with(report="last"), "the mean of the grad_accum micro-batch losses (not the last one)"),
    ],
)
def test_training_step_checker_names_the_mistake(wrong, hint):
    rejects("training_step", wrong, hint)


def test_training_step_checker_compares_with_gptlibs_own_step():
    "A step that is right with SGD but wrong with AdamW (its moments reset) is caught by the comparison."

    def fresh_optimizer_state(model, optimizer, batches, grad_accum, grad_clip, lr):
        loss = solution("training_step")(model, optimizer, batches, grad_accum, grad_clip, lr)
        optimizer.state.clear()  # forgets m and v: harmless for SGD, not for AdamW
        return loss

    rejects("training_step", fresh_optimizer_state, "after two AdamW steps the parameters differ")
