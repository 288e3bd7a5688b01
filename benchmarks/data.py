"""Data preparation and the batch loader, gptlib against its peers, on the embedded Shakespeare corpus.

    .venv/bin/python benchmarks/data.py

Preparation (documents -> framed, shuffled, split shards on disk), 42 documents, 5.06 MB:
  * gptlib `prepare` with 1 and 2 tokenizer workers;
  * the bare tokenizer fast path on the same texts (`Tokenizer.encode_batch`, tiktoken underneath): the
    floor, so `prepare / bare - 1` is the cost of framing, shuffling, checksumming and writing;
  * nanoGPT's recipe (encode every document in memory, concatenate, `tofile`): no shuffle, no index,
    no checksums, memory proportional to the corpus;
  * DataTrove's `DocumentTokenizer` with the same merges through Hugging Face `tokenizers` (our tokenizer's
    `hf/tokenizer.json` export), writing the same `.ds` layout.

Loader (batches of 8 x 513 tokens, i.e. B=8, T=512):
  * gptlib `BatchLoader` in the calling process and with 2 workers;
  * nanoGPT's `get_batch` (a fresh `np.memmap` and random offsets each batch);
  * DataTrove's `DatatroveFolderDataset` in a `DataLoader` (in-process, shuffled);
  * and what the model consumes: training steps/s of the `cpu` preset (B=8, T=256).

Writes the `data` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _results import machine_line, write_section  # benchmarks/, the script's own folder, is on sys.path
from torch.utils.data import DataLoader

from gptlib.corpus import open_corpus
from gptlib.data import DataConfig, frame, prepare, token_dtype
from gptlib.loader import BatchLoader
from gptlib.tokenizer import Tokenizer

VOCAB = 4096
REPEATS = 3


def best_seconds(fn, repeats=REPEATS) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def rate(next_batch, seconds: float = 2.0) -> float:
    next_batch()  # warm up: workers started, pages mapped
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        next_batch()
        count += 1
    return count / (time.perf_counter() - t0)


def prepare_timed(corpus: Path, work: Path, tok, workers: int) -> float:
    """Run `prepare` from scratch; return the seconds spent inside the tokenizer's `encode_batch`."""
    out = work / f"shards{workers}"
    shutil.rmtree(out, ignore_errors=True)
    spent, real = [], tok.encode_batch

    def timed_encode_batch(texts, *args, **kwargs):
        t0 = time.perf_counter()
        result = real(texts, *args, **kwargs)
        spent.append(time.perf_counter() - t0)
        return result

    tok.encode_batch = timed_encode_batch
    try:
        cfg = DataConfig(corpus=str(corpus), tokenizer=work / "tokenizer", out=out, workers=workers)
        prepare(cfg, progress=False, tokenizer=tok)
    finally:
        del tok.encode_batch
    return sum(spent)


def bench_preparation(work: Path, docs, tok) -> tuple[list[tuple], dict]:
    texts = [d.text for d in docs]
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    corpus = work / "corpus"
    corpus.mkdir()
    for d in docs:
        (corpus / f"{d.name}.txt").write_text(d.text, encoding="utf-8")
    tok.save(work / "tokenizer")
    rows, seconds = [], {}

    for workers in (1, 2):
        # interleaved, best of REPEATS each: the machine is shared, so alternate to see the same load
        bare, full, outside = [], [], []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            tok.encode_batch(texts, workers=workers)
            bare.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            inside = prepare_timed(corpus, work, tok, workers)
            full.append(time.perf_counter() - t0)
            outside.append(full[-1] - inside)
        seconds[f"bare{workers}"], seconds[f"prepare{workers}"] = min(bare), min(full)
        seconds[f"outside{workers}"] = min(outside)

    def nanogpt_recipe():
        dtype = token_dtype(tok.n_vocab)
        ids = tok.encode_batch(texts, workers=1)
        every = np.concatenate([frame(i, tok.bos_id, tok.eos_id, dtype) for i in ids])
        every.tofile(work / "nanogpt.bin")

    seconds["nanogpt"] = best_seconds(nanogpt_recipe)
    seconds["datatrove"] = bench_datatrove(work, docs)

    for label, key in (
        ("bare tokenizer fast path (`encode_batch`, 1 worker)", "bare1"),
        ("bare tokenizer fast path (`encode_batch`, 2 workers)", "bare2"),
        ("**gptlib `prepare`, 1 worker**", "prepare1"),
        ("**gptlib `prepare`, 2 workers**", "prepare2"),
        ("nanoGPT recipe (in memory, no shuffle/index/checksums)", "nanogpt"),
        ("DataTrove `DocumentTokenizer` (HF tokenizers, same merges)", "datatrove"),
    ):
        s = seconds.get(key)
        if s is None:
            rows.append((label, "n/a", "n/a", "n/a"))
            continue
        ratio = s / seconds["prepare1"]
        rows.append((label, f"{s:.3f}", f"{megabytes / s:.1f}", f"{ratio:.2f}"))
    seconds["megabytes"] = megabytes
    return rows, seconds


def bench_datatrove(work: Path, docs) -> float | None:
    try:
        from datatrove.data import Document as DataTroveDocument
        from datatrove.pipeline.tokens.tokenizer import DocumentTokenizer
        from loguru import logger
    except ImportError:
        return None
    logger.remove()  # its per-step INFO lines would flood the output

    def run():
        out = work / "datatrove"
        shutil.rmtree(out, ignore_errors=True)
        step = DocumentTokenizer(
            output_folder=str(out / "final"),
            local_working_dir=str(out / "tmp"),
            tokenizer_name_or_path=str(work / "tokenizer" / "hf" / "tokenizer.json"),
            eos_token="<|eos|>",
            seed=1,
            save_filename="shakespeare",
        )
        step.run(data=(DataTroveDocument(text=d.text, id=d.name) for d in docs), rank=0, world_size=1)

    return best_seconds(run, repeats=1)


