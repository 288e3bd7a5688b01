"""Other tools' formats of the shards: nanoGPT's and llm.c's token files, both ways.

Hand-written plumbing, not generated from a notebook: the idea lives in 02_data (shards are token ids on
disk); this module only translates them, and checks the translation. (The tokenizer's own files for
tiktoken and Hugging Face are written with it, by `gptlib.tokenizer.save_tokenizer`.)

- `export_nanogpt` / `export_llmc`: nanoGPT's headerless `train.bin` / `val.bin`, llm.c's headed `.bin`, with
  `gptlib-export.json` beside them (which tokenizer and which shards made each file).
- `import_bins`: such files back into a shard folder, refused when they were not made by the tokenizer (the
  export record says so, or, without one, the ids do not survive decoding and encoding again).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from .data import plan_shards, token_dtype, tokenizer_name, write_shard
from .files import (
    atomic_open,
    naming,
    new_sha256,
    read_json_document,
    remove_stale_temporaries,
    sha256_file,
    write_json,
)
from .shards import SPLITS, ShardError, building, new_manifest, publish, read_manifest, verify_split
from .tokenizer import Tokenizer

__all__ = [
    "LLMC_MAGIC",
    "LLMC_VERSION",
    "LLMC_HEADER_INTS",
    "EXPORT_RECORD",
    "export_nanogpt",
    "export_llmc",
    "read_nanogpt_bin",
    "read_llmc_bin",
    "document_ends",
    "check_own_encoding",
    "import_bins",
]

# --- shards: nanoGPT and llm.c ----------------------------------------------------------------------------

LLMC_MAGIC, LLMC_VERSION, LLMC_HEADER_INTS = 20240520, 1, 256
EXPORT_RECORD = "gptlib-export.json"  # beside exported .bin files: the tokenizer and the shards of each one
_EXPORT_FORMAT, _EXPORT_VERSION = "gptlib-bin-export", 1


def _export_record(folder: Path) -> dict:
    "The entries (file name -> record) of `folder`'s export record; empty when it has none gptlib can read."
    try:
        files = read_json_document(
            folder / EXPORT_RECORD, format=_EXPORT_FORMAT, version=_EXPORT_VERSION, required=("files",)
        )["files"]
    except ValueError:
        return {}
    return (
        {name: entry for name, entry in files.items() if isinstance(entry, dict)}
        if isinstance(files, dict)
        else {}
    )


def _blocks(path: Path, size: int = 1 << 22):
    "The bytes of the file `path`, a block at a time; a failing read names the file (a failing write, not)."
    with naming(path), open(path, "rb") as f:
        yield from iter(lambda: f.read(size), b"")


def _export_bins(folder, out, names: dict[str, str], fmt: str, header=None) -> dict[str, Path]:
    """Write each split's tokens as `out / names[split]` (after `header(split)`'s bytes, when given): both
    files or neither. Then record them in `out/gptlib-export.json`, and remove the temporary files a killed
    export left there. A file in the way that gptlib did not export there is refused, never overwritten."""
    folder, out = Path(folder), Path(out)
    manifest = read_manifest(folder)
    if manifest["tokens"]["dtype"] != "uint16":
        raise ShardError(
            f"{fmt} stores uint16 tokens; the shards in {folder} are {manifest['tokens']['dtype']}"
        )
    if out.exists() and not out.is_dir():
        raise ShardError(f"{out} exists and is not a folder")
    record = _export_record(out)
    for name in names.values():
        target, entry = out / name, record.get(name, {})
        if target.exists() and not (
            target.is_file()
            and entry.get("bytes") == target.stat().st_size
            and entry.get("sha256") == sha256_file(target)
        ):
            raise ShardError(
                f"{target} exists and gptlib did not export it: move it away or choose another folder"
            )
    out.mkdir(parents=True, exist_ok=True)
    entries = {}
    with contextlib.ExitStack() as stack:  # every file under a temporary name until all are complete
        for split, name in names.items():
            f, digest = stack.enter_context(atomic_open(out / name)), new_sha256()
            for block in [header(split)] if header else []:
                f.write(block)
                digest.update(block)
            for shard in verify_split(folder, manifest, split):
                for block in _blocks(folder / shard["files"][0]["path"]):
                    f.write(block)
                    digest.update(block)
            entries[name] = {
                "format": fmt,
                "split": split,
                "bytes": f.tell(),
                "sha256": digest.hexdigest(),
                "tokenizer": manifest["tokenizer"]["fingerprint"],
                "key": manifest.get("key"),
            }
    write_json(
        out / EXPORT_RECORD,
        {"format": _EXPORT_FORMAT, "version": _EXPORT_VERSION, "files": {**record, **entries}},
    )
    remove_stale_temporaries(out)  # the half-written .bin files of an export that was killed
    return {split: out / name for split, name in names.items()}


def export_nanogpt(folder, out) -> dict[str, Path]:
    """Write nanoGPT's `train.bin` and `val.bin` (headerless uint16) from a prepared folder."""
    return _export_bins(folder, out, {split: f"{split}.bin" for split in SPLITS}, "nanogpt")


