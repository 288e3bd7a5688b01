"""Other tools' formats: the tokenizer for tiktoken and Hugging Face, the shards for nanoGPT and llm.c.

Hand-written plumbing, not generated from a notebook: the ideas live in 01_bpe (a tokenizer is its merges)
and 02_data (shards are token ids on disk); this module only translates them, and checks the translation.

- `save_tokenizer_folder`: a complete tokenizer folder (gptlib's `tokenizer.json` and `.vocab`, tiktoken's
  ranks file, Hugging Face's `hf/tokenizer.json`), built aside and swapped in as a whole.
- `export_nanogpt` / `export_llmc`: nanoGPT's headerless `train.bin` / `val.bin`, llm.c's headed `.bin`.
- `import_bins`: such files back into a shard folder, refused when they were not made by the tokenizer.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np

from . import __version__
from .data import (
    FORMAT,
    FORMAT_VERSION,
    PERMUTATION_NAME,
    SPLITS,
    ShardError,
    describe_tokenizer,
    file_record,
    plan_shards,  # fmt: skip
    publish,
    read_manifest,
    token_dtype,
    tokenizer_name,
    verify_split,
    write_shard,
)
from .files import atomic_open, atomic_write, replace_folder, temporary_name
from .tokenizer import SPECIAL_TOKENS, Tokenizer

__all__ = [
    "TIKTOKEN_FILE",
    "HF_FILE",
    "LLMC_MAGIC",
    "LLMC_VERSION",
    "LLMC_HEADER_INTS",
    "tiktoken_ranks_text",
    "byte_to_unicode",
    "huggingface_json",
    "export_tokenizer",
    "check_tokenizer_target",
    "save_tokenizer_folder",
    "export_nanogpt",
    "export_llmc",
    "read_nanogpt_bin",
    "read_llmc_bin",
    "document_ends",
    "import_bins",
]

TIKTOKEN_FILE = "tokenizer.tiktoken"
HF_FILE = "hf/tokenizer.json"


# --- the tokenizer ----------------------------------------------------------------------------------------


def tiktoken_ranks_text(tokenizer: Tokenizer) -> str:
    "tiktoken's ranks file (`base64(token) rank` a line): `tiktoken.load.load_tiktoken_bpe` reads it."
    return "".join(f"{base64.b64encode(token).decode()} {rank}\n" for token, rank in tokenizer.mergeable_ranks().items())


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-ins for bytes, which byte-level BPE in Hugging Face `tokenizers` uses:
    printable Latin-1 bytes stand for themselves, the others map to code points from 256 up."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def huggingface_json(tokenizer: Tokenizer) -> dict:
    """A Hugging Face `tokenizer.json` with the same ids: split with our pattern, byte-level BPE with our
    merges, and `ignore_merges` so a chunk that is a whole token stays one token, as in tiktoken."""
    table = byte_to_unicode()
    shown = ["".join(table[byte] for byte in tokenizer.token_bytes(i)) for i in range(tokenizer.n_vocab - len(SPECIAL_TOKENS))]
    added = [{"id": token_id, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for name, token_id in tokenizer.special_tokens.items()]  # fmt: skip
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": tokenizer.pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        ]},  # fmt: skip
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
            "vocab": {token: i for i, token in enumerate(shown)},
            "merges": [f"{shown[a]} {shown[b]}" for a, b in tokenizer.merges],
        },  # fmt: skip
    }


def export_tokenizer(tokenizer: Tokenizer, folder) -> None:
    "Write tiktoken's ranks file and Hugging Face's `hf/tokenizer.json` into `folder`."
    folder = Path(folder)
    (folder / HF_FILE).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / TIKTOKEN_FILE, tiktoken_ranks_text(tokenizer).encode())
    atomic_write(folder / HF_FILE, (json.dumps(huggingface_json(tokenizer), ensure_ascii=False) + "\n").encode())


def check_tokenizer_target(folder, *, overwrite: bool = False) -> None:
    """Refuse a target a tokenizer folder may not be written to: a file, a folder holding anything but a
    tokenizer, or (without `overwrite`) an existing tokenizer. Checked before training, and again when saving."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()):
        if not (folder / "tokenizer.json").is_file():
            raise ValueError(f"{folder} is not empty and holds no tokenizer: choose another folder")
        if not overwrite:
            raise ValueError(f"{folder} already holds a tokenizer: choose another folder or pass --overwrite")


