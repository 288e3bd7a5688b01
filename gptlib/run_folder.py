"""A training run's folder: marker, lock, checkpoints, the resume point, the metrics log.

Hand-written plumbing, not generated from a notebook: 06_training teaches what a checkpoint must hold to
resume bit for bit; this module keeps the folder it lives in. A run folder holds

    gptlib-run.json             the marker: gptlib made this folder for a run (any other non-empty folder
                                is refused, so that nothing of the user's is overwritten or deleted)
    .lock                       one writer at a time (`gptlib.files.FolderLock`)
    config.json                 the resolved config of the latest start
    tokenizer/                  the tokenizer the run trains with, copied when the run begins
    metrics.jsonl               one JSON record per line (train, val and event records)
    tensorboard/                its scalars as TensorBoard events (`--tensorboard`, `metrics tensorboard`)
    checkpoints/step-NNNNNNN/   model.safetensors, state.pt, checkpoint.json (written last)

The store does not know what it saves (its resuming half, below, knows a run's state). A checkpoint is
three opaque parts, as in nanochat's `save_checkpoint(dir, step, model_data, optimizer_data, meta_data)`:
a torch module whose weights go to
`model.safetensors`, a dict of tensors and plain values for `state.pt` (loadable with
`torch.load(weights_only=True)`, which runs no pickled code), and a JSON-able dict of metadata for
`checkpoint.json`, to which the store adds the format, the step and the sha256 of both files. The store
reads three keys of the metadata: `val_loss` (which checkpoint is best), and, to rebuild a trained model
(`load_trained`), `model_config` and `tokenizer_fingerprint`.

- `RunFolder`: the folder opened by the process that trains in it: refusing strangers, the marker, the
  lock, dead processes' temporaries removed; the resume point (`resume_point`: the newest intact
  checkpoint, damaged newer ones skipped with the reason), `begin` (a new run), `save_config`,
  `save_checkpoint` and `prune` (the last few and the best kept; pruning never stops a run);
- `MetricsLog`, `read_metrics`: the records, truncated to the resume step when a run continues; `Records`:
  where each record of a training run goes (its history, the log, a callback, a line of text);
- reading a finished run: `list_checkpoints`, `read_checkpoint_meta`, `verify_checkpoint`,
  `load_checkpoint`, `load_trained`;
- resuming: `check_checkpoint` (whether a checkpoint belongs to the run that would continue from it: its
  config but the fields marked `resumable`, the model, the tokenizer and shards it trained on, `run_inputs`,
  the number of processes), `save_state` (a run's checkpoint: every rank's state gathered, written, pruned)
  and `restore_state` (the weights, moments, scaler, generators and place in the batches put back, each
  checked first), `resume_precision`, `open_tokenizer` (the run's tokenizer, its size checked against the
  model's); `init_from_run` (continued pretraining: another run's best weights, the same tokenizer and shape
  required); `start_new` and `resumed_log`: where a new or a resumed run stands (`Progress`).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from .config import ConfigError, checked_int
from .display import log_line
from .errors import GptlibError
from .files import (
    LOCK_FILE,
    FolderLock,
    atomic_write,
    build_folder,
    naming,
    read_json_document,
    remove_stale_temporaries,
    rename,
    sha256_file,
    temporary_name,
    write_json,
)
from .model import GPT
from .modern import ModernConfig, build_model
from .optim import PRECISIONS
from .runtime import rng_state, seed_everything, set_rng_state
from .shards import check_made_by, read_manifest
from .tensorboard import EVENT_FILES, TENSORBOARD_DIR
from .tokenizer import Tokenizer

__all__ = [
    "RUN_MARKER",
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "CheckpointError",
    "RunFolder",
    "list_checkpoints",
    "read_checkpoint_meta",
    "verify_checkpoint",
    "load_checkpoint",
    "load_trained",
    "MetricsLog",
    "read_metrics",
    "Records",
    "open_tokenizer",
    "run_inputs",
    "resume_precision",
    "check_checkpoint",
    "save_state",
    "restore_state",
    "check_moments",
    "init_from_run",
    "Progress",
    "start_new",
    "resumed_log",
]

RUN_MARKER = "gptlib-run.json"
RUN_FORMAT, RUN_VERSION = "gptlib-run", 1
CHECKPOINT_FORMAT = "gptlib-checkpoint"
CHECKPOINT_VERSION = 2  # 2: model_config has attn_dropout
_FILES = ("model.safetensors", "state.pt")


class CheckpointError(GptlibError, ValueError):
    """A run folder or checkpoint that cannot be used: missing, damaged, of another format, not made by
    gptlib, or not matching the run that would continue from it."""


def _failed_write(error: RuntimeError) -> bool:
    """Whether torch.save's RuntimeError is a write that failed (a full or failing disk: its stream writer
    says "file write failed", or its container's check says "enforce fail ... unexpected pos")."""
    text = str(error)
    return "write" in text or "enforce fail" in text or "No space" in text


