"""Faults and bad input, round four (issue 38), from the command line: a stream that never ends where a file
was expected, a run's TensorBoard folder holding the user's files, a link or an edited metrics log, and .bin
files cut short or written as the wrong integer type. Each ends in one `error: ...` line and exit status 2
(no traceback), naming the path, and deletes nothing gptlib did not write."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gptlib.cli import main
from gptlib.data import open_split
from gptlib.run_folder import RunFolder, read_metrics
from gptlib.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parent.parent


def _gptlib(*args, tmp_path: Path, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """`python -m gptlib ARGS` in a child process, this checkout's gptlib first on the path, its data folder
    under `tmp_path`, and at most 4 GB of address space: what would read without end fails fast instead."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "GPTLIB_DATA": str(tmp_path / "gptlib-data"),
    }

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run(
        [sys.executable, "-m", "gptlib", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit_memory,
        **kwargs,
    )


def _one_error_line(stderr: str) -> str:
    "The message of the single `error: ...` line that `stderr` must be."
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0].removeprefix("error: ")


def _fails(capsys, argv: list) -> str:
    "Run the command line in this process; it must exit with 2 and one error line, which is returned."
    status = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert status == 2, err
    return _one_error_line(err)


# --- a stream where a file was expected -----------------------------------------------------------------


@pytest.fixture
def corpus_with_a_pipe(tmp_path) -> tuple[Path, Path]:
    "A corpus folder of three documents and, below them, a named pipe called like a document."
    corpus = tmp_path / "corpus"
    (corpus / "more").mkdir(parents=True)
    for i in range(3):
        (corpus / f"doc{i}.txt").write_text(f"the text of document {i}, " * 50, encoding="utf-8")
    pipe = corpus / "more" / "pipe.txt"
    os.mkfifo(pipe)
    return corpus, pipe


@pytest.mark.parametrize("command", ["run", "tokenizer train"])
def test_a_named_pipe_in_a_corpus_folder_is_refused_before_any_work(corpus_with_a_pipe, tmp_path, command):
    """A pipe that no one writes to blocks its reader for good: it is refused by name, nothing is made."""
    corpus, pipe = corpus_with_a_pipe
    out = tmp_path / "tok"
    argv = {
        "run": ["run", "--corpus", corpus],
        "tokenizer train": [
            "tokenizer",
            "train",
            "--corpus",
            corpus,
            "--vocab-size",
            260,
            "--out",
            out,
            "-q",
        ],
    }[command]
    result = _gptlib(*argv, tmp_path=tmp_path, timeout=60)  # before the fix: blocked until the timeout
    assert result.returncode == 2, result.stderr
    message = _one_error_line(result.stderr)
    assert str(pipe) in message and "not a regular file" in message
    assert not out.exists() and not (tmp_path / "gptlib-data").exists(), "no work began"


@pytest.fixture
def tokenizer_folder(tmp_path) -> Path:
    folder = tmp_path / "tokenizer"
    Tokenizer.train(["a few words of text, and a few more words. " * 20], vocab_size=270, workers=1).save(
        folder
    )
    return folder


@pytest.mark.parametrize("where", ["--file", "stdin"])
def test_encode_of_a_stream_without_end_is_refused_in_one_line(tokenizer_folder, tmp_path, where):
    """`/dev/zero` never ends: it is read up to the command's limit and refused, not read until memory runs
    out (before the fix: a `MemoryError` traceback, here under the child's 4 GB limit)."""
    argv = ["tokenizer", "encode", "--tokenizer", tokenizer_folder]
    if where == "--file":
        result = _gptlib(*argv, "--file", "/dev/zero", tmp_path=tmp_path)
    else:
        with open("/dev/zero", "rb") as zero:
            result = _gptlib(*argv, tmp_path=tmp_path, stdin=zero)
    assert result.returncode == 2, result.stderr
    message = _one_error_line(result.stderr)
    assert message.startswith("/dev/zero holds more than" if where == "--file" else "stdin holds more than")


# --- metrics tensorboard ----------------------------------------------------------------------------------

RECORDS = [
    {"kind": "train", "step": 1, "loss": 5.0, "lr": 1e-3},
    {"kind": "val", "step": 1, "val_loss": 4.9, "val_bpb": 2.5},
    {"kind": "train", "step": 2, "loss": 4.0, "lr": 1e-3},
]


@pytest.fixture
def run(tmp_path) -> Path:
    "A run folder (its marker made by gptlib) whose metrics.jsonl holds three records."
    pytest.importorskip("tensorboard")
    folder = tmp_path / "run"
    with RunFolder(folder):
        pass
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return folder


def _event_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("events.out.tfevents.*"))


def test_metrics_tensorboard_replaces_its_event_files_and_keeps_the_users_files(run, capsys):
    assert main(["metrics", "tensorboard", "--run", str(run)]) == 0
    first = _event_files(run / "tensorboard")
    (run / "tensorboard" / "notes.md").write_text("my notes on this run")
    (run / "tensorboard" / "plots").mkdir()
    (run / "tensorboard" / "plots" / "loss.png").write_bytes(b"mine")
    assert main(["metrics", "tensorboard", "--run", str(run)]) == 0
    assert (run / "tensorboard" / "notes.md").read_text() == "my notes on this run"
    assert (run / "tensorboard" / "plots" / "loss.png").read_bytes() == b"mine"
    again = _event_files(run / "tensorboard")
    assert len(first) == len(again) == 1 and first != again, "the old event file replaced by the new one"
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == [".lock"], "no temporary left"


