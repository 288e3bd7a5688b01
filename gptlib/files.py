"""Files written safely and read with suspicion: every write, rename, hash and lock.

Hand-written plumbing, not generated from a notebook: it teaches nothing about GPTs. The tokenizer, the
shards, the checkpoints and the run pipeline all go through it, so each rule below holds everywhere:

- a file is written under a unique temporary name in its own folder, flushed to disk and renamed into
  place (`atomic_open`, `atomic_write`, `write_json`): a kill or a full disk never leaves a half-written
  file under the final name, and the error of a failed write names the file (`No space left on device:
  PATH`), which a bare `write()` does not;
- a finished folder takes the place of an older one in one rename (`replace_folder`), and the old one is
  deleted only once the new one is in place;
- leftovers of processes that died mid-write are recognised by the pid in their name and removed
  (`remove_stale_temporaries`);
- a versioned JSON document is checked against its format, version and required fields before any of it
  is used (`read_json_document`);
- one writer per folder (`FolderLock`): a second process is refused, a lock left by a dead one is free, and
  a writer refused or interrupted before it wrote anything into a new folder leaves neither lock nor folder.
  The lock is POSIX's `flock`, like the liveness test of a pid: gptlib runs on Linux and macOS.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import itertools
import json
import os
import re
import secrets
import shutil
from pathlib import Path

from .errors import GptlibError

__all__ = [
    "new_sha256",
    "sha256_bytes",
    "sha256_file",
    "temporary_name",
    "temporary_of",
    "naming",
    "atomic_open",
    "atomic_write",
    "write_json",
    "rename",
    "replace_folder",
    "build_folder",
    "remove_stale_temporaries",
    "read_json_document",
    "DocumentError",
    "LOCK_FILE",
    "FolderLock",
    "LockedError",
]


# --- checksums --------------------------------------------------------------------------------------


def new_sha256():
    "A running sha256 (`update(bytes)`, `hexdigest()`), for data hashed while it is written."
    return hashlib.sha256()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path) -> str:
    "The sha256 of a file's bytes, read a block at a time; a failed read names the file."
    digest = hashlib.sha256()
    with naming(path), open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- writing ------------------------------------------------------------------------------------------

_TEMPORARY = re.compile(r"^\.(.+)\.tmp-(\d+)-[0-9a-f]{8}$")  # what `temporary_name` makes: NAME, PID


def temporary_name(path) -> Path:
    "A fresh hidden name beside `path` that tells which process made it: `.NAME.tmp-PID-RANDOM`."
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def temporary_of(name: str) -> str | None:
    "The NAME a `temporary_name` called `name` stands in for; None when `name` is not one."
    match = _TEMPORARY.match(name)
    return match.group(1) if match else None


def _fsync_folder(folder: Path) -> None:
    "Make a rename in `folder` durable (POSIX; a no-op where folders cannot be opened)."
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# A read never fails with these: raised inside an `atomic_open` block, they come from writing its file.
_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _name_the_file(error: OSError, path: Path) -> None:
    "Let `error` name `path` when it names no file (the errors of `read()`, `write()`, `fsync()` name none)."
    if error.filename is None:
        error.filename = str(path)


@contextlib.contextmanager
def naming(path):
    """Within the block, an `OSError` that names no file is made to name `path`: for a block that reads or
    writes that one file, so that `Input/output error` says where."""
    try:
        yield
    except OSError as e:
        _name_the_file(e, Path(path))
        raise


@contextlib.contextmanager
def atomic_open(path, durable: bool = True):
    """Open `path` for binary writing under a temporary name; on success flush, fsync (when `durable`) and
    rename it into place. On any error the final name is untouched and the temporary file is removed; a
    failed write or flush is an `OSError` that names `path`."""
    path = Path(path)
    partial = temporary_name(path)
    try:
        try:
            with open(partial, "xb") as f:
                yield f
                with naming(path):  # the data of this file reaching the disk
                    f.flush()
                    if durable:
                        os.fsync(f.fileno())
        except OSError as e:  # a write of the block, or `close()` writing what the failed flush left
            if e.errno in _WRITE_ERRORS:
                _name_the_file(e, path)
            raise
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if durable:
        _fsync_folder(path.parent)


def atomic_write(path, data: bytes, durable: bool = True) -> None:
    with atomic_open(path, durable) as f:
        f.write(data)


def write_json(path, document, durable: bool = True) -> None:
    "`document` as indented JSON, written atomically."
    atomic_write(path, (json.dumps(document, indent=1) + "\n").encode("utf-8"), durable)


def rename(source, target) -> None:
    "Rename `source` to `target` (replacing a file there), durably."
    os.replace(source, target)
    _fsync_folder(Path(target).parent)


def replace_folder(new, final) -> None:
    """Put the finished folder `new` at `final` (same parent folder). An existing `final` is first moved
    aside under a temporary name and deleted only after `new` is in place, so `final` is always either
    the old folder or the new one."""
    new, final = Path(new), Path(final)
    if final.exists() and not final.is_dir():
        raise NotADirectoryError(f"{final} exists and is not a folder")
    old = temporary_name(final) if final.exists() else None
    if old is not None:
        os.replace(final, old)
    try:
        os.replace(new, final)
    except BaseException:
        if old is not None:
            os.replace(old, final)
        raise
    _fsync_folder(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def build_folder(final):
    """Build a folder under a temporary name beside `final` (the block gets its path) and put it in place
    with `replace_folder` when the block ends; on any error the half-built folder is removed and `final` is
    left as it was."""
    final = Path(final)
    work = temporary_name(final)
    work.mkdir(parents=True)
    try:
        yield work
        replace_folder(work, final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def remove_stale_temporaries(folder, recursive: bool = False) -> list[Path]:
    """Delete the temporary files and folders (`temporary_name`) in `folder` (and below it, when `recursive`)
    whose process is gone, and those of `folder` itself beside it (a copy of it being built, or an old one
    moved aside: `build_folder`, `replace_folder`); return them. Beside it, only `folder`'s own temporaries
    are touched, never another name's."""
    folder = Path(folder)
    removed = []
    if not folder.is_dir():
        return removed
    own = []
    with contextlib.suppress(OSError):  # a parent that cannot be listed holds nothing known to be ours
        own = [entry for entry in folder.parent.iterdir() if temporary_of(entry.name) == folder.name]
    for entry in own + list(folder.rglob(".*.tmp-*") if recursive else folder.iterdir()):
        match = _TEMPORARY.match(entry.name)
        if match and entry.exists() and not _alive(int(match.group(2))):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