# --- one checkpoint -------------------------------------------------------------------------------------


def _step_folder(step: int) -> str:
    return f"step-{step:07d}"


def save_checkpoint(folder, step: int, model, state: dict, meta: dict) -> Path:
    """Write checkpoint `folder/step-NNNNNNN`: `model`'s weights to `model.safetensors`, `state` to
    `state.pt`, then `checkpoint.json` (`meta` with the format, the step and both files' sha256), last.
    It is built under a temporary name and swapped in whole: a kill or a full disk leaves the older
    checkpoints as they were, and the same step saved again (after a resume) replaces its older copy."""
    from safetensors import SafetensorError
    from safetensors.torch import save_model

    final = Path(folder) / _step_folder(step)
    with build_folder(final) as work:
        try:
            # save_model, not save_file: it writes a tied weight (the LM head is the embedding) once
            save_model(model, str(work / "model.safetensors"), metadata={"format": CHECKPOINT_FORMAT})
            torch.save(state, work / "state.pt")
        except (SafetensorError, RuntimeError) as e:  # how both writers report a full disk, for one
            if isinstance(e, RuntimeError) and not _failed_write(e):
                raise  # any other RuntimeError is a bug: its traceback stays
            raise CheckpointError(f"{final} could not be written: {str(e).splitlines()[0]}") from e
        files = {name: sha256_file(work / name) for name in _FILES}
        document = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "step": step}
        write_json(work / "checkpoint.json", {**document, **meta, "files": files})
    return final


def read_checkpoint_meta(path) -> dict:
    """The validated `checkpoint.json` of checkpoint folder `path` (its files are not hashed: that is
    `verify_checkpoint`, for the one checkpoint about to be loaded)."""
    path = Path(path)
    if not (path / "checkpoint.json").is_file():
        raise CheckpointError(f"{path} is not a checkpoint: it has no checkpoint.json")
    meta = read_json_document(
        path / "checkpoint.json",
        format=CHECKPOINT_FORMAT,
        version=CHECKPOINT_VERSION,
        error=CheckpointError,
        what="checkpoint",
        required=("step", "files", "val_loss"),
    )
    try:
        step = checked_int(meta["step"], f"the step in {path / 'checkpoint.json'}", low=0)
    except ConfigError as e:
        raise CheckpointError(f"{path / 'checkpoint.json'} is malformed: {e}") from e
    if not isinstance(meta["files"], dict) or set(meta["files"]) != set(_FILES):
        raise CheckpointError(f"{path / 'checkpoint.json'} is malformed: bad file list")
    if not isinstance(meta["val_loss"], (float, type(None))):  # json reads every non-integral number as float
        raise CheckpointError(f"{path / 'checkpoint.json'} is malformed: val_loss is {meta['val_loss']!r}")
    if path.name.startswith("step-") and path.name != _step_folder(step):
        # an edited step would make the run's log jump, or repeat steps
        raise CheckpointError(f"{path / 'checkpoint.json'} says step {step}, but the folder is {path.name}")
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


def load_checkpoint(path, model, *, state: bool = True, meta: dict | None = None) -> tuple[dict, dict]:
    """Load checkpoint `path`'s weights into `model` and return `(meta, state)` (`state` is `{}` when not
    asked for). Its files are checked against their checksums first, unless `meta` is given: then the
    caller has verified them (`RunFolder.resume_point` does)."""
    from safetensors.torch import load_model

    if meta is None:
        meta = read_checkpoint_meta(path)
        verify_checkpoint(path, meta)
    try:
        load_model(model, str(Path(path) / "model.safetensors"))
        saved = torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=True) if state else {}
    except Exception as e:  # safetensors and torch raise several kinds; all mean "unreadable"
        raise CheckpointError(f"{path} could not be read: {e}") from e
    return meta, saved


