"""gptlib.files: a failed write names its file and leaves the final name as it was; checked documents."""

from __future__ import annotations

import errno
import json
import os
import re

import pytest

from gptlib.errors import GptlibError
from gptlib.files import DocumentError, atomic_open, atomic_write, read_json_document


def _full_disk() -> OSError:
    "The error a `write()` raises on a full disk: errno and message, but no file name."
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_inside_the_block_names_the_file_and_leaves_nothing(tmp_path):
    target = tmp_path / "train.bin"
    target.write_bytes(b"old")
    with pytest.raises(OSError) as caught:
        with atomic_open(target) as f:
            f.write(b"new")
            raise _full_disk()
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["train.bin"]


def test_a_failing_flush_names_the_file(tmp_path, monkeypatch):
    def fsync(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError) as caught:
        atomic_write(tmp_path / "a.json", b"{}")
    assert caught.value.filename == str(tmp_path / "a.json") and not list(tmp_path.iterdir())


def test_a_read_error_inside_the_block_is_not_blamed_on_the_file_written(tmp_path):
    # An input/output error may come from reading another file in the block: naming the target would mislead.
    with pytest.raises(OSError) as caught:
        with atomic_open(tmp_path / "out.bin"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
    assert caught.value.filename is None
    with pytest.raises(OSError) as caught:  # an error that names its own file keeps it
        with atomic_open(tmp_path / "out.bin"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/elsewhere/stream.tok")
    assert caught.value.filename == "/elsewhere/stream.tok"


def test_a_damaged_document_is_a_gptlib_error_naming_the_file(tmp_path):
    path = tmp_path / "manifest.json"
    for text, problem in [
        ("{", "not valid JSON"),
        ('{"format": "other", "version": 1}', "is not a gptlib-thing file"),
        ('{"format": "gptlib-thing", "version": 9}', "this gptlib reads version 1"),
        ('{"format": "gptlib-thing", "version": 1}', "lacks the field(s) ['splits']"),
    ]:
        path.write_text(text)
        with pytest.raises(DocumentError, match=re.escape(problem)) as caught:
            read_json_document(path, format="gptlib-thing", version=1, required=("splits",))
        assert str(path) in str(caught.value) and isinstance(caught.value, GptlibError)
    path.write_text(json.dumps({"format": "gptlib-thing", "version": 1, "splits": {}}))
    assert read_json_document(path, format="gptlib-thing", version=1, required=("splits",))["splits"] == {}
