"""The lab measured: A/A experiments (what noise alone decides), a known win found, what a decision costs.

    .venv/bin/python benchmarks/lab.py [--pin MINUTES] [--run] [--aa N]

`--pin` trains the trial's baseline once to a budget of MINUTES on this machine (`lab pin`) and records the
steps and precision it planned; `--run` runs the experiments at those pinned steps: rotary positions
against the sinusoidal table (a known win: 1.944 against 2.033 bits/byte at 1,300 steps of the `cpu` preset,
`benchmarks/positions.py`), and N A/A experiments (the baseline against itself with the candidate's seeds
shifted by 1,000: exchangeable arms, real noise; see `gptlib.lab`), each on seeds of its own so that they
are independent, all under one declared rule. Two queues run side by side, one thread each (the 2 cores
shared out), each into a ledger of its own; the ledgers are then added to `benchmarks/lab_runs.jsonl`, the
records, from which the section of RESULTS.md is written (without a flag the script only rewrites it).

The trial: the `cpu` preset's recipe on a smaller model (2 layers of width 128, context 128: 0.9 M
parameters) with the 4,096-id tokenizer of `make run`, eager, validated on the whole held-out split at the
last step. The runs use a snapshot of the code: the committed tree (`git archive HEAD`) with the lab's own
files from the working tree, so that other work in the tree cannot change the code between two trials.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECORDS = Path(__file__).with_name("lab_runs.jsonl")
WORK = Path("/tmp/gptlib-lab-bench")  # the snapshot, the queues, the ledgers and the run folders
DATA = REPO / "data"
# lesson 04's GPT (tied head, GELU), as every trial here ran before the `cpu` preset took two of 07's pieces
BASE = (
    "--preset cpu --tied-head true --mlp gelu --n-layer 2 --n-embd 128 --context 128 --compile false "
    "--checkpoint-every 200 --keep-last 1 "
    f"--shards {DATA / 'shards/shakespeare-4096'} --tokenizer {DATA / 'tokenizers/shakespeare-4096'}"
)
RULE = "--min-effect 0.01 --level 0.05 --min-seeds 3 --max-seeds 5"
SHIFT = 1000  # an A/A candidate's seeds: the baseline's plus this


def snapshot(rev: str = "HEAD") -> Path:
    """The gptlib of commit `rev` with the lab's files of the working tree, in WORK/snap (made anew), and the
    commit it was taken from in WORK/snap/COMMIT (HEAD may move while the trials run)."""
    snap = WORK / "snap"
    shutil.rmtree(snap, ignore_errors=True)
    snap.mkdir(parents=True)
    (snap / "COMMIT").write_text(commit(rev).strip(), encoding="utf-8")
    archive = subprocess.run(["git", "archive", rev, "gptlib"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(snap)], input=archive.stdout, check=True)
    for name in ("gptlib/lab.py", "gptlib/cli/lab.py"):
        shutil.copy(REPO / name, snap / name)
    return snap


def lab(snap: Path, *argv: str, threads: int = 1) -> subprocess.Popen:
    "`lab VERB ...` run from the snapshot, in a process of its own, with `threads` torch threads."
    code = (
        "import sys; from gptlib.cli._shared import Parser; from gptlib.cli import lab; "
        "p = Parser(prog='lab'); lab.add_to(p.add_subparsers(dest='command')); "
        "a = p.parse_args(sys.argv[1:]); sys.exit(a.handler(a))"
    )
    env = {**os.environ, "PYTHONPATH": str(snap), "OMP_NUM_THREADS": str(threads)}
    return subprocess.Popen([sys.executable, "-c", code, "lab", *argv], env=env, cwd=WORK)


def read_ledger(path: Path) -> list[dict]:
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return [json.loads(line) for line in lines[1:]]


def known(record: dict) -> str:
    "A record as it is known whichever session added it (its `session` aside): to tell which are held."
    return json.dumps({k: v for k, v in record.items() if k != "session"}, sort_keys=True)


def add_records(records: list[dict], path: Path = RECORDS) -> None:
    "Append ledger records to `path` (itself a ledger: `lab show benchmarks/lab_runs.jsonl` reads it)."
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if not old:
        old = json.dumps({"format": "gptlib-lab-ledger", "version": 1}) + "\n"
    path.write_text(old + "".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def measured(records: list[dict]) -> list[dict]:
    """The ledger records worth adding to the records: all but the declaration of an experiment stopped (or
    failed: no shards, say) before its first trial or look, which measured nothing."""
    tried = {r["experiment"] for r in records if r["kind"] in ("trial", "look")}
    return [r for r in records if r["kind"] != "experiment" or r["name"] in tried]


def machine_kind(machine: dict) -> dict:
    """The CPU kind a record's `machine` names, with its family and model numbers: the kind's own, or an older
    record's `cpu_ids` beside it."""
    return {"ids": machine.get("cpu_ids", {}), **machine["cpu"]}