# --- the checkpoints of a run -----------------------------------------------------------------------------


def list_checkpoints(run) -> list[Path]:
    "The finished checkpoint folders of a run, oldest first."
    folder = Path(run) / "checkpoints"
    return sorted(p for p in folder.glob("step-*") if p.is_dir()) if folder.is_dir() else []


def _checkpoints(run) -> list[tuple[Path, dict | None, str | None]]:
    """Every checkpoint of `run`, oldest first, with its metadata, or with None and the reason it does not
    read: the one walk over a run's checkpoints."""
    found = []
    for path in list_checkpoints(run):
        try:
            found.append((path, read_checkpoint_meta(path), None))
        except CheckpointError as e:
            found.append((path, None, str(e)))
    return found


def _best_first(meta: dict) -> tuple[float, int]:
    """The order of the best checkpoint: the lowest validation loss first, the latest among equals, those
    never validated last."""
    return (math.inf if meta["val_loss"] is None else meta["val_loss"], -meta["step"])


def _newest_intact(run) -> tuple[Path | None, dict | None, list[tuple[Path, str]]]:
    """The newest checkpoint whose metadata reads and whose files match their checksums, its metadata, and
    the newer ones skipped with the reason; `(None, None, skipped)` when none is intact."""
    skipped = []
    for path, meta, problem in reversed(_checkpoints(run)):
        if meta is not None:
            try:
                verify_checkpoint(path, meta)
                return path, meta, skipped
            except CheckpointError as e:
                problem = str(e)
        skipped.append((path, problem))
    return None, None, skipped


def load_trained(run, which: str = "best", device="cpu") -> tuple[GPT, Tokenizer, dict]:
    """The model of a run's `best` (lowest validation loss) or `latest` checkpoint in eval mode, its tokenizer
    and the checkpoint's metadata. A damaged checkpoint is passed over for the next best (or newest) one."""
    run = Path(run)
    if which not in ("best", "latest"):
        raise ValueError(f"which must be 'best' or 'latest', got {which!r}")
    walked = _checkpoints(run)
    readable = [(path, meta) for path, meta, _ in walked if meta is not None]
    if not readable:
        damaged = [problem for _, meta, problem in walked if meta is None]
        reason = f" ({len(damaged)} damaged: {damaged[-1]})" if damaged else ""
        raise CheckpointError(f"{run} has no readable checkpoint{reason}: train it first")
    if which == "best":
        readable.sort(key=lambda found: _best_first(found[1]))
    else:
        readable.reverse()
    tokenizer = Tokenizer.load(run / "tokenizer")
    problems = []
    for path, meta in readable:
        if tokenizer.fingerprint() != meta.get("tokenizer_fingerprint"):
            raise CheckpointError(f"{run / 'tokenizer'} is not the tokenizer {path} was trained with")
        try:
            model = build_model(ModernConfig.from_dict(meta.get("model_config")))
            verify_checkpoint(path, meta)
            load_checkpoint(path, model, state=False, meta=meta)
        except (CheckpointError, GptlibError) as e:
            problems.append(str(e))
            continue
        return model.to(device).eval(), tokenizer, meta
    raise CheckpointError(f"no checkpoint of {run} could be loaded: {'; '.join(problems)}")


# --- the run folder, opened to train in -----------------------------------------------------------------