def bench_loader(shards: Path) -> tuple[list[tuple], dict]:
    B, T = 8, 512
    rates = {}
    for workers in (0, 2):
        loader = BatchLoader(shards, "train", batch_size=B, context=T, num_workers=workers)
        rates[f"gptlib{workers}"] = rate(lambda ld=loader: next(ld))
        loader.close()

    tokens_file = next((shards / "train").glob("*.ds"))

    def nanogpt_get_batch():
        data = np.memmap(tokens_file, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - T, (B,))
        x = torch.stack([torch.from_numpy(data[i : i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + T].astype(np.int64)) for i in ix])
        return x, y

    rates["nanogpt"] = rate(nanogpt_get_batch)
    try:
        from datatrove.utils.dataset import DatatroveFolderDataset

        dataset = DatatroveFolderDataset(str(shards / "train"), seq_len=T, token_size=2)
        dataloader = DataLoader(dataset, batch_size=B, shuffle=True, num_workers=0)
        stream = iter(_forever(dataloader))
        rates["datatrove"] = rate(lambda: next(stream))
    except ImportError:
        rates["datatrove"] = None
    rates["model"] = model_steps_per_second()

    rows = []
    for label, key in (
        ("**gptlib `BatchLoader`, in-process (`num_workers=0`)**", "gptlib0"),
        ("**gptlib `BatchLoader`, 2 workers**", "gptlib2"),
        ("nanoGPT `get_batch` (random offsets)", "nanogpt"),
        ("DataTrove `DatatroveFolderDataset` + `DataLoader`", "datatrove"),
        ("the `cpu` model preset consumes (training steps/s, B=8, T=256)", "model"),
    ):
        r = rates.get(key)
        ratio = None if r is None else rates["gptlib0"] / r
        rows.append(
            (
                label,
                "n/a" if r is None else f"{r:,.1f}" if r < 100 else f"{r:,.0f}",
                "n/a" if r is None else f"{ratio:,.1f}" if ratio < 100 else f"{ratio:,.0f}",
            )
        )
    return rows, rates


def _forever(dataloader):
    while True:
        yield from dataloader


def model_steps_per_second() -> float | None:
    try:
        from gptlib.train_config import TrainConfig, make_model
    except ImportError:
        return None
    torch.manual_seed(0)
    model = make_model(TrainConfig.preset("cpu", vocab_size=VOCAB))  # the model `make run` trains
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, VOCAB, (8, 256))

    def step():
        _, loss = model(x, x)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    return 1 / best_seconds(step, repeats=3)


def table(header: tuple, rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main() -> None:
    docs = list(open_corpus("shakespeare"))
    tok = Tokenizer.train([d.text for d in docs], vocab_size=VOCAB)
    with tempfile.TemporaryDirectory(prefix="gptlib-bench-data-") as tmp:
        work = Path(tmp)
        prep_rows, seconds = bench_preparation(work, docs, tok)
        loader_rows, rates = bench_loader(work / "shards1")
    overhead = {w: seconds[f"prepare{w}"] / seconds[f"bare{w}"] - 1 for w in (1, 2)}
    inside = {w: seconds[f"outside{w}"] / seconds[f"bare{w}"] for w in (1, 2)}
    markdown = f"""## Data preparation and loader (`benchmarks/data.py`)

{machine_line()} The machine was shared with other jobs while this ran: treat differences under ~20 % as
noise.

**Preparation** of the embedded corpus end to end (42 documents, {seconds["megabytes"]:.2f} MB, a
{VOCAB:,d}-id tokenizer; best of {REPEATS}): framing, shuffling, splitting, writing `.ds`/`.ds.index`/
`.ds.metadata` with sha256 checksums and the manifest. "× prepare(1)" is time relative to gptlib with 1
worker.

{table(("pipeline", "seconds", "MB/s", "× prepare(1)"), prep_rows)}

Overhead of gptlib's pipeline over the bare tokenizer fast path on the same text, end to end (best times):
**{overhead[1]:+.0%}** with 1 worker, **{overhead[2]:+.0%}** with 2 (target: under 30 %). Measured inside
`prepare`, the wall time not covered by the tokenizer's own `encode_batch` calls (reading the corpus,
framing, the stream files, the shuffled copy, sha256, fsync, the manifest; the tokenizer runs one chunk ahead
in a background thread, so part of this work is hidden behind it) is {seconds["outside1"]:.3f} s,
**{inside[1]:.0%}** of the bare tokenization time with 1 worker ({seconds["outside2"]:.3f} s,
{inside[2]:.0%} with 2): on this shared machine the end-to-end figure moves more with the machine's load than
with the pipeline.

**Loader**: batches per second of 8 × 513 tokens from the prepared train split (2 s each). "gptlib(0) ×" is
how many times faster gptlib's in-process loader is.

{table(("loader", "batches/s", "gptlib(0) ×"), loader_rows)}

The in-process loader (target ≥ 20,000 batches/s) is far above what the `cpu` preset consumes, so on a CPU
`num_workers=0` is the better choice: workers pay a pickle and a process hop per batch, which costs more than
computing the batch. Workers pay off when a GPU consumes hundreds of batches per second or shards sit on slow
disks.
"""
    write_section("data", markdown)
    print(markdown)


if __name__ == "__main__":
    main()
