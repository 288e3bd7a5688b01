"""The exercises' checkers (gptlib.exercises): each one accepts the reference answer in notebooks/solutions/,
reports an untouched stub as "not done yet" without raising (so CI can run the notebooks with the stubs in
place), and rejects plausible wrong answers with the hint that names the mistake."""

from __future__ import annotations

import ast
import importlib.util
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from gptlib import exercises

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "notebooks" / "solutions"
# (exercise, the solutions file holding its reference answer)
EXERCISES = [
    ("merge_step", "bpe"),
    ("encode_with_merges", "bpe"),
    ("read_document", "data"),
    ("windows_to_xy", "loader"),
    ("adamw_update", "optim"),
    ("warmup_cosine", "optim"),
    ("accumulate_gradients", "optim"),
    ("scaler_update", "optim"),
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
        exercises.check_windows_to_xy(half_done)


def test_checkers_leave_torch_threads_as_they_found_them():
    threads = torch.get_num_threads()
    exercises.check_windows_to_xy(solution("windows_to_xy"))
    with pytest.raises(AssertionError):
        exercises.check_windows_to_xy(lambda tokens, starts, T: (torch.zeros(1), torch.zeros(1)))
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
# 01 · BPE


def _merge(ids, pair, new_id):
    "`ids` with `pair` replaced by `new_id`, left to right without overlaps (the wrong answers' shared part)."
    out, skip = [], False
    for a, b in zip(ids, [*ids[1:], None]):
        if skip:
            skip = False
        elif (a, b) == pair:
            out.append(new_id)
            skip = True
        else:
            out.append(a)
    return out


def merge_step_first_seen_on_ties(ids, new_id):
    counts = Counter(zip(ids, ids[1:]))
    pair = max(counts, key=counts.get)  # among equal counts: the first one seen
    return pair, _merge(ids, pair, new_id)


def merge_step_counting_like_the_merge(ids, new_id):
    counts, i = Counter(), 0
    while i < len(ids) - 1:  # skips past a repeated id, as the merge does: [1, 1, 1, 1] counts (1, 1) twice
        counts[(ids[i], ids[i + 1])] += 1
        i += 2 if ids[i] == ids[i + 1] else 1
    pair = min(counts, key=lambda p: (-counts[p], p))
    return pair, _merge(ids, pair, new_id)


def merge_step_first_occurrence_only(ids, new_id):
    pair = min(Counter(zip(ids, ids[1:])).items(), key=lambda item: (-item[1], item[0]))[0]
    i = list(zip(ids, ids[1:])).index(pair)
    return pair, ids[:i] + [new_id] + ids[i + 2 :]


def merge_step_marking_positions(ids, new_id):
    counts = Counter(zip(ids, ids[1:]))
    pair = min(counts, key=lambda p: (-counts[p], p))
    starts = {i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) == pair}  # overlapping ones included
    covered = starts | {i + 1 for i in starts}
    return pair, [
        new_id if i in starts else ids[i] for i in range(len(ids)) if i in starts or i not in covered
    ]


def merge_step_right_to_left(ids, new_id):
    counts = Counter(zip(ids, ids[1:]))
    pair = min(counts, key=lambda p: (-counts[p], p))
    return pair, _merge(ids[::-1], pair[::-1], new_id)[::-1]


def merge_step_in_place(ids, new_id):
    counts = Counter(zip(ids, ids[1:]))
    pair = min(counts, key=lambda p: (-counts[p], p))
    ids[:] = _merge(ids, pair, new_id)
    return pair, ids


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (merge_step_first_seen_on_ties, "ties go to the smallest pair, (2, 3)"),
        (
            merge_step_counting_like_the_merge,
            "count pairs at every position, so [1, 1, 1, 1] holds (1, 1) three times",
        ),
        (merge_step_first_occurrence_only, "only the first (1, 2) was replaced"),
        (
            merge_step_marking_positions,
            "the pair (5, 5) in [5, 5, 5] is merged once, left to right, not twice",
        ),
        (merge_step_right_to_left, "merge left to right: [5, 5, 5] becomes [256, 5]"),
        (merge_step_in_place, "merge_step changed the list it was given"),
    ],
)
def test_merge_step_checker_names_the_mistake(wrong, hint):
    rejects("merge_step", wrong, hint)


