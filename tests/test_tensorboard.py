"""TensorBoard event files hold a run's scalars, read back with TensorBoard's own reader; a resumed run's
events replace the interrupted run's after the resume step."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from gptlib.tensorboard import TensorBoardLog, write_events  # noqa: E402


def _records(steps, offset=0.0):
    for step in steps:
        yield {"kind": "train", "step": step, "loss": 5.0 - step / 100 + offset, "lr": 1e-3, "grad_norm": 0.5}
        if step % 20 == 0:
            yield {"kind": "val", "step": step, "val_loss": 4.9 - step / 100 + offset, "val_bpb": 2.1}
    yield {"kind": "event", "step": steps[-1], "message": "not a scalar"}


def _scalars(folder, tag):
    reader = EventAccumulator(str(folder))
    reader.Reload()
    return [(event.step, round(event.value, 4)) for event in reader.Scalars(tag)]


def test_the_event_file_holds_the_train_and_validation_scalars(tmp_path):
    write_events(_records([10, 20, 30, 40]), tmp_path / "tb")
    reader = EventAccumulator(str(tmp_path / "tb"))
    reader.Reload()
    assert {"train/loss", "train/lr", "train/grad_norm", "val/loss", "val/bpb"} <= set(
        reader.Tags()["scalars"]
    )
    assert _scalars(tmp_path / "tb", "train/loss") == [(10, 4.9), (20, 4.8), (30, 4.7), (40, 4.6)]
    assert _scalars(tmp_path / "tb", "val/loss") == [(20, 4.7), (40, 4.5)]


def test_a_resumed_run_replaces_the_events_after_its_resume_step(tmp_path):
    folder = tmp_path / "tb"
    write_events(_records([10, 20, 30, 40, 50]), folder)  # the run that was interrupted after step 50
    # TensorBoard reads a folder's event files in the order of their names, which hold the second they were
    # made and then a per-process counter: a file of the same second may sort first (counter 10 before 9)
    time.sleep(1.0)
    with TensorBoardLog(folder, resume_step=20) as log:  # ... resumed from its checkpoint at step 20
        for record in _records([30, 40], offset=1.0):
            log(record)
    assert _scalars(folder, "train/loss") == [(10, 4.9), (20, 4.8), (30, 5.7), (40, 5.6)]
