"""Faults around training, from the command line: damaged checkpoints, metrics and validation data, signals,
bad numbers, devices this machine lacks, unwritable or full disks, two writers, folders that are not runs.
Every error is one `error: ...` line and exit code 2; a run that can go on, goes on."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from gptlib.files import sha256_file
from gptlib.run_folder import RUN_MARKER, list_checkpoints, read_checkpoint_meta, read_metrics

REPO = Path(__file__).resolve().parent.parent


def flags(small_data, out, **overrides) -> list[str]:
    values = {
        "shards": small_data / "shards",
        "tokenizer": small_data / "tokenizer",
        "out": out,
        "max_steps": 12,
        "log_every": 1,
        "eval_every": 4,
        "eval_batches": 2,
        "checkpoint_every": 4,
        "keep_last": 1,
        "micro_batch": 4,
        "context": 32,
        "vocab_size": 300,  # small_data's tokenizer
        "precision": "fp32",
        **overrides,
    }
    if "budget" in overrides:  # a budget sets max_steps
        del values["max_steps"]
    return ["--preset", "tiny", *[f"--{k.replace('_', '-')}={v}" for k, v in values.items()]]


def gptlib(*args, timeout=120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gptlib", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        **kwargs,
    )


def with_patch(patch: str, *args) -> subprocess.CompletedProcess:
    """Run the command line in a child whose `patch` (Python source) ran first: to simulate full or read-only
    disks."""
    code = (
        textwrap.dedent(patch)
        + f"\nfrom gptlib.cli import main\nraise SystemExit(main({[str(a) for a in args]!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)


def one_error_line(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def damage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def train_losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_metrics(run) if r["kind"] == "train"]


def dead_pid() -> int:
    "The pid of a process that has ended (a child that printed it and exited)."
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(child.stdout)


def rehash(checkpoint: Path) -> None:
    "Record the sha256 of the checkpoint's files as they are now, as someone who edited them might."
    meta = json.loads((checkpoint / "checkpoint.json").read_text())
    meta["files"] = {name: sha256_file(checkpoint / name) for name in meta["files"]}
    (checkpoint / "checkpoint.json").write_text(json.dumps(meta))


# --- checkpoints --------------------------------------------------------------------------------------------


def test_a_damaged_older_checkpoint_never_stops_later_saves(small_data, tmp_path):
    run = tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, run, max_steps=8, keep_last=3)).returncode == 0
    older = list_checkpoints(run)[0]
    (older / "checkpoint.json").write_text("{ damaged")
    result = gptlib("train", "start", *flags(small_data, run, max_steps=16, decay_steps=8, keep_last=1))
    assert result.returncode == 0, result.stderr
    assert f"moved the damaged checkpoint {older.name} aside" in result.stdout
    assert [p.name for p in list_checkpoints(run)][-1] == "step-0000016" and (
        run / "checkpoints" / f"damaged-{older.name}"
    ).is_dir()
    assert gptlib("sample", "--run", run, "--max-new-tokens", 5).returncode == 0


def test_a_damaged_latest_checkpoint_falls_back_to_the_newest_intact_one(small_data, tmp_path):
    reference, run = tmp_path / "reference", tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, reference)).returncode == 0
    assert (
        gptlib(
            "train", "start", *flags(small_data, run, keep_last=3), "--max-steps=8", "--decay-steps=12"
        ).returncode
        == 0
    )
    latest = list_checkpoints(run)[-1]
    damage(latest / "model.safetensors")
    result = gptlib("sample", "--run", run, "--checkpoint", "latest", "--max-new-tokens", 5)
    assert result.returncode == 0, result.stderr  # sampling passes over the damaged checkpoint too
    result = gptlib("train", "start", *flags(small_data, run, keep_last=3))
    assert result.returncode == 0, result.stderr
    assert (
        f"skipped the damaged checkpoint {latest.name}" in result.stdout
        and "resuming from step-0000004" in result.stdout
    )
    assert train_losses(run) == train_losses(reference), "the resume from the older checkpoint is exact"


def test_a_kill_during_pruning_leaves_nothing_that_stops_the_run(small_data, tmp_path):
    run = tmp_path / "run"
    patch = """
        import os, signal, shutil
        import gptlib.run_folder as run_folder
        def rmtree_then_die(path, *args, **kwargs):
            victims = sorted(os.listdir(path))
            os.remove(os.path.join(path, victims[0]))  # half deleted
            os.kill(os.getpid(), signal.SIGKILL)
        run_folder.shutil.rmtree = rmtree_then_die
    """
    result = with_patch(patch, "train", "start", *flags(small_data, run))
    assert result.returncode == -9, result.stderr
    assert list((run / "checkpoints").glob(".step-*.tmp-*")), "the kill came mid-delete"
    result = gptlib("train", "start", *flags(small_data, run))
    assert result.returncode == 0, result.stderr
    assert not list((run / "checkpoints").glob(".*")), (
        "the half-deleted checkpoint of the dead process is gone"
    )
    assert gptlib("sample", "--run", run, "--max-new-tokens", 5).returncode == 0


def test_stale_temporary_checkpoint_folders_are_removed_on_resume(small_data, tmp_path):
    run = tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, run, max_steps=4)).returncode == 0
    stale = run / "checkpoints" / f".step-0000008.tmp-{dead_pid()}-0123abcd"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    assert gptlib("train", "start", *flags(small_data, run, max_steps=8, decay_steps=4)).returncode == 0
    assert not stale.exists()


def test_dead_processes_temporaries_beside_the_metrics_and_config_are_removed(small_data, tmp_path):
    run = tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, run, max_steps=4)).returncode == 0
    pid = dead_pid()
    stale = [run / f".metrics.jsonl.tmp-{pid}-0123abcd", run / f".config.json.tmp-{pid}-4567cdef"]
    for path in stale:
        path.write_text("half written")
    assert gptlib("train", "start", *flags(small_data, run, max_steps=8, decay_steps=4)).returncode == 0
    assert not any(path.exists() for path in stale)


def test_a_state_pt_of_another_checkpoint_is_refused_though_its_checksum_was_made_to_match(
    small_data, tmp_path
):
    run = tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, run, max_steps=8, keep_last=3)).returncode == 0
    older, newer = list_checkpoints(run)
    shutil.copy(older / "state.pt", newer / "state.pt")
    rehash(newer)
    result = gptlib("train", "start", *flags(small_data, run, max_steps=12, decay_steps=8))
    one_error_line(result, "state.pt is of step 4, not 8")


def test_a_state_pt_of_a_run_with_another_seed_is_refused_though_its_checksum_was_made_to_match(
    small_data, tmp_path
):
    run = tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, run, max_steps=4)).returncode == 0
    latest = list_checkpoints(run)[-1]
    state = torch.load(latest / "state.pt", weights_only=True)
    state["ranks"][0]["loader"]["seed"] = 7  # as in the state.pt of a same-shaped run of seed 7, same step
    torch.save(state, latest / "state.pt")
    rehash(latest)
    result = gptlib("train", "start", *flags(small_data, run, max_steps=8, decay_steps=4))
    one_error_line(result, "state.pt holds the batches of seed 7")


def test_optimizer_moments_of_another_shape_are_refused_rather_than_crashing(small_data, tmp_path):
    run = tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, run, max_steps=4)).returncode == 0
    latest = list_checkpoints(run)[-1]
    state = torch.load(latest / "state.pt", weights_only=True)
    state["optimizer"]["state"][0]["exp_avg"] = torch.zeros(7, 3)  # as from a model of another shape
    torch.save(state, latest / "state.pt")
    rehash(latest)
    result = gptlib("train", "start", *flags(small_data, run, max_steps=8, decay_steps=4))
    one_error_line(result, "exp_avg of parameter 0 has another shape")


def test_a_checkpoint_whose_step_was_edited_is_skipped_as_damaged(small_data, tmp_path):
    run = tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, run, max_steps=8, keep_last=3)).returncode == 0
    newer = list_checkpoints(run)[-1]
    meta = json.loads((newer / "checkpoint.json").read_text())
    (newer / "checkpoint.json").write_text(json.dumps({**meta, "step": 35}))  # the log would jump to 35
    result = gptlib("train", "start", *flags(small_data, run, max_steps=12, decay_steps=8))
    assert result.returncode == 0, result.stderr
    assert "says step 35, but the folder is step-0000008" in result.stdout
    assert "resuming from step-0000004" in result.stdout
    assert [step for step, _ in train_losses(run)] == list(range(1, 13))


# --- data the run reads -------------------------------------------------------------------------------------


def test_a_damaged_validation_split_is_found_before_the_first_step(small_data, tmp_path):
    shards = tmp_path / "shards"
    shutil.copytree(small_data / "shards", shards)
    damage(next((shards / "val").glob("*.ds")))
    run = tmp_path / "run"
    one_error_line(gptlib("train", "start", *flags(small_data, run, shards=shards)), "corrupted")
    assert not train_losses(run) and not list_checkpoints(run)


def test_a_validation_split_too_short_for_one_window_is_refused_before_the_first_step(small_data, tmp_path):
    one_error_line(
        gptlib(
            "train",
            "start",
            *flags(small_data, tmp_path / "run", context=64, micro_batch=1),
            "--context=100000",
        ),
        "not one window",
    )


def test_a_damaged_line_in_the_middle_of_the_metrics_drops_only_itself(small_data, tmp_path):
    run = tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, run, max_steps=8)).returncode == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[3] = lines[3][: len(lines[3]) // 2]  # torn in the middle of the file
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    result = gptlib("train", "start", *flags(small_data, run, max_steps=12, decay_steps=8))
    assert result.returncode == 0 and "dropped 1 damaged line(s) of metrics.jsonl" in result.stdout
    steps = [step for step, _ in train_losses(run)]
    assert steps == [s for s in range(1, 13) if s != 3], "only the torn record is missing"


# --- signals, numbers, devices ------------------------------------------------------------------------------


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_a_checkpoint_and_exits_with_the_shells_code(small_data, tmp_path, sig, code):
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "gptlib",
        "train",
        "start",
        *flags(small_data, run, max_steps=100_000, checkpoint_every=100_000, eval_every=100_000, log_every=1),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline and len(train_losses(run) if (run / "metrics.jsonl").exists() else []) < 3
    ):
        time.sleep(0.1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert f"({sig.name})" in out and read_checkpoint_meta(list_checkpoints(run)[-1])["step"] >= 3


def test_a_second_ctrl_c_stops_at_once_where_the_first_waits_for_the_step(capsys):
    from gptlib.cli._shared import signal_exit_code
    from gptlib.runtime import StopRequest

    before = signal.getsignal(signal.SIGINT)
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # the handler runs in this thread, between two bytecodes
        assert stop.signal == "SIGINT" and signal_exit_code(stop.signal) == 130, "the first one only asks"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
    assert "Ctrl-C again: now" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before, "the handler before the run is back"


def test_a_second_ctrl_c_during_the_probe_stops_at_once_and_the_same_command_then_trains(
    small_data, tmp_path
):
    run, args = tmp_path / "run", flags(small_data, tmp_path / "run", budget=0.3, precision="auto")
    patch = """
        import os, signal, time
        import gptlib.probe as probe
        real_time_steps = probe.time_steps
        def twice_then_time(steps, most):  # Ctrl-C twice while the probe times its first steps
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)  # never reached: the second raises
            return real_time_steps(steps, most)
        probe.time_steps = twice_then_time
    """
    interrupted = with_patch(patch, "train", "start", *args)
    assert interrupted.returncode == 130 and "Traceback" not in interrupted.stderr, interrupted.stderr
    assert interrupted.stderr.splitlines()[-1] == "interrupted" and not list_checkpoints(run)
    again = gptlib("train", "start", *args)
    assert again.returncode == 0, again.stderr[-2000:]
    start = [r for r in read_metrics(run) if r["kind"] == "event" and "max_steps" in r][-1]
    assert train_losses(run)[-1][0] == start["max_steps"], "a whole run, planned by its own probe"


@pytest.mark.parametrize(
    "flag",
    ["--max-lr=inf", "--grad-clip=nan", "--weight-decay=nan", "--init-scale=nan", "--min-lr=-1", "--beta2=1"],
)
def test_numbers_that_would_train_nans_are_refused(small_data, tmp_path, flag):
    name = flag[2:].split("=")[0].replace("-", "_")
    one_error_line(gptlib("train", "start", *flags(small_data, tmp_path / "run"), flag), name)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "flag, asked", [("--context=10000000000", "--context 10,000,000,000 asks for 7.68 TB of memory")]
)
def test_sizes_beyond_memory_are_refused_before_anything_is_allocated(small_data, tmp_path, flag, asked):
    result = gptlib("train", "start", *flags(small_data, tmp_path / "run"), flag)
    assert one_error_line(result, asked, "more than the").endswith("of this machine")
    assert not (tmp_path / "run").exists()


def test_a_loss_that_is_no_longer_finite_stops_the_run_and_no_checkpoint_of_it_is_saved(small_data, tmp_path):
    from safetensors.torch import load_file

    run = tmp_path / "run"
    result = gptlib("train", "start", *flags(small_data, run, max_lr=1e30, checkpoint_every=1, eval_every=1))
    message = one_error_line(result, "training diverged (max_lr=1e+30 too high?)")
    found = re.match(r"error: the (training|validation) loss of step (\d+) is (nan|inf|-inf):", message)
    which, step = found.group(1), int(found.group(2))
    logged = [r for r in read_metrics(run) if r["kind"] != "event"]
    # a step whose training loss is finite is logged before its validation; nothing of a non-finite one is
    last_logged = step if which == "validation" else step - 1
    assert [r["step"] for r in logged if r["kind"] == "train"] == list(range(1, last_logged + 1))
    assert all(math.isfinite(r.get("loss", r.get("val_loss"))) for r in logged), logged
    assert len(list_checkpoints(run)) == step - 1, "a checkpoint of every finite step, none of the last"
    for checkpoint in list_checkpoints(run):
        weights = load_file(checkpoint / "model.safetensors")
        assert all(torch.isfinite(tensor).all() for tensor in weights.values()), checkpoint


def test_sampling_is_finite_for_every_accepted_temperature(small_data, tmp_path):
    run = tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, run, max_steps=2)).returncode == 0
    greedy = gptlib("sample", "--run", run, "--prompt", "ROMEO", "--temperature", 0, "--max-new-tokens", 8)
    for temperature in ("1e-45", "5e-324"):  # logits / T overflow float32: the limit is the greedy choice
        result = gptlib(
            "sample", "--run", run, "--prompt", "ROMEO", "--temperature", temperature, "--max-new-tokens", 8
        )
        assert result.returncode == 0 and result.stdout == greedy.stdout, result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine has the device")
@pytest.mark.parametrize("device", ["cuda", "cuda:3", "tpu"])
def test_a_device_this_machine_lacks_is_one_error_line(small_data, tmp_path, device):
    one_error_line(
        gptlib("train", "start", *flags(small_data, tmp_path / "run"), f"--device={device}"), device
    )
    assert gptlib("train", "start", *flags(small_data, tmp_path / "ok", max_steps=2)).returncode == 0
    one_error_line(gptlib("sample", "--run", tmp_path / "ok", "--device", device), device)


# --- where the run writes -----------------------------------------------------------------------------------


def test_out_that_is_a_file_is_one_error_line(small_data, tmp_path):
    out = tmp_path / "notes.txt"
    out.write_text("mine")
    one_error_line(gptlib("train", "start", *flags(small_data, out)), str(out))
    assert out.read_text() == "mine"


def test_an_unwritable_run_folder_is_one_error_line(small_data, tmp_path):
    patch = """
        import os
        real_mkdir = os.mkdir
        def mkdir(path, *args, **kwargs):  # as on a read-only file system (root ignores permission bits)
            if os.path.basename(str(path)) == "run":
                raise PermissionError(13, "Permission denied", str(path))
            return real_mkdir(path, *args, **kwargs)
        os.mkdir = mkdir
    """
    one_error_line(
        with_patch(patch, "train", "start", *flags(small_data, tmp_path / "run")), "Permission denied"
    )


@pytest.mark.parametrize("what", ["state.pt", "state.pt, as torch's writer says it", "model.safetensors"])
def test_a_full_disk_while_saving_a_checkpoint_is_one_error_line_and_keeps_the_older_ones(
    small_data, tmp_path, what
):
    run = tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, run, max_steps=4)).returncode == 0
    before = {p.name: (p / "checkpoint.json").read_bytes() for p in list_checkpoints(run)}
    patch = {
        "state.pt": """
            import errno, torch
            def full(obj, path, *a, **k):
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            torch.save = full
        """,
        "state.pt, as torch's writer says it": """
            import torch
            def full(obj, path, *a, **k):
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4352 vs 4240")
            torch.save = full
        """,
        "model.safetensors": """
            import safetensors.torch
            from safetensors import SafetensorError
            def full(*a, **k):
                raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull })")
            safetensors.torch.save_model = full
        """,
    }[what]
    result = with_patch(patch, "train", "start", *flags(small_data, run, max_steps=8, decay_steps=4))
    needle = {"state.pt": "No space left on device", "model.safetensors": "StorageFull"}.get(
        what, "enforce fail"
    )
    one_error_line(result, needle)
    assert {p.name: (p / "checkpoint.json").read_bytes() for p in list_checkpoints(run)} == before
    assert not list((run / "checkpoints").glob(".*")), "the half-written checkpoint is removed"


def test_a_full_disk_while_appending_to_the_metrics_names_the_file(small_data, tmp_path):
    run = tmp_path / "run"
    patch = """
        import builtins, errno, os
        real_open = builtins.open
        class Full:  # a file whose writes fail as on a full disk: errno and message, no file name
            def __init__(self, f):
                self._f = f
            def write(self, data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            def __getattr__(self, name):
                return getattr(self._f, name)
            def __enter__(self):
                return self
            def __exit__(self, *exc):
                return self._f.__exit__(*exc)
        def open_(file, mode="r", *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            return Full(f) if str(file).endswith("metrics.jsonl") and "a" in mode else f
        builtins.open = open_
    """
    result = with_patch(patch, "train", "start", *flags(small_data, run, max_steps=4))
    assert one_error_line(result) == f"error: No space left on device: {run / 'metrics.jsonl'}"


def test_a_second_writer_on_the_same_run_is_refused_and_a_dead_ones_lock_is_free(small_data, tmp_path):
    run = tmp_path / "run"
    endless = flags(small_data, run, max_steps=100_000, checkpoint_every=100_000, eval_every=100_000)
    first = subprocess.Popen(
        [sys.executable, "-m", "gptlib", "train", "start", *endless],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not ((run / "metrics.jsonl").exists() and train_losses(run)):
            time.sleep(0.1)
        one_error_line(gptlib("train", "start", *flags(small_data, run)), f"pid {first.pid}", "run folder")
    finally:
        first.kill()  # kill -9: the lock is never released by the process itself
        first.wait()
    result = gptlib("train", "start", *flags(small_data, run, max_steps=4))
    assert result.returncode == 0, result.stderr  # the kernel released the dead writer's lock
    assert read_checkpoint_meta(list_checkpoints(run)[-1])["step"] == 4


def test_a_folder_of_the_users_is_refused_and_nothing_in_it_is_touched(small_data, tmp_path):
    out = tmp_path / "experiment"
    out.mkdir()
    mine = {
        "config.json": '{"mine": 1}\n',
        "metrics.jsonl": '{"kind": "mine"}\n',
        "training.png": "not a png",
    }
    for name, text in mine.items():
        (out / name).write_text(text)
    one_error_line(gptlib("train", "start", *flags(small_data, out)), str(out), "is not a gptlib run")
    assert {p.name: p.read_text() for p in out.iterdir()} == mine, "nothing added, overwritten or deleted"


def test_a_run_folder_has_its_marker_and_a_run_of_an_older_gptlib_still_resumes(small_data, tmp_path):
    run = tmp_path / "run"
    assert gptlib("train", "start", *flags(small_data, run, max_steps=4)).returncode == 0
    assert (run / RUN_MARKER).is_file()
    (run / RUN_MARKER).unlink()  # as runs were before they had one: known by their gptlib checkpoints
    result = gptlib("train", "start", *flags(small_data, run, max_steps=8, decay_steps=4))
    assert result.returncode == 0, result.stderr
    assert "resuming from step-0000004" in result.stdout and (run / RUN_MARKER).is_file()


def test_a_tokenizer_of_another_size_is_refused_before_the_run_folder_is_made(small_data, tmp_path):
    run = tmp_path / "run"
    result = gptlib("train", "start", *flags(small_data, run), "--vocab-size=512")
    one_error_line(result, "has 300 ids but vocab_size is 512", "--vocab-size 300")
    assert not run.exists()


def test_pruning_that_cannot_remove_a_checkpoint_never_stops_the_run(small_data, tmp_path):
    run = tmp_path / "run"
    patch = """
        import gptlib.run_folder as run_folder
        def refuse(source, target):  # as in a folder made immutable (chattr +i)
            raise PermissionError(1, "Operation not permitted", str(source))
        run_folder.rename = refuse
    """
    result = with_patch(patch, "train", "start", *flags(small_data, run, keep_last=1))
    assert result.returncode == 0, result.stderr
    assert (
        "could not prune step-" in result.stdout
        and "(Operation not permitted); the run goes on" in result.stdout
    )
    assert read_checkpoint_meta(list_checkpoints(run)[-1])["step"] == 12


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: {**r, "step": str(r["step"])} if r["kind"] == "train" else r,  # a step written as a string
        lambda r: {k: v for k, v in r.items() if k != "skipped"},  # a running count left out
        lambda r: {**r, "val_bpb": "n/a"} if r["kind"] == "val" else r,  # a figure that is not one
    ],
    ids=["step-as-text", "no-skipped", "val-bpb-text"],
)
def test_an_edited_metrics_log_resumes_and_is_judged_without_a_traceback(small_data, tmp_path, edit):
    """A `metrics.jsonl` whose lines were edited by hand: resuming drops the lines it cannot compute with
    (and says so), the run goes on exactly, and the records read back are all of the right shape."""
    run = tmp_path / "run"
    first = gptlib("train", "start", *flags(small_data, run), "--max-steps", 4, "--decay-steps", 12)
    assert first.returncode == 0, first.stderr[-2000:]
    log = run / "metrics.jsonl"
    log.write_text(
        "".join(json.dumps(edit(json.loads(line))) + "\n" for line in log.read_text().splitlines())
    )
    resumed = gptlib("train", "start", *flags(small_data, run), "--decay-steps", 12)
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr[-2000:]
    reference = tmp_path / "reference"
    assert gptlib("train", "start", *flags(small_data, reference), "--decay-steps", 12).returncode == 0
    assert train_losses(run)[-8:] == train_losses(reference)[-8:], "steps 5-12 as an uninterrupted run's"
    for record in read_metrics(run):
        assert isinstance(record["step"], int), record


def test_a_mistyped_init_from_is_named_as_missing_before_anything_is_written(small_data, tmp_path):
    run = tmp_path / "run"
    result = gptlib("train", "start", *flags(small_data, run), "--init-from", tmp_path / "no-such-run")
    one_error_line(result, f"--init-from {tmp_path / 'no-such-run'}: no such run folder")
    assert not (run / "checkpoints").exists()


def test_a_budget_and_a_step_count_together_are_refused_rather_than_one_ignored(small_data, tmp_path):
    run = tmp_path / "run"
    result = gptlib("train", "start", *flags(small_data, run), "--budget", 1, "--max-steps", 7)
    one_error_line(result, "--budget sets max_steps", "pass --budget or --max-steps")
    assert not run.exists()