def commit(rev: str = "HEAD") -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "--verify", f"{rev}^{{commit}}"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"error: no commit {rev} in {REPO}")
    return done.stdout


def pin(minutes: float) -> None:
    snap, ledger = snapshot(), WORK / "pin.jsonl"
    ledger.unlink(missing_ok=True)
    work = WORK / "pin-runs"
    shutil.rmtree(work, ignore_errors=True)
    done = lab(snap, "pin", str(ledger), "--base", BASE, "--budget", str(minutes), "--work", str(work))
    if done.wait():
        raise SystemExit(f"lab pin failed ({done.returncode})")
    records = read_ledger(ledger)
    for r in records:
        r.update(commit=(snap / "COMMIT").read_text(encoding="utf-8"), uptime=os.getloadavg())
    add_records(records)


def pinned_base() -> str:
    pins = [r for r in read_ledger(RECORDS) if r["kind"] == "pin"]
    if not pins:
        raise SystemExit("no pinned steps in the records: run with --pin MINUTES first")
    return f"{BASE} --max-steps {pins[-1]['max_steps']} --precision {pins[-1]['precision']}"


def aa_line(k: int) -> str:
    "A/A number k (from 1): the baseline against itself, on seeds 100 (k - 1) + 1 ... of its own."
    base = shlex.quote(pinned_base())
    return f"--name aa-{k} --base {base} --seed-shift {SHIFT} --first-seed {100 * (k - 1) + 1} {RULE}"


def run_queues(
    queues: list[list[str]],
    tag: str,
    snap: Path,
    records_path: Path = RECORDS,
    threads: int = 1,
    earlier: Sequence[dict] = (),
) -> None:
    """Each queue in a process and a ledger of its own, side by side; their records then added to the records,
    those the records do not hold yet. A queue's ledger stays in WORK: the same queue run again (after a
    stop) goes on from its trials; records of that ledger the records lack (a run killed before it added them)
    are added with this session's times and commit. `earlier` (records from the records: an experiment's
    declaration, looks and trials) is written into each ledger first, so that an experiment stopped in an
    earlier session goes on from its trials (the lab trains only the trials whose keys it does not find)."""
    began, load, workers = time.strftime("%Y-%m-%d %H:%M"), os.getloadavg(), []
    # read now: another run may take a new snapshot into the same folder before this one ends
    snapped = (snap / "COMMIT").read_text(encoding="utf-8")
    for i, queue in enumerate(queues):
        (WORK / f"queue-{tag}{i}.txt").write_text("\n".join(queue) + "\n", encoding="utf-8")
        ledger, work = WORK / f"ledger-{tag}{i}.jsonl", WORK / f"runs-{tag}{i}"
        there = {known(r) for r in read_ledger(ledger)}
        if missing := [r for r in earlier if known(r) not in there]:
            add_records(missing, ledger)
        workers.append(
            lab(
                snap,
                "queue",
                str(ledger),
                str(WORK / f"queue-{tag}{i}.txt"),
                "--work",
                str(work),
                "--threads",
                str(threads),
                threads=threads,
            )
        )
    codes = [w.wait() for w in workers]
    records = [r for i in range(len(queues)) for r in read_ledger(WORK / f"ledger-{tag}{i}.jsonl")]
    held = {known(r) for r in read_ledger(records_path)}
    records = [r for r in measured(records) if known(r) not in held]
    session = {"began": began, "ended": time.strftime("%Y-%m-%d %H:%M"), "load_before": load}
    session.update(load_after=os.getloadavg(), commit=snapped, exit=codes, queues=queues)
    for r in records:
        r["session"] = session
    add_records(records, records_path)


