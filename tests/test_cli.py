"""The command line: one parser per command, flags refused before any work, and the error policy (a user's
mistake is one `error: ...` line and exit 2, a bug shows its traceback, Ctrl-C exits 130)."""

from __future__ import annotations

import builtins
import errno
import importlib.metadata
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gptlib.cli
import gptlib.cli.corpus
import gptlib.cli.model
import gptlib.cli.run
import gptlib.cli.train
import gptlib.files
from gptlib.cli import build_parser, config_from_args, describe, main
from gptlib.corpus import CorpusError
from gptlib.files import LockedError
from gptlib.tokenizer import Tokenizer
from gptlib.train_config import TRAIN_PRESETS, TrainConfig

ROOT = Path(__file__).resolve().parent.parent


def one_error_line(capsys, status: int) -> str:
    "The message of the one `error: ...` line the command printed to stderr, after it exited with 2."
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("error: "), err
    return err.removeprefix("error: ").strip()


def child(patch: str, *argv: str, **kwargs) -> subprocess.CompletedProcess:
    "`python -m gptlib ARGV` in a child process whose `patch` (Python source) ran first."
    code = textwrap.dedent(patch) + f"\nfrom gptlib.cli import main\nraise SystemExit(main({list(argv)!r}))\n"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, **kwargs
    )


@pytest.fixture
def no_work(monkeypatch):
    "Make every stage fail the test if it starts: a refused flag must be refused before any work."

    def started(*args, **kwargs):
        raise AssertionError("work started before the flags were checked")

    for module, name in [
        (gptlib.cli.run, "fetch_shakespeare"),
        (gptlib.cli.run, "run_pipeline"),
        (gptlib.cli.train, "train"),
        (gptlib.cli.corpus, "open_corpus"),
        (gptlib.cli.tokenizer, "open_corpus"),
        (gptlib.cli.data, "prepare"),
        (gptlib.cli.sample, "load_trained"),
    ]:
        monkeypatch.setattr(module, name, started)


# --- bad flags: one line, exit 2, before any work -----------------------------------------------------------


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["run", "--preset", "huge"], "--preset: invalid choice: 'huge'"),
        (["run", "--sample-tokens", "-1"], "--sample-tokens: the value must be at least 1, got -1"),
        (["model", "show", "--preset", "huge"], "--preset: invalid choice"),
        (["train", "start", "--max-steps", "five"], "--max-steps: invalid int value: 'five'"),
        (
            ["train", "start", "--shards", "s", "--tokenizer", "t", "--out", "o", "--max-stepz", "5"],
            "--max-stepz",
        ),
        (["train", "start", "--bogus", "1"], "unrecognized arguments: --bogus 1"),
        (["train", "config", "--compile", "maybe"], "--compile: expected true or false, got 'maybe'"),
        (["train", "start", "--shards", "s", "--tokenizer", "t", "--out", ""], "--out: an empty value"),
        (["tokenizer", "train", "--out", ""], "--out: an empty path"),
        (["tokenizer", "train", "--workers", "0"], "--workers: the value must be at least 1, got 0"),
        (["data", "prepare", "--tokenizer", "t", "--out", ""], "--out: an empty path"),
        (["data", "import", "--format", "csv"], "--format: invalid choice: 'csv'"),
        (["sample", "--run", ""], "--run: an empty path"),
        (
            ["sample", "--run", "r", "--seed", str(2**70)],
            "--seed: the value must be at most 18446744073709551615",
        ),
        (["sample", "--run", "r", "--top-k", "-3"], "--top-k: the value must be at least 0, got -3"),
        (["sample", "--run", "r", "--temperature", "nan"], "--temperature: expected a finite number"),
        (["sample", "--run", "r", "--temperature", "inf"], "--temperature: expected a finite number"),
        (["sample", "--run", "r", "--temperature", "-1"], "--temperature: the value must be at least 0"),
        (["corpus", "fetch", "--sdist", ""], "--sdist: an empty path"),
        (["corpus", "show", "--sdist", ""], "--sdist: an empty path"),
        (["run", "--sdist", ""], "--sdist: an empty path"),
        (["tokenizer", "train", "--sdist", ""], "--sdist: an empty path"),
        (["corpus", "shuffle"], "invalid choice: 'shuffle'"),
        ([], "required: COMMAND"),
    ],
)
def test_a_bad_flag_is_one_error_line_before_any_work(capsys, no_work, argv, flag):
    message = one_error_line(capsys, main(argv))
    assert flag in message, message
    assert "(see `python -m gptlib" in message and message.endswith(" -h`)"), "it says where the usage is"