class RunFolder:
    """The folder of one run, for the process that trains in it. `writer=False` (the other ranks of a
    `torchrun` group) only reads: no lock, no marker, nothing written or removed.

    Entering it refuses a folder that is not empty and is not a gptlib run (no marker), takes the lock, puts
    the marker, and removes what processes that died left half-written (temporary files and folders). A run
    refused before it began (a setting its data cannot serve, Ctrl-C) in a new or empty folder takes the
    marker and the lock away again, and the folder it made."""

    def __init__(self, path, *, writer: bool = True):
        self.path, self.writer = Path(path), writer
        self.checkpoints = self.path / "checkpoints"
        self.metrics = MetricsLog(self.path / "metrics.jsonl", enabled=writer)
        self._lock = FolderLock(self.path, "run folder") if writer else None

    def __enter__(self) -> RunFolder:
        if self.writer:
            _refuse_strangers(self.path)
            self._lock.__enter__()
            try:
                if not (self.path / RUN_MARKER).is_file():
                    write_json(self.path / RUN_MARKER, {"format": RUN_FORMAT, "version": RUN_VERSION})
                for folder in (self.path, self.checkpoints):  # metrics and config, half-written checkpoints
                    remove_stale_temporaries(folder)
            except BaseException as e:  # a full disk, Ctrl-C: the lock is given back, as after a failed block
                self.__exit__(type(e), e, e.__traceback__)
                raise
        return self

    def __exit__(self, exc_type, *exc) -> bool:
        if self._lock is not None:
            if exc_type is not None and self._lock.fresh:  # refused before it began: it leaves no run folder
                with contextlib.suppress(OSError):
                    if {entry.name for entry in self.path.iterdir()} == {LOCK_FILE, RUN_MARKER}:
                        (self.path / RUN_MARKER).unlink()  # and the lock takes its folder back (FolderLock)
            self._lock.__exit__(exc_type, *exc)
        return False

    def resume_point(self) -> tuple[Path | None, dict | None, list[tuple[Path, str]]]:
        """`(path, meta, skipped)`: the checkpoint to continue from (its files checked against their sha256),
        its metadata, and the newer ones that are damaged, with the reason. `(None, None, [])` for a new
        run; a run whose checkpoints are all damaged is refused rather than started again over them."""
        path, meta, skipped = _newest_intact(self.path)
        if path is None and skipped:
            raise CheckpointError(
                f"{self.path} has checkpoints but none is intact ({skipped[0][1]}); "
                "move them away to start again"
            )
        return path, meta, skipped

    def begin(self, tokenizer) -> None:
        """Start a new run: the checkpoints folder, a copy of the tokenizer (`tokenizer.save`), an empty log,
        and no TensorBoard event files of an earlier start that never reached a checkpoint (they are the run's
        own, as its log is; anything else in `tensorboard/` is the user's and stays, and a link is not
        followed)."""
        if self.writer:
            self.checkpoints.mkdir(parents=True, exist_ok=True)
            tokenizer.save(self.path / "tokenizer")
            self.metrics.truncate_after(-1)
            events = self.path / TENSORBOARD_DIR
            if events.is_dir() and not events.is_symlink():
                for path in events.glob(EVENT_FILES):
                    if path.is_file() and not path.is_symlink():
                        path.unlink()

    def save_config(self, config: dict) -> None:
        "The run's resolved config as `config.json`, for people and tools to read."
        if self.writer:
            write_json(self.path / "config.json", config)

    def save_checkpoint(self, step: int, model, state: dict, meta: dict) -> Path:
        "`save_checkpoint` into this run's `checkpoints/`."
        return save_checkpoint(self.checkpoints, step, model, state, meta)

    def prune(self, keep_last: int) -> list[str]:
        """Delete all but the `keep_last` latest readable checkpoints and the best one, each renamed away
        first (a kill mid-delete leaves a temporary folder, removed at the next start, not half a
        checkpoint). A checkpoint whose metadata does not read is moved aside to `damaged-step-N`. Nothing
        here stops the run: what cannot be moved or deleted is reported. Returns what to report."""
        walked, notes = _checkpoints(self.path), []
        good = [(path, meta) for path, meta, _ in walked if meta is not None]
        keep = {path for path, _ in good[-keep_last:]}
        if good:
            keep.add(min(good, key=lambda found: _best_first(found[1]))[0])
        for path, meta, problem in walked:
            try:
                if meta is None:
                    aside = path.with_name(f"damaged-{path.name}")
                    rename(path, aside)
                    notes.append(f"moved the damaged checkpoint {path.name} aside to {aside.name}: {problem}")
                elif path not in keep:
                    doomed = temporary_name(path)
                    rename(path, doomed)
                    shutil.rmtree(doomed)
            except OSError as e:
                notes.append(f"could not prune {path.name} ({e.strerror or e}); the run goes on")
        return notes


