"""Your own text, end to end: `python -m gptlib run --corpus SPEC` (folders named after the corpus, whole
documents held out with at least one window, a prompt from the held-out text, every stage reused), text that
is not English through every stage, TensorBoard events while a run trains and afterwards, and continued
pretraining (`train start --init-from RUN`)."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import math
import random
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import gptlib.pipeline
from gptlib.cli import main
from gptlib.data import DataConfig, open_split, prepare, split_documents
from gptlib.model import GPT, sample_text
from gptlib.pipeline import (
    PROMPT_CHARS,
    VAL_FRACTION,
    VAL_MAX_TOKENS,
    TrainingEvents,
    corpus_name,
    held_out_bpb,
    held_out_fraction,
    held_out_prompt,
    prepare_data,
)
from gptlib.run_folder import CheckpointError, RunFolder, init_from_run, load_trained, read_metrics
from gptlib.shards import ShardError
from gptlib.tokenizer import Tokenizer
from gptlib.train import train
from gptlib.train_config import TrainConfig

# Sentences in scripts and languages a byte-level BPE must carry through untouched: accents, ß, Cyrillic,
# Greek, Chinese, Japanese, Arabic (right to left), Devanagari, emoji with skin tones, flags and joiners.
SENTENCES = [
    "Les élèves étudient à l'école près de la forêt.",
    "Où est la bibliothèque ? Ça dépend du garçon.",
    "Über den Brücken fließt der Fluss; Grüße aus München!",
    "Москва — столица России, и зимой идёт снег.",
    "Съешь же ещё этих мягких французских булок.",
    "Η γλώσσα είναι όμορφη. Καλημέρα σας!",
    "我们在学校学习中文。今天天气很好。",
    "東京は日本の首都です。ひらがなとカタカナ。",
    "اللغة العربية جميلة. ذهبت إلى السوق.",
    "नमस्ते, आप कैसे हैं?",
    "Heute ist ein guter Tag 🎉👍🏽 und 👨‍👩‍👧‍👦 mit 🇫🇷🇯🇵.",
    "Rocket 🚀 to the 🌍 and back 🙂",
]


def write_multilingual(folder: Path, documents: int = 8, lines: int = 40, seed: int = 0) -> list[str]:
    "A few documents, each a page of lines in every script above, as .txt files in `folder`; their texts."
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    texts = []
    for i in range(documents):
        text = "\n".join(" ".join(rng.sample(SENTENCES, 2)) for _ in range(lines)) + "\n"
        (folder / f"page-{i:02d}.txt").write_text(text, encoding="utf-8")
        texts.append(text)
    return texts


def gptlib_main(argv: list[str]) -> tuple[int, str]:
    "`python -m gptlib ARGV` in this process: its exit status and what it printed."
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    return status, out.getvalue()


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory):
    """`python -m gptlib run --corpus DIR --preset tiny --tensorboard` on the multilingual corpus, run once
    with its data under a root of its own (`GPTLIB_DATA`): the root, the texts, the exit status and output."""
    root = tmp_path_factory.mktemp("multilingual")
    texts = write_multilingual(root / "texts")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GPTLIB_DATA", str(root / "data"))
        status, out = gptlib_main(
            ["run", "--corpus", str(root / "texts"), "--preset", "tiny", "--tensorboard"]
        )
        again = gptlib_main(["run", "--corpus", str(root / "texts"), "--preset", "tiny"])
    name = corpus_name(str(root / "texts"))
    return {"root": root / "data", "name": name, "texts": texts, "status": status, "out": out, "again": again}


# --- names, the held-out documents, the prompt ------------------------------------------------------------


def test_folders_are_named_after_the_corpus_and_two_folders_of_one_name_never_collide(tmp_path):
    (tmp_path / "a" / "texts").mkdir(parents=True)
    (tmp_path / "b" / "texts").mkdir(parents=True)
    (tmp_path / "Война и мир.jsonl").write_text("")
    first, second = corpus_name(str(tmp_path / "a" / "texts")), corpus_name(str(tmp_path / "b" / "texts"))
    assert first.startswith("texts-") and second.startswith("texts-") and first != second
    assert corpus_name(str(tmp_path / "a" / "texts" / ".." / "texts")) == first  # one folder, one name
    assert corpus_name(str(tmp_path / "Война и мир.jsonl")).startswith("Война_и_мир-")
    assert (
        corpus_name("shakespeare") == "shakespeare"
        and corpus_name("shakespeare-folio") == "shakespeare-folio"
    )
    assert corpus_name("hf:roneneldan/TinyStories@train").startswith("TinyStories-")
    assert corpus_name("hf:roneneldan/TinyStories@train") != corpus_name(
        "hf:roneneldan/TinyStories@validation"
    )


def _held_out(lengths, context: int) -> list[int]:
    "The lengths of the documents `data.split_documents` holds out at the fraction `held_out_fraction` gives."
    order = np.arange(len(lengths))
    return [lengths[i] for i in split_documents(order, held_out_fraction(lengths, context))["val"]]


def test_five_percent_of_the_documents_are_held_out_as_before():
    plays = [
        30_000 + 100 * i for i in range(42)
    ]  # Shakespeare's 42 plays: 2 held out, the fraction as before
    assert held_out_fraction(plays, 256) == VAL_FRACTION and len(_held_out(plays, 256)) == 2


def test_more_documents_are_held_out_until_they_hold_one_window():
    short = [30] * 20  # 5 % is one document of 30 tokens: not one window of a context of 64
    val = _held_out(short, 64)
    assert sum(val) >= 65 and sum(val[:-1]) < 65, "the fewest documents that hold one window of 65 tokens"


def test_fewer_documents_are_held_out_when_they_hold_more_than_enough():
    big = [VAL_MAX_TOKENS // 2 + 1] * 200  # 5 % would be 10 documents, 5 times VAL_MAX_TOKENS
    assert len(_held_out(big, 256)) == 2


def test_a_corpus_that_cannot_hold_out_a_window_and_keep_a_document_is_refused():
    with pytest.raises(ShardError, match="too small.*one validation window of 257 tokens"):
        held_out_fraction([100, 100, 100], 256)
    with pytest.raises(ShardError, match="at least 2, the corpus has 1"):
        held_out_fraction([10_000], 256)


def test_prepare_data_holds_out_a_window_and_reuses_its_shards(tmp_path, monkeypatch):
    texts = tmp_path / "notes"
    texts.mkdir()
    for i in range(20):
        (texts / f"{i:02d}.txt").write_text(f"Note {i}: buy milk, bread and eggs.")
    data = prepare_data(str(texts), 260, tmp_path / "data", context=64, log=None, progress=False)
    lengths = np.diff(open_split(data.shards, "val").doc_ends, prepend=0)
    assert lengths.sum() >= 65 and lengths[:-1].sum() < 65 and len(lengths) > 1
    manifest = data.shards / "manifest.json"
    made = manifest.stat().st_mtime_ns
    calls = []
    monkeypatch.setattr(gptlib.pipeline, "prepare", lambda *a, **k: calls.append(1) or prepare(*a, **k))
    again = prepare_data(str(texts), 260, tmp_path / "data", context=64, log=None, progress=False)
    assert again.manifest == data.manifest and manifest.stat().st_mtime_ns == made and len(calls) == 1


def _write_spec(kind: str, folder: Path, texts: list[str]) -> Path:
    "The documents `texts` as a corpus of `kind`: a folder of .txt files, a .jsonl file or a .parquet file."
    folder.mkdir()
    if kind == "folder":
        for i, text in enumerate(texts):
            (folder / f"{i:02d}.txt").write_text(text, encoding="utf-8")
        return folder
    if kind == "jsonl":
        lines = "".join(json.dumps({"text": text}, ensure_ascii=False) + "\n" for text in texts)
        (folder / "docs.jsonl").write_text(lines, encoding="utf-8")
        return folder / "docs.jsonl"
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pyarrow.table({"text": texts}), folder / "docs.parquet")
    return folder / "docs.parquet"


@pytest.mark.parametrize("kind", ["folder", "jsonl", "parquet"])
def test_every_local_corpus_spec_gets_its_tokenizer_and_shards_named_after_it(tmp_path, kind):
    texts = [" ".join(random.Random(i).sample(SENTENCES, 6)) for i in range(12)]
    spec = _write_spec(kind, tmp_path / "corpus", texts)
    data = prepare_data(str(spec), 300, tmp_path / "data", context=32, log=None, progress=False)
    name = corpus_name(str(spec))
    assert name.startswith({"folder": "corpus-", "jsonl": "docs-", "parquet": "docs-"}[kind])
    assert data.tokenizer_dir == tmp_path / "data" / "tokenizers" / f"{name}-300"
    assert data.shards == tmp_path / "data" / "shards" / f"{name}-300"
    splits = data.manifest["splits"]
    assert splits["val"]["n_documents"] == 1 and splits["train"]["n_documents"] == 11  # 5 % of 12, one
    assert data.manifest["corpus"]["spec"] == str(spec.resolve())  # one corpus, however its path is written


def test_a_corpus_of_one_document_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    (tmp_path / "book.txt").write_text("Call me Ishmael. " * 1000)
    monkeypatch.setenv("GPTLIB_DATA", str(tmp_path / "data"))
    assert main(["run", "--corpus", str(tmp_path / "book.txt"), "--preset", "tiny"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "one document (book.txt)" in err and "a folder of several .txt" in err
    assert not (tmp_path / "data" / "tokenizers").exists()


class OneDocument:
    "A held-out split of one document, as `held_out_prompt` reads it (`doc_ends`, `read`)."

    def __init__(self, text: str, tokenizer: Tokenizer):
        self.tokens = np.array([tokenizer.bos_id, *tokenizer.encode(text), tokenizer.eos_id])
        self.doc_ends = np.array([len(self.tokens)])

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.tokens[start:stop]


def test_the_prompt_is_the_opening_of_the_first_held_out_document():
    tokenizer = Tokenizer.train(
        ["Some text to learn a few merges from, in English and 中文."], 280, progress=False
    )

    def prompt(text: str) -> str:
        return held_out_prompt(OneDocument(text, tokenizer), tokenizer)

    assert prompt("CHAPTER ONE\nIt was a dark night.") == "CHAPTER ONE\n"  # a short first line, as a heading
    long = prompt("It was the best of times, it was the worst of times, it was the age of wisdom.")
    assert long == "It was the best of times, it was the" and len(long) <= PROMPT_CHARS  # whole words
    chinese = (
        "我们在学校学习中文。今天天气很好，我们去公园散步吧。" * 3
    )  # cut where the split pattern cuts it
    assert prompt(chinese) == "我们在学校学习中文。今天天气很好，我们去公园散步吧。我们在学校学习中文"
    assert prompt("x" * 100) == "x" * PROMPT_CHARS  # one chunk longer than a prompt: its first characters
    # "\n\n" is one chunk, so one token or a few of its own: a prompt ending in one "\n" would end in a token
    # the model never saw after a title, and the sample would begin with noise
    assert prompt("Chapter 19\n\nIt was late.") == "Chapter 19\n\n"
    for text in ["Chapter 19\n\nIt was late.", "It was the best of times, it was the worst of times, it was"]:
        ids = tokenizer.encode(text)
        assert tokenizer.encode(prompt(text)) == ids[: len(tokenizer.encode(prompt(text)))], (
            "the text's tokens"
        )
    assert prompt("\n\n  Indented after blank lines.") == "Indented after blank lines."
    assert prompt("") == ""


# --- your own text, end to end: a multilingual corpus -----------------------------------------------------


def test_run_on_a_folder_of_text_prints_a_sample_and_a_finite_bits_per_byte(multilingual):
    assert multilingual["status"] == 0, multilingual["out"]
    out = multilingual["out"]
    assert f"runs/{multilingual['name']}-tiny" in out and "=== sample (the best checkpoint" in out
    bpb = float(out.split(" bits/byte over the ")[0].rsplit(", ", 1)[1])
    assert math.isfinite(bpb) and 0 < bpb < 8, "bits per byte of a model that learned something"
    prompt = ast.literal_eval(out.split(", prompt ")[1].split(") ===")[0])  # printed as Python writes it
    assert any(text.startswith(prompt) for text in multilingual["texts"]), "the held-out text's opening"
    # the committed bands are Shakespeare's: another text is not judged against them
    assert out.rstrip().endswith("the committed bands are of shakespeare"), out[-300:]


def test_the_same_command_again_reuses_every_stage_and_samples_the_same(multilingual):
    status, out = multilingual["again"]
    assert status == 0 and out.count("reused") == 1, out  # the tokenizer; the shards are reused silently
    sample = multilingual["out"].split("===\n")[1].split("=== end")[0]
    assert sample in out and "resuming from step-0000060" in out and "new run" not in out


def test_text_that_is_not_english_round_trips_through_the_tokenizer_shards_and_samples(multilingual):
    root, name = multilingual["root"], multilingual["name"]
    tokenizer = Tokenizer.load(root / "tokenizers" / f"{name}-512")
    for text in [*multilingual["texts"], *SENTENCES, "e\u0301 (e and a combining accent)", "\u200f\u200dx"]:
        assert tokenizer.decode(tokenizer.encode(text)) == text
    # the shards: every document once, over both splits, its framed tokens decoding to its text exactly
    documents = []
    for split in ("train", "val"):
        tokens = open_split(root / "shards" / f"{name}-512", split)
        ends = tokens.doc_ends.tolist()
        for start, end in zip([0, *ends[:-1]], ends):
            framed = tokens.read(start, end)
            assert framed[0] == tokenizer.bos_id and framed[-1] == tokenizer.eos_id
            documents.append(tokenizer.decode(framed[1:-1]))
    assert sorted(documents) == sorted(multilingual["texts"])
    # samples: whatever the model draws (bytes that cut a character in two included), decoding never fails
    model, tokenizer, _ = load_trained(root / "runs" / f"{name}-tiny")
    for seed in range(4):
        assert isinstance(sample_text(model, tokenizer, "Москва", 40, seed=seed, temperature=1.5), str)
    ids = np.random.default_rng(0).integers(0, tokenizer.n_vocab + 3, size=2000)  # and past the vocabulary
    assert tokenizer.decode(ids) == tokenizer.decode_bytes(ids).decode("utf-8", errors="replace")


def test_a_tensorboard_run_leaves_events_that_tensorboards_reader_lists_the_losses_from(multilingual):
    reader = _events(multilingual["root"] / "runs" / f"{multilingual['name']}-tiny" / "tensorboard")
    assert {"train/loss", "train/lr", "val/loss", "val/bpb"} <= set(reader.Tags()["scalars"])
    assert [event.step for event in reader.Scalars("val/bpb")] == [20, 40, 60]


# --- TensorBoard ----------------------------------------------------------------------------------------


def _events(folder: Path):
    "TensorBoard's own reader of the event files in `folder`, loaded."
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    reader = accumulator.EventAccumulator(str(folder))
    reader.Reload()
    return reader


def _scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    return [(event.step, event.value) for event in _events(folder).Scalars(tag)]


def _logged(run: Path, kind: str, field: str) -> list[tuple[int, float]]:
    "The (step, value) of one field of `run`'s metrics.jsonl, rounded as TensorBoard stores it (float32)."
    return [(r["step"], float(np.float32(r[field]))) for r in read_metrics(run) if r["kind"] == kind]


def tiny(small_data, out, **overrides) -> TrainConfig:
    "A seconds-long run on the conftest's three plays and 300-id tokenizer."
    base = {
        "shards": str(small_data / "shards"),
        "tokenizer": str(small_data / "tokenizer"),
        "out": str(out),
        "max_steps": 8,
        "log_every": 1,
        "eval_every": 4,
        "eval_batches": 2,
        "checkpoint_every": 2,
        "micro_batch": 4,
        "context": 32,
        "vocab_size": 300,
        "precision": "fp32",  # not measured: an interrupted run and its reference compute alike
    }
    return TrainConfig.preset("tiny", **{**base, **overrides})


def test_a_resumed_runs_events_replace_those_after_its_resume_step(small_data, tmp_path):
    pytest.importorskip("tensorboard")
    cfg = tiny(small_data, tmp_path / "run", dropout=0.1)
    events = TrainingEvents(cfg.out)
    train(
        cfg, until_step=5, callback=events, log=None, progress=False
    )  # events up to step 5, checkpoint at 5
    events.close()
    (tmp_path / "run" / "checkpoints" / "step-0000005").rename(tmp_path / "aside")  # resumed from step 4 now
    events = TrainingEvents(cfg.out)
    train(cfg, callback=events, log=None, progress=False)
    events.close()
    board = tmp_path / "run" / "tensorboard"
    assert _scalars(board, "train/loss") == _logged(tmp_path / "run", "train", "loss")  # steps 1-8, once each
    assert _scalars(board, "val/bpb") == _logged(tmp_path / "run", "val", "val_bpb")


def test_metrics_tensorboard_writes_the_events_of_a_finished_run_and_replaces_them_when_run_again(
    small_data, tmp_path
):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    train(tiny(small_data, run), log=None, progress=False)
    for _ in range(2):  # the second time, the events are replaced, not added to
        status, out = gptlib_main(["metrics", "tensorboard", "--run", str(run)])
        assert status == 0 and "8 train and 2 val records" in out
        assert len(list((run / "tensorboard").iterdir())) == 1
        assert _scalars(run / "tensorboard", "train/loss") == _logged(run, "train", "loss")
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == [".lock"]  # no temporary left


def test_metrics_tensorboard_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["metrics", "tensorboard", "--run", str(tmp_path / "typo")]) == 2
    assert "has no metrics.jsonl" in capsys.readouterr().err and not (tmp_path / "typo").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "mine" / "notes.txt").write_text("my own file")
    assert main(["metrics", "tensorboard", "--run", str(tmp_path / "mine")]) == 2
    assert "is not a gptlib run" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["metrics.jsonl", "notes.txt"]


def test_a_new_run_starts_without_the_events_of_an_earlier_start_and_keeps_the_users_files(
    small_data, tmp_path
):
    """A run killed before its first checkpoint starts again from nothing: its TensorBoard events go with its
    log, but a note the user put into `tensorboard/` is the user's."""
    run = tmp_path / "run"
    with RunFolder(run):  # an earlier start, stopped before its first checkpoint, left its events
        (run / "tensorboard").mkdir()
        (run / "tensorboard" / "events.out.tfevents.old").write_text("an earlier start's events")
        (run / "tensorboard" / "notes.md").write_text("mine\n")
    with RunFolder(run) as folder:
        folder.begin(Tokenizer.load(small_data / "tokenizer"))
    assert [p.name for p in (run / "tensorboard").iterdir()] == ["notes.md"]