# --- reading --------------------------------------------------------------------------------------------


class DocumentError(GptlibError, ValueError):
    "A JSON document gptlib reads is missing, damaged, or of another format or version."


def read_json_document(
    path,
    *,
    format: str,
    version: int,
    required=(),
    error=DocumentError,
    version_key: str = "version",
    what: str = "file",
) -> dict:
    """The JSON object in `path`, checked before use: valid UTF-8 JSON, an object, `"format": format`,
    `version_key: version` and every field in `required`. Anything else raises `error` naming the file
    and the problem."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{path} is missing")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise error(f"{path} is not UTF-8 text (corrupted?): {e}") from e
    except json.JSONDecodeError as e:
        raise error(f"{path} is not valid JSON (truncated or corrupted?): {e}") from e
    except OSError as e:
        raise error(f"{path} cannot be read: {e.strerror or e}") from e
    if not isinstance(document, dict) or document.get("format") != format:
        raise error(f"{path} is not a {format} {what}")
    if document.get(version_key) != version:
        raise error(
            f"{path} has {version_key} {document.get(version_key)!r}; this gptlib reads version {version}"
        )
    missing = [key for key in required if key not in document]
    if missing:
        raise error(f"{path} lacks the field(s) {missing}")
    return document


# --- one writer per folder --------------------------------------------------------------------------


LOCK_FILE = ".lock"  # in every folder gptlib writes with a lock: what a folder's checks count as no content


class LockedError(GptlibError, RuntimeError):
    "Another live process is writing to the folder."


_LOCK_TRIES = 100  # FolderLock: how often a lock file removed under it is opened again


class FolderLock:
    """An exclusive lock on `folder/.lock` for the life of a `with` block. The operating system releases it
    when the process dies however it dies (`fcntl.flock`), so a crashed writer never blocks the next one.
    The file holds the owner's pid, for the error message.

    A block that fails (an error, Ctrl-C) in a folder that was `fresh` (missing, or holding nothing but a
    lock) and still holds nothing but the lock leaves no lock behind, nor the folder when the lock made it:
    a command refused or interrupted before it wrote anything leaves the disk as it found it. A kill leaves
    the lock, which the next writer takes."""

    def __init__(self, folder, what: str = "folder"):
        self.path, self.what, self._fd = Path(folder) / LOCK_FILE, what, None
        self.fresh, self._made = False, []

    def __enter__(self) -> FolderLock:
        # A lock file its holder removed (`_take_back`, a fresh folder given back) after this process opened
        # it is locked in vain: a lock on a removed file keeps no one out. Then the path is opened again
        # (its folder made again if it went too); each retry needs another process to have given a fresh
        # folder back in between, so a few are plenty
        self._made = []
        for _ in range(_LOCK_TRIES):
            fd = self._open_locked()
            try:
                held = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                held = False  # the path's file was removed: open it again
            except BaseException:
                os.close(fd)
                raise
            if not held:
                os.close(fd)
                continue
            try:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            except BaseException:  # a full disk, Ctrl-C: nothing held, and a fresh folder given back
                if self.fresh:
                    self._take_back()
                os.close(fd)
                raise
            self._fd = fd
            return self
        raise LockedError(f"the lock of the {self.what} {self.path.parent} keeps being removed; try again")

    def _open_locked(self) -> int:
        "Open the lock file (making its folder) and lock it, or raise `LockedError` naming the holder."
        folder = self.path.parent
        # the folders `mkdir` is about to make, with those an earlier try made, the deepest first
        made = itertools.takewhile(lambda p: not p.exists(), [folder, *folder.parents])
        self._made = sorted({*made, *self._made}, key=lambda p: len(p.parts), reverse=True)
        self.fresh = bool(self._made) or (
            folder.is_dir() and all(entry.name == LOCK_FILE for entry in folder.iterdir())
        )
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            with contextlib.suppress(OSError, ValueError):
                owner = int(self.path.read_text().split()[0])
                raise LockedError(
                    f"another process (pid {owner}) is writing to the {self.what} {self.path.parent}; "
                    "wait for it to finish or stop it"
                ) from None
            raise LockedError(f"another process is writing to the {self.what} {self.path.parent}") from None
        return fd

    def __exit__(self, exc_type, *exc) -> bool:
        if self._fd is not None:
            if exc_type is not None and self.fresh:
                self._take_back()
            os.close(self._fd)  # closing releases the lock; the file stays (removing it then would race)
            self._fd = None
        return False

    def _take_back(self) -> None:
        """Remove the lock of a fresh folder the block left empty, and the folders this lock made. The lock
        file goes while it is still held, so no other process holds it meanwhile: one that opens it later
        makes a new one (and a folder no longer empty stays)."""
        with contextlib.suppress(OSError):
            if [entry.name for entry in self.path.parent.iterdir()] == [LOCK_FILE]:
                self.path.unlink()
                for folder in self._made:
                    folder.rmdir()