def _refuse_strangers(path: Path) -> None:
    """Refuse `path` unless it is missing, empty, or a gptlib run: one with the marker, or one an older
    gptlib made before runs had it (its checkpoints read as gptlib's)."""
    if not path.exists():
        return
    if not path.is_dir():
        raise CheckpointError(f"{path} is a file, not a run folder: choose another out folder")
    if (path / RUN_MARKER).is_file():
        read_json_document(
            path / RUN_MARKER, format=RUN_FORMAT, version=RUN_VERSION, error=CheckpointError, what="run"
        )
        return
    entries = sorted(entry.name for entry in path.iterdir() if entry.name != LOCK_FILE)
    if not entries or any(meta is not None for _, meta, _ in _checkpoints(path)):
        return
    shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
    raise CheckpointError(
        f"{path} is not empty ({shown}) and is not a gptlib run (it has no {RUN_MARKER}): "
        "nothing of it is overwritten; choose a new or empty out folder"
    )


# --- the metrics log ------------------------------------------------------------------------------------


# the fields of a record that its readers compute with (resume, the band's verdict, plots, TensorBoard):
# numbers where present (`loss` and `val_loss`/`val_bpb` always); a record that holds another type is damaged
_NUMBERS = {
    "train": ("loss", "lr", "grad_norm", "loss_scale", "mfu", "tokens_per_s", "elapsed_s"),
    "val": ("val_loss", "val_bpb"),
}
_REQUIRED = {"train": ("loss",), "val": ("val_loss", "val_bpb")}
_COUNTS = {"train": ("skipped",), "val": ("val_tokens",), "event": ("max_steps",)}


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _damaged(record) -> bool:
    """Whether `record`, one parsed line of a metrics log, is damaged: not a dict with a `kind`, a `step` that
    is not a whole number, or a field its readers compute with of another type (an edited line)."""
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("kind"), str)
        or not _is_count(record.get("step"))
    ):
        return True
    kind = record["kind"]
    if any(name not in record for name in _REQUIRED.get(kind, ())):
        return True
    numbers = [record[n] for n in _NUMBERS.get(kind, ()) if n in record]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in numbers):
        return True
    return any(not _is_count(record[n]) for n in _COUNTS.get(kind, ()) if n in record)


def _parse_lines(path: Path) -> tuple[list[dict], int]:
    """The records of a JSON-lines file and the number of damaged lines skipped: a line that is not JSON, or
    a record of the wrong shape (`_damaged`). A last line cut short by a kill is not counted: the
    record it held is written again."""
    records, damaged = [], 0
    with naming(path):  # an input/output error names the file
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            damaged += index < len(lines) - 1
            continue
        if _damaged(record):
            damaged += 1
        else:
            records.append(record)
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
            with naming(self.path), open(self.path, "a") as f:  # a full disk names the file
                f.write(json.dumps(record) + "\n")


def read_metrics(run) -> list[dict]:
    "The records of `run/metrics.jsonl` (damaged lines skipped)."
    return _parse_lines(Path(run) / "metrics.jsonl")[0]


class Records:
    """A run's records (train, val and event dicts), each sent everywhere it goes: into the history that
    `gptlib.train.train` returns, appended to `metrics.jsonl`, to the caller's `callback`, and to `log` as a
    line of text. Only rank 0 is given a callback and a log, and only its metrics log writes."""

    def __init__(self, metrics: MetricsLog, callback=None, log=None):
        self.history: list[dict] = []  # what `train` returns: every record of the run, resumed part included
        self.metrics, self.callback, self.log = metrics, callback, log

    def add(self, record: dict) -> None:
        self.history.append(record)
        self.metrics.append(record)  # flushed at once: a kill loses at most the line being written
        if self.callback is not None:
            self.callback(record)  # e.g. a live figure (`gptlib.display.LivePlot`)
        if self.log is not None:
            self.log(log_line(record))  # one line of text per record (`gptlib.display.log_line`)

    def event(self, step: int, message: str, **details) -> None:
        """Something that happened, in words (and `details` for tools, e.g. the start's `max_steps`): a
        start, a checkpoint skipped or pruned, the end."""
        self.add({"kind": "event", "step": step, "message": message, **details})