def encode_leftmost_pair_first(data, merges):
    rank = {pair: 256 + i for i, pair in enumerate(merges)}
    ids = list(data)
    while True:
        found = [i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) in rank]
        if not found:
            return ids
        i = found[0]  # the leftmost mergeable pair, whatever its rank
        ids[i : i + 2] = [rank[(ids[i], ids[i + 1])]]


def encode_ids_from_zero(data, merges):
    rank = {pair: i for i, pair in enumerate(merges)}  # forgets that ids 0..255 are the bytes
    ids = list(data)
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, math.inf))
        if pair not in rank:
            break
        ids = _merge(ids, pair, rank[pair])
    return ids


def encode_one_round(data, merges):
    rank = {pair: 256 + i for i, pair in enumerate(merges)}
    ids = list(data)
    if len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, math.inf))
        if pair in rank:
            ids = _merge(ids, pair, rank[pair])
    return ids


def encode_without_a_stop(data, merges):
    rank = {pair: 256 + i for i, pair in enumerate(merges)}
    ids = list(data)
    while True:
        pair = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, math.inf))  # min() of nothing fails
        if pair not in rank:
            return ids
        ids = _merge(ids, pair, rank[pair])


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (
            encode_leftmost_pair_first,
            "the merge made first (lowest rank, earliest in the list) applies first",
        ),
        (encode_ids_from_zero, "merge i makes id 256 + i"),
        (encode_one_round, "keep merging while some adjacent pair is in the list"),
        (encode_without_a_stop, "with fewer than two ids there is nothing to merge"),
    ],
)
def test_encode_with_merges_checker_names_the_mistake(wrong, hint):
    rejects("encode_with_merges", wrong, hint)


# ------------------------------------------------------------------------------------------------------
# 02 · shards


def read_the_next_document(tokens, ends, i):
    return tokens[int(ends[i]) : int(ends[i + 1])]


def read_one_token_late(tokens, ends, i):
    start = 0 if i == 0 else int(ends[i - 1])
    return tokens[start + 1 : int(ends[i]) + 1]


def read_with_ends_minus_one(tokens, ends, i):
    return tokens[int(ends[i - 1]) : int(ends[i])]  # i = 0 reads from the last end


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (read_the_next_document, "which is document 2: ends[i] is where document i ends"),
        (read_one_token_late, "off by one; document i is tokens[ends[i - 1] : ends[i]]"),
        (read_with_ends_minus_one, "document 0 starts at offset 0"),
    ],
)
def test_read_document_checker_names_the_mistake(wrong, hint):
    rejects("read_document", wrong, hint)


# ------------------------------------------------------------------------------------------------------
# 03 · loader


def xy_as_stored(tokens, starts, T):
    x = torch.from_numpy(np.stack([tokens[s : s + T] for s in starts]).astype(np.int32))
    y = torch.from_numpy(np.stack([tokens[s + 1 : s + T + 1] for s in starts]).astype(np.int32))
    return x, y


def xy_whole_windows(tokens, starts, T):
    windows = torch.from_numpy(np.stack([tokens[s : s + T + 1] for s in starts]).astype(np.int64))
    return windows, windows


def xy_targets_not_shifted(tokens, starts, T):
    x = torch.from_numpy(np.stack([tokens[s : s + T] for s in starts]).astype(np.int64))
    return x, x.clone()


