"""The shard folder: manifest, verification, reuse, the lock, work folders, publishing.

Hand-written plumbing, not generated from a notebook. Notebook 02 (`gptlib.data`) teaches the idea: documents
framed, shuffled, split and written as DataTrove shards, in two passes. This module keeps the folder they live
in honest, so that the idea's code never has to think about it:

- `new_manifest` describes a finished preparation (format, tokenizer, token dtype, the permutation, and every
  shard file with its size and sha256); `read_manifest` reads one back with suspicion;
- `verify_split` checks a split's files against the manifest, and `check_made_by` refuses the shards of
  another tokenizer;
- `preparation_key` and `finished`: a folder made from the same inputs, still intact, is reused as it is;
- `building` refuses a folder holding files gptlib did not write, takes the folder's lock and gives a fresh
  work folder; `publish` swaps the finished splits in and writes the manifest last.

The one rule behind all of it: a folder is a dataset only while its manifest is there and agrees with its
files. The manifest is written last and removed first when a dataset is replaced, so a process killed at any
moment leaves either the old dataset, the new one, or a folder that every reader refuses ("no manifest.json").
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from . import __version__
from .errors import GptlibError
from .files import (
    FolderLock,
    atomic_open,
    read_json_document,
    remove_stale_temporaries,
    rename,
    replace_folder,
    sha256_bytes,
    sha256_file,
    temporary_of,
    write_json,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "PERMUTATION_NAME",
    "SPLITS",
    "SHARD_SUFFIXES",
    "ShardError",
    "file_record",
    "shard_record",
    "new_manifest",
    "read_manifest",
    "verify_split",
    "check_made_by",
    "preparation_key",
    "finished",
    "refuse_strangers",
    "building",
    "publish",
]

FORMAT, FORMAT_VERSION = "gptlib-shards", 1
MANIFEST_NAME, PERMUTATION_NAME = "manifest.json", "permutation.npy"
SPLITS = ("train", "val")
SHARD_SUFFIXES = (".ds", ".ds.index", ".ds.metadata")  # DataTrove's three files of a shard, in writing order


class ShardError(GptlibError, ValueError):
    """Shards that cannot be made or used, and why: a corpus too small to split, an output folder holding
    files gptlib did not write, or shard files missing, truncated, corrupted, badly described or made by
    another tokenizer. The message names the file or folder."""


# --- what the manifest records ----------------------------------------------------------------------------


def file_record(folder: Path, path: Path, sha256: str | None = None) -> dict:
    """A file's entry in the manifest: its path relative to `folder`, its size and its sha256 (computed here
    unless given)."""
    return {
        "path": path.relative_to(folder).as_posix(),
        "bytes": path.stat().st_size,
        "sha256": sha256 or sha256_file(path),
    }


def shard_record(root: Path, folder: Path, name: str, dtype) -> dict:
    """The manifest's record of the shard `folder/name` just written: its token and document counts, read from
    the sizes of its `.ds` (`dtype` tokens) and `.ds.index` (one uint64 a document) files, and each of its
    three files with a path relative to `root`. Hashing the files once more here costs one read of data the
    page cache still holds; it keeps the writer of a shard free of bookkeeping."""
    dtype = np.dtype(dtype)
    paths = [Path(folder) / f"{name}{suffix}" for suffix in SHARD_SUFFIXES]
    n_tokens, odd_bytes = divmod(paths[0].stat().st_size, dtype.itemsize)
    n_documents, odd_index = divmod(paths[1].stat().st_size, 8)
    assert n_documents > 0 and not odd_bytes and not odd_index, f"{paths[0]} is not a whole shard"
    return {
        "name": name,
        "n_tokens": n_tokens,
        "n_documents": n_documents,
        "files": [file_record(Path(root), path) for path in paths],
    }


def new_manifest(
    work: Path, order, splits: dict, *, tokenizer, name: str, dtype, framing: str, shuffle: dict, **fields
) -> dict:
    """The manifest of the `splits` (their shard records) just written in `work`, after saving the document
    `order` there as `permutation.npy`. `tokenizer` made the shards (its fingerprint, size and special ids
    are recorded), `name` is what their `.ds.metadata` files call it, and `fields` (how they were made) come
    first."""
    dtype = np.dtype(dtype)
    with atomic_open(work / PERMUTATION_NAME) as f:
        np.save(f, order, allow_pickle=False)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created_by": f"gptlib {__version__}",
        **fields,
        "tokenizer": {
            "name": name,
            "fingerprint": tokenizer.fingerprint(),
            "n_vocab": tokenizer.n_vocab,
            "bos_id": tokenizer.bos_id,
            "eos_id": tokenizer.eos_id,
        },
        "tokens": {"dtype": dtype.name, "token_size": dtype.itemsize, "framing": framing},
        "shuffle": {**shuffle, "file": file_record(work, work / PERMUTATION_NAME)},
        "splits": splits,
    }


# --- reading it back --------------------------------------------------------------------------------------


def read_manifest(folder) -> dict:
    """The validated manifest of a shard folder; `ShardError` naming the problem otherwise. Validated means:
    JSON of our format and version, a token dtype that holds the tokenizer's ids, and for each split at least
    one shard, each shard's three files under their expected names, and token counts that add up."""
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        raise ShardError(
            f"no {MANIFEST_NAME} in {folder}: it was never prepared, or its preparation did not finish"
        )
    manifest = read_json_document(
        path,
        format=FORMAT,
        version=FORMAT_VERSION,
        version_key="format_version",
        required=("tokenizer", "tokens", "splits"),
        error=ShardError,
        what="manifest",
    )
    try:
        problem = _manifest_problem(manifest)
    except (KeyError, TypeError, ValueError) as e:  # a field missing, or of the wrong type
        problem = f"missing or bad field ({type(e).__name__}: {e})"
    if problem:
        raise ShardError(f"{path} is malformed: {problem}")
    return manifest


