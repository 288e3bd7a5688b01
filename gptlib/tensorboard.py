"""TensorBoard event files of a run's scalars.

Written while a run trains, or afterwards from its metrics.jsonl. Hand-written plumbing, not generated
from a notebook: `metrics.jsonl` stays the run's record; this module only translates its records for the
tool many users already watch runs in. A `train` record becomes the scalars `train/loss`, `train/lr`,
`train/grad_norm`, `train/tokens_per_s`, `train/mfu`, `train/loss_scale`; a `val` record `val/loss` (nats
per token) and `val/bpb` (bits per byte), each at its step. It needs the `tensorboard` extra
(`pip install 'gptlib[tensorboard]'`), which torch's `SummaryWriter` writes with.

- `TensorBoardLog(folder, resume_step)`: a callable that takes records as the training loop emits them; a
  run resumed at step N drops the events written after N by the interrupted run (`purge_step`), as the
  metrics log drops its lines after N;
- `write_events(records, folder)`: the event file of records already written (`gptlib metrics tensorboard`),
  replacing the event files in `folder` and nothing else there;
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import GptlibError
from .files import temporary_name

__all__ = [
    "TENSORBOARD_DIR",
    "EVENT_FILES",
    "SCALARS",
    "check_installed",
    "TensorBoardLog",
    "write_events",
]

TENSORBOARD_DIR = "tensorboard"  # inside a run folder
EVENT_FILES = "events.out.tfevents.*"  # how TensorBoard's writers name their event files
SCALARS = {  # record kind -> (field of the record, tag of the scalar)
    "train": (
        ("loss", "train/loss"),
        ("lr", "train/lr"),
        ("grad_norm", "train/grad_norm"),
        ("tokens_per_s", "train/tokens_per_s"),
        ("mfu", "train/mfu"),
        ("loss_scale", "train/loss_scale"),
    ),
    "val": (("val_loss", "val/loss"), ("val_bpb", "val/bpb")),
}


def check_installed():
    """torch's SummaryWriter class, or a GptlibError that says how to install what it needs: a command asked
    for events checks this before any work, rather than fail at the run's first record."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:  # torch imports the tensorboard package lazily, here
        raise GptlibError(
            "TensorBoard logging needs the tensorboard package: pip install 'gptlib[tensorboard]'"
        ) from e
    return SummaryWriter


def _summary_writer(folder: Path, purge_step: int | None):
    "torch's SummaryWriter writing into `folder`."
    return check_installed()(log_dir=str(folder), purge_step=purge_step)


def _check_writable(folder: Path) -> None:
    """An `OSError` naming `folder` unless a file can be made in it: checked here because TensorBoard opens
    its event file in a thread of its own, whose failure prints that thread's traceback and names the file
    as bytes."""
    probe = temporary_name(folder / "probe")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(folder)) from e
    probe.unlink()


class TensorBoardLog:
    """Writes each record's scalars to the event file in `folder`, flushed at every validation (so that a
    TensorBoard watching the folder sees a run as it trains). `resume_step`: the step a resumed run starts
    from; events of the interrupted run after it are dropped by TensorBoard."""

    def __init__(self, folder, resume_step: int | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        _check_writable(self.folder)
        # TensorBoard hides the events at and after `purge_step` written before it: those after the resume
        self._writer = _summary_writer(self.folder, None if resume_step is None else resume_step + 1)

    def __call__(self, record: dict) -> None:
        for field, tag in SCALARS.get(record.get("kind"), ()):
            value = record.get(field)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._writer.add_scalar(tag, value, global_step=record["step"])
        if record.get("kind") == "val":
            self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> TensorBoardLog:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


def write_events(records, folder) -> Path:
    """An event file in `folder` holding the scalars of `records` (a run's metrics.jsonl, read), which then
    replaces the event files that were there (`EVENT_FILES`). Nothing else in `folder` is touched; on an
    error the new file is removed and the old ones stay."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    old = {path for path in folder.glob(EVENT_FILES) if path.is_file()}
    try:
        with TensorBoardLog(folder) as log:
            for record in records:
                log(record)
    except BaseException as e:
        for path in set(folder.glob(EVENT_FILES)) - old:
            if path.is_file():
                path.unlink()
        if isinstance(e, OSError) and isinstance(e.filename, bytes):  # TensorBoard's writer names it so
            e.filename = os.fsdecode(e.filename)
        raise
    for path in old:  # the new file's name holds the time and the process id: never an old one's
        path.unlink(missing_ok=True)
    return folder
