"""The data commands under faults, from the command line: the user's files in the way, an output that is a
file, a read-only folder, a full disk, a second writer, a kill while publishing, a corpus that is not UTF-8.
Each ends in one `error: ...` line and exit status 2 (no traceback), deletes nothing gptlib did not write, and
leaves nothing that reads as a valid dataset; gptlib's own leftovers are cleaned by the next success."""

from __future__ import annotations

import builtins
import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import gptlib.files
from gptlib.cli import main
from gptlib.data import open_split
from gptlib.shards import MANIFEST_NAME, ShardError, read_manifest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sources(tmp_path_factory, nine_documents):
    """Nine documents (slices of three plays) and a 300-id tokenizer trained on them."""
    root = nine_documents(tmp_path_factory.mktemp("faults"))
    return root


def prepare_argv(sources: Path, out: Path, *extra: str) -> list[str]:
    return [
        "data",
        "prepare",
        "--corpus",
        str(sources / "corpus"),
        "--tokenizer",
        str(sources / "tokenizer"),
        "--out",
        str(out),
        "--val-fraction",
        "0.25",
        "--shard-tokens",
        "1500",
        "--no-progress",
        *extra,
    ]


def run_cli(capsys, argv: list[str]) -> tuple[int, str]:
    """Exit status and stderr of `python -m gptlib ARGV`, run in this process."""
    status = main([str(a) for a in argv])
    return status, capsys.readouterr().err


def assert_one_error_line(status: int, err: str, *needles: str) -> None:
    assert status == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def assert_not_a_dataset(out: Path) -> None:
    assert not (out / MANIFEST_NAME).exists()
    with pytest.raises(ShardError, match="no manifest.json"):
        open_split(out, "train")
    assert not list(out.rglob("*.tmp-*")), "no half-written file is left under a temporary name"


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")
    }


# --- the user's files ------------------------------------------------------------------------------------


def test_prepare_keeps_user_files_named_like_shards_and_says_which(sources, tmp_path, capsys):
    out = tmp_path / "dataset"
    (out / "train" / "train_images").mkdir(parents=True)
    (out / "train" / "train_labels.csv").write_text("id,label\n1,cat\n")
    (out / "train" / "train_images" / "0001.png").write_bytes(b"\x89PNG")
    before = snapshot(out)
    status, err = run_cli(capsys, prepare_argv(sources, out))
    assert_one_error_line(status, err, "train/train_images", "train/train_labels.csv", "did not write")
    assert snapshot(out) == before, "nothing of the user's is deleted, and nothing is added"


def test_prepare_refuses_to_replace_a_split_folder_holding_files_the_manifest_does_not_record(
    sources, tmp_path, capsys
):
    out = tmp_path / "shards"
    assert run_cli(capsys, prepare_argv(sources, out))[0] == 0
    (out / "val" / "val_notes.txt").write_text("mine")
    status, err = run_cli(capsys, prepare_argv(sources, out, "--seed", "8"))
    assert_one_error_line(status, err, "val/val_notes.txt")
    assert (out / "val" / "val_notes.txt").read_text() == "mine"
    assert read_manifest(out)["shuffle"]["seed"] == 1337 and len(open_split(out, "train")) > 0, (
        "the old dataset stands"
    )
    (out / "val" / "val_notes.txt").unlink()
    assert run_cli(capsys, prepare_argv(sources, out, "--seed", "8"))[0] == 0, (
        "gptlib's own files are replaced"
    )
    assert read_manifest(out)["shuffle"]["seed"] == 8


def test_prepare_refuses_a_folder_without_a_manifest_that_holds_anything_but_gptlibs_names(
    sources, tmp_path, capsys
):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    status, err = run_cli(capsys, prepare_argv(sources, out))
    assert_one_error_line(status, err, "notes.txt")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    mine = tmp_path / "unreadable-manifest"
    mine.mkdir()
    (mine / MANIFEST_NAME).write_text('{"format": "someone-elses"}')
    status, err = run_cli(capsys, prepare_argv(sources, mine))
    assert_one_error_line(status, err, MANIFEST_NAME)
    assert (mine / MANIFEST_NAME).read_text() == '{"format": "someone-elses"}'