# --- resuming: whether a checkpoint belongs to this run, and its state put back --------------------------


def open_tokenizer(cfg) -> Tokenizer:
    """The tokenizer of the run `cfg` (a `TrainConfig`). Its number of ids must be `vocab_size`:
    they are the model's ids too, and a run recorded with one size but trained with another could not be
    resumed or read back."""
    tokenizer = Tokenizer.load(cfg.tokenizer)  # checked as it is read: format, merges, special tokens
    if tokenizer.n_vocab != cfg.vocab_size:
        raise ConfigError(
            f"the tokenizer {cfg.tokenizer} has {tokenizer.n_vocab:,d} ids but vocab_size is "
            f"{cfg.vocab_size:,d}: pass --vocab-size {tokenizer.n_vocab} (the model's ids are its ids)"
        )
    return tokenizer


def run_inputs(tokenizer, shards) -> dict:
    """What a run trains on, as its checkpoints record it: the tokenizer's fingerprint and the key of the
    shard folder `shards` (shards prepared again from changed inputs have another key). Shards another
    tokenizer made are refused here, before the run folder is made."""
    manifest = read_manifest(shards)
    check_made_by(shards, manifest, tokenizer.fingerprint())
    return {"tokenizer_fingerprint": tokenizer.fingerprint(), "data_key": manifest["key"]}


def resume_precision(requested: str, meta: dict | None) -> str:
    """The precision to train in: `requested`, except that `auto` keeps the precision a resumed run began
    in (its checkpoint `meta` records it). The start-up measurement can come out otherwise on a busy machine,
    and a run that switched between bf16 and fp32 would not continue exactly."""
    began_in = meta.get("precision") if meta is not None and requested == "auto" else None
    return began_in if began_in in PRECISIONS and began_in != "auto" else requested


def check_checkpoint(meta: dict, cfg, dist, inputs: dict) -> None:
    """Refuse a checkpoint (its metadata `meta`) made by another run than `cfg` (a `TrainConfig`)
    in `dist`'s processes on `inputs` (`run_inputs`), naming the difference: a config field not marked
    `resumable`, the end of the learning-rate decay, the model, the tokenizer, the shards or the number of
    processes. A resume that went on regardless would not continue this run: it would start another one
    from the middle."""
    if not isinstance(meta.get("config"), dict):
        raise CheckpointError("the checkpoint records no training config: it was not saved by gptlib.train")
    _check_config(cfg, meta["config"])
    saved_model = meta.get("model_config")  # the model the weights were saved from
    if not isinstance(saved_model, dict):
        raise CheckpointError("the checkpoint records no model config: it was not saved by gptlib.train")
    # a field the checkpoint does not record is newer than the run, which ran with its default
    saved_model = {**ModernConfig().to_dict(), **saved_model}
    if saved_model != cfg.model_config().to_dict():
        raise CheckpointError(
            f"the checkpoint's model {saved_model} differs from {cfg.model_config().to_dict()}"
        )
    if meta.get("tokenizer_fingerprint") != inputs["tokenizer_fingerprint"]:  # other ids for the same text
        raise CheckpointError("the checkpoint was trained with a different tokenizer (fingerprints differ)")
    # shards made again from changed inputs have another key: their batches are not the ones trained on
    if None not in (meta.get("data_key"), inputs["data_key"]) and meta["data_key"] != inputs["data_key"]:
        raise CheckpointError(
            "the checkpoint was trained on other shards: they were prepared again since (from "
            "changed inputs), so the run cannot resume exactly; use another `out` folder"
        )
    # each rank saved its own generators and place in the batches: another number of ranks has no state
    if meta.get("world_size") != dist.world_size:
        raise CheckpointError(
            f"the checkpoint was saved by {meta.get('world_size')} processes, this run has {dist.world_size}"
        )


