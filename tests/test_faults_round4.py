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
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gptlib.cli import main
from gptlib.corpus import CorpusError, open_corpus
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


# --- the corpus: what is read, and when it is refused -------------------------------------------------------


def _documents(folder: Path, count: int) -> Path:
    "`count` short documents in `folder`, made for the test."
    folder.mkdir(parents=True)
    for i in range(count):
        (folder / f"doc{i}.txt").write_text(f"the text of document {i}, " * 50, encoding="utf-8")
    return folder


@pytest.fixture
def data_folder(tmp_path, monkeypatch) -> Path:
    "Where `run` writes in this test (`GPTLIB_DATA`), not made yet."
    folder = tmp_path / "gptlib-data"
    monkeypatch.setenv("GPTLIB_DATA", str(folder))
    return folder


def test_a_jsonl_corpus_of_one_record_is_refused_before_any_work(tmp_path, data_folder, capsys):
    corpus = tmp_path / "book.jsonl"
    corpus.write_text(json.dumps({"text": "Call me Ishmael. " * 1000}) + "\n\n")  # a blank line is no record
    message = _fails(capsys, ["run", "--corpus", corpus, "--preset", "tiny"])
    assert message.startswith(f"the corpus {corpus} is one document (book.jsonl:1)")
    assert "a .jsonl file of several records" in message
    assert not data_folder.exists(), "no tokenizer or shards were made"


@pytest.mark.parametrize("command", ["run", "tokenizer train"])
def test_a_folder_of_jsonl_files_is_refused_saying_what_a_folder_is_read_as(
    tmp_path, data_folder, capsys, command
):
    corpus = tmp_path / "records"
    corpus.mkdir()
    for name in ("a", "b"):
        (corpus / f"{name}.jsonl").write_text(json.dumps({"text": f"record {name}"}) + "\n")
    argv = {
        "run": ["run", "--corpus", corpus, "--preset", "tiny"],
        "tokenizer train": ["tokenizer", "train", "--corpus", corpus, "--out", tmp_path / "tok", "-q"],
    }[command]
    message = _fails(capsys, argv)
    assert message.startswith(f"the corpus {corpus} is empty: a corpus folder is read as the .txt files")
    assert (
        f"it holds 2 .jsonl files, each read as a corpus of its own: --corpus {corpus / 'a.jsonl'}" in message
    )
    assert not data_folder.exists() and not (tmp_path / "tok").exists()


