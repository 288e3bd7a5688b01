"""A training run's folder: checkpoints that resume exactly, and the metrics log.

Hand-written plumbing, not generated from a notebook: 06_training explains what a checkpoint must hold to
resume bit for bit; this module does the bookkeeping. A run folder holds

    checkpoints/step-NNNNNNN/   model.safetensors, state.pt, checkpoint.json (written last)
    metrics.jsonl               one JSON record per line (train, val and event records)
    config.json, tokenizer/     the resolved config and the tokenizer the run trains with

- `save_checkpoint` writes a checkpoint into a temporary folder and renames it into place;
- `read_checkpoint_meta` reads its metadata (cheap: ranking and pruning use only this),
  `verify_checkpoint` checks its files' sha256 (only for the checkpoint about to be loaded);
- `newest_intact` finds the checkpoint to resume from, skipping damaged ones and saying why;
- `best_checkpoint`, `prune_checkpoints`: rank by the validation loss in the metadata; pruning never fails
  a run (a checkpoint it cannot read is moved aside and reported, never deleted);
- `check_resumable`, `load_checkpoint`, `load_trained`; `MetricsLog`, `read_metrics`.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from .errors import GptlibError
from .files import (
    atomic_write,
    read_json_document,
    rename,
    replace_folder,
    sha256_file,
    temporary_name,
    write_json,
)
from .model import GPT, GPTConfig
from .tokenizer import Tokenizer

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "RESUMABLE_CHANGES",
    "CheckpointError",
    "rng_state",
    "set_rng_state",
    "save_checkpoint",
    "read_checkpoint_meta",
    "verify_checkpoint",
    "list_checkpoints",
    "newest_intact",
    "precision_of_run",
    "best_checkpoint",
    "prune_checkpoints",
    "check_resumable",
    "load_checkpoint",
    "load_trained",
    "MetricsLog",
    "read_metrics",
]

CHECKPOINT_FORMAT = "gptlib-checkpoint"
CHECKPOINT_VERSION = 2  # 2: model_config has attn_dropout
_FILES = ("model.safetensors", "state.pt")
# TrainConfig fields that may change when a run is resumed: where and how it runs, not what it computes.
# `max_steps` and `decay_steps` may change only while the cosine's end (decay_steps, or else max_steps) stays
# put (see `check_resumable`): the steps after it run at min_lr.
RESUMABLE_CHANGES = frozenset(
    {
        "out",
        "device",
        "compile",
        "loader_workers",
        "log_every",
        "eval_every",
        "eval_batches",
        "checkpoint_every",
        "keep_last",
        "max_steps",
        "decay_steps",
    }
)


class CheckpointError(GptlibError, ValueError):
    "A checkpoint is missing, corrupted, of another format, or does not match the run resuming from it."


# --- random number generators ---------------------------------------------------------------------


def rng_state() -> dict:
    "Every random number generator training touches, as tensors, ints and lists (loadable with weights_only)."
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, py_state, gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "python": [version, list(py_state), gauss],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, py_state, gauss = state["python"]
    random.setstate((version, tuple(py_state), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --- writing and reading one checkpoint ---------------------------------------------------------------


def save_checkpoint(
    folder,
    *,
    model,
    optimizer,
    scaler,
    step: int,
    config: dict,
    ranks: list[dict],
    tokenizer_fingerprint: str,
    data_key: str | None = None,
    val_loss: float | None = None,
    precision: str | None = None,
) -> Path:
    """Write a checkpoint atomically to `folder/step-NNNNNNN`: `model.safetensors` (the raw model's weights),
    `state.pt` (optimizer, scaler, per-rank RNG and loader states; tensors and plain values only) and
    `checkpoint.json` (format, version, step, the run's config dict, the tokenizer's fingerprint, the
    shards' key `data_key`, the validation loss, the precision trained in and the sha256 of both files),
    written last."""
    from safetensors.torch import save_model

    folder = Path(folder)
    final = folder / f"step-{step:07d}"
    tmp = temporary_name(final)
    tmp.mkdir(parents=True)
    try:
        save_model(model, str(tmp / "model.safetensors"), metadata={"format": CHECKPOINT_FORMAT})
        state = {
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(),
            "ranks": ranks,
            "step": step,
        }
        torch.save(state, tmp / "state.pt")
        meta = {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "step": step,
            "val_loss": val_loss,
            "config": config,
            "model_config": model.config.to_dict(),
            "world_size": len(ranks),
            "tokenizer_fingerprint": tokenizer_fingerprint,
            "data_key": data_key,
            "precision": precision,
            "files": {name: sha256_file(tmp / name) for name in _FILES},
        }
        write_json(tmp / "checkpoint.json", meta)
        replace_folder(tmp, final)  # the same step saved again (after a resume) replaces the older copy
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def read_checkpoint_meta(path) -> dict:
    "The validated `checkpoint.json` of checkpoint folder `path` (its files are not hashed: `verify_checkpoint`)."
    path = Path(path)
    if not (path / "checkpoint.json").is_file():
        raise CheckpointError(f"{path} is not a checkpoint: it has no checkpoint.json")
    meta = read_json_document(
        path / "checkpoint.json",
        format=CHECKPOINT_FORMAT,
        version=CHECKPOINT_VERSION,
        error=CheckpointError,
        what="checkpoint",
        required=(
            "step",
            "config",
            "model_config",
            "files",
            "tokenizer_fingerprint",
            "world_size",
            "val_loss",
        ),
    )
    if (
        not isinstance(meta["step"], int)
        or not isinstance(meta["files"], dict)
        or set(meta["files"]) != set(_FILES)
    ):
        raise CheckpointError(f"{path / 'checkpoint.json'} is malformed: bad step or file list")
    return meta


def verify_checkpoint(path, meta: dict) -> None:
    "Check that the files of checkpoint `path` are there and match the sha256 recorded in `meta`."
    for name, expected in meta["files"].items():
        file = Path(path) / name
        if not file.is_file():
            raise CheckpointError(f"{path} is incomplete: {name} is missing")
        if sha256_file(file) != expected:
            raise CheckpointError(
                f"{file} is corrupted: its sha256 differs from the one recorded in checkpoint.json"
            )


def load_checkpoint(
    path, *, model, optimizer=None, scaler=None, meta: dict | None = None
) -> tuple[dict, dict]:
    """Load weights (and optimizer/scaler state when given) from checkpoint `path`, after checking its files
    against their checksums (skipped when `meta` comes from `newest_intact`, which checked them); return
    `(meta, state)`."""
    from safetensors.torch import load_model

    if meta is None:
        meta = read_checkpoint_meta(path)
        verify_checkpoint(path, meta)
    if meta["model_config"] != model.config.to_dict():
        raise CheckpointError(f"{path} holds a model {meta['model_config']}, not {model.config.to_dict()}")
    try:
        load_model(model, str(Path(path) / "model.safetensors"))
        want_state = optimizer is not None or scaler is not None
        state = (
            torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=True) if want_state else {}
        )
    except Exception as e:  # safetensors and torch raise several kinds; all mean "unreadable"
        raise CheckpointError(f"{path} could not be read: {e}") from e
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    return meta, state


# --- the checkpoints of a run ---------------------------------------------------------------------------


def list_checkpoints(run) -> list[Path]:
    "The finished checkpoint folders of a run, oldest first."
    folder = Path(run) / "checkpoints"
    return sorted(p for p in folder.glob("step-*") if p.is_dir()) if folder.is_dir() else []


def _readable(run) -> tuple[list[tuple[Path, dict]], list[tuple[Path, str]]]:
    "The checkpoints whose metadata reads, oldest first, and the others with the reason."
    good, bad = [], []
    for path in list_checkpoints(run):
        try:
            good.append((path, read_checkpoint_meta(path)))
        except CheckpointError as e:
            bad.append((path, str(e)))
    return good, bad


def newest_intact(run) -> tuple[Path | None, dict | None, list[tuple[Path, str]]]:
    """The newest checkpoint whose metadata reads and whose files match their checksums, its metadata, and
    the newer ones skipped with the reason; `(None, None, skipped)` when none is intact."""
    skipped = []
    for path in reversed(list_checkpoints(run)):
        try:
            meta = read_checkpoint_meta(path)
            verify_checkpoint(path, meta)
        except CheckpointError as e:
            skipped.append((path, str(e)))
            continue
        return path, meta, skipped
    return None, None, skipped


def precision_of_run(run, asked: str) -> str:
    """The precision a run trains in: `asked`, except that `auto` keeps the precision of the run's newest
    readable checkpoint, so that a resumed run does not switch between bf16 and fp32 (and lose its exact
    resume) when the start-up measurement comes out differently on a busy machine."""
    for path in reversed(list_checkpoints(run) if asked == "auto" else []):
        try:
            return read_checkpoint_meta(path).get("precision") or asked
        except CheckpointError:  # damaged: the resume skips it too
            continue
    return asked


def best_checkpoint(run) -> Path | None:
    "The readable checkpoint with the lowest validation loss in its metadata (the latest if none was validated)."
    scored = [
        (m["val_loss"] if m["val_loss"] is not None else math.inf, -m["step"], p)
        for p, m in _readable(run)[0]
    ]
    return min(scored)[2] if scored else None


def prune_checkpoints(run, keep_last: int) -> list[str]:
    """Delete all but the `keep_last` latest readable checkpoints and the best one, each renamed away first
    (a kill mid-delete leaves a temporary folder, not a half checkpoint). A checkpoint whose metadata does
    not read is moved aside to `checkpoints/damaged-step-N` and reported. Returns what to report."""
    good, bad = _readable(run)
    notes = []
    for path, reason in bad:
        aside = path.with_name(f"damaged-{path.name}")
        rename(path, aside)
        notes.append(f"moved the damaged checkpoint {path.name} aside to {aside.name}: {reason}")
    best = best_checkpoint(run)
    keep = {p for p, _ in good[-keep_last:]} | {best}
    for path, _ in good:
        if path not in keep:
            doomed = temporary_name(path)
            rename(path, doomed)
            shutil.rmtree(doomed)
    return notes


def check_resumable(
    meta: dict,
    config: dict,
    model_config: GPTConfig,
    tokenizer_fingerprint: str,
    world_size: int,
    data_key: str | None = None,
) -> None:
    """Refuse a checkpoint made by a different run (another model, data, schedule or world size), naming the
    differences. `config` is the run's TrainConfig as a dict."""
    saved = meta["config"]
    different = sorted(k for k, v in config.items() if k not in RESUMABLE_CHANGES and saved.get(k) != v)
    if different:
        details = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {config[k]!r}" for k in different)
        raise CheckpointError(
            f"the checkpoint was made with a different configuration ({details}); "
            "use another `out` folder for a new run"
        )
    decay_end, saved_end = (
        config["decay_steps"] or config["max_steps"],
        saved["decay_steps"] or saved["max_steps"],
    )
    if decay_end != saved_end:
        raise CheckpointError(
            f"max_steps {config['max_steps']} would move the end of the learning-rate decay from "
            f"step {saved_end} to {decay_end}; to train longer on the same schedule pass "
            f"--decay-steps {saved_end} (the steps after it run at min_lr)"
        )
    if meta["model_config"] != model_config.to_dict():
        raise CheckpointError(
            f"the checkpoint's model {meta['model_config']} differs from {model_config.to_dict()}"
        )
    if meta["tokenizer_fingerprint"] != tokenizer_fingerprint:
        raise CheckpointError("the checkpoint was trained with a different tokenizer (fingerprints differ)")
    if meta.get("data_key") is not None and data_key is not None and meta["data_key"] != data_key:
        raise CheckpointError(
            "the checkpoint was trained on other shards: they were prepared again since (from "
            "changed inputs), so the run cannot resume exactly; use another `out` folder"
        )
    if meta["world_size"] != world_size:
        raise CheckpointError(
            f"the checkpoint was saved by {meta['world_size']} processes, this run has {world_size}"
        )


def load_trained(run, which: str = "best", device="cpu") -> tuple[GPT, Tokenizer, dict]:
    """The model of a run's `best` (lowest validation loss) or `latest` checkpoint in eval mode, its tokenizer
    and the checkpoint's metadata. A damaged checkpoint is passed over for the next best (or newest) one."""
    run = Path(run)
    if which not in ("best", "latest"):
        raise ValueError(f"which must be 'best' or 'latest', got {which!r}")
    good, bad = _readable(run)
    if not good:
        reason = f" ({len(bad)} damaged: {bad[-1][1]})" if bad else ""
        raise CheckpointError(f"{run} has no readable checkpoint{reason}: train it first")
    if which == "best":
        good.sort(
            key=lambda pm: (pm[1]["val_loss"] if pm[1]["val_loss"] is not None else math.inf, -pm[1]["step"])
        )
    else:
        good.reverse()
    tokenizer = Tokenizer.load(run / "tokenizer")
    problems = []
    for path, meta in good:
        if tokenizer.fingerprint() != meta["tokenizer_fingerprint"]:
            raise CheckpointError(f"{run / 'tokenizer'} is not the tokenizer {path} was trained with")
        model = GPT(GPTConfig.from_dict(meta["model_config"]))
        try:
            verify_checkpoint(path, meta)
            load_checkpoint(path, model=model, meta=meta)
        except CheckpointError as e:
            problems.append(str(e))
            continue
        return model.to(device).eval(), tokenizer, meta
    raise CheckpointError(f"no checkpoint of {run} could be loaded: {'; '.join(problems)}")


# --- the metrics log ------------------------------------------------------------------------------------


def _parse_lines(path: Path) -> tuple[list[dict], int]:
    "The records of a JSON-lines file and the number of damaged lines skipped (a last line cut short by a kill is not counted)."
    records, damaged = [], 0
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            damaged += index < len(lines) - 1
            continue
        if isinstance(record, dict) and "kind" in record:
            records.append(record)
        else:
            damaged += 1
    return records, damaged


class MetricsLog:
    "Records as JSON lines in `run/metrics.jsonl`, appended and flushed one by one (rank 0 only)."

    def __init__(self, path, enabled: bool = True):
        self.path, self.enabled = Path(path), enabled

    def truncate_after(self, step: int) -> tuple[list[dict], int]:
        """Keep the records up to `step` (a resumed run repeats the later ones); return them and the number of
        damaged lines dropped (a damaged line in the middle does not hide the records after it)."""
        records, damaged = _parse_lines(self.path)
        records = [r for r in records if r.get("step", 0) <= step]
        if self.enabled and (self.path.is_file() or records):
            atomic_write(self.path, "".join(json.dumps(r) + "\n" for r in records).encode(), durable=False)
        return records, damaged

    def append(self, record: dict) -> None:
        if self.enabled:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")


def read_metrics(run) -> list[dict]:
    "The records of `run/metrics.jsonl` (damaged lines skipped)."
    return _parse_lines(Path(run) / "metrics.jsonl")[0]