def export_llmc(folder, out, prefix: str = "gptlib") -> dict[str, Path]:
    """Write llm.c's `<prefix>_train.bin` / `<prefix>_val.bin`: 256 int32 header, then uint16 tokens."""
    n_tokens = {split: entry["n_tokens"] for split, entry in read_manifest(folder)["splits"].items()}

    def header(split: str) -> bytes:
        ints = np.zeros(LLMC_HEADER_INTS, dtype="<i4")
        ints[:3] = LLMC_MAGIC, LLMC_VERSION, n_tokens[split]
        return ints.tobytes()

    return _export_bins(folder, out, {split: f"{prefix}_{split}.bin" for split in SPLITS}, "llmc", header)


def read_nanogpt_bin(path) -> np.ndarray:
    """The tokens of a nanoGPT `.bin`, memory-mapped (uint16)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no nanoGPT file {path}")
    if path.stat().st_size % 2 or path.stat().st_size == 0:
        raise ShardError(f"{path} holds no tokens, or an odd number of bytes: not a file of uint16 tokens")
    tokens = np.memmap(path, dtype="<u2", mode="r").view(np.ndarray)
    if width := _wider_ints(tokens):
        raise ShardError(
            f"{path} holds {8 * width}-bit integers ({width} bytes each, the upper bytes all zero), not "
            "nanoGPT's uint16 tokens: write the ids as uint16 (numpy's `.astype(np.uint16)`) and import that"
        )
    return tokens


def _wider_ints(tokens: np.ndarray, sample: int = 4096) -> int | None:
    """4 or 8 when the file `tokens` were read from (as little-endian uint16) holds ints of that many bytes
    instead, the usual slip (numpy's default int64): the first `sample` values, grouped by that width, are
    zero but for the lowest uint16 of each group. None when they read as uint16 tokens."""
    for width in (8, 4):
        per = width // 2  # uint16 values per int
        head = np.asarray(tokens[: sample - sample % per])
        if len(tokens) % per == 0 and len(head) >= 16 * per:  # a few ids say little either way
            groups = head.reshape(-1, per)
            if groups[:, 0].any() and not groups[:, 1:].any():
                return width
    return None


def read_llmc_bin(path) -> np.ndarray:
    """The tokens of an llm.c `.bin` (version 1), memory-mapped after checking its header."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no llm.c file {path}")
    header_bytes = 4 * LLMC_HEADER_INTS
    if path.stat().st_size < header_bytes:
        raise ShardError(f"{path} is shorter than llm.c's {header_bytes}-byte header")
    header = np.fromfile(path, dtype="<i4", count=LLMC_HEADER_INTS)
    if header[0] != LLMC_MAGIC:
        raise ShardError(f"{path} is not an llm.c token file: magic {header[0]}, expected {LLMC_MAGIC}")
    if header[1] != LLMC_VERSION:
        raise ShardError(f"{path} is llm.c version {header[1]}; only version {LLMC_VERSION} (uint16) is read")
    n_tokens = int(header[2])
    if n_tokens < 1 or path.stat().st_size != header_bytes + 2 * n_tokens:
        body = path.stat().st_size - header_bytes
        held = f"the file holds {body // 2:,d}"
        if n_tokens > 0 and body in (4 * n_tokens, 8 * n_tokens):  # the ids written wider than uint16
            held = f"the file holds them in {body // n_tokens} bytes each, not as uint16"
        raise ShardError(f"{path}: the header says {n_tokens:,d} tokens, {held}")
    return np.memmap(path, dtype="<u2", mode="r", offset=header_bytes, shape=(n_tokens,)).view(np.ndarray)


def document_ends(tokens: np.ndarray, eos_id: int, block: int = 1 << 24) -> np.ndarray:
    """Cumulative document ends of a token stream: just after each `eos_id`, plus the end of the stream
    when it does not finish with one. Scans `block` tokens at a time."""
    ends = [np.flatnonzero(tokens[i : i + block] == eos_id) + (i + 1) for i in range(0, len(tokens), block)]
    ends = np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64)
    if len(tokens) and (len(ends) == 0 or ends[-1] != len(tokens)):
        ends = np.append(ends, len(tokens))
    return ends.astype(np.int64)


def check_own_encoding(
    tokens: np.ndarray,
    ends: np.ndarray,
    tokenizer: Tokenizer,
    source,
    samples: int = 8,
    max_tokens: int = 1 << 16,
) -> None:
    """Refuse token ids that `tokenizer` did not produce. BPE's output is a fixed point of decode-then-encode:
    decoding a document and encoding its text again gives the same ids back. Another tokenizer's ids almost
    never do (their bytes differ, so the text differs, so the merges differ). `samples` documents spread
    over the file are checked; one longer than `max_tokens` is cut there, and its last tenth, where the cut
    can change the tokens, is not compared."""
    starts = np.concatenate([[0], ends[:-1]])
    for d in np.unique(np.linspace(0, len(ends) - 1, samples).round().astype(int)).tolist():
        ids = tokens[starts[d] : min(ends[d], starts[d] + max_tokens)].tolist()
        cut = ends[d] - starts[d] > max_tokens
        ids = ids[1:] if ids[:1] == [tokenizer.bos_id] else ids
        ids = ids[:-1] if ids[-1:] == [tokenizer.eos_id] else ids
        again = tokenizer.encode(tokenizer.decode(ids))
        compared = len(ids) - len(ids) // 10 if cut else max(len(ids), len(again))
        if again[:compared] != ids[:compared]:
            first = next((i for i, (a, b) in enumerate(zip(ids, again)) if a != b), min(len(ids), len(again)))
            raise ShardError(
                f"{source} was not made by this tokenizer ({tokenizer.fingerprint()[:16]}…): document {d}'s "
                f"ids change when decoded and encoded again (from token {first} on); import it with the "
                "tokenizer that made it"
            )