def save_tokenizer_folder(tokenizer: Tokenizer, folder, *, overwrite: bool = False, extra: dict | None = None) -> Path:
    """Write a complete tokenizer folder: `Tokenizer.save` plus the exports, plus `extra` JSON files
    (name -> document). The folder is built under a temporary name and swapped in whole, so `folder` is
    always either the old tokenizer or the new one, never a mixture. An existing tokenizer is replaced
    only with `overwrite`; a folder holding anything else is never replaced."""
    folder = Path(folder)
    check_tokenizer_target(folder, overwrite=overwrite)
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = temporary_name(folder)
    try:
        tokenizer.save(work)
        export_tokenizer(tokenizer, work)
        for name, document in (extra or {}).items():
            atomic_write(work / name, (json.dumps(document, indent=1) + "\n").encode())
        replace_folder(work, folder)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return folder


# --- shards: nanoGPT and llm.c ----------------------------------------------------------------------------

LLMC_MAGIC, LLMC_VERSION, LLMC_HEADER_INTS = 20240520, 1, 256


def _uint16_only(manifest: dict, what: str) -> None:
    if manifest["tokens"]["dtype"] != "uint16":
        raise ValueError(f"{what} stores uint16 tokens; these shards are {manifest['tokens']['dtype']}")


def _copy_split(folder: Path, manifest: dict, split: str, out) -> int:
    """Append the raw token bytes of a split's shards to an open file; returns the token count."""
    for shard in verify_split(folder, manifest, split):
        with open(folder / shard["files"][0]["path"], "rb") as f:
            shutil.copyfileobj(f, out, 1 << 22)
    return manifest["splits"][split]["n_tokens"]


def export_nanogpt(folder, out) -> dict[str, Path]:
    """Write nanoGPT's `train.bin` and `val.bin` (headerless uint16) from a prepared folder."""
    folder, out = Path(folder), Path(out)
    manifest = read_manifest(folder)
    _uint16_only(manifest, "nanoGPT")
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split in SPLITS:
        paths[split] = out / f"{split}.bin"
        with atomic_open(paths[split]) as f:
            _copy_split(folder, manifest, split, f)
    return paths


def export_llmc(folder, out, prefix: str = "gptlib") -> dict[str, Path]:
    """Write llm.c's `<prefix>_train.bin` / `<prefix>_val.bin`: 256 int32 header, then uint16 tokens."""
    folder, out = Path(folder), Path(out)
    manifest = read_manifest(folder)
    _uint16_only(manifest, "llm.c (version 1)")
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split in SPLITS:
        header = np.zeros(LLMC_HEADER_INTS, dtype="<i4")
        header[:3] = LLMC_MAGIC, LLMC_VERSION, manifest["splits"][split]["n_tokens"]
        paths[split] = out / f"{prefix}_{split}.bin"
        with atomic_open(paths[split]) as f:
            f.write(header.tobytes())
            _copy_split(folder, manifest, split, f)
    return paths