def test_metrics_tensorboard_refuses_a_link_and_leaves_it_and_its_target_as_they_were(run, tmp_path, capsys):
    """The folder a `tensorboard` link points to may hold another run's events: nothing is replaced there,
    the link is not swapped for a folder, and nothing is left beside it."""
    elsewhere = tmp_path / "shared-logdir"
    elsewhere.mkdir()
    (elsewhere / "events.out.tfevents.1700000000.host.1.0").write_bytes(b"another run's events")
    (run / "tensorboard").symlink_to(elsewhere, target_is_directory=True)
    message = _fails(capsys, ["metrics", "tensorboard", "--run", run])
    assert message.startswith(f"{run / 'tensorboard'} is a link")
    assert (run / "tensorboard").is_symlink() and os.readlink(run / "tensorboard") == str(elsewhere)
    assert [p.name for p in elsewhere.iterdir()] == ["events.out.tfevents.1700000000.host.1.0"]
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == [".lock"], "no temporary left"


def test_metrics_tensorboard_into_a_read_only_folder_is_one_error_line_naming_it(run, capsys, monkeypatch):
    """Simulated (the tests run as root, and root ignores permission bits): nothing can be created in
    `tensorboard/`. TensorBoard's writer opens its file in a thread of its own; its traceback must not show,
    nor the path as bytes."""
    events = run / "tensorboard"
    events.mkdir()
    (events / "notes.md").write_text("mine")

    def refused(path) -> bool:
        return isinstance(path, (str, bytes, os.PathLike)) and Path(os.fsdecode(path)).parent == events

    def deny(path):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    real_open, real_os_open = builtins.open, os.open

    def guarded_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wxa+") and refused(file):
            deny(file)
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and refused(path):
            deny(path)
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(io, "open", guarded_open)  # what TensorBoard's file system layer calls
    monkeypatch.setattr(os, "open", guarded_os_open)
    message = _fails(capsys, ["metrics", "tensorboard", "--run", run])
    assert message == f"Permission denied: {events}"
    assert [p.name for p in events.iterdir()] == ["notes.md"]


def test_metrics_tensorboard_leaves_out_a_record_without_a_step(run, capsys):
    """A line edited by hand out of shape (a train record that lost its step, TensorBoard's x axis) is a
    damaged line, left out as every reader of the log leaves it out: no `KeyError` traceback."""
    before = sum(r["kind"] == "train" for r in read_metrics(run))
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines.insert(2, json.dumps({"kind": "train", "loss": 4.5}))  # edited by hand: line 3 lost its step
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["metrics", "tensorboard", "--run", str(run)]) == 0
    assert f"{before} train and" in capsys.readouterr().out


# --- data import of .bin files ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory, nine_documents) -> Path:
    """Nine documents, a 300-id tokenizer, their shards (`shards/`) and those exported as nanoGPT files
    (`bins/`, with gptlib-export.json)."""
    root = nine_documents(tmp_path_factory.mktemp("round4-bins"))
    prepare = ["data", "prepare", "--corpus", root / "corpus", "--tokenizer", root / "tokenizer"]
    prepare += ["--out", root / "shards", "--val-fraction", "0.25", "--no-progress"]
    assert main([str(a) for a in prepare]) == 0
    export = ["data", "export", "--shards", root / "shards", "--format", "nanogpt", "--out", root / "bins"]
    assert main([str(a) for a in export]) == 0
    return root


def _import_argv(exported: Path, bins: Path, out: Path) -> list:
    return [
        "data",
        "import",
        "--format",
        "nanogpt",
        "--train",
        bins / "train.bin",
        "--val",
        bins / "val.bin",
    ] + [
        "--tokenizer",
        exported / "tokenizer",
        "--out",
        out,
    ]


def test_a_bin_cut_short_of_the_size_its_export_record_says_is_refused_naming_both(
    exported, tmp_path, capsys
):
    bins = tmp_path / "bins"
    bins.mkdir()
    for name in ("train.bin", "val.bin", "gptlib-export.json"):
        (bins / name).write_bytes((exported / "bins" / name).read_bytes())
    full = (bins / "train.bin").stat().st_size
    half = full // 4 * 2  # a copy that stopped half way, at a whole token
    with open(bins / "train.bin", "r+b") as f:
        f.truncate(half)
    message = _fails(capsys, _import_argv(exported, bins, tmp_path / "back"))
    assert message.startswith(f"{bins / 'train.bin'} holds {half:,d} bytes")
    assert f"{full:,d}" in message and "cut short" in message
    assert not (tmp_path / "back").exists()


@pytest.mark.parametrize("dtype, bits", [(np.int64, 64), (np.uint32, 32)])
def test_bins_of_wider_integers_are_refused_for_their_type_not_blamed_on_the_tokenizer(
    exported, tmp_path, capsys, dtype, bits
):
    bins = tmp_path / "bins"
    bins.mkdir()
    for split in ("train", "val"):  # the right ids, written with numpy's default integer type
        np.asarray(open_split(exported / "shards", split)).astype(dtype).tofile(bins / f"{split}.bin")
    message = _fails(capsys, _import_argv(exported, bins, tmp_path / "back"))
    assert message.startswith(f"{bins / 'train.bin'} holds {bits}-bit integers")
    assert "uint16" in message and "tokenizer" not in message
    assert not (tmp_path / "back").exists()