def _check_config(cfg, saved: dict) -> None:
    """Refuse to continue a run saved with config `saved` (its `to_dict()`) when `cfg` would compute something
    else: a field that is not `resumable` differs, or the cosine would end at another step. Past the cosine's
    end a run trains at min_lr, so it may grow longer without changing its past."""
    resumable = set(cfg.names(resumable=True))
    now = cfg.to_dict()  # paths as strings, as the saved config has them
    # a field the checkpoint does not record is newer than the run, which ran with its default
    saved = {**{f.name: f.default for f in fields(cfg)}, **saved}
    different = sorted(k for k, v in now.items() if k not in resumable and saved.get(k) != v)
    if different:
        details = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {now[k]!r}" for k in different)
        raise CheckpointError(
            f"the checkpoint was made with a different configuration ({details}); "
            "use another `out` folder for a new run"
        )
    # the learning rate of every step to come depends on where the cosine ends, not on max_steps
    end, saved_end = cfg.decay_steps or cfg.max_steps, saved.get("decay_steps") or saved.get("max_steps")
    if end != saved_end:
        raise CheckpointError(
            f"max_steps {cfg.max_steps} would move the end of the learning-rate decay from "
            f"step {saved_end} to {end}; to train longer on the same schedule pass "
            f"--decay-steps {saved_end} (the steps after it run at min_lr)"
        )


def save_state(run: RunFolder, training, cfg, dist, done) -> list[str]:
    """A checkpoint of `training` (a `gptlib.train.Training`) at `done.step` (a `Progress`) in
    the run folder `run`, then pruning; returns what pruning reports. Every rank's generators and place in the
    batches are gathered to rank 0, which writes the weights, the rest of the state and the metadata that
    `check_checkpoint` and `restore_state` read back (the validation loss, the config, the model, the
    processes, the inputs and the precision). A collective: every rank calls it, also those that write
    nothing."""
    ranks = dist.gather({"rng": rng_state(), "loader": training.loader.state_dict()})
    if not dist.is_main:
        return []
    state = {
        "optimizer": training.optimizer.state_dict(),  # tensors and plain values: weights_only loads them
        "scaler": training.scaler.state_dict(),
        "ranks": ranks,  # per rank: the generators and the loader's position
        "step": done.step,  # checked on resume against the metadata's step
    }
    meta = {
        "val_loss": done.val_loss,
        "config": cfg.to_dict(),
        "model_config": training.model.config.to_dict(),
        "world_size": dist.world_size,
        **training.inputs,
        "precision": training.precision.name,  # what a resume with precision `auto` keeps
        "probe": training.probe.to_dict() if training.probe is not None else None,  # what it was chosen on
    }
    run.save_checkpoint(done.step, training.model, state, meta)  # the raw model: loadable without wrappers
    return run.prune(cfg.keep_last)  # never fails the run: what it cannot remove, it reports


def restore_state(training, dist, path: Path, meta: dict) -> None:
    """Continue from checkpoint `path` (its files verified) in `training` (a `gptlib.train.Training`): the
    weights, the optimizer's moments, the loss scaler, this rank's random generators and its place in the
    batches. The next step is then exactly the one the saved run would have taken. What `state.pt` holds is
    checked first, not trusted because its checksum matches: the checksum only says the file is the one
    recorded, not that it belongs here."""
    _, state = load_checkpoint(path, training.model, meta=meta)  # weights into the raw model, which the
    try:  # compiled and DDP wrappers share (they are made after this)
        if state["step"] != meta["step"]:  # the state.pt of another checkpoint
            raise CheckpointError(f"{path / 'state.pt'} is of step {state['step']}, not {meta['step']}")
        check_moments(training.optimizer, state["optimizer"])
        mine = state["ranks"][dist.rank]
        if mine["loader"]["seed"] != training.loader.seed:  # the state.pt of a run with another seed
            raise CheckpointError(f"{path / 'state.pt'} holds the batches of seed {mine['loader']['seed']}")
        training.optimizer.load_state_dict(state["optimizer"])  # AdamW's moments and its step counts
        training.scaler.load_state_dict(state["scaler"])  # fp16's scale, and the steps since it last grew
        set_rng_state(mine["rng"])  # dropout goes on with the numbers the saved run would have drawn
        training.loader.load_state_dict(mine["loader"])  # the batch after the last one the saved run read
    except CheckpointError:  # found wrong above, and said why
        raise
    # not the state of a run at all, or of other parameter groups (torch's ValueError)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
        raise CheckpointError(f"{path / 'state.pt'} is not the state of a run like this one ({e!r})") from e