# --- continued pretraining ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def new_text(small_data, tmp_path_factory):
    "Shards of the multilingual corpus made with small_data's tokenizer: the new text to continue on."
    root = tmp_path_factory.mktemp("new-text")
    write_multilingual(root / "texts", documents=6)
    config = DataConfig(
        corpus=str(root / "texts"), tokenizer=small_data / "tokenizer", out=root / "shards", val_fraction=0.34
    )
    prepare(config, progress=False)
    return root / "shards"


def test_a_continued_run_starts_from_the_old_runs_best_weights(small_data, new_text, tmp_path):
    train(tiny(small_data, tmp_path / "old"), log=None, progress=False)
    best, _, meta = load_trained(tmp_path / "old", "best")
    continued = tiny(small_data, tmp_path / "new", shards=str(new_text), init_from=str(tmp_path / "old"))
    model = GPT(continued.model_config())
    assert init_from_run(model, continued.init_from, Tokenizer.load(continued.tokenizer)) == meta
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), best.state_dict().values()))
    fresh = train(replace(continued, init_from="", out=str(tmp_path / "fresh")), log=None, progress=False)
    history = train(continued, log=None, progress=False)
    first = [r["loss"] for r in history if r["kind"] == "train"][0]
    assert first < [r["loss"] for r in fresh if r["kind"] == "train"][0], "trained weights, not drawn ones"
    assert "new run (from the best checkpoint of" in history[0]["message"]


