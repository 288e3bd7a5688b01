"""gptlib.probe on a GPU: the precision, the micro-batch and compiling chosen from measured facts alone (a
faked device table: no GPU here), the search that measures them (run on the CPU with a faked memory), and a
run that resumes deciding as it began."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

import gptlib.probe
import gptlib.train
from gptlib.config import ConfigError
from gptlib.probe import (
    MEMORY_MARGIN,
    Choice,
    Probe,
    Trial,
    choose_shape,
    chosen_config,
    compile_pays,
    describe,
    micro_batches,
    precisions_to_time,
    recorded,
    resumed_config,
    search,
)
from gptlib.runtime import Distributed
from gptlib.train_config import TrainConfig

GB = 10**9
H200 = ("fp16_tensor_cores", "bf16_tensor_cores")  # compute capability 9.0: both 16-bit formats
T4 = ("fp16_tensor_cores",)  # 7.5: fp16 only
H200_MEMORY = 143 * GB


def table(rows, compiled=()):
    """Trials from `(precision, micro_batch, ms, GB)` rows of `gpt-25m`'s 16,384 tokens a step (32 sequences
    a process): `ms` None for a shape not timed, `GB` None for one that ran out of memory."""
    trials = [
        Trial(p, mb, 32 // mb, False, None if ms is None else ms / 1e3, None if gb is None else int(gb * GB))
        for p, mb, ms, gb in rows
    ]
    return trials + [Trial(p, mb, 32 // mb, True, ms / 1e3, int(gb * GB)) for p, mb, ms, gb in compiled]


def choose(trials, *, features=H200, memory=H200_MEMORY, steps=6000, compile_s=15.0, requested="auto"):
    return choose_shape(
        trials, requested=requested, features=features, total_memory=memory, steps=steps, compile_s=compile_s
    )


# what one H200 measured of gpt-25m (../shared/GPU.md): eager 8 x 4 in fp16 and bf16, 32 x 1, and compiled
MEASURED = [
    ("bf16", 8, 28.4, 4.1),
    ("fp16", 8, 25.6, 4.2),
    ("bf16", 16, 21.0, 6.3),
    ("fp16", 16, 21.5, 6.4),
    ("bf16", 32, 17.0, 10.6),
    ("fp16", 32, 17.6, 10.7),
]


def test_micro_batches_double_while_they_divide_the_sequences_of_a_step():
    assert micro_batches(8, 4) == (8, 16, 32)  # gpt-25m: 8 x 4, 16 x 2, 32 x 1
    assert micro_batches(6, 4) == (6, 12, 24)
    assert micro_batches(8, 3) == (8,)  # 16 does not divide 24: no shape keeps the batch
    assert micro_batches(8, 1) == (8,)


def test_the_largest_micro_batch_that_fits_is_chosen_in_bf16_and_compiled_where_it_pays():
    choice = choose(table(MEASURED, compiled=[("bf16", 32, 12.0, 9.0)]))
    assert choice == Choice("bf16", 32, 1, True)
    # eager only (the first choice, before compiling is timed): the same shape
    assert choose(table(MEASURED)) == Choice("bf16", 32, 1, False)


def test_a_micro_batch_past_the_memory_margin_or_out_of_memory_is_not_chosen():
    near_full = (1 - MEMORY_MARGIN / 2) * H200_MEMORY / GB  # fits, but leaves less than the margin free
    rows = [r for r in MEASURED if r[1] != 32] + [
        ("bf16", 32, 17.0, near_full),
        ("fp16", 32, 17.6, near_full),
    ]
    assert choose(table(rows)) == Choice("bf16", 16, 2, False)
    rows = [r for r in MEASURED if r[1] != 32] + [("bf16", 32, None, None), ("fp16", 32, None, None)]
    assert choose(table(rows)) == Choice("bf16", 16, 2, False)
    # where the device does not say its memory, whatever ran fits
    assert choose(table(MEASURED[:4] + [("bf16", 32, 17.0, near_full)]), memory=None).micro_batch == 32


def test_a_larger_micro_batch_is_kept_within_the_noise_of_the_fastest_and_not_past_it():
    rows = [("bf16", 8, 28.0, 4.0), ("bf16", 16, 20.0, 6.0), ("bf16", 32, 21.0, 10.0)]  # 32: 5 % slower
    assert choose(table(rows)).micro_batch == 32
    rows[2] = ("bf16", 32, 25.0, 10.0)  # 25 % slower than 16 x 2: measurably, not noise
    assert choose(table(rows)) == Choice("bf16", 16, 2, False)


def test_compiling_is_chosen_only_where_its_seconds_pay_back_over_the_run():
    assert compile_pays(0.018, 0.012, 15.0, steps=6000)  # 36 s saved for 15 s of compiling
    assert not compile_pays(0.018, 0.012, 15.0, steps=2000)  # 12 s saved: less than it costs
    assert not compile_pays(0.018, 0.0175, 0.0, steps=10**6)  # free, but within the noise of a timing
    trials = table(MEASURED, compiled=[("bf16", 32, 12.0, 9.0)])
    assert choose(trials, steps=2000).compile is False
    # a compiled step of another shape or precision than the eager choice decides nothing
    assert choose(table(MEASURED, compiled=[("bf16", 16, 5.0, 5.0)])).compile is False


def test_a_gpu_with_fp16_tensor_cores_alone_trains_fp16_and_one_without_any_fp32():
    rows = [("fp16", 8, 60.0, 4.0), ("fp16", 16, 50.0, 6.0), ("fp16", 32, 48.0, 10.0)]
    assert choose(table(rows), features=T4, memory=16 * GB) == Choice("fp16", 32, 1, False)
    rows = [("fp32", 8, 300.0, 6.0), ("fp32", 16, 290.0, 10.0)]
    assert choose(table(rows), features=(), memory=16 * GB) == Choice("fp32", 16, 2, False)


def test_fp16_is_kept_where_its_steps_are_measurably_faster_than_bf16s():
    rows = [("bf16", 32, 20.0, 10.6), ("fp16", 32, 15.0, 10.7)]  # fp16 25 % faster: not noise
    assert choose(table(rows)).precision == "fp16"


def test_bf16_is_kept_where_fp16_is_no_faster_beyond_the_noise():
    rows = [("bf16", 32, 17.0, 10.6), ("fp16", 32, 16.5, 10.7)]  # fp16 3 % faster: noise, and a scaler
    assert choose(table(rows)).precision == "bf16"
    assert choose(table(rows), requested="bf16").precision == "bf16"


def test_no_micro_batch_that_fits_is_a_config_error():
    with pytest.raises(ConfigError, match="fits the GPU's memory"):
        choose(table([("bf16", 8, None, None), ("fp16", 8, None, None)]))


def test_a_gpus_auto_times_each_16_bit_format_its_tensor_cores_run(monkeypatch):
    for capability, expected in [((9, 0), ("bf16", "fp16")), ((7, 5), ("fp16",)), ((6, 1), ("fp32",))]:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert precisions_to_time("auto", "cuda", budget=False) == expected
        assert gptlib.probe.tunes("auto", "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    # a precision asked for keeps the run as configured: timed for a budget only, and no shape chosen
    assert precisions_to_time("fp16", "cuda", budget=False) == ()
    assert precisions_to_time("fp16", "cuda", budget=True) == ("fp16",)
    assert not gptlib.probe.tunes("fp16", "cuda") and not gptlib.probe.tunes("auto", "cpu")


def chose(choice: Choice, **fields) -> Probe:
    return Probe(step_s={choice.precision: 0.017}, precisions=(choice.precision,), choice=choice, **fields)


def test_the_chosen_config_keeps_the_global_batch_and_the_windows_validated():
    seed = TrainConfig.preset("gpt-25m")  # 8 x 4, 20 validation batches of 8
    cfg = chosen_config(seed, chose(Choice("bf16", 32, 1, True)))
    assert (cfg.micro_batch, cfg.grad_accum, cfg.compile, cfg.eval_batches) == (32, 1, True, 5)
    assert cfg.micro_batch * cfg.grad_accum == seed.micro_batch * seed.grad_accum
    assert (
        chosen_config(cfg, chose(Choice("bf16", 32, 1, True))) == cfg
    )  # a resume applies it again: no change
    assert chosen_config(seed, None) == seed and chosen_config(seed, Probe(step_s={"fp16": 0.03})) == seed
    every_window = replace(seed, eval_batches=0)
    assert chosen_config(every_window, chose(Choice("bf16", 16, 2, False))).eval_batches == 0


def test_a_probe_with_its_choice_is_recorded_as_json_and_read_back_the_same():
    probe = Probe(
        step_s={"bf16": 0.017, "fp16": 0.0176},
        features=("NVIDIA H200", *H200),
        precisions=("bf16", "fp16"),
        compiled_s={"bf16": 0.012},
        compile_s=15.2,
        trials=tuple(table(MEASURED[:2] + [("bf16", 32, None, None)], compiled=[("bf16", 8, 20.0, 4.0)])),
        memory=H200_MEMORY,
        choice=Choice("bf16", 8, 4, True),
    )
    meta = json.loads(json.dumps({"probe": probe.to_dict()}))  # as a checkpoint's metadata holds it
    assert recorded(meta) == probe
    old = {"step_s": {"fp16": 0.032}, "features": [], "eval_s": 0.0, "save_s": 0.0, "precisions": ["fp16"]}
    assert recorded({"probe": old}) == Probe(
        step_s={"fp16": 0.032}, precisions=("fp16",)
    )  # before the choice


def test_a_resumed_run_keeps_the_shape_its_probe_chose_whatever_the_command_gives():
    chosen = chosen_config(TrainConfig.preset("gpt-25m"), chose(Choice("bf16", 32, 1, True)))
    meta = {"config": chosen.to_dict(), "probe": chose(Choice("bf16", 32, 1, True)).to_dict()}
    resumed = resumed_config(TrainConfig.preset("gpt-25m"), meta)  # the command line's 8 x 4 again
    assert (resumed.micro_batch, resumed.grad_accum, resumed.eval_batches, resumed.compile) == (
        32,
        1,
        5,
        True,
    )
    # a probe that chose nothing (a CPU's, or a precision asked for) leaves the shape to the command
    meta = {"config": chosen.to_dict(), "probe": Probe(step_s={"fp16": 0.03}).to_dict()}
    assert resumed_config(TrainConfig.preset("gpt-25m"), meta).micro_batch == 8


def test_the_first_line_names_the_gpu_its_step_times_and_the_shape_it_chose():
    trials = table(MEASURED, compiled=[("bf16", 32, 12.0, 9.0)])
    probe = Probe(
        step_s={"bf16": 0.017, "fp16": 0.0176},
        features=("NVIDIA H200", *H200),
        precisions=("bf16", "fp16"),
        compiled_s={"bf16": 0.012},
        compile_s=15.0,
        trials=tuple(trials),
        memory=H200_MEMORY,
        choice=Choice("bf16", 32, 1, True),
    )
    line = describe(probe, "bf16", times=True, max_steps=3000, budget_min=1.0, compiled=True)
    assert "a step takes bf16 17 ms, fp16 18 ms (NVIDIA H200, fp16_tensor_cores, bf16_tensor_cores)" in line
    assert "shape 32 x 1 of bf16 steps 8 x 4 28 ms, 16 x 2 21 ms, 32 x 1 17 ms (10.6 of 143 GB)" in line
    assert "12 ms compiled after 15 s: compiled" in line
    assert "budget 1 min: 3,000 steps of 12 ms compiled" in line


# --- the search itself, on the CPU: real steps of the run's copies, the GPU's memory faked -----------------


class FakeMemory:
    """A GPU's memory as the search reads it: `total`, and for each step measured in turn the bytes it held
    beyond what was allocated before, or None: the step runs out of memory (raised, the step not run)."""

    def __init__(self, total: int, held: list):
        self.total, self.held, self.released = total, list(held), 0

    def measure(self, run) -> int:
        held = self.held.pop(0)
        if held is None:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (faked)")
        run()
        return held

    def release(self) -> None:
        self.released += 1


def test_the_search_doubles_until_memory_runs_out_and_chooses_from_what_it_measured(
    small_data, tmp_path, monkeypatch
):
    """On the CPU, as a GPU's search runs: one real step of the run's copy at 4, 8 and 16 sequences a pass
    (16 runs out of memory: the doubling stops, its gradients are freed), the fitting shapes timed, the
    eager choice compiled by the run's own `training_module` and timed again. The times are faked (a test
    must not depend on a clock); the steps are real, each at its own shape, the batch of a step kept."""
    from gptlib.run_folder import run_inputs

    shapes, compiled = [], []

    def step(self, batches, lr, cfg):  # the run's step, its shapes noted
        def noted():
            for x, y in batches:
                shapes.append((cfg.micro_batch, cfg.grad_accum, tuple(x.shape)))
                yield x, y

        return real_step(self, noted(), lr, cfg)

    real_step = gptlib.train.Training.step
    monkeypatch.setattr(gptlib.train.Training, "step", step)
    times = iter([{"bf16": 0.030}, {"bf16": 0.020}, {"bf16": 0.012}])  # at 4 x 4, 8 x 2, compiled 8 x 2

    def fake_time_steps(steps, most=None):
        for run_step in steps.values():
            run_step()
        return next(times)

    monkeypatch.setattr(gptlib.probe, "time_steps", fake_time_steps)
    monkeypatch.setattr(gptlib.probe, "_tensor_cores", lambda device: H200)
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: compiled.append(model) or model)
    cfg = TrainConfig.preset(
        "tiny",
        shards=str(small_data / "shards"),
        tokenizer=str(small_data / "tokenizer"),
        out=str(tmp_path / "run"),
        vocab_size=300,
        context=32,
        micro_batch=4,
        grad_accum=4,
        precision="auto",
        max_steps=10_000,  # compiling's pay-back counts the run's steps: long enough for any compile here
    )
    dist = Distributed(0, 1, 0, torch.device("cpu"))
    tokenizer = gptlib.train.open_tokenizer(cfg)
    build = gptlib.train.eager_copies(cfg, dist, tokenizer, run_inputs(tokenizer, cfg.shards))
    trial = build("bf16")
    memory = FakeMemory(40 * GB, [5 * GB, 10 * GB, None, 9 * GB])  # 4, 8, 16 (out of memory), compiled 8
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        probe = search(cfg, dist, {"bf16": trial}, None, memory)
    finally:
        trial.loader.close()
        torch.use_deterministic_algorithms(deterministic)  # a CPU compile turns it on for the run's life
    assert probe.choice == Choice("bf16", 8, 2, True)  # 0.020 s against 0.012 compiled: 16 x 1 did not fit
    assert probe.step_s == {"bf16": 0.020} and probe.compiled_s == {"bf16": 0.012} and probe.memory == 40 * GB
    measured = [(t.micro_batch, t.grad_accum, t.compiled, t.step_s) for t in probe.trials]
    assert measured == [(4, 4, False, 0.030), (8, 2, False, 0.020), (16, 1, False, None), (8, 2, True, 0.012)]
    out_of_memory = probe.trials[2]
    assert out_of_memory.memory is None and memory.released == 1 and not out_of_memory.fits(memory.total)
    assert all(t.memory >= 5 * GB for t in probe.trials if t.memory is not None)  # the model's bytes added
    # each step at its shape: the memory pass (4 x 4, 8 x 2), the timing, the compile's trial and timing
    assert {(mb, accum, rows) for mb, accum, (rows, _) in shapes} == {(4, 4, 4), (8, 2, 8)}
    assert len(compiled) == 1 and compiled[0] is trial.model  # the run's own training_module compiled it


# --- the GPU check's dry run ------------------------------------------------------------------------------


def test_the_gpu_checks_summary_marks_what_falls_short_of_the_issues_bar(tmp_path):
    """The summary of a GPU's records names each figure against the issue's threshold: the real loop at the
    chosen shape at 35 % MFU or more and 90 % of its bare step, a budget's run using 90-100 % of its minutes,
    a recipe at 1.80 bits/byte or less; RESULTS.md refuses a dry run's records."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import gpu_check

    gpu = {"device": "NVIDIA H200", "dry_run": False}
    loop = {"precision": "bf16", "micro_batch": 32, "grad_accum": 1, "compile": True, "start": "new run ..."}
    loop.update(
        loop_tokens_per_s=1.9e6, loop_tokens_per_s_overall=1.8e6, bare_tokens_per_s=2.0e6, bare_mfu=0.38
    )
    records = {
        "loop": [{**gpu, **loop, "run": "chosen", "loop_mfu": 0.36, "loop_of_bare": 0.95}],
        "budget": [
            {
                **gpu,
                "budget_min": 1.0,
                "wall_s": 52.0,
                "used": 52.0 / 60,
                "planned_steps": 3000,
                "final_steps": 3000,
                "precision": "bf16",
                "best_val_bpb": 1.95,
                "best_step": 500,
                "last_val_bpb": 2.4,
                "start": "new run ...",
            }
        ],
        "recipe": [
            {
                **gpu,
                "name": "a",
                "why": "w",
                "budget_min": 0.6,
                "steps": 900,
                "best_val_bpb": 1.78,
                "best_step": 800,
                "best_at_s": 30.0,
                "last_val_bpb": 1.79,
            }
        ],
    }
    for stage, rows in records.items():
        (tmp_path / f"{stage}.json").write_text(json.dumps(rows))
    summary = gpu_check.summary_markdown(tmp_path)
    assert "on NVIDIA H200" in summary and "dry run" not in summary
    assert "| 0.95 (meets the issue's bar) |" in summary
    assert "at the chosen shape: 36.0% (meets the issue's bar)" in summary
    assert "87% of its minutes (**below the issue's bar**)" in summary
    assert "| 1.7800 (meets the issue's bar) |" in summary
    (tmp_path / "budget.json").write_text(json.dumps([{**records["budget"][0], "dry_run": True}]))
    with pytest.raises(SystemExit, match="dry run"):
        gpu_check.write_results(tmp_path)