def test_a_linked_folder_in_a_corpus_folder_is_read_and_a_folder_reached_twice_once(tmp_path, capsys):
    corpus = _documents(tmp_path / "corpus" / "own", 1).parent
    _documents(tmp_path / "elsewhere", 2)
    (corpus / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (corpus / "again").symlink_to("own", target_is_directory=True)  # its documents are read as own/...
    (corpus / "own" / "up").symlink_to("..", target_is_directory=True)  # a loop: nothing more to read
    (corpus / "gone").symlink_to(tmp_path / "no-such-folder", target_is_directory=True)
    assert main(["corpus", "show", "--corpus", str(corpus), "-v"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()[:-1]] == ["linked/doc0", "linked/doc1", "own/doc0"]
    assert out.splitlines()[-1].startswith(f"{corpus}: 3 documents")


def test_an_edit_in_place_that_keeps_size_and_mtime_makes_the_shards_again(nine_documents, tmp_path, capsys):
    """An editor that writes in place, or a copy with `touch -d`, can leave a file its size and modification
    time: the change time, which no call sets back, still tells the corpus changed."""
    root = nine_documents(tmp_path)
    prepare = ["data", "prepare", "--corpus", root / "corpus", "--tokenizer", root / "tokenizer"]
    prepare += ["--out", root / "shards", "--val-fraction", "0.25", "--no-progress"]
    assert main([str(a) for a in prepare]) == 0
    document = root / "corpus" / "doc00.txt"
    before, data = document.stat(), document.read_bytes()
    assert data[:4].isascii() and b"ZQXJ" not in data
    with open(document, "r+b") as f:  # the same number of bytes, written over the first ones
        f.write(b"ZQXJ")
    os.utime(document, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = document.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert main([str(a) for a in prepare]) == 0
    tokenizer = Tokenizer.load(root / "tokenizer")
    texts = [tokenizer.decode(np.asarray(open_split(root / "shards", s)).tolist()) for s in ("train", "val")]
    assert any("ZQXJ" in text for text in texts), "the shards were reused: they hold the text before the edit"


@pytest.mark.parametrize("where", ["a folder inside it", "the folder itself"])
def test_run_refuses_a_corpus_folder_holding_its_own_data_folder(tmp_path, monkeypatch, capsys, where):
    """The data folder holds the run's `sample.txt` and other texts: read back as documents, they would
    change the corpus at every run (and train the model on its own samples)."""
    corpus = _documents(tmp_path / "corpus", 3)
    data = corpus / "gptlib-data" if where == "a folder inside it" else corpus
    monkeypatch.setenv("GPTLIB_DATA", str(data))
    message = _fails(capsys, ["run", "--corpus", corpus, "--preset", "tiny"])
    assert message.startswith(f"the corpus folder {corpus} holds {data}, the data folder where `run` writes")
    assert sorted(p.name for p in corpus.iterdir()) == ["doc0.txt", "doc1.txt", "doc2.txt"], "nothing made"


def test_run_tensorboard_without_tensorboard_is_refused_before_any_stage(
    nine_documents, tmp_path, data_folder, monkeypatch, capsys
):
    corpus = nine_documents(tmp_path)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # an import of it fails, as uninstalled
    message = _fails(capsys, ["run", "--corpus", corpus / "corpus", "--preset", "tiny", "--tensorboard"])
    assert message.startswith("TensorBoard logging needs the tensorboard package")
    assert not data_folder.exists(), "no stage ran"


# --- training: the expected bands, and a run refused before it began ----------------------------------------


def _train_argv(small_data: Path, out: Path, *more) -> list[str]:
    "`train start` of a 4-step tiny run on `small_data`."
    argv = ["train", "start", "--preset", "tiny", "--shards", small_data / "shards"]
    argv += ["--tokenizer", small_data / "tokenizer", "--vocab-size", 300, "--out", out, "--max-steps", 4]
    argv += ["--eval-every", 4, "--eval-batches", 2, "--checkpoint-every", 4, "--micro-batch", 4]
    argv += ["--context", 32, "--precision", "fp32", *more]
    return [str(a) for a in argv]


def test_a_truncated_bands_file_is_named_before_training_and_the_plot_is_still_made(
    small_data, tmp_path, monkeypatch, capsys
):
    import gptlib.expected

    bands = tmp_path / "bands"
    bands.mkdir()
    committed = (gptlib.expected.BANDS / "cpu.json").read_text()
    (bands / "cpu.json").write_text(committed[: len(committed) // 2])  # a copy cut short
    monkeypatch.setattr(gptlib.expected, "BANDS", bands)
    run = tmp_path / "run"
    assert main(_train_argv(small_data, run)) == 0
    lines = capsys.readouterr().out.splitlines()
    damaged = f"{bands / 'cpu.json'} is not valid JSON (truncated or corrupted?)"
    assert lines[0].startswith(f"note: {damaged}") and "will not be placed" in lines[0], (
        "said before training"
    )
    assert lines[-1].startswith(f"no expected band: {damaged}")
    assert (run / "training.png").is_file()


@pytest.mark.parametrize("refusal", ["a context its validation text cannot hold", "another tokenizer"])
@pytest.mark.parametrize("out", ["new", "empty"])
def test_train_start_refused_before_it_began_leaves_no_run_folder(
    small_data, tokenizer_folder, tmp_path, capsys, refusal, out
):
    run = tmp_path / "run" / "deeper"  # two folders that do not exist yet
    if out == "empty":
        run.mkdir(parents=True)
    more = {
        "a context its validation text cannot hold": ["--context", "1000000"],
        "another tokenizer": ["--tokenizer", tokenizer_folder, "--vocab-size", 270],
    }[refusal]
    message = _fails(capsys, _train_argv(small_data, run, *more))
    if "context" in refusal:
        assert "windows of 1000001 tokens" in message
    else:
        assert message.startswith("tokenizer mismatch")
    if out == "new":
        assert not (tmp_path / "run").exists(), "the folders it would have made"
    else:
        assert run.is_dir() and not any(run.iterdir()), "the user's folder as it was: empty"


def test_a_checkpoint_renamed_and_its_step_edited_to_match_is_refused(small_data, tmp_path, capsys):
    """The name and the metadata agree, but the state inside is step 4's: resuming from it would train step 9
    from step 4's weights and batches. Refused in one line, and nothing is deleted."""
    run = tmp_path / "run"
    assert main(_train_argv(small_data, run)) == 0
    saved = run / "checkpoints" / "step-0000004"
    edited = saved.rename(run / "checkpoints" / "step-0000008")
    meta = json.loads((edited / "checkpoint.json").read_text())
    (edited / "checkpoint.json").write_text(json.dumps({**meta, "step": 8}))
    capsys.readouterr()
    message = _fails(capsys, _train_argv(small_data, run, "--max-steps", 12, "--decay-steps", 4))
    assert message == f"{edited / 'state.pt'} is of step 4, not 8"
    assert sorted(p.name for p in edited.iterdir()) == ["checkpoint.json", "model.safetensors", "state.pt"]


# --- the tokenizer folder of a `tokenizer train` that did not finish ----------------------------------------


def _dead_pid() -> int:
    "The pid of a process that has ended (a child that printed it and exited)."
    return int(
        subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout
    )


@pytest.mark.parametrize("stop", ["ctrl-c", "a failing corpus"])
def test_tokenizer_train_stopped_before_it_saved_leaves_no_folder_it_made(
    nine_documents, tmp_path, monkeypatch, capsys, stop
):
    corpus = nine_documents(tmp_path) / "corpus"
    out = tmp_path / "new" / "tok"

    def stopped(*args, **kwargs):
        if stop == "ctrl-c":
            raise KeyboardInterrupt
        raise CorpusError(f"{corpus / 'doc22.txt'} is not valid UTF-8 (byte 7: invalid start byte)")

    monkeypatch.setattr(Tokenizer, "train", stopped)
    argv = ["tokenizer", "train", "--corpus", str(corpus), "--out", str(out), "-q"]
    assert main(argv) == (130 if stop == "ctrl-c" else 2)
    assert not (tmp_path / "new").exists(), "not even the lock"


def test_the_next_save_removes_a_dead_saves_copy_beside_the_tokenizer_and_nothing_else(
    nine_documents, tmp_path, capsys
):
    root = nine_documents(tmp_path)
    dead, mine = _dead_pid(), os.getpid()
    leftovers = {
        f".tokenizer.tmp-{dead}-0123abcd": "a dead save's copy",
        f".tokenizer.tmp-{mine}-4567cdef": "a live process's: it may be writing",
        f".tokenizers.tmp-{dead}-89abcdef": "another folder's",
        ".tokenizer.notes": "the user's",
    }
    for name in leftovers:
        (root / name).mkdir()
        (root / name / "tokenizer.json").write_text("{}")
    argv = [
        "tokenizer",
        "train",
        "--corpus",
        root / "corpus",
        "--vocab-size",
        280,
        "--out",
        root / "tokenizer",
    ]
    assert main([str(a) for a in [*argv, "--overwrite", "-q"]]) == 0
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".")) == sorted(list(leftovers)[1:])


def test_a_tokenizer_folder_a_killed_train_left_reads_as_unfinished(tmp_path, capsys):
    out = tmp_path / "tok"  # what SIGKILL (or SIGTERM) to a `tokenizer train` leaves: only the lock
    out.mkdir()
    (out / ".lock").write_text(f"{_dead_pid()}\n")
    message = _fails(capsys, ["tokenizer", "encode", "--tokenizer", out, "--text", "hi"])
    assert message.startswith(
        f"{out} holds no tokenizer, only the lock of a `tokenizer train` that did not finish"
    )


# --- Ctrl-C outside the command -----------------------------------------------------------------------------

# `python -m gptlib model show`, run as `-m` runs it, with SIGINT sent at a chosen moment: while torch is
# imported (the command line's first seconds), or as the process shuts down after the command ended.
_SIGINT_AT = """
import atexit, importlib.abc, os, runpy, signal, sys
# Ctrl-C raises KeyboardInterrupt as in a terminal: a shell that started pytest in the background leaves
# SIGINT ignored in every child (as test_faults_tokenizer's _ctrl_c says)
signal.signal(signal.SIGINT, signal.default_int_handler)
if {when!r} == "import":
    class Interrupt(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch":
                os.kill(os.getpid(), signal.SIGINT)
    sys.meta_path.insert(0, Interrupt())
else:
    atexit.register(os.kill, os.getpid(), signal.SIGINT)
sys.argv = ["gptlib", "model", "show", "--preset", "tiny"]
runpy.run_module("gptlib", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_while_the_command_line_starts_is_one_line_and_exit_130(tmp_path):
    code = _SIGINT_AT.format(when="import")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert (result.returncode, result.stderr, result.stdout) == (130, "interrupted\n", "")


def test_ctrl_c_after_the_command_ended_leaves_its_status_and_prints_nothing(tmp_path):
    code = _SIGINT_AT.format(when="exit")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert "parameters" in result.stdout


# --- a full disk --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("full_at", ["train/train_00000.ds", "train/train_00000.ds.index", "manifest.json"])
def test_a_full_disk_during_data_import_names_the_file(exported, tmp_path, monkeypatch, capsys, full_at):
    """The disk fills up as the file `full_at` is written. A small file waits in the write buffer: the flush
    fails, and closing the file tries (and fails) once more, which must name the file too."""
    import gptlib.files

    out = tmp_path / "back"
    final = (out / ".work-import" / full_at) if full_at != "manifest.json" else out / full_at

    class FullDisk(io.FileIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def opened(path, mode="r", *args, **kwargs):
        if gptlib.files.temporary_of(Path(path).name) == final.name and Path(path).parent == final.parent:
            return io.BufferedWriter(FullDisk(path, mode.replace("b", "")))
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(gptlib.files, "open", opened, raising=False)
    message = _fails(capsys, _import_argv(exported, exported / "bins", out))
    assert message == f"No space left on device: {final}"


def test_a_corpus_stamp_follows_the_bytes_not_the_metadata(tmp_path):
    """Work made from a local corpus is keyed by its bytes: an edit in place that keeps the size and sets the
    modification time back changes the stamp; a chmod, or an identical copy renamed over the file (another
    inode, another change time), does not, so a run made from the corpus still resumes."""
    folder = tmp_path / "texts"
    folder.mkdir()
    doc = folder / "a.txt"
    doc.write_text("To be, or not to be.\n")
    (folder / "b.txt").write_text("That is the question.\n")
    first = open_corpus(str(folder)).stamp()
    os.chmod(doc, 0o600)
    copy = tmp_path / "copy.txt"
    shutil.copy2(doc, copy)
    os.replace(copy, doc)
    assert open_corpus(str(folder)).stamp() == first
    times = doc.stat()
    doc.write_text("To be, or not to bX.\n")  # the same size
    os.utime(doc, ns=(times.st_atime_ns, times.st_mtime_ns))  # the modification time set back
    assert open_corpus(str(folder)).stamp() != first


# --- two leftovers of the round: a lock file removed while it is being taken; a marker that cannot be written


def test_a_lock_file_removed_while_another_process_takes_it_is_taken_again(tmp_path, monkeypatch):
    import fcntl

    from gptlib import files

    real_flock, calls = fcntl.flock, []

    def flock_after_a_take_back(fd, operation):
        if not calls:  # the holder of a fresh folder gave it back between this process's open and its flock
            (tmp_path / "run" / files.LOCK_FILE).unlink()
        calls.append(fd)
        return real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_after_a_take_back)
    lock = files.FolderLock(tmp_path / "run")
    with lock:
        # the lock held is on the file at the path, so a third writer is kept out
        assert os.fstat(lock._fd).st_ino == os.stat(lock.path).st_ino
        monkeypatch.setattr(fcntl, "flock", real_flock)
        with pytest.raises(files.LockedError), files.FolderLock(tmp_path / "run"):
            pass
    assert len(calls) == 2  # the removed file was locked in vain, then the path's new one


def test_a_run_folder_whose_marker_cannot_be_written_gives_its_lock_and_folder_back(tmp_path, monkeypatch):
    from gptlib import run_folder

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_folder, "write_json", disk_full)
    with pytest.raises(OSError, match="No space left"), RunFolder(tmp_path / "run"):
        pass
    assert not (tmp_path / "run").exists()  # the disk as it was found
    monkeypatch.undo()
    with RunFolder(tmp_path / "run") as folder:  # the next writer is not refused by a lock left held
        assert (folder.path / run_folder.RUN_MARKER).is_file()


def test_a_lock_whose_pid_cannot_be_written_is_given_back_with_its_fresh_folder(tmp_path, monkeypatch):
    from gptlib import files

    real_write = os.write

    def disk_full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(OSError, match="No space left"), files.FolderLock(tmp_path / "new" / "run"):
        pass
    monkeypatch.setattr(os, "write", real_write)
    assert not (tmp_path / "new").exists()  # the folders it made, given back
    with files.FolderLock(tmp_path / "new" / "run") as lock:  # and no descriptor left holding the lock
        assert lock.path.is_file()