def check_moments(optimizer: torch.optim.Optimizer, saved: dict) -> None:
    """Refuse optimizer moments of another shape than the parameters they belong to: torch does not check
    them, and AdamW's kernels would read past the end of a tensor (a crash, or garbage)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for index, moments in saved["state"].items():
        for name, value in moments.items():  # exp_avg, exp_avg_sq: the parameter's shape; step: a scalar
            if value.dim() > 0 and (index >= len(params) or value.shape != params[index].shape):
                raise CheckpointError(f"the optimizer's {name} of parameter {index} has another shape")


def init_from_run(model: GPT, source, tokenizer: Tokenizer) -> dict:
    """Load the weights of run `source`'s best checkpoint into `model`; return that checkpoint's metadata.
    It must have been trained with the same tokenizer (the same ids for the same text, or the embeddings
    would mean nothing) and be a model of the same shape: every `GPTConfig` field but the dropouts, which
    are how a model trains, not what it is."""
    if not Path(source).is_dir():  # a mistyped path is not a run without checkpoints
        raise CheckpointError(f"--init-from {source}: no such run folder")
    trained, its_tokenizer, meta = load_trained(source, "best")  # checked: files, checksums, tokenizer
    if its_tokenizer.fingerprint() != tokenizer.fingerprint():
        raise CheckpointError(
            f"--init-from {source}: it was trained with another tokenizer; continued pretraining needs the "
            f"same ids, so make this run's shards with {Path(source) / 'tokenizer'}"
        )
    shape, its_shape = (
        {k: v for k, v in config.to_dict().items() if "dropout" not in k}
        for config in (model.config, trained.config)
    )
    if shape != its_shape:
        different = ", ".join(f"{k} {its_shape[k]} vs {shape[k]}" for k in shape if shape[k] != its_shape[k])
        raise CheckpointError(f"--init-from {source}: its model has another shape ({different} here)")
    model.load_state_dict(trained.state_dict())  # copied into the parameters the optimizer already holds
    return meta


# --- where a run stands: a new start, or the records of a resumed one ----------------------------------


@dataclass
class Progress:
    "Where a run stands: the optimizer steps done, the last validation loss, the steps the scaler skipped."

    step: int = 0
    val_loss: float | None = None  # recorded with each checkpoint: what ranks the best one
    skipped: int = 0


def start_new(cfg, dist, run: RunFolder, training, tokenizer: Tokenizer) -> Progress:
    """Begin a new run of `cfg` (a `TrainConfig`) on `training` (its `Training`): the weights of
    `cfg.init_from`'s best checkpoint when asked, the tokenizer copied into the run folder, an empty log
    (rank 0); then every generator seeded per rank, so that dropout differs between ranks (the initial
    weights were drawn before)."""
    if cfg.init_from:  # continued pretraining: the drawn weights replaced, with a new optimizer and schedule
        init_from_run(training.model, cfg.init_from, tokenizer)
    run.begin(tokenizer)  # the copy travels with the run: `gptlib sample` reads it back
    seed_everything(cfg.seed + dist.rank)
    return Progress()  # step 0, not validated yet, nothing skipped


def resumed_log(run: RunFolder, records: Records, meta: dict, damaged: list) -> Progress:
    """The run's records up to the checkpoint's step (the resumed run writes the later ones again, and they
    come out the same), what was skipped on the way there, and where the run stands."""
    kept, bad_lines = run.metrics.truncate_after(meta["step"])
    records.history = kept  # what `train` returns covers the whole run, not only this start
    for path, why in damaged:
        records.event(meta["step"], f"skipped the damaged checkpoint {path.name}: {why}")
    if bad_lines:
        records.event(meta["step"], f"dropped {bad_lines} damaged line(s) of metrics.jsonl")
    # a running count (0 in a record that lacks it: an older or edited log)
    skipped = max([r.get("skipped", 0) for r in kept if r["kind"] == "train"], default=0)
    return Progress(meta["step"], meta["val_loss"], skipped)