# --- an output that cannot be written ------------------------------------------------------------------


def test_an_out_that_is_a_file_ends_in_one_error_line(sources, tmp_path, capsys):
    assert run_cli(capsys, prepare_argv(sources, tmp_path / "shards"))[0] == 0
    target = tmp_path / "a-file"
    target.write_text("mine")
    commands = {
        "prepare": prepare_argv(sources, target),
        "export": ["data", "export", "--shards", tmp_path / "shards", "--format", "nanogpt", "--out", target],
        "import": [
            "data",
            "import",
            "--format",
            "nanogpt",
            "--train",
            target,
            "--val",
            target,
            "--tokenizer",
            sources / "tokenizer",
            "--out",
            target,
        ],
    }
    for command, argv in commands.items():
        status, err = run_cli(capsys, argv)
        assert_one_error_line(status, err, str(target))
        assert target.read_text() == "mine", command
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "shards"], "nothing written beside it"


@pytest.fixture
def read_only(monkeypatch):
    """`read_only(folder)`: from now on, creating anything inside `folder` fails as in a folder without write
    permission. (Simulated: the tests run as root here, and root ignores permission bits.)"""
    folders = []

    def refused(path) -> bool:
        return any(Path(os.path.abspath(path)).is_relative_to(f) for f in folders)

    real_open, real_os_open, real_mkdir = builtins.open, os.open, os.mkdir

    def guarded_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wxa+") and refused(file):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and refused(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_os_open(path, flags, *args, **kwargs)

    def guarded_mkdir(path, *args, **kwargs):
        if refused(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(os, "open", guarded_os_open)
    monkeypatch.setattr(os, "mkdir", guarded_mkdir)
    return lambda folder: folders.append(Path(folder).resolve())


def test_a_read_only_out_folder_ends_in_one_error_line_and_stays_empty(sources, tmp_path, capsys, read_only):
    assert run_cli(capsys, prepare_argv(sources, tmp_path / "shards"))[0] == 0
    locked = tmp_path / "read-only"
    locked.mkdir()
    read_only(locked)
    bins = tmp_path / "bins"
    assert (
        run_cli(
            capsys, ["data", "export", "--shards", tmp_path / "shards", "--format", "llmc", "--out", bins]
        )[0]
        == 0
    )
    commands = [
        prepare_argv(sources, locked),
        ["data", "export", "--shards", tmp_path / "shards", "--format", "nanogpt", "--out", locked],
        [
            "data",
            "import",
            "--format",
            "llmc",
            "--train",
            bins / "gptlib_train.bin",
            "--val",
            bins / "gptlib_val.bin",
            "--tokenizer",
            sources / "tokenizer",
            "--out",
            locked,
        ],
    ]
    for argv in commands:
        status, err = run_cli(capsys, argv)
        assert_one_error_line(status, err, "Permission denied", str(locked))
        assert not any(locked.iterdir()), argv[1]


@pytest.fixture
def disk_full_after(monkeypatch):
    """`disk_full_after(n)`: the files gptlib writes take `n` more bytes, then every write fails (ENOSPC)."""
    budget = [10**12]  # until the test sets it

    class FullDisk:
        def __init__(self, f):
            self._f = f

        def write(self, data) -> int:
            size = memoryview(data).nbytes
            if size > budget[0]:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            budget[0] -= size
            return self._f.write(data)

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._f.__exit__(*exc)

    monkeypatch.setattr(gptlib.files, "open", lambda *a, **k: FullDisk(builtins.open(*a, **k)), raising=False)

    def fill(n: int) -> None:
        budget[0] = n

    return fill


@pytest.mark.parametrize("phase", ["pass 1", "pass 2"])
def test_a_full_disk_ends_in_one_error_line_and_leaves_no_dataset(
    sources, tmp_path, capsys, disk_full_after, phase
):
    assert run_cli(capsys, prepare_argv(sources, tmp_path / "reference"))[0] == 0
    stream_bytes = 2 * sum(s["n_tokens"] for s in read_manifest(tmp_path / "reference")["splits"].values())
    out = tmp_path / "shards"
    disk_full_after(
        1_000 if phase == "pass 1" else stream_bytes + 1_000
    )  # pass 2: the stream fits, the shards do not
    status, err = run_cli(capsys, prepare_argv(sources, out))
    assert_one_error_line(status, err, "No space left on device")
    assert_not_a_dataset(out)
    assert bool(list(out.glob(".work-*/stream.tok"))) == (phase == "pass 2")
    disk_full_after(10**9)  # space freed: the same command completes, and cleans up after the failed run
    assert run_cli(capsys, prepare_argv(sources, out))[0] == 0
    assert len(open_split(out, "val")) > 0 and not list(out.glob(".work-*"))


def test_a_full_disk_during_export_leaves_neither_file(sources, tmp_path, capsys, disk_full_after):
    assert run_cli(capsys, prepare_argv(sources, tmp_path / "shards"))[0] == 0
    train_bytes = sum(
        f["bytes"]
        for s in read_manifest(tmp_path / "shards")["splits"]["train"]["shards"]
        for f in s["files"][:1]
    )
    disk_full_after(train_bytes + 100)  # train.bin fits, val.bin does not
    status, err = run_cli(
        capsys,
        [
            "data",
            "export",
            "--shards",
            tmp_path / "shards",
            "--format",
            "nanogpt",
            "--out",
            tmp_path / "bins",
        ],
    )
    assert_one_error_line(status, err, "No space left on device")
    assert not list((tmp_path / "bins").iterdir()), (
        "a nanoGPT folder with train.bin and no val.bin is not left"
    )


# --- gptlib's own leftovers, and one writer at a time ----------------------------------------------------


def test_work_folders_of_earlier_runs_and_imports_are_removed_by_the_next_success(
    sources, tmp_path, capsys, disk_full_after
):
    out, bins = tmp_path / "shards", tmp_path / "bins"
    assert run_cli(capsys, prepare_argv(sources, out))[0] == 0
    assert run_cli(capsys, ["data", "export", "--shards", out, "--format", "nanogpt", "--out", bins])[0] == 0
    disk_full_after(1_000)
    assert run_cli(capsys, prepare_argv(sources, out, "--seed", "8"))[0] == 2  # fails, leaves .work-<key>
    disk_full_after(1_000)
    assert (
        run_cli(
            capsys,
            [
                "data",
                "import",
                "--format",
                "nanogpt",
                "--train",
                bins / "train.bin",
                "--val",
                bins / "val.bin",
                "--tokenizer",
                sources / "tokenizer",
                "--out",
                out,
            ],
        )[0]
        == 2
    )
    left = sorted(p.name for p in out.glob(".work-*"))
    assert ".work-import" in left and len(left) == 2, left
    (out / ".work-of-mine").mkdir()  # not a name gptlib gives its work folders
    disk_full_after(10**9)
    assert run_cli(capsys, prepare_argv(sources, out, "--seed", "9"))[0] == 0
    assert [p.name for p in out.glob(".work-*")] == [".work-of-mine"], (
        "gptlib's work folders go, the user's stays"
    )


DIE_WHILE_EXPORTING = """
import os, signal, sys
import gptlib.interop as interop
real_sha256 = interop.new_sha256
class DieAtTheSecondBlock:  # the first block of train.bin is written when the process is killed
    def __init__(self):
        self.digest, self.blocks = real_sha256(), 0
    def update(self, block):
        self.blocks += 1
        if self.blocks == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        self.digest.update(block)
interop.new_sha256 = DieAtTheSecondBlock
from gptlib.cli import main
main(sys.argv[1:])
"""


def test_an_export_killed_mid_write_leaves_a_temporary_that_the_next_export_removes(
    sources, tmp_path, capsys
):
    shards, bins = tmp_path / "shards", tmp_path / "bins"
    assert run_cli(capsys, prepare_argv(sources, shards))[0] == 0
    argv = ["data", "export", "--shards", str(shards), "--format", "nanogpt", "--out", str(bins)]
    killed = subprocess.run([sys.executable, "-c", DIE_WHILE_EXPORTING, *argv], cwd=REPO, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert [p.name.split(".tmp-")[0] for p in bins.iterdir()] == [".train.bin"], "killed while writing it"
    assert run_cli(capsys, argv)[0] == 0
    assert sorted(p.name for p in bins.iterdir()) == ["gptlib-export.json", "train.bin", "val.bin"]


HOLD_LOCK = """
import sys, time
from gptlib.files import FolderLock
with FolderLock(sys.argv[1], "shard folder"):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_a_second_writer_is_refused_while_the_first_runs_and_a_killed_one_frees_the_folder(
    sources, tmp_path, capsys
):
    out = tmp_path / "shards"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        status, err = run_cli(capsys, prepare_argv(sources, out))
        assert_one_error_line(
            status, err, f"another process (pid {holder.pid}) is writing to the shard folder"
        )
        bins = tmp_path / "bins"
        assert run_cli(capsys, prepare_argv(sources, tmp_path / "other"))[0] == 0
        assert (
            run_cli(
                capsys,
                ["data", "export", "--shards", tmp_path / "other", "--format", "nanogpt", "--out", bins],
            )[0]
            == 0
        )
        status, err = run_cli(
            capsys,
            [
                "data",
                "import",
                "--format",
                "nanogpt",
                "--train",
                bins / "train.bin",
                "--val",
                bins / "val.bin",
                "--tokenizer",
                sources / "tokenizer",
                "--out",
                out,
            ],
        )
        assert_one_error_line(
            status, err, f"another process (pid {holder.pid}) is writing to the shard folder"
        )
    finally:
        holder.kill()  # SIGKILL: the lock must be released by the operating system, not by the holder
        holder.wait(timeout=30)
    assert run_cli(capsys, prepare_argv(sources, out))[0] == 0


def test_a_kill_while_publishing_leaves_no_dataset_and_the_rerun_completes(sources, tmp_path, capsys):
    out = tmp_path / "shards"
    assert run_cli(capsys, prepare_argv(sources, out))[0] == 0
    child = textwrap.dedent(f"""
        import os, signal
        import gptlib.shards as shards
        def die(*args, **kwargs):  # the new splits are in place, the new manifest not yet written
            os.kill(os.getpid(), signal.SIGKILL)
        shards.write_json = die
        from gptlib.cli import main
        main({[str(a) for a in prepare_argv(sources, out, "--seed", "8")]!r})
    """)
    result = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert (out / "train").is_dir() and list(out.glob(".work-*")), "killed between the swap and the manifest"
    assert_not_a_dataset(out)
    started = time.perf_counter()
    assert run_cli(capsys, prepare_argv(sources, out, "--seed", "8"))[0] == 0
    assert (
        read_manifest(out)["shuffle"]["seed"] == 8
        and not list(out.glob(".work-*"))
        and not list(out.glob(".*.tmp-*"))
    )
    assert time.perf_counter() - started < 60


# --- the corpus -----------------------------------------------------------------------------------------


def test_a_jsonl_corpus_that_is_not_utf8_is_named_with_its_line(sources, tmp_path, capsys):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_bytes(b'{"text": "first"}\n{"text": "second"}\n{"text": "caf\xe9"}\n')
    argv = prepare_argv(sources, tmp_path / "shards")
    argv[argv.index("--corpus") + 1] = str(corpus)
    status, err = run_cli(capsys, argv)
    assert_one_error_line(status, err, f"{corpus}:3 is not valid UTF-8")
    assert_not_a_dataset(tmp_path / "shards")


def test_bins_handed_on_without_their_record_import_with_their_own_tokenizer(sources, tmp_path, capsys):
    """The import's fixed-point check accepts the tokenizer's own ids from the command line, too."""
    out, bins = tmp_path / "shards", tmp_path / "bins"
    assert run_cli(capsys, prepare_argv(sources, out))[0] == 0
    assert run_cli(capsys, ["data", "export", "--shards", out, "--format", "nanogpt", "--out", bins])[0] == 0
    (bins / "gptlib-export.json").unlink()
    argv = [
        "data",
        "import",
        "--format",
        "nanogpt",
        "--train",
        bins / "train.bin",
        "--val",
        bins / "val.bin",
        "--tokenizer",
        sources / "tokenizer",
        "--out",
        tmp_path / "back",
    ]
    assert run_cli(capsys, argv)[0] == 0
    assert np.array_equal(
        np.asarray(open_split(tmp_path / "back", "train")), np.asarray(open_split(out, "train"))
    )