def test_a_continued_run_resumes_from_its_own_checkpoint_even_when_the_old_run_is_gone(
    small_data, new_text, tmp_path
):
    train(tiny(small_data, tmp_path / "old"), log=None, progress=False)
    continued = tiny(small_data, tmp_path / "a", shards=str(new_text), init_from=str(tmp_path / "old"))
    full = train(continued, log=None, progress=False)
    interrupted = replace(continued, out=str(tmp_path / "b"))
    train(interrupted, until_step=4, log=None, progress=False)
    shutil.move(tmp_path / "old", tmp_path / "moved")  # the weights it started from: never read again
    resumed = train(interrupted, log=None, progress=False)
    assert [r["loss"] for r in resumed if r["kind"] == "train"] == [
        r["loss"] for r in full if r["kind"] == "train"
    ]
    with pytest.raises(CheckpointError, match="init_from"):  # a resume is the same run: the same init_from
        train(replace(interrupted, init_from=""), log=None, progress=False)


def test_train_start_init_from_reports_bits_per_byte_on_the_old_and_new_text_before_and_after(
    small_data, new_text, tmp_path
):
    old = tmp_path / "old"
    train(tiny(small_data, old), log=None, progress=False)
    flags = [
        "--shards",
        str(new_text),
        "--tokenizer",
        str(small_data / "tokenizer"),
        "--out",
        str(tmp_path / "new"),
    ]
    flags += ["--vocab-size", "300", "--context", "32", "--micro-batch", "4", "--max-steps", "8"]
    flags += ["--eval-every", "4", "--eval-batches", "2", "--precision", "fp32", "--init-from", str(old)]
    status, out = gptlib_main(["train", "start", "--preset", "tiny", *flags])
    assert status == 0, out
    table = out.split("continued pretraining: bits per byte over the held-out text")[1].splitlines()
    rows = {line.split()[1]: line for line in table[1:3]}  # "the old run's ...", "this run's ..."
    cfg = tiny(small_data, tmp_path / "new", shards=str(new_text), init_from=str(old), eval_every=4)
    tokenizer = Tokenizer.load(small_data / "tokenizer")
    before, after = load_trained(old)[0], load_trained(tmp_path / "new")[0]
    for row, shards in (("old", small_data / "shards"), ("run's", new_text)):
        figures = [held_out_bpb(model, shards, tokenizer, cfg) for model in (before, after)]
        expected = f"{figures[0]:.4f} -> {figures[1]:.4f}"
        assert expected in rows[row] and str(shards) in rows[row]


