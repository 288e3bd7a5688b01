"""gptlib.optim: parameter groups, the LR schedule, accumulation, the precision policy (a pure function of the
hardware's features and measured step times), MFU."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gptlib.model import GPT, GPTConfig
from gptlib.optim import (
    CPU_FEATURES,
    PrecisionError,
    check_partition,
    choose_precision,
    cpu_features,
    datasheet_peak_flops,
    has_units,
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


def test_check_partition_names_what_is_wrong():
    model = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))
    params = list(model.parameters())
    with pytest.raises(AssertionError, match="appears twice"):
        check_partition(model, [{"params": params + params[:1]}])
    model[0].bias.requires_grad_(False)
    with pytest.raises(AssertionError, match="does not train"):
        check_partition(model, [{"params": params}])
    with pytest.raises(AssertionError, match="1 trainable parameters are in no group"):
        check_partition(model, [{"params": params[:1] + params[3:]}])


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


# --- precision ----------------------------------------------------------------------------------------------


def test_choose_precision_on_cpu_as_requested():
    assert choose_precision("cpu", "fp32").name == "fp32"
    bf16 = choose_precision("cpu", "bf16", features=("avx512_bf16",))
    assert (bf16.name, bf16.use_scaler, bf16.autocast_dtype) == ("bf16", False, torch.bfloat16)
    assert "warning" not in bf16.reason
    fp16 = choose_precision("cpu", "fp16", features=("amx_fp16",))
    assert fp16.use_scaler and "loss scaler" in fp16.reason and "warning" not in fp16.reason
    with pytest.raises(PrecisionError, match="fp8"):
        choose_precision("cpu", "fp8")
    assert issubclass(PrecisionError, ValueError)  # callers that catch ValueError keep working


@pytest.mark.parametrize(
    "times, features, expected",
    [
        ({"fp32": 0.77, "bf16": 0.49}, ("avx512_bf16",), "bf16"),  # 1.57x faster: well beyond the noise
        ({"fp32": 0.50, "bf16": 0.47}, ("avx512_bf16",), "fp32"),  # 6 % faster: within the noise
        ({"fp32": 0.50, "bf16": 0.52}, ("amx_bf16", "avx512_bf16"), "fp32"),  # units, yet slower per step
        ({"fp32": 0.50, "bf16": 2.10}, (), "fp32"),  # emulated bf16
        ({"fp32": 0.50}, ("amx_bf16",), "fp32"),  # bf16 not timed
    ],
)
def test_auto_on_a_cpu_keeps_the_faster_measured_step(times, features, expected):
    chosen = choose_precision("cpu", "auto", step_seconds=times, features=features)
    assert chosen.name == expected and not chosen.use_scaler
    assert f"fp32 {times['fp32'] * 1e3:,.0f} ms" in chosen.reason  # the times it decided on
    assert (", ".join(features) or "no bf16/fp16 features") in chosen.reason  # and the features


def test_auto_never_picks_fp16_on_a_cpu():
    times = {"fp32": 1.0, "bf16": 0.9, "fp16": 0.2}
    assert choose_precision("cpu", step_seconds=times, features=("amx_fp16", "amx_bf16")).name == "fp32"


def test_fp16_on_a_cpu_without_fp16_units_is_warned_with_its_measured_cost():
    chosen = choose_precision(
        "cpu", "fp16", step_seconds={"fp32": 0.5, "fp16": 4.55}, features=("avx512_bf16",)
    )
    assert chosen.name == "fp16" and chosen.use_scaler
    assert (
        "warning: this CPU has no fp16 units (avx512_bf16)" in chosen.reason
        and "9.1x fp32's" in chosen.reason
    )
    unmeasured = choose_precision("cpu", "fp16", features=())
    assert "warning" in unmeasured.reason and "x fp32's" not in unmeasured.reason


def test_bf16_asked_for_on_a_cpu_whose_units_do_not_pay_is_warned_with_its_measured_cost():
    """An Intel Xeon whose hypervisor hides AMX names avx512_bf16, yet its bf16 steps of the `cpu` preset
    took 1.4x fp32's: the flags name the hardware, the timed steps say it does not pay."""
    features = ("avx512_bf16", "avx512_fp16")
    slower = choose_precision("cpu", "bf16", step_seconds={"fp32": 0.35, "bf16": 0.49}, features=features)
    assert slower.name == "bf16" and not slower.use_scaler  # asked for, it runs
    assert "warning: a step takes 1.4x fp32's" in slower.reason and "avx512_bf16" in slower.reason
    faster = choose_precision("cpu", "bf16", step_seconds={"fp32": 1.16, "bf16": 0.705}, features=features)
    within_noise = choose_precision(
        "cpu", "bf16", step_seconds={"fp32": 1.0, "bf16": 1.05}, features=features
    )
    assert "warning" not in faster.reason and "warning" not in within_noise.reason