@pytest.mark.slow
def test_the_gpu_checks_dry_run_runs_every_stage_on_the_cpu_and_summarizes_them(small_data, tmp_path):
    """benchmarks/gpu_check.sh --dry-run: every stage of the GPU check, at toy sizes on the CPU (one recipe
    candidate), each under its time limit, its records in $OUT and a summary of them all (1-2 minutes)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "GPTLIB_DATA": str(tmp_path / "data")}
    args = ["--dry-run", "--data", str(small_data), "--work", str(tmp_path / "work"), "--only", "gpt-25m-wsd"]
    result = subprocess.run(
        ["bash", str(repo / "benchmarks" / "gpu_check.sh"), *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ran = (out / "check.log").read_text()
    for stage in ("data", "loop", "budget", "recipe", "steps", "peer"):
        assert f"== {stage}: exit 0" in ran, ran + (out / f"{stage}.log").read_text()[-3000:]
    loop = json.loads((out / "loop.json").read_text())
    assert [r["run"] for r in loop] == ["seed", "chosen"] and all(r["loop_of_bare"] > 0 for r in loop)
    assert json.loads((out / "budget.json").read_text())[0]["final_steps"] > 0
    assert [r["name"] for r in json.loads((out / "recipe.json").read_text())] == ["gpt-25m-wsd"]
    summary = (out / "summary.md").read_text()
    assert "a **dry run** on the CPU" in summary and "| seed | fp32 | 2 x 4 |" in summary
    assert "gptlib's GPT against nanoGPT's model" in summary and "| gpt-25m-wsd |" in summary
    assert not list((tmp_path / "work").glob("loop-*")), "the runs' folders are removed after each stage"