@pytest.fixture(scope="module")
def other_tokenizer(new_text, tmp_path_factory):
    "Another tokenizer of 300 ids (trained on the new text) and the new text's shards made with it."
    root = tmp_path_factory.mktemp("other-tokenizer")
    texts = new_text.parent / "texts"
    Tokenizer.train([p.read_text() for p in sorted(texts.glob("*.txt"))], 300, progress=False).save(
        root / "tok"
    )
    config = DataConfig(corpus=str(texts), tokenizer=root / "tok", out=root / "shards", val_fraction=0.34)
    prepare(config, progress=False)
    return root


@pytest.mark.parametrize(
    "case, message",
    [
        ("shape", r"--init-from .*old: its model has another shape \(n_layer 2 vs 3 here\)"),
        ("tokenizer", r"--init-from .*old: it was trained with another tokenizer"),
        ("no checkpoint", r"empty has no readable checkpoint"),
    ],
)
def test_a_continued_run_that_cannot_start_from_the_old_weights_is_refused_in_one_line(
    small_data, new_text, other_tokenizer, tmp_path, capsys, case, message
):
    old = tmp_path / "old"
    train(tiny(small_data, old, max_steps=2), log=None, progress=False)
    (tmp_path / "empty").mkdir()
    shards, tokenizer = new_text, small_data / "tokenizer"
    if case == "tokenizer":
        shards, tokenizer = other_tokenizer / "shards", other_tokenizer / "tok"
    argv = ["train", "start", "--preset", "tiny", "--shards", str(shards), "--tokenizer", str(tokenizer)]
    argv += ["--out", str(tmp_path / "new"), "--vocab-size", "300", "--context", "32", "--micro-batch", "4"]
    argv += ["--n-layer", "3" if case == "shape" else "2"]
    argv += ["--init-from", str(tmp_path / "empty" if case == "no checkpoint" else old)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and re.search(message, err), err
    assert not (tmp_path / "new").exists(), "refused before any work"


@pytest.mark.parametrize("preset", ["cpu", "gpt-25m"])
def test_the_run_says_how_many_training_tokens_each_parameter_gets(preset):
    """Before training, `run` says what the data is worth to the model: tokens per parameter, its parameters
    counted as the model counts them, and a word when the text is far below Chinchilla's 20."""
    from gptlib.pipeline import tokens_per_parameter
    from gptlib.train_config import make_model

    cfg = TrainConfig.preset(preset)
    params = make_model(cfg).num_params(False)  # the `cpu` preset's untied head counts
    line = tokens_per_parameter(cfg, 1_260_000)
    assert f"1,260,000 training tokens for {params:,d} parameters: {1_260_000 / params:.2g}" in line, line
    assert "small for this model" in line
    assert "small" not in tokens_per_parameter(cfg, 40 * params)