def read_nanogpt_bin(path) -> np.ndarray:
    """The tokens of a nanoGPT `.bin`, memory-mapped (uint16)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no nanoGPT file {path}")
    if path.stat().st_size % 2:
        raise ShardError(f"{path} has an odd number of bytes: not a file of uint16 tokens")
    return np.memmap(path, dtype="<u2", mode="r").view(np.ndarray)


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
    if path.stat().st_size != header_bytes + 2 * n_tokens:
        raise ShardError(f"{path}: the header says {n_tokens:,d} tokens, the file holds {(path.stat().st_size - header_bytes) // 2:,d}")
    return np.memmap(path, dtype="<u2", mode="r", offset=header_bytes, shape=(n_tokens,)).view(np.ndarray)


def document_ends(tokens: np.ndarray, eos_id: int, block: int = 1 << 24) -> np.ndarray:
    """Cumulative document ends of a token stream: just after each `eos_id`, plus the end of the stream
    when it does not finish with one. Scans `block` tokens at a time."""
    ends = [np.flatnonzero(tokens[i : i + block] == eos_id) + (i + 1) for i in range(0, len(tokens), block)]
    ends = np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64)
    if len(tokens) and (len(ends) == 0 or ends[-1] != len(tokens)):
        ends = np.append(ends, len(tokens))
    return ends.astype(np.int64)


def import_bins(train_bin, val_bin, out, tokenizer, *, fmt: str = "nanogpt", shard_tokens: int = 50_000_000) -> dict:
    """Turn nanoGPT (`fmt="nanogpt"`) or llm.c (`fmt="llmc"`) train/val files made with `tokenizer` into a
    shard folder at `out`; returns its manifest."""
    readers = {"nanogpt": read_nanogpt_bin, "llmc": read_llmc_bin}
    if fmt not in readers:
        raise ValueError(f"fmt must be one of {sorted(readers)}, got {fmt!r}")
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.load(Path(tokenizer))
    dtype, out = token_dtype(tok.n_vocab), Path(out)
    if dtype != np.uint16:
        raise ValueError(f"{fmt} files hold uint16 tokens; a tokenizer of {tok.n_vocab} ids needs uint32")
    sources = {"train": Path(train_bin), "val": Path(val_bin)}
    work = out / ".work-import"
    if work.exists():
        shutil.rmtree(work)
    splits, name = {}, tokenizer_name(tok)
    for split, source in sources.items():
        tokens = readers[fmt](source)
        if len(tokens) == 0:
            raise ShardError(f"{source} holds no tokens")
        if int(tokens.max()) >= tok.n_vocab:
            raise ShardError(f"{source} holds token id {int(tokens.max())}, beyond this tokenizer's {tok.n_vocab} ids")
        ends = document_ends(tokens, tok.eos_id)
        starts = np.concatenate([[0], ends[:-1]])
        records = []
        for s, (first, end) in enumerate(plan_shards(ends - starts, shard_tokens)):
            docs_iter = (tokens[a:b] for a, b in zip(starts[first:end].tolist(), ends[first:end].tolist()))
            records.append(write_shard(work / split, f"{split}_{s:05d}", docs_iter, dtype, name, root=work))
        splits[split] = {"n_tokens": len(tokens), "n_documents": len(ends), "shards": records}
        del tokens
    n_documents = sum(s["n_documents"] for s in splits.values())
    with atomic_open(work / PERMUTATION_NAME) as f:  # no permutation: the identity, for a uniform layout
        np.save(f, np.arange(n_documents, dtype=np.int64), allow_pickle=False)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created_by": f"gptlib {__version__}",
        "key": None,
        "corpus": {"spec": f"{fmt}: {sources['train']}, {sources['val']}", "n_documents": n_documents},
        "tokenizer": describe_tokenizer(tok),
        "tokens": {"dtype": dtype.name, "token_size": dtype.itemsize, "framing": "as imported; documents end after eos"},
        "shuffle": {"generator": None, "seed": None, "file": file_record(work, work / PERMUTATION_NAME),
                    "note": f"imported from {fmt} files in their order"},  # fmt: skip
        "split": {"val_fraction": None, "rule": f"as in the {fmt} files", "n_val_documents": splits["val"]["n_documents"]},
        "shard_tokens": shard_tokens,
        "splits": splits,
    }
    publish(work, out, manifest)
    return manifest