def xy_swapped(tokens, starts, T):
    x = torch.from_numpy(np.stack([tokens[s : s + T] for s in starts]).astype(np.int64))
    y = torch.from_numpy(np.stack([tokens[s + 1 : s + T + 1] for s in starts]).astype(np.int64))
    return y, x


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (xy_as_stored, "x is torch.int32: token ids go to nn.Embedding and cross_entropy as int64"),
        (xy_whole_windows, "a window is T + 1 tokens, x its first T and y its last T"),
        (xy_targets_not_shifted, "y equals x: y holds the next token of each input"),
        (xy_swapped, "row b of x is tokens[starts[b] : starts[b] + T]"),
    ],
)
def test_windows_to_xy_checker_names_the_mistake(wrong, hint):
    rejects("windows_to_xy", wrong, hint)


# ------------------------------------------------------------------------------------------------------
# 05 · optimization


def adamw_with(mistake):
    def adamw_update(param, grad, m, v, step, lr, betas, eps, weight_decay):
        return exercises._adamw_variant(
            param, grad, m, v, step, lr, betas, eps, weight_decay, mistake=mistake
        )

    return adamw_update


def adamw_m_from_the_sum(param, grad, m, v, step, lr, betas, eps, weight_decay):
    param, _, v = solution("adamw_update")(param, grad, m, v, step, lr, betas, eps, weight_decay)
    return param, m + grad, v  # the parameter right, m kept as a plain sum


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (adamw_with("l2"), "weight decay is added to the gradient (Adam with L2)"),
        (adamw_with("no_bias_correction"), "no bias correction"),
        (adamw_with("eps_inside"), "eps is inside the square root"),
        (adamw_with("no_sqrt"), "divide by its square root"),
        (adamw_with("decay_without_lr"), "the decay ignores the learning rate"),
        (adamw_with("decay_after"), "torch.optim.AdamW shrinks the parameter first"),
        (adamw_with("step_from_zero"), "the bias correction uses step + 1"),
        (adamw_m_from_the_sum, "m is wrong: it is the running mean of the gradient"),
    ],
)
def test_adamw_update_checker_names_the_mistake(wrong, hint):
    rejects("adamw_update", wrong, hint)


def test_adamw_reference_variant_is_torch_adamw():
    "The mistake-free variant the hints are computed from is AdamW itself (else every hint could be wrong)."
    p = torch.randn(5, dtype=torch.float64, requires_grad=True)
    param, m, v = p.detach().clone(), torch.zeros(5, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)
    optimizer = torch.optim.AdamW([p], lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.5)
    for step in (1, 2, 3):
        grad = torch.randn(5, dtype=torch.float64)
        p.grad = grad.clone()
        optimizer.step()
        param, m, v = exercises._adamw_variant(param, grad, m, v, step, 0.1, (0.9, 0.95), 1e-8, 0.5)
    torch.testing.assert_close(param, p.detach(), rtol=1e-12, atol=1e-12)


def wc_warmup_from_zero(step, max_lr, min_lr, warmup_steps, decay_steps):
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    return solution("warmup_cosine")(step, max_lr, min_lr, warmup_steps, decay_steps)