@pytest.mark.parametrize(
    "times", [{"bf16": 0.5}, {"fp32": 0.5, "fp8": 0.1}, {"fp32": 0.0}, {"fp32": math.nan}]
)
def test_step_times_that_cannot_be_compared_are_refused(times):
    with pytest.raises(ValueError, match="step_seconds"):
        choose_precision("cpu", "auto", step_seconds=times, features=())


@pytest.mark.parametrize(
    "requested, cores, expected",
    [
        ("auto", ("fp16_tensor_cores", "bf16_tensor_cores"), ("bf16", False)),  # A100, H100: no scaler needed
        ("auto", ("fp16_tensor_cores",), ("fp16", True)),  # V100, T4: fp16 with the loss scaler
        ("auto", (), ("fp32", False)),  # no tensor cores
        ("bf16", ("fp16_tensor_cores",), ("fp16", True)),  # bf16 asked, only fp16 there
        ("fp16", ("fp16_tensor_cores", "bf16_tensor_cores"), ("fp16", True)),  # fp16 as asked (gpt-25m)
        ("fp32", ("fp16_tensor_cores", "bf16_tensor_cores"), ("fp32", False)),
    ],
)
def test_the_cuda_policy_follows_the_tensor_cores(requested, cores, expected):
    chosen = choose_precision("cuda", requested, features=cores)  # a pure function: no GPU needed
    assert (chosen.name, chosen.use_scaler) == expected and chosen.device_type == "cuda"


def test_cpu_features_come_from_the_flags_line():
    info = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile amx_bf16 amx_int8\n"
    assert cpu_features(info) == ("amx_bf16", "avx512_bf16")
    assert cpu_features("flags\t: fpu sse avx2\n") == ()
    assert cpu_features("model name\t: amx_bf16 in a name is not a flag\n") == ()
    assert set(cpu_features()) <= set(CPU_FEATURES)  # this machine's


def test_units_are_named_per_format():
    assert has_units("bf16", ("avx512_bf16",)) and has_units("bf16", ("amx_bf16", "avx512_fp16"))
    assert not has_units("fp16", ("amx_bf16", "avx512_bf16")) and has_units("fp16", ("avx512_fp16",))
    assert not has_units("bf16", ())


def test_auto_on_a_cpu_without_step_times_follows_the_matmul_speedup(monkeypatch):
    "The fallback training uses until it times its own steps: the same decision as before, bf16 at 1.3x."
    import gptlib.optim as optim

    for speedup, expected in ((3.1, "bf16"), (1.31, "bf16"), (1.29, "fp32"), (0.4, "fp32")):
        monkeypatch.setattr(optim, "cpu_bf16_speedup", lambda speedup=speedup: speedup)
        chosen = choose_precision("cpu")
        assert chosen.name == expected and f"{speedup:.1f}x" in chosen.reason, (speedup, chosen)
        assert not chosen.use_scaler


def test_the_bf16_speedup_is_measured_and_plausible():
    from gptlib.optim import cpu_bf16_speedup

    speedup = cpu_bf16_speedup()
    assert 0 < speedup < 50
    if has_units("bf16", cpu_features()):
        # bf16 units at 512 x 512: 0.59x (an Intel Xeon whose AMX its hypervisor hides: avx512_bf16 alone),
        # 2.2x (AMD EPYC Zen 4), 5.8x (Xeon with AMX). Not "bf16 is fast": the floor tells units from the
        # conversion to fp32 and back that a CPU without them takes (0.016x)
        assert speedup > 0.25
    else:
        assert speedup < 1.3  # none: converted to fp32 and back (AMD EPYC Zen 2: 0.016x), `auto` keeps fp32


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
