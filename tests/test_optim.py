"""gptlib.optim: parameter groups, the LR schedule, accumulation, the teaching loss scaler, precision, MFU."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gptlib.model import GPT, GPTConfig
from gptlib.optim import (
    DynamicLossScaler,
    choose_precision,
    datasheet_peak_flops,
    lr_at,
    make_adamw,
    measure_matmul_flops,
    mfu,
    param_groups,
)


def tiny_gpt(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig.preset("tiny", vocab_size=64, dropout=0.0))


def random_batch(n: int, T: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 64, (n, T + 1), generator=g)
    return x[:, :-1], x[:, 1:]


# --- LR schedule ------------------------------------------------------------------------------------


def test_lr_schedule_warmup_peak_and_floor():
    assert lr_at(0) == pytest.approx(6e-4 / 50)
    assert lr_at(24) == pytest.approx(6e-4 * 25 / 50)
    assert lr_at(49) == pytest.approx(6e-4)
    assert lr_at(50) == pytest.approx(6e-4)
    assert lr_at(10_000) == pytest.approx(6e-5)
    assert lr_at(50_000) == pytest.approx(6e-5)
    midpoint = 50 + (10_000 - 50) / 2
    assert lr_at(int(midpoint)) == pytest.approx((6e-4 + 6e-5) / 2, rel=1e-3)


def test_lr_schedule_is_monotone_after_warmup():
    lrs = [lr_at(s) for s in range(50, 10_001, 7)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"step": -1},
        {"step": 0, "min_lr": 1e-3, "max_lr": 1e-4},
        {"step": 0, "warmup_steps": 20, "decay_steps": 10},
    ],
)
def test_lr_schedule_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        lr_at(**kwargs)


# --- parameter groups and AdamW -----------------------------------------------------------------------


def test_param_groups_partition_every_parameter_once():
    model = tiny_gpt()
    decay, no_decay = param_groups(model, weight_decay=0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    ids = [id(p) for g in (decay, no_decay) for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim < 2 for p in no_decay["params"])
    # the tied embedding / LM head matrix is one tensor, decayed once
    assert sum(p is model.wte.weight for p in decay["params"]) == 1
    # biases and LayerNorm gains are never decayed
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(
        names[id(p)].endswith(("bias",)) or ".ln" in names[id(p)] or "ln_" in names[id(p)]
        for p in no_decay["params"]
    )


def test_param_groups_skip_frozen_parameters_and_reject_negative_decay():
    model = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))
    model[0].bias.requires_grad_(False)
    groups = param_groups(model)
    assert sum(len(g["params"]) for g in groups) == 3
    with pytest.raises(ValueError, match="weight_decay"):
        param_groups(model, weight_decay=-0.1)


def test_make_adamw_reports_fused_and_keeps_group_decay():
    optimizer, fused = make_adamw(tiny_gpt(), lr=1e-3)
    assert isinstance(fused, bool)
    assert optimizer.defaults["fused"] == fused
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]


# --- accumulation ---------------------------------------------------------------------------------------


def test_four_micro_batches_of_8_equal_one_batch_of_32():
    x, y = random_batch(32)
    one, accum = tiny_gpt(), tiny_gpt()
    one(x, y)[1].backward()
    for xm, ym in zip(x.split(8), y.split(8)):
        (accum(xm, ym)[1] / 4).backward()
    for a, b in zip(one.parameters(), accum.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6)


# --- the teaching loss scaler -----------------------------------------------------------------------------


def _scaled_run(scaler, overflow_steps, n_steps=14):
    model = tiny_gpt()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    trace = []
    for step in range(n_steps):
        x, y = random_batch(4, seed=step)
        loss = model(x, y)[1]
        scaler.scale(loss).backward()
        if step in overflow_steps:  # force an overflow: one gradient entry becomes inf
            next(model.parameters()).grad.view(-1)[0] = float("inf")
        scaler.unscale_(optimizer)
        scale = scaler.get_scale() if isinstance(scaler, torch.amp.GradScaler) else scaler.scale_value
        before = [p.detach().clone() for p in model.parameters()]
        scaler.step(optimizer)
        scaler.update()
        stepped = not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
        trace.append((scale, stepped))
        optimizer.zero_grad(set_to_none=True)
    return trace, model


def test_hand_written_scaler_matches_torch_grad_scaler_with_forced_overflows():
    overflow = {0, 1, 5, 9}
    ours, ours_model = _scaled_run(DynamicLossScaler(init_scale=2.0**10, growth_interval=3), overflow)
    theirs, torch_model = _scaled_run(
        torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3), overflow
    )
    assert ours == theirs
    assert [stepped for _, stepped in ours] == [s not in overflow for s in range(14)]
    assert {scale for scale, _ in ours} >= {2.0**10, 2.0**9, 2.0**8}  # halved on overflow
    assert any(b > a for (a, _), (b, _) in zip(ours, ours[1:]))  # and doubled after clean runs
    for a, b in zip(ours_model.parameters(), torch_model.parameters()):
        assert torch.equal(a, b)


def test_scaler_state_round_trip_and_bad_arguments():
    scaler = DynamicLossScaler(init_scale=8.0, growth_interval=2)
    scaler.found_inf = False
    scaler.update()
    restored = DynamicLossScaler()
    restored.load_state_dict(scaler.state_dict())
    assert restored.state_dict() == {"scale": 8.0, "clean_steps": 1}
    with pytest.raises(ValueError):
        DynamicLossScaler(backoff_factor=2.0)


# --- precision ----------------------------------------------------------------------------------------------


def test_choose_precision_on_cpu():
    assert choose_precision("cpu", "fp32").name == "fp32"
    bf16 = choose_precision("cpu", "bf16")
    assert (bf16.name, bf16.use_scaler, bf16.autocast_dtype) == ("bf16", False, torch.bfloat16)
    fp16 = choose_precision("cpu", "fp16")
    assert fp16.use_scaler and fp16.reason
    with pytest.raises(ValueError, match="fp8"):
        choose_precision("cpu", "fp8")


def test_auto_precision_on_cpu_follows_the_measured_bf16_speedup(monkeypatch):
    import gptlib.optim as optim

    for speedup, expected in ((3.1, "bf16"), (1.31, "bf16"), (1.29, "fp32"), (0.4, "fp32")):
        monkeypatch.setattr(optim, "cpu_bf16_speedup", lambda speedup=speedup: speedup)
        chosen = choose_precision("cpu")
        assert chosen.name == expected and f"{speedup:.1f}x" in chosen.reason, (speedup, chosen)
        assert not chosen.use_scaler


def test_the_bf16_speedup_is_measured_and_plausible():
    from gptlib.optim import cpu_bf16_speedup

    assert 0.05 < cpu_bf16_speedup() < 50


def test_precision_autocast_runs_matmuls_in_its_dtype():
    with choose_precision("cpu", "bf16").autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with choose_precision("cpu", "fp32").autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


# --- MFU ----------------------------------------------------------------------------------------------------


def test_datasheet_table_matches_names_exactly():
    assert datasheet_peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989.4e12
    assert datasheet_peak_flops("NVIDIA H100 PCIe", "fp16") == 756e12
    assert datasheet_peak_flops("NVIDIA A100-SXM4-40GB", "bf16") == 312e12
    assert datasheet_peak_flops("NVIDIA L4", "bf16") == 121e12
    assert datasheet_peak_flops("NVIDIA L40S", "bf16") is None
    assert datasheet_peak_flops("NVIDIA GeForce RTX 4090", "bf16") == 165.2e12
    assert datasheet_peak_flops("Tesla T4", "bf16") is None


def test_mfu_from_measured_peak():
    peak = measure_matmul_flops("cpu", "fp32", n=128, repeats=2)
    assert peak > 0 and math.isfinite(peak)
    assert mfu(1000.0, 2e6, 4e9) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        mfu(1.0, 1.0, 0.0)