def test_train_start_needs_the_folders_before_any_work(capsys, no_work):
    message = one_error_line(capsys, main(["train", "start", "--tokenizer", "t", "--max-steps", "5"]))
    assert message.startswith("train start needs --shards, --out: the shard folder"), message


def test_flags_are_never_abbreviated(capsys, no_work):
    # argparse would read --max-step as --max-steps, and a later flag --max-step-time would change its meaning
    assert "unrecognized arguments: --max-step" in one_error_line(
        capsys, main(["train", "config", "--max-step", "5"])
    )
    assert "unrecognized arguments: --sample" in one_error_line(capsys, main(["run", "--sample", "5"]))


def test_help_is_exit_0_for_every_command_and_verb(capsys):
    for argv in [[], ["corpus"], ["tokenizer"], ["data"], ["model"], ["train"], ["sample"], ["run"]]:
        assert main([*argv, "-h"]) == 0
    for verbs in (["corpus", "fetch"], ["tokenizer", "encode"], ["data", "import"], ["model", "show"]):
        assert main([*verbs, "-h"]) == 0
    assert main(["train", "start", "-h"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "--max-steps INT optimizer steps of the whole run" in shown, (
        "train start lists the config's fields"
    )


# --- what the parser makes of the flags ---------------------------------------------------------------------


def test_train_start_is_parsed_once_into_the_config_of_its_flags():
    argv = ["--preset", "cpu", "--shards", "s", "--tokenizer", "t", "--out", "o", "--max-steps", "7"]
    args = build_parser().parse_args(["train", "start", *argv])
    assert args.handler is gptlib.cli.train.start_command
    expected = TrainConfig.preset("cpu", shards="s", tokenizer="t", out="o", max_steps=7)
    assert gptlib.cli.train._config(args) == expected == config_from_args(argv)


def test_train_config_prints_the_resolved_configuration(capsys):
    assert main(["train", "config", "--preset", "tiny", "--max-lr", "0.01", "--compile", "true"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == TrainConfig.preset("tiny", max_lr=0.01, compile=True).to_dict()


def test_preset_choices_come_from_the_preset_table(capsys, monkeypatch):
    monkeypatch.setitem(TRAIN_PRESETS, "mine", {**TRAIN_PRESETS["tiny"], "max_steps": 3})
    assert main(["train", "config", "--preset", "mine"]) == 0
    assert json.loads(capsys.readouterr().out)["max_steps"] == 3
    assert main(["run", "-h"]) == 0 and "mine" in capsys.readouterr().out


def test_train_start_draws_the_curves_in_the_main_process_only(monkeypatch, tmp_path):
    drawn, history = [], [{"kind": "train", "step": 1}, {"kind": "event", "step": 1, "stopped": "SIGTERM"}]

    def train_as(is_main: bool):
        def train(cfg, callback):  # as under torchrun: the callback runs in the main process only
            for record in history if is_main else []:
                callback(record)
            return history

        return train

    monkeypatch.setattr(gptlib.cli.train, "read_metrics", lambda run: history)
    monkeypatch.setattr(gptlib.cli.train, "save_plots", lambda records, path, **kw: drawn.append(path))
    argv = ["train", "start", "--shards", "s", "--tokenizer", "t", "--out", str(tmp_path / "run")]
    for is_main in (False, True):
        monkeypatch.setattr(gptlib.cli.train, "train", train_as(is_main))
        assert main(argv) == 143, "a run stopped by SIGTERM exits as the shell reports it"
    assert drawn == [tmp_path / "run" / "training.png"]


def test_model_show_refuses_a_model_beyond_memory_before_building_it(capsys, monkeypatch):
    monkeypatch.setattr(gptlib.cli.model, "GPT", None)  # building it would fail the test
    argv = ["model", "show", "--preset", "gpt-25m", "--vocab-size", "10000000000"]
    message = one_error_line(capsys, main(argv))
    assert message.startswith("--vocab-size 10,000,000,000 asks for 20.5 TB of memory (the model), more than")


def test_the_console_script_runs_the_same_main_as_python_m():
    import gptlib.__main__  # importing it runs nothing: `python -m gptlib` calls its main

    (script,) = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == "gptlib"]
    assert script.load() is gptlib.__main__.main  # Ctrl-C while the command line imports: exit 130 in both
    result = subprocess.run(
        [sys.executable, "-m", "gptlib", "model", "show", "--preset", "tiny"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0 and "parameters" in result.stdout, result.stderr


# --- the command line's own checks --------------------------------------------------------------------------


@pytest.fixture
def tokenizer_folder(tmp_path) -> Path:
    folder = tmp_path / "tok"
    Tokenizer.train(["the cat sat on the mat " * 20], 270, workers=1).save(folder)
    return folder


@pytest.mark.parametrize(
    "ids, problem",
    [
        ("[true, false]", "--ids must be a JSON list of ints, like [15, 27], got '[true, false]'"),
        ("[1.5]", "--ids must be a JSON list of ints"),
        ('{"a": 1}', "--ids must be a JSON list of ints"),
        ("15, 27", "--ids must be a JSON list of ints, like [15, 27]: Extra data"),
    ],
)
def test_decode_refuses_ids_that_are_not_a_list_of_ints(capsys, tokenizer_folder, ids, problem):
    message = one_error_line(
        capsys, main(["tokenizer", "decode", "--tokenizer", str(tokenizer_folder), "--ids", ids])
    )
    assert message.startswith(problem), message


def test_decode_and_encode_agree(capsys, tokenizer_folder):
    assert main(["tokenizer", "encode", "--tokenizer", str(tokenizer_folder), "--text", "the mat"]) == 0
    ids = capsys.readouterr().out.strip()
    assert main(["tokenizer", "decode", "--tokenizer", str(tokenizer_folder), "--ids", ids]) == 0
    assert capsys.readouterr().out == "the mat\n"


def test_encode_names_a_file_that_fails_to_read(capsys, tokenizer_folder, tmp_path, monkeypatch):
    text = tmp_path / "text.txt"
    text.write_text("the cat")

    def read_bytes(self):  # a failing disk: the read fails, naming no file
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    argv = ["tokenizer", "encode", "--tokenizer", str(tokenizer_folder), "--file", str(text)]
    assert one_error_line(capsys, main(argv)) == f"Input/output error: {text}"


class _FailingReads:
    "A file whose every read fails as a dying disk's does: errno and message, no file name."

    def __init__(self, f):
        self._f = f

    def _fail(self, *args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    read = readline = readlines = readinto = __next__ = _fail

    def __iter__(self):
        return self

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)


@pytest.mark.parametrize("corpus", ["a folder of .txt", "a .jsonl file"])
def test_a_corpus_file_that_fails_to_read_is_named(capsys, tmp_path, monkeypatch, corpus):
    (tmp_path / "texts").mkdir()
    bad = tmp_path / "texts" / "play.txt" if corpus == "a folder of .txt" else tmp_path / "docs.jsonl"
    bad.write_text('{"text": "the cat"}\n')
    real_open = io.open

    def open_(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return _FailingReads(f) if str(file) == str(bad) and "r" in mode else f

    monkeypatch.setattr(io, "open", open_)  # what pathlib opens with
    monkeypatch.setattr(builtins, "open", open_)
    spec = str(bad.parent if corpus == "a folder of .txt" else bad)
    assert one_error_line(capsys, main(["corpus", "show", "--corpus", spec])) == f"Input/output error: {bad}"


def _corpus_named_badly(tmp_path: Path, case: str) -> str:
    "A corpus spec gptlib cannot read, of the kind `case` says."
    if case == "an empty spec":
        (tmp_path / "notes.txt").write_text("the current folder, which an empty spec must not mean")
        return ""
    if case == "hf: and a local path":
        (tmp_path / "texts").mkdir()
        (tmp_path / "texts" / "a.txt").write_text("the cat sat")
        return f"hf:{tmp_path / 'texts'}"
    if case == "a file name that is not UTF-8":
        (tmp_path / "texts").mkdir()
        try:
            (tmp_path / "texts" / os.fsdecode(b"caf\xe9.txt")).write_text("the cat sat")
        except (OSError, UnicodeEncodeError):
            pytest.skip("this file system refuses names that are not UTF-8")
        return str(tmp_path / "texts")
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "numbers.parquet")
    return str(tmp_path / "numbers.parquet")


@pytest.mark.parametrize(
    "case, problem",
    [
        ("an empty spec", "the corpus spec is empty"),
        ("hf: and a local path", "(for a local folder, give its path without hf:)"),
        ("a file name that is not UTF-8", "caf\\udce9.txt' is not valid UTF-8: rename the file"),
        ("a parquet column of ints", "numbers.parquet:0: column 'text' holds int values, not text"),
    ],
)
def test_a_corpus_gptlib_cannot_read_is_one_error_line_naming_it(
    capsys, tmp_path, monkeypatch, case, problem
):
    monkeypatch.chdir(tmp_path)
    spec, out = _corpus_named_badly(tmp_path, case), tmp_path / "tok"
    argv = ["tokenizer", "train", "--corpus", spec, "--vocab-size", "260", "--out", str(out), "-q"]
    message = one_error_line(capsys, main([*argv, "--workers", "1"]))
    assert problem in message, message
    assert not (out / "tokenizer.json").exists()


def test_folder_names_of_the_largest_legal_length_are_written_into(capsys, small_data, tmp_path):
    shards, run = tmp_path / ("s" * 255), tmp_path / ("r" * 255)  # 255 bytes: NAME_MAX on Linux and macOS
    tokenizer = str(small_data / "tokenizer")
    where = ["--corpus", str(small_data / "texts"), "--tokenizer", tokenizer, "--out", str(shards)]
    assert main(["data", "prepare", *where, "--val-fraction", "0.34", "--no-progress"]) == 0
    sizes = ["--micro-batch=4", "--context=32", "--eval-batches=1", "--vocab-size=300", "--precision=fp32"]
    argv = ["train", "start", "--preset", "tiny", "--shards", str(shards), "--tokenizer", tokenizer]
    assert main([*argv, "--out", str(run), "--max-steps=2", *sizes]) == 0
    assert main([*argv, "--out", str(run), "--max-steps=4", "--decay-steps=2", *sizes]) == 0  # a resume
    capsys.readouterr()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-0000002", "step-0000004"]


def test_a_full_disk_names_the_file_it_was_writing(capsys, monkeypatch, small_data, tmp_path):
    class FullDisk:  # a file whose every write fails as on a full disk: errno and message, no file name
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

    monkeypatch.setattr(gptlib.files, "open", lambda *a, **k: FullDisk(open(*a, **k)), raising=False)
    bins = tmp_path / "bins"
    argv = [
        "data",
        "export",
        "--shards",
        str(small_data / "shards"),
        "--format",
        "nanogpt",
        "--out",
        str(bins),
    ]
    assert one_error_line(capsys, main(argv)) == f"No space left on device: {bins / 'train.bin'}"


# --- the error policy ---------------------------------------------------------------------------------------


def _failing(error: BaseException):
    def fail(*args, **kwargs):
        raise error

    return fail


@pytest.mark.parametrize(
    "error, line",
    [
        (CorpusError("the corpus x is empty"), "the corpus x is empty"),
        (LockedError("another process (pid 7) is writing to r"), "another process (pid 7) is writing to r"),
        (
            OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/disk/shard.ds"),
            "No space left on device: /disk/shard.ds",
        ),
        (PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/ro"), "Permission denied: /ro"),
        (FileNotFoundError("no nanoGPT file x.bin"), "no nanoGPT file x.bin"),
    ],
)
def test_gptlib_errors_and_os_errors_are_one_line_and_exit_2(capsys, monkeypatch, error, line):
    monkeypatch.setattr(gptlib.cli.corpus, "measure", _failing(error))
    assert one_error_line(capsys, main(["corpus", "show"])) == line


def test_an_os_error_of_a_rename_names_both_paths():
    error = OSError(errno.EXDEV, os.strerror(errno.EXDEV), "/a/x", None, "/b/x")
    assert describe(error) == "Invalid cross-device link: /a/x -> /b/x"
    assert describe(CorpusError("first line\nsecond line")) == "first line"


@pytest.mark.parametrize(
    "error", [ValueError("bad"), KeyError("splits"), TypeError("not a str"), AssertionError()]
)
def test_a_bug_is_not_caught_so_its_traceback_shows(monkeypatch, error):
    monkeypatch.setattr(gptlib.cli.corpus, "measure", _failing(error))
    with pytest.raises(type(error)):
        main(["corpus", "show"])


def test_a_bug_in_a_child_process_prints_its_traceback_and_exits_1():
    patch = """
        import gptlib.cli.corpus
        def measure(corpus, each=None):
            return {}["documents"]  # a bug: a KeyError, which the command line must not dress as a user error
        gptlib.cli.corpus.measure = measure
    """
    result = child(patch, "corpus", "show")
    assert result.returncode == 1, result.stderr
    assert "Traceback" in result.stderr and "KeyError: 'documents'" in result.stderr
    assert not [line for line in result.stderr.splitlines() if line.startswith("error: ")]


def test_ctrl_c_outside_training_exits_130(capsys, monkeypatch):
    monkeypatch.setattr(gptlib.cli.corpus, "measure", _failing(KeyboardInterrupt()))
    assert main(["corpus", "show"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_a_reader_that_stops_reading_ends_the_command_quietly(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3000):  # about 200 kB of `corpus show -v` lines: more than a pipe holds
        (corpus / f"{i:05d}.txt").write_text("a few words")
    command = [sys.executable, "-m", "gptlib", "corpus", "show", "-v", "--corpus", str(corpus)]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141 and err == "" and "00000" in first


def _summary(**changes) -> dict:
    "What `gptlib.pipeline.run_pipeline` returns, for a run that finished (or stopped, with `changes`)."
    return {
        "run": "/runs/shakespeare-tiny",
        "step": 60,
        "last_step": 60,
        "stopped_early": False,
        "signal": None,
        "val_loss": 5.4321,
        "val_bpb": 2.3456,
        "val_tokens": 12_345,
        "references": {"ln V": 6.24, "unigram": 5.9, "bigram": 4.8},
        "held_out": 2,
        "prompt": "JULIET.\n",
        "sample": "Romeo.\nWhat say you?",
        "quality": {
            "known_words": 0.75,
            "known_speakers": None,
            "longest_blank_run": 2,
            "stutters": ["ooo"],
            "n_words": 4,
        },
        "tensorboard": None,
        "band": ["no expected band for this recipe", "inside the expected band"],
        "wall_s": 90.0,
        **changes,
    }


def test_run_prints_the_sample_and_the_figures_of_the_pipeline(capsys, monkeypatch, shakespeare_texts):
    asked = []

    def run_pipeline(preset, **kwargs):
        asked.append((preset, kwargs))
        return _summary()

    monkeypatch.setattr(gptlib.cli.run, "run_pipeline", run_pipeline)
    assert main(["run", "--preset", "tiny", "--prompt", "JULIET.\n", "--sample-tokens", "20"]) == 0
    asked_for = {
        "corpus": "shakespeare",
        "prompt": "JULIET.\n",
        "sample_tokens": 20,
        "config": TrainConfig.preset("tiny"),
        "tensorboard": False,
    }
    assert asked == [("tiny", asked_for)]
    out = capsys.readouterr().out
    assert "shakespeare: 42 documents, 5,057,198 characters, 5.06 MB" in out
    assert (
        "=== sample (the best checkpoint, step 60, prompt 'JULIET.\\n') ===\nRomeo.\nWhat say you?\n" in out
    )
    assert "val loss 5.4321 nats/token, 2.3456 bits/byte over the 12,345 tokens" in out
    assert "(for reference: ln V 6.24, unigram 5.90, bigram 4.80 nats/token)" in out
    assert "75.0% of words and no speaker headings found" in out and "wall time 1.5 min" in out
    assert out.rstrip().endswith("no expected band for this recipe\ninside the expected band")  # last lines


def test_run_stopped_by_ctrl_c_says_how_to_resume_and_exits_130(capsys, monkeypatch, shakespeare_texts):
    # the best checkpoint (sampled) is the one of step 8; training stopped after step 12
    stopped = _summary(stopped_early=True, signal="SIGINT", step=8, last_step=12)
    monkeypatch.setattr(gptlib.cli.run, "run_pipeline", lambda preset, **kwargs: stopped)
    assert main(["run"]) == 130
    assert "stopped at step 12: run `python -m gptlib run` again to resume" in capsys.readouterr().out