def _manifest_problem(manifest: dict) -> str | None:
    "What is wrong with a manifest everything else relies on, or None."
    dtype, tokenizer = np.dtype(manifest["tokens"]["dtype"]), manifest["tokenizer"]
    if dtype not in (np.uint16, np.uint32) or manifest["tokens"]["token_size"] != dtype.itemsize:
        return f"tokens of {dtype.name} and token_size {manifest['tokens']['token_size']!r}"
    if not 0 < tokenizer["n_vocab"] <= 2 ** (8 * dtype.itemsize):  # every id must fit the dtype
        return f"tokens of {dtype.name} cannot hold the ids of a tokenizer of {tokenizer['n_vocab']} ids"
    for split in SPLITS:
        entry, name = manifest["splits"][split], re.compile(rf"{split}_\d{{5,}}")
        for shard in entry["shards"]:
            paths = [f"{split}/{shard['name']}{suffix}" for suffix in SHARD_SUFFIXES]
            typed = all(isinstance(f["bytes"], int) and isinstance(f["sha256"], str) for f in shard["files"])
            if not (name.fullmatch(shard["name"]) and [f["path"] for f in shard["files"]] == paths and typed):
                return f"bad record for shard {shard.get('name')!r}"
        if not entry["shards"] or sum(s["n_tokens"] for s in entry["shards"]) != entry["n_tokens"]:
            return f"split {split!r} has no shard, or a token count that disagrees with its shards"
    return None if isinstance(tokenizer["fingerprint"], str) else "the tokenizer has no fingerprint"


# (path, size, mtime_ns, inode) -> the sha256 already checked in this process. Hashing a split of many
# gigabytes takes a while, and a training run opens its splits more than once (loader, validation); a file
# whose size, modification time and inode are unchanged is not read again.
_VERIFIED: dict[tuple, str] = {}


def _check_file(folder: Path, record: dict, checksums: bool) -> Path:
    "The file of a manifest `record`, once it has the recorded size and (with `checksums`) sha256."
    path = folder / record["path"]
    if not path.is_file():
        raise ShardError(f"{path} is missing (listed in {folder / MANIFEST_NAME})")
    stat = path.stat()
    if stat.st_size != record["bytes"]:
        kind = "truncated" if stat.st_size < record["bytes"] else "longer than recorded"
        raise ShardError(f"{path} is {kind}: {stat.st_size:,d} bytes, the manifest says {record['bytes']:,d}")
    seen = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if checksums and _VERIFIED.get(seen) != record["sha256"]:
        actual = sha256_file(path)
        if actual != record["sha256"]:
            raise ShardError(
                f"{path} is corrupted: sha256 {actual[:16]}…, the manifest says {record['sha256'][:16]}…"
            )
        _VERIFIED[seen] = actual
    return path


def verify_split(folder, manifest: dict, split: str, checksums: bool = True) -> list[dict]:
    """Check every shard file of `split` against the manifest: present, of the recorded size, the token file a
    whole number of tokens of the recorded dtype, the index one uint64 a document, and (unless `checksums` is
    false: sizes only) the recorded sha256. Returns the split's shard records."""
    folder, dtype = Path(folder), np.dtype(manifest["tokens"]["dtype"])
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    shards = manifest["splits"][split]["shards"]
    for shard in shards:
        tokens, index, _ = (_check_file(folder, f, checksums) for f in shard["files"])
        size = tokens.stat().st_size
        if size != shard["n_tokens"] * dtype.itemsize:  # sizes agree with the record, not with the dtype
            raise ShardError(
                f"{tokens} holds {size:,d} bytes, not {shard['n_tokens']:,d} {dtype.name} tokens: wrong dtype"
            )
        if index.stat().st_size != 8 * shard["n_documents"]:
            raise ShardError(f"{index} does not hold {shard['n_documents']} uint64 document ends")
    return shards


def check_made_by(folder, manifest: dict, fingerprint: str) -> None:
    """Refuse (`ShardError`) the shards of `folder` unless the tokenizer whose fingerprint is `fingerprint`
    made them: another tokenizer's ids would decode to other text, and train a model on noise without an
    error."""
    expected = manifest["tokenizer"]["fingerprint"]
    if fingerprint != expected:
        raise ShardError(
            f"tokenizer mismatch: the shards in {folder} were made by tokenizer {expected[:16]}…, this one "
            f"is {fingerprint[:16]}…; prepare the shards again with this tokenizer"
        )


