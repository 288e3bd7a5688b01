"""The tokenizer's command line under faults: each bad input or failing disk ends in one line `error: ...` on
stderr and exit code 2 (no traceback), leaves what was on disk as it was, and a killed `tokenizer train`
leaves no worker process behind."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import gptlib.tokenizer
from gptlib.cli import main as cli_main
from gptlib.files import FolderLock

ROOT = Path(__file__).resolve().parent.parent


def _gptlib(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    "`python -m gptlib ARGS` in a child process, with this checkout's gptlib first on the path."
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "gptlib", *args], env=env, capture_output=True, timeout=timeout, **kwargs
    )


def _one_error_line(stderr: str) -> str:
    "The message of the single `error: ...` line that `stderr` must be."
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0].removeprefix("error: ")


def _fails(capsys, argv: list[str]) -> str:
    "Run the command line in this process; it must exit with 2 and one error line, which is returned."
    assert cli_main(argv) == 2
    return _one_error_line(capsys.readouterr().err)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _train_argv(corpus: Path, out: Path, vocab_size: int, *more: str) -> list[str]:
    "`tokenizer train` of `corpus` into `out`, quietly, in this process alone (one worker)."
    where = ["--corpus", str(corpus), "--vocab-size", str(vocab_size), "--out", str(out)]
    return ["tokenizer", "train", *where, "-q", "--workers", "1", *more]


@pytest.fixture
def corpus(tmp_path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text(
        "the cat sat on the mat, and the dog sat on the log. " * 40, encoding="utf-8"
    )
    (folder / "b.txt").write_text("a rat ran at the hat; that cat is the fat one! " * 40, encoding="utf-8")
    return folder


@pytest.fixture
def trained(corpus, tmp_path, capsys) -> Path:
    "A tokenizer folder written by `tokenizer train`."
    out = tmp_path / "tok"
    assert cli_main(_train_argv(corpus, out, 280)) == 0
    capsys.readouterr()
    return out


def _no_training(monkeypatch) -> None:
    "Make any attempt to train fail the test: the command line must refuse before it starts."

    def count_chunks(*args, **kwargs):
        raise AssertionError("training started before the output folder was checked")

    monkeypatch.setattr(gptlib.tokenizer, "count_chunks", count_chunks)


# --- tokenizer train: where the tokenizer goes ------------------------------------------------------------


def test_train_refuses_an_existing_tokenizer_before_training(corpus, trained, capsys, monkeypatch):
    before = _snapshot(trained)
    _no_training(monkeypatch)
    argv = ["tokenizer", "train", "--corpus", str(corpus), "--vocab-size", "290", "--out", str(trained), "-q"]
    assert (
        _fails(capsys, argv)
        == f"{trained} already holds a tokenizer: choose another folder or pass --overwrite"
    )
    assert _snapshot(trained) == before


def test_train_with_overwrite_replaces_an_existing_tokenizer(corpus, trained, capsys):
    old = json.loads((trained / "tokenizer.json").read_text())
    argv = _train_argv(corpus, trained, 275, "--overwrite")
    assert cli_main(argv) == 0
    new = json.loads((trained / "tokenizer.json").read_text())
    assert new["fingerprint"] != old["fingerprint"] and new["n_vocab"] < old["n_vocab"]


def test_train_refuses_an_output_that_is_a_file_before_training(corpus, tmp_path, capsys, monkeypatch):
    target = tmp_path / "notes.txt"
    target.write_text("not a folder")
    _no_training(monkeypatch)
    argv = ["tokenizer", "train", "--corpus", str(corpus), "--vocab-size", "280", "--out", str(target), "-q"]
    assert _fails(capsys, argv) == f"{target} exists and is not a folder"
    assert target.read_text() == "not a folder"


def test_train_with_overwrite_keeps_the_users_files_beside_the_tokenizer(corpus, trained, capsys):
    (trained / "NOTES.md").write_text("why this tokenizer: my notes\n")
    (trained / "hf" / "mine.txt").write_text("kept too\n")
    argv = _train_argv(corpus, trained, 275, "--overwrite")
    assert cli_main(argv) == 0
    assert (trained / "NOTES.md").read_text() == "why this tokenizer: my notes\n"
    assert (trained / "hf" / "mine.txt").read_text() == "kept too\n"
    assert gptlib.tokenizer.Tokenizer.load(trained).n_vocab == 275


def test_a_save_that_fails_half_way_leaves_the_old_tokenizer_as_it_was(corpus, trained, capsys, monkeypatch):
    before = _snapshot(trained)
    opened = []
    real_atomic_open = gptlib.tokenizer.atomic_open

    @contextlib.contextmanager
    def full_disk_on_the_third_file(path, durable=True):
        opened.append(path)
        with real_atomic_open(path, durable) as f:
            if len(opened) == 3:  # tokenizer.json and tokenizer.vocab are written, the rest are not
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            yield f

    monkeypatch.setattr(gptlib.tokenizer, "atomic_open", full_disk_on_the_third_file)
    argv = _train_argv(corpus, trained, 275, "--overwrite")
    message = _fails(capsys, argv)
    assert len(opened) == 3 and message == f"No space left on device: {opened[2]}"
    assert _snapshot(trained) == before, "the old tokenizer changed"
    assert sorted(p.name for p in trained.iterdir()) == sorted(
        [".lock", "hf", "tokenizer.json", "tokenizer.tiktoken", "tokenizer.vocab"]
    ), "a temporary file is left"


def _dead_pid() -> int:
    "The pid of a process that has ended (a child that printed it and exited)."
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    return int(child.stdout)


def test_the_next_save_removes_the_temporaries_of_a_process_killed_while_saving(corpus, trained, capsys):
    pid = _dead_pid()
    stale = [
        trained / f".tokenizer.json.tmp-{pid}-0123abcd",
        trained / "hf" / f".tokenizer.json.tmp-{pid}-89abcdef",
    ]
    for path in stale:
        path.write_text("half written")
    live = trained / f".tokenizer.vocab.tmp-{os.getpid()}-4567cdef"  # a live process's: it may be writing
    live.write_text("being written")
    assert cli_main(_train_argv(corpus, trained, 275, "--overwrite")) == 0
    assert not any(path.exists() for path in stale) and live.exists()


@pytest.mark.parametrize("where", ["a read-only folder", "a new folder in a read-only one"])
def test_a_read_only_out_is_refused_before_training(corpus, tmp_path, capsys, monkeypatch, where):
    read_only = tmp_path / "read-only"  # a patch, as root writes through permission bits
    read_only.mkdir()
    out = read_only if where == "a read-only folder" else read_only / "tok"

    def refuse(real):
        def call(path, *args, **kwargs):
            if Path(path).is_relative_to(read_only):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real(path, *args, **kwargs)

        return call

    monkeypatch.setattr(os, "open", refuse(os.open))
    monkeypatch.setattr(os, "mkdir", refuse(os.mkdir))
    _no_training(monkeypatch)
    message = _fails(capsys, _train_argv(corpus, out, 280))
    assert message == f"Read-only file system: {out if out != read_only else out / '.lock'}"


def test_a_second_train_into_the_same_folder_is_refused_before_training(
    corpus, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "tok"
    _no_training(monkeypatch)
    with FolderLock(out, "tokenizer folder"):  # the first `tokenizer train`, still training
        message = _fails(capsys, _train_argv(corpus, out, 280))
    assert message.startswith(f"another process (pid {os.getpid()}) is writing to the tokenizer folder {out}")
    assert [p.name for p in out.iterdir()] == [".lock"]


@pytest.mark.parametrize("out", ["tok", "t" * 255], ids=["a short name", "a 255-byte name"])
def test_a_folder_with_only_a_lock_left_is_free_to_train_into(corpus, tmp_path, capsys, out):
    out = tmp_path / out  # what a training stopped by Ctrl-C or a failing corpus leaves; 255 bytes is legal
    out.mkdir()
    (out / ".lock").write_text("12345\n")
    assert cli_main(_train_argv(corpus, out, 280)) == 0
    assert gptlib.tokenizer.Tokenizer.load(out).n_vocab == 280
    assert cli_main(_train_argv(corpus, out, 275, "--overwrite")) == 0


def test_one_long_document_without_spaces_trains_in_time_linear_in_its_length(tmp_path):
    # One chunk of 240,000 letters (a DNA string; base64 and minified code are alike): 1,000 merges take
    # about 2 s, where a trainer that searched the word once per occurrence of each pair took two minutes.
    # The limit only tells those apart, with room for a busy machine; figures belong to the benchmarks.
    (tmp_path / "dna").mkdir()
    rng = np.random.default_rng(0)
    (tmp_path / "dna" / "genome.txt").write_text("".join(rng.choice(list("ACGT"), 240_000)))
    argv = _train_argv(tmp_path / "dna", tmp_path / "tok", 1259)
    try:
        done = _gptlib(*argv, timeout=40)
    except subprocess.TimeoutExpired:
        pytest.fail("training on one long chunk is quadratic in its length again")
    assert done.returncode == 0, done.stderr
    assert b"1 chunks (1 distinct): made 1,000 of 1,000 merges" in done.stdout
    rustbpe = pytest.importorskip("rustbpe")  # and the merges are still rustbpe's
    reference = rustbpe.Tokenizer()
    reference.train_from_iterator([(tmp_path / "dna" / "genome.txt").read_text()], 1256)
    theirs = [token for token, _ in sorted(reference.get_mergeable_ranks(), key=lambda t: t[1])]
    ours = gptlib.tokenizer.Tokenizer.load(tmp_path / "tok")
    assert [ours.token_bytes(i) for i in range(ours.n_vocab - 3)] == theirs


def test_the_pipeline_does_not_reuse_a_tokenizer_saved_over_its_own(corpus, tmp_path, capsys):
    from gptlib.pipeline import prepare_tokenizer

    folder = tmp_path / "tokenizers" / "corpus-280"
    made, reused = prepare_tokenizer(str(corpus), 280, folder, progress=False)
    assert not reused and prepare_tokenizer(str(corpus), 280, folder, progress=False)[1]
    other = tmp_path / "other"
    other.mkdir()
    (other / "c.txt").write_text("entirely different words, in another order. " * 40, encoding="utf-8")
    argv = ["tokenizer", "train", "--corpus", str(other), "--vocab-size", "280", "--out", str(folder)]
    assert cli_main([*argv, "-q", "--workers", "1", "--overwrite"]) == 0
    again, reused = prepare_tokenizer(str(corpus), 280, folder, progress=False)
    assert not reused and again == made, "the pipeline took another corpus's tokenizer for its own"


# --- tokenizer encode: what it reads and what it prints ---------------------------------------------------


def test_encode_refuses_a_folder_as_file(trained, corpus, capsys):
    argv = ["tokenizer", "encode", "--tokenizer", str(trained), "--file", str(corpus)]
    assert _fails(capsys, argv) == f"--file {corpus} is a folder: give the path of a text file"


def test_encode_refuses_invalid_utf8_alike_on_stdin_and_from_a_file(trained, tmp_path):
    bad = b"caf\xe9 au lait"  # Latin-1, not UTF-8: byte 3 starts a sequence that the space breaks
    (tmp_path / "bad.txt").write_bytes(bad)
    from_stdin = _gptlib("tokenizer", "encode", "--tokenizer", str(trained), input=bad)
    from_file = _gptlib(
        "tokenizer", "encode", "--tokenizer", str(trained), "--file", str(tmp_path / "bad.txt")
    )
    assert from_stdin.returncode == from_file.returncode == 2
    assert from_stdin.stdout == from_file.stdout == b""
    on_stdin = _one_error_line(from_stdin.stderr.decode())
    assert on_stdin == "stdin is not valid UTF-8 (byte 3: invalid continuation byte)"
    assert _one_error_line(from_file.stderr.decode()) == on_stdin.replace("stdin", str(tmp_path / "bad.txt"))


def test_encode_reads_valid_utf8_on_stdin(trained):
    done = _gptlib("tokenizer", "encode", "--tokenizer", str(trained), input="the café".encode())
    assert done.returncode == 0
    ids = json.loads(done.stdout)
    assert gptlib.tokenizer.Tokenizer.load(trained).decode(ids) == "the café"


def test_encode_show_is_unambiguous_on_text_with_bars(trained, capsys):
    text = "a|b || the cat|"
    assert cli_main(["tokenizer", "encode", "--tokenizer", str(trained), "--show", "--text", text]) == 0
    pieces = json.loads(capsys.readouterr().out)
    tokenizer = gptlib.tokenizer.Tokenizer.load(trained)
    assert pieces == [tokenizer.decode([i]) for i in tokenizer.encode(text)]
    assert "".join(pieces) == text and "|" in pieces


# --- worker processes die with the command ----------------------------------------------------------------


def _children(pid: int) -> dict[int, str]:
    "pid -> start time (field 22 of /proc/PID/stat: a reused pid starts later) of the live children of `pid`."
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        state, ppid, started = fields[0], int(fields[1]), fields[19]
        if ppid == pid and state not in "ZX":
            found[int(stat.parent.name)] = started
    return found


def _alive(pid: int, started: str) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[19] == started and fields[0] not in "ZX"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds child processes through /proc")
@pytest.mark.parametrize("signal_number", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_killed_train_leaves_no_worker_process(tmp_path, shakespeare_texts, signal_number):
    corpus = tmp_path / "corpus"  # the plays ten times over, about 50 MB: seconds of splitting
    corpus.mkdir()
    for copy in range(10):
        for play in sorted(shakespeare_texts.glob("*.txt")):
            shutil.copy(play, corpus / f"{copy}-{play.name}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [
        sys.executable,
        "-m",
        "gptlib",
        "tokenizer",
        "train",
        "--corpus",
        str(corpus),
        "--vocab-size",
        "300",
        "--out",
        str(tmp_path / "tok"),
        "--workers",
        "3",
        "-q",
    ]
    parent = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = {}
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and parent.poll() is None and time.monotonic() < deadline:
            workers = _children(parent.pid)  # the two helper processes that split the corpus
            time.sleep(0.02)
        assert len(workers) == 2, f"expected 2 worker processes while splitting, saw {workers}"
        assert all(_alive(pid, started) for pid, started in workers.items()), "the split ended too soon"
        parent.send_signal(signal_number)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 10  # the watchdog thread polls every 0.5 s; Linux kills at once
        while any(_alive(pid, started) for pid, started in workers.items()) and time.monotonic() < deadline:
            time.sleep(0.05)
        survivors = [pid for pid, started in workers.items() if _alive(pid, started)]
        assert not survivors, f"worker processes {survivors} outlived their parent"
    finally:
        for pid, started in workers.items():  # never leave orphans behind, even when the test fails
            if _alive(pid, started):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait()


# --- Ctrl-C: the whole process group signalled, as a terminal does ------------------------------------------

# Two moments of Ctrl-C, each made certain by a patch of the child: (1) the worst one, a worker has written
# half of its result into the pipe the pool reads (a worker interrupted there would leave half a message, and
# the pool's reader would wait for the rest for good); (2) the workers are idle, waiting for work (a worker
# interrupted there would print a KeyboardInterrupt traceback of its own).
CTRL_C = {
    "while a worker sends its result": """
        import multiprocessing.connection as connection
        parent, real_send = os.getpid(), connection.Connection._send
        def send_half_then_ctrl_c(self, buf, *args):
            if os.getpid() == parent or len(buf) < 1000 or os.path.exists(once):  # not a worker's result
                return real_send(self, buf, *args)
            open(once, "x").close()
            real_send(self, buf[: len(buf) // 2], *args)
            os.killpg(0, signal.SIGINT)  # Ctrl-C, to every process of the group
            real_send(self, buf[len(buf) // 2 :], *args)
        connection.Connection._send = send_half_then_ctrl_c
    """,
    "while the workers wait for work": """
        import time
        import gptlib.bpe_backends as backends
        def count_nothing(texts, *args):  # module-level: a pool pickles it by name (a lambda it cannot)
            return [], []
        backends._count_batch = count_nothing  # the helpers finish at once, then wait
        real_share = backends.share_batches
        def share_then_ctrl_c(batches, helper, args, *, here, **kwargs):
            def here_then_ctrl_c(item):
                if not os.path.exists(once):
                    open(once, "x").close()
                    time.sleep(1)  # the helpers are done with their batches by now
                    os.killpg(0, signal.SIGINT)
                    time.sleep(1)  # Python raises KeyboardInterrupt at its next instruction
                here(item)
            real_share(batches, helper, args, here=here_then_ctrl_c, **kwargs)
        backends.share_batches = share_then_ctrl_c
    """,
}


def _ctrl_c(tmp_path, moment: str, *argv: str, env: dict | None = None) -> tuple[int, str]:
    """Run the command line in a session of its own, with a Ctrl-C to its process group at `moment` (and a
    default of 3 workers: `run` trains its tokenizer with the default number); its exit status and stderr."""
    # Ctrl-C raises KeyboardInterrupt, as in a terminal's foreground command: a shell that started pytest in
    # the background (`make test &`) leaves SIGINT ignored in every child, and Python then never raises it
    patch = "import os, signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    patch += "import gptlib.workers\ngptlib.workers.default_workers = lambda: 3\n"
    patch += "once = os.environ['CTRL_C_ONCE']\n" + textwrap.dedent(CTRL_C[moment])
    code = patch + f"\nfrom gptlib.cli import main\nraise SystemExit(main({list(argv)!r}))\n"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "CTRL_C_ONCE": str(tmp_path / "ctrl-c-sent"),
        **(env or {}),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own: the Ctrl-C must not reach pytest
    )
    try:
        _, err = child.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        pytest.fail(f"Ctrl-C {moment} left the command hanging")
    assert (tmp_path / "ctrl-c-sent").exists(), "the moment never came: the test did not test"
    return child.returncode, err


@pytest.mark.parametrize("moment", sorted(CTRL_C))
def test_ctrl_c_never_hangs_tokenizer_train_and_only_the_parent_speaks(tmp_path, shakespeare_texts, moment):
    argv = _train_argv(shakespeare_texts, tmp_path / "tok", 300)[:-2]  # all but `--workers 1`
    status, err = _ctrl_c(tmp_path, moment, *argv)
    assert status == 130 and "Traceback" not in err and err.splitlines()[-1] == "interrupted", err
    assert not (tmp_path / "tok" / "tokenizer.json").exists()


def test_ctrl_c_never_hangs_the_tokenizer_stage_of_run(tmp_path, shakespeare_texts):
    data = tmp_path / "data"  # the cached corpus, and nothing else: `run` starts with the tokenizer stage
    (data / "shakespeare").mkdir(parents=True)
    (data / "shakespeare" / "texts").symlink_to(shakespeare_texts)
    moment = "while a worker sends its result"
    status, err = _ctrl_c(tmp_path, moment, "run", "--preset", "tiny", env={"GPTLIB_DATA": str(data)})
    assert status == 130 and "Traceback" not in err and err.splitlines()[-1] == "interrupted", err[-3000:]