def _check_made_by(source: Path, tokens: np.ndarray, ends: np.ndarray, tokenizer: Tokenizer) -> None:
    """Refuse `source` unless `tokenizer` made its ids: its export record says so, when the record still
    describes the file (same size and sha256); otherwise the ids must be the tokenizer's own encoding. A file
    shorter than the record says is refused even then: its ids are the tokenizer's, cut short (a copy that
    stopped half way), and would import as a smaller dataset without a word."""
    entry = _export_record(source.parent).get(source.name)
    size = source.stat().st_size
    if entry and entry.get("bytes") == size and entry.get("sha256") == sha256_file(source):
        if entry.get("tokenizer") != tokenizer.fingerprint():
            raise ShardError(
                f"{source} was exported from shards made by tokenizer {str(entry.get('tokenizer'))[:16]}…, "
                f"not by this one ({tokenizer.fingerprint()[:16]}…): import it with that tokenizer"
            )
        return
    check_own_encoding(tokens, ends, tokenizer, source)
    recorded = entry.get("bytes") if entry else None
    if isinstance(recorded, int) and not isinstance(recorded, bool) and size < recorded:
        raise ShardError(
            f"{source} holds {size:,d} bytes, but {source.parent / EXPORT_RECORD} records the {recorded:,d} "
            "bytes gptlib exported: it was cut short (an interrupted copy?); copy it again, or delete its "
            "entry in the record to import it as it is"
        )


def import_bins(
    train_bin, val_bin, out, tokenizer, *, fmt: str = "nanogpt", shard_tokens: int = 50_000_000
) -> dict:
    """Turn nanoGPT (`fmt="nanogpt"`) or llm.c (`fmt="llmc"`) train/val files made with `tokenizer` into a
    shard folder at `out`; returns its manifest. Both files are checked before anything is written, and the
    folder is built and published by the shard folder's rules (`gptlib.shards`)."""
    readers = {"nanogpt": read_nanogpt_bin, "llmc": read_llmc_bin}
    if fmt not in readers:
        raise ValueError(f"fmt must be one of {sorted(readers)}, got {fmt!r}")
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.load(Path(tokenizer))
    dtype, out = token_dtype(tok.n_vocab), Path(out)
    if dtype != np.uint16:
        raise ShardError(f"{fmt} files hold uint16 tokens; a tokenizer of {tok.n_vocab} ids needs uint32")
    sources, found = {"train": Path(train_bin), "val": Path(val_bin)}, {}
    for split, source in sources.items():
        tokens = readers[fmt](source)
        if int(tokens.max()) >= tok.n_vocab:
            raise ShardError(
                f"{source} holds token id {int(tokens.max())}, beyond this tokenizer's {tok.n_vocab} ids"
            )
        found[split] = tokens, document_ends(tokens, tok.eos_id)
        _check_made_by(source, *found[split], tok)
    with building(out, None) as work:  # refuses strangers, holds the lock: `.work-import`
        splits = {}
        for split, (tokens, ends) in found.items():
            starts, records = np.concatenate([[0], ends[:-1]]), []
            for s, (first, end) in enumerate(plan_shards(ends - starts, shard_tokens)):
                documents = (
                    tokens[a:b] for a, b in zip(starts[first:end].tolist(), ends[first:end].tolist())
                )
                records.append(
                    write_shard(
                        work / split, f"{split}_{s:05d}", documents, dtype, tokenizer_name(tok), root=work
                    )
                )
            splits[split] = {"n_tokens": len(tokens), "n_documents": len(ends), "shards": records}
        n_documents = sum(entry["n_documents"] for entry in splits.values())
        manifest = new_manifest(
            work,
            np.arange(n_documents, dtype=np.int64),
            splits,
            tokenizer=tok,
            name=tokenizer_name(tok),
            dtype=dtype,
            framing="as imported; documents end after eos",
            key=None,
            corpus={"spec": f"{fmt}: {sources['train']}, {sources['val']}", "n_documents": n_documents},
            shuffle={"generator": None, "seed": None, "note": f"imported from {fmt} files in their order"},
            split={
                "val_fraction": None,
                "rule": f"as in the {fmt} files",
                "n_val_documents": splits["val"]["n_documents"],
            },
            shard_tokens=shard_tokens,
        )
        publish(work, out, manifest)
    return manifest