# --- reuse ------------------------------------------------------------------------------------------------


def preparation_key(inputs: dict) -> str:
    """sha256 of every input the shards depend on (`inputs`, plus the format version): the same key means the
    same shards, so a folder that holds them need not be made again."""
    return sha256_bytes(json.dumps({"format_version": FORMAT_VERSION, **inputs}, sort_keys=True).encode())


def finished(out, key: str) -> dict | None:
    """The manifest of `out` when it holds a complete dataset made from the inputs of `key` whose files all
    verify (sha256 included); None when there is no manifest, another one, or a damaged file: make it
    again."""
    with contextlib.suppress(ShardError):
        manifest = read_manifest(out)
        if manifest.get("key") == key and all(verify_split(out, manifest, split) for split in SPLITS):
            return manifest
    return None


# --- writing a new dataset, without touching what is not ours ----------------------------------------------

# Where a preparation (named after its key) or an import builds its splits, inside the shard folder: on the
# same file system, so that publishing is a rename.
_WORK_FOLDER = re.compile(r"\.work-([0-9a-f]{16}|import)")
# Every name gptlib itself may leave at the top of a shard folder (and their temporaries: `temporary_of`).
_OWN_NAME = re.compile(rf"manifest\.json|permutation\.npy|train|val|\.lock|{_WORK_FOLDER.pattern}")


def _own(name: str) -> bool:
    "Whether `name`, at the top of a shard folder, is one gptlib writes there (or a temporary of one)."
    return bool(_OWN_NAME.fullmatch(name) or _OWN_NAME.fullmatch(temporary_of(name) or "\0"))


def refuse_strangers(out: Path) -> None:
    """Refuse (`ShardError`, naming them) to write into `out` while it holds what gptlib did not write there.
    In `train/` and `val/`, a file is ours only when the manifest records it (a file merely *named*
    `train_labels.csv` is not a shard). Without a readable manifest (say, a preparation killed while
    publishing) the split folders may hold only shard names, and the top of `out` only gptlib's own names."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ShardError(f"{out} exists and is not a folder")
    found, manifest = [], None
    try:
        manifest = read_manifest(out) if (out / MANIFEST_NAME).exists() else None
    except ShardError:  # a manifest gptlib cannot read is not its own to replace
        found.append(MANIFEST_NAME)
    recorded = (
        {f["path"] for s in SPLITS for sh in manifest["splits"][s]["shards"] for f in sh["files"]}
        if manifest
        else ()
    )
    if not manifest and out.exists():
        found += [p.name for p in sorted(out.iterdir()) if not _own(p.name)]
    for split in SPLITS:  # (a file named like a split folder is refused by replace_folder, without harm)
        folder = out / split
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            name = f"{split}/{path.name}"
            ours = (
                name in recorded
                if manifest
                else re.fullmatch(rf"{split}_\d{{5,}}\.ds(\.index|\.metadata)?", path.name)
            )
            if not (ours and path.is_file()):
                found.append(name)
    if found:
        listed = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
        raise ShardError(
            f"refusing to write shards into {out}: it holds files gptlib did not write ({listed}); "
            "move them away or choose another folder"
        )


@contextlib.contextmanager
def building(out, key: str | None) -> Iterator[Path]:
    """Where a new dataset for the shard folder `out` is built: refuses a folder holding files gptlib did not
    write (before any work), holds the folder's lock for the whole block (a second writer is refused; a killed
    one leaves it free) and yields a fresh work folder inside `out`, `.work-<key>` (`.work-import` for
    `key=None`). Whatever an earlier, killed build left there is removed first: it is gptlib's own, and this
    process holds the lock."""
    out = Path(out)
    refuse_strangers(out)
    with FolderLock(out, "shard folder"):
        work = out / (f".work-{key[:16]}" if key else ".work-import")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        yield work


def publish(work: Path, out: Path, manifest: dict) -> None:
    """Move the finished splits and permutation from `work` into `out` and write `manifest` there, then
    remove every work folder. In this order: the old manifest first (from then on `out` is not a dataset),
    each split folder in one rename, the permutation, the new manifest last. Called inside `building`, which
    holds the lock."""
    refuse_strangers(out)  # again: files may have appeared while the shards were being written
    (out / MANIFEST_NAME).unlink(missing_ok=True)
    for split in SPLITS:
        replace_folder(work / split, out / split)
    rename(work / PERMUTATION_NAME, out / PERMUTATION_NAME)
    write_json(out / MANIFEST_NAME, manifest)
    # this preparation's work folder, and any left by an earlier, different one or by an import
    for work_folder in [p for p in out.iterdir() if _WORK_FOLDER.fullmatch(p.name)]:
        shutil.rmtree(work_folder, ignore_errors=True)
    remove_stale_temporaries(out)  # e.g. an old split folder that a killed run had moved aside