def wc_cosine_from_step_zero(step, max_lr, min_lr, warmup_steps, decay_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = min(step / decay_steps, 1.0)  # measured from step 0, not from the end of warmup
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def wc_without_floor(step, max_lr, min_lr, warmup_steps, decay_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / (decay_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def wc_down_to_zero(step, max_lr, min_lr, warmup_steps, decay_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = min((step - warmup_steps) / (decay_steps - warmup_steps), 1.0)
    return 0.5 * max_lr * (1 + math.cos(math.pi * progress))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (wc_warmup_from_zero, "step 0 already trains"),
        (wc_cosine_from_step_zero, "the cosine starts where the warmup ends"),
        (wc_without_floor, "from decay_steps on the rate stays at min_lr"),
        (wc_down_to_zero, "the cosine ends at min_lr, not 0"),
    ],
)
def test_warmup_cosine_checker_names_the_mistake(wrong, hint):
    rejects("warmup_cosine", wrong, hint)


def accumulate_without_dividing(model, micro_batches):
    losses = []
    for x, y in micro_batches:
        _, loss = model(x, y)
        loss.backward()
        losses.append(loss.item())
    return sum(losses) / len(losses)


def accumulate_zeroing_each_time(model, micro_batches):
    losses = []
    for x, y in micro_batches:
        model.zero_grad()
        _, loss = model(x, y)
        (loss / len(micro_batches)).backward()
        losses.append(loss.item())
    return sum(losses) / len(losses)


def accumulate_returning_the_sum(model, micro_batches):
    total = 0.0
    for x, y in micro_batches:
        _, loss = model(x, y)
        (loss / len(micro_batches)).backward()
        total += loss.item()
    return total


def accumulate_without_backward(model, micro_batches):
    with torch.no_grad():
        return sum(model(x, y)[1].item() for x, y in micro_batches) / len(micro_batches)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (accumulate_without_dividing, "the gradients are 4 times too large"),
        (accumulate_zeroing_each_time, "only the last micro-batch's gradient is left"),
        (accumulate_returning_the_sum, "the returned loss is the sum over micro-batches"),
        (accumulate_without_backward, "call .backward() on each micro-batch's loss"),
    ],
)
def test_accumulate_gradients_checker_names_the_mistake(wrong, hint):
    rejects("accumulate_gradients", wrong, hint)


def scaler_never_grows(scale, found_inf, clean_steps, growth_interval):
    return (scale / 2, 0) if found_inf else (scale, clean_steps + 1)


def scaler_halving_every_step(scale, found_inf, clean_steps, growth_interval):
    return scale / 2, 0 if found_inf else clean_steps + 1


def scaler_keeping_the_count_on_overflow(scale, found_inf, clean_steps, growth_interval):
    if found_inf:
        return scale / 2, clean_steps
    return (scale * 2, 0) if clean_steps + 1 == growth_interval else (scale, clean_steps + 1)


def scaler_keeping_the_count_after_growth(scale, found_inf, clean_steps, growth_interval):
    if found_inf:
        return scale / 2, 0
    clean_steps += 1
    return (scale * 2 if clean_steps % growth_interval == 0 else scale), clean_steps


def scaler_one_step_late(scale, found_inf, clean_steps, growth_interval):
    if found_inf:
        return scale / 2, 0
    return (scale * 2, 0) if clean_steps == growth_interval else (scale, clean_steps + 1)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (scaler_never_grows, "the growth_interval-th clean step in a row doubles the scale"),
        (scaler_halving_every_step, "a clean step leaves the scale alone"),
        (scaler_keeping_the_count_on_overflow, "an overflow also restarts the count of clean steps at 0"),
        (
            scaler_keeping_the_count_after_growth,
            "after doubling, the count of clean steps starts again from 0",
        ),
        (scaler_one_step_late, "the growth_interval-th clean step in a row doubles the scale"),
    ],
)
def test_scaler_update_checker_names_the_mistake(wrong, hint):
    rejects("scaler_update", wrong, hint)


def test_scaler_rule_is_torch_grad_scalers():
    "The reference the checker compares with (DynamicLossScaler) follows torch's own update of the scale."
    from gptlib.optim import DynamicLossScaler

    ours = DynamicLossScaler(init_scale=2.0**16, growth_interval=3)
    scale, growth_tracker = torch.tensor([2.0**16]), torch.tensor([0], dtype=torch.int32)
    for found_inf in [True, True] + [False] * 7 + [True] + [False] * 4:
        ours.found_inf = found_inf
        ours.update()
        torch._amp_update_scale_(scale, growth_tracker, torch.tensor([float(found_inf)]), 2.0, 0.5, 3)
        assert (ours.scale_value, ours.clean_steps) == (scale.item(), growth_tracker.item())


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