def run(aa: int) -> None:
    "The rotary experiment and A/A 1..aa, in two queues side by side."
    rotary = (
        f"--name rotary-vs-table --base {shlex.quote(pinned_base())} --baseline '--positions sinusoidal' "
        f"--candidate '--positions rotary' --first-seed 1 {RULE}"
    )
    lines = [rotary] + [aa_line(k) for k in range(1, aa + 1)]
    # rotary and the first A/A share their rotary arms (the same config and seeds): one queue, one ledger
    run_queues([lines[:2] + lines[4::2], lines[2:4] + lines[5::2]], "", snapshot())


def spare(k: int) -> None:
    "A/A number k alone, with the snapshot of the run under way (made anew only when there is none)."
    snap = WORK / "snap" if (WORK / "snap" / "gptlib" / "lab.py").is_file() else snapshot()
    run_queues([[aa_line(k)]], f"spare{k}-", snap)


def section(records: list[dict]) -> str:
    sys.path.insert(0, str(REPO))
    from gptlib.expected import kind_text
    from gptlib.lab import summary

    rows = sorted(summary(records), key=lambda row: (not row["changed"], row["name"]))  # A/As last
    trials = [r for r in records if r["kind"] == "trial"]
    pins = [r for r in records if r["kind"] == "pin"]
    md = ["## The lab (`benchmarks/lab.py`)", ""]
    if not trials:
        return "\n".join(md + ["No records yet."])
    first = trials[0]
    cpu = kind_text(machine_kind(first["machine"]))
    sessions = [t["session"] for t in trials if "session" in t]
    began = min((s["began"] for s in sessions), default="?")
    ended = max((s["ended"] for s in sessions), default="?")
    commits = sorted({s["commit"] for s in sessions})
    md += [
        f"{began} to {ended}, commit {', '.join(commits)} "
        f"(its gptlib with the lab's files), {cpu}, torch {first['machine']['torch']}, "
        "one thread a trial, two trials at a time; command: "
        "`.venv/bin/python benchmarks/lab.py --pin 0.5 --run`.",
        "",
    ]
    if pins:
        p = pins[-1]
        md += [
            f"The trial: `{BASE.split(' --shards')[0]}` on the 4,096-id data, pinned by `lab pin` at the "
            f"steps a {p['budget']:g}-minute budget bought the baseline here, alone: **{p['max_steps']:,d} "
            f"steps in {p['precision']}** (the probe's choice); validated once, on the whole held-out split. "
            f"The rule, declared in the ledger before the first trial: `{RULE}` (each look at 0.05 / 3).",
            "",
        ]
    md += [
        "| experiment | candidate | seeds | mean difference (bits/byte) | interval | decision | trials "
        "| minutes |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for row in rows:
        changed = ", ".join(f"{k} {a} → {b}" for k, (a, b) in row["changed"].items())
        changed = changed or f"the baseline, seeds + {row['seed_shift']:,d} (A/A)"
        figures = (
            f"{row['mean']:+.4f} | [{row['lower']:+.4f}, {row['upper']:+.4f}]"
            if row["mean"] is not None
            else "|"
        )
        md.append(
            f"| {row['name']} | {changed} | {row['n']} | {figures} | **{row['decision']}** | "
            f"{row['trials']} | {row['seconds'] / 60:.1f} |"
        )
    seconds = [t["seconds"] for t in trials]
    loads = [t["load"] for t in trials if t.get("load") is not None]
    aa = [r for r in rows if not r["changed"]]
    aa_differences = [d for r in aa for d in r["differences"]]
    md += [
        "",
        f"A/A: {sum(r['decision'] == 'keep' for r in aa)} keep of {len(aa)} "
        f"({', '.join(r['decision'] + ' at ' + str(r['n']) for r in aa)}); their {len(aa_differences)} "
        "differences "
        f"spread with a standard deviation of {statistics.stdev(aa_differences):.4f} bits/byte "
        f"(two unpaired seeds)."
        if len(aa_differences) > 1
        else "",
        f"Cost: {len(trials)} trials trained, {statistics.median(seconds):.0f} s each (median; "
        f"{min(seconds):.0f}-{max(seconds):.0f} s), {sum(seconds) / 60:.1f} minutes of trials in all; a "
        f"decision took {statistics.median([r['seconds'] for r in rows]) / 60:.1f} minutes of trials "
        f"(median over the experiments; the two queues ran side by side). Load average (1 min) at the "
        "trials' starts: "
        f"{min(loads):.1f}-{max(loads):.1f} (other agents share the 2 cores).",
    ]
    return "\n".join(md + ["", NOTES])


NOTES = """How to read it (by hand, from the records of 2026-12-05). The rule keeps when the lower bound of
the mean paired difference (baseline minus candidate) clears the minimum effect, rejects when the upper
bound stays below it, and stops undecided at the cap; its three looks (3, 4 and 5 seeds) each test at 0.05 /
3, so the interval shown is 96.7 %. Rotary positions were kept at the first look: better on each of the
three seeds by 0.034-0.046 bits/byte (2.363-2.379 against the table's 2.406-2.413), [+0.021, +0.057] wholly
above 0.01. At 400 steps of this small model the gain is smaller than the 0.089 of `benchmarks/positions.py`
(1,300 steps of the `cpu` preset), with the same sign.

An A/A trains the baseline against itself with the candidate's seeds shifted by 1,000: another draw of the
initial weights and of the batches, so the arms are exchangeable (the true difference is 0) and differ by
the noise of two unpaired seeds (the same seed in both arms gives a difference of exactly 0, bit for bit,
which shows nothing). None of the six was kept. Five ran to the cap, their means within 0.005 of 0 and their
intervals straddling both 0 and 0.01: at this noise (a standard deviation of 0.009 between two unpaired
seeds, against 0.006 between rotary's paired arms) five seeds cannot tell 0.01 from 0, and the rule says
undecided rather than guess. aa-6 was rejected at three seeds whose differences happened to agree (-0.003 to
-0.005): its interval even left out 0, a t bound resting on three values that came out close, and its reject
says only what is true of any A/A: not better by 0.01. Six A/As without a keep cannot show a false-keep rate
of 5 % (that needs hundreds of them); the level rests on the test, and `tests/test_lab.py` checks it on
4,000 simulated null experiments: looking after every seed at 0.05 / looks keeps fewer than 5 %, looking at
0.05 each time keeps more.

Cost on this machine: a trial took 30 s when the 2 cores were quiet and up to 140 s when other agents' work
shared them (1-minute load averages of 1.5-9.1 at the trials' starts; median 88 s). A clear win decided at
the first look took 6 trials (8.3 minutes of trials here, about 3 on a quiet machine); an A/A run to the cap
10 (11-19 minutes here, about 5 quiet; aa-1 reused rotary's three rotary arms, the same config and seeds,
and counts their minutes). The whole round: 59 trials, 86 minutes of trials in 45 minutes of wall time (two
queues side by side), after the pin's one budget run. Only this CPU kind was at hand: the same experiment on
a second kind is still to be run."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pin", type=float, metavar="MINUTES", help="pin the trial's steps from a budget")
    parser.add_argument("--run", action="store_true", help="run the experiments")
    parser.add_argument("--aa", type=int, default=5, help="A/A experiments (default: 5)")
    parser.add_argument("--spare", type=int, metavar="K", help="run A/A number K alone (beside a --run)")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if args.pin:
        pin(args.pin)
    if args.run:
        run(args.aa)
    if args.spare:
        spare(args.spare)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import write_section

    write_section("lab", section(read_ledger(RECORDS)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
