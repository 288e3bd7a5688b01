"""Lesson 07's rungs measured with the lab: which pieces of today's small-model recipes pay on two CPU cores.

    .venv/bin/python benchmarks/modern.py [--screen] [--screen-more] [--full] [--rungs [NAME ...]] [--steps N]

`--screen`: each piece of `gptlib.modern` alone against lesson 04's GPT trained with AdamW, and all of them
together, on the lab's small trial (`benchmarks/lab.py`: 2 layers of width 128, context 128, 400 bf16 steps
pinned there) with paired seeds, under the lab's rule. `--full`: the pieces chosen from the screen together
against the `cpu` preset's recipe with lesson 04's GPT at `--steps` (1,300 by default, about `make run`'s
steps on a Zen 4), compiled, bf16, paired seeds. `--rungs`: each piece the full experiment did not take
(RMSNorm, QK-norm, ReLU², no biases, Muon at 1e-2) alone against the same baseline, at the steps `make run`
reaches here (its committed band's mean, or `--steps`), in one queue with both threads a trial; rungs of the
records stopped before their rule decided go on from their trials (seeds 4 and 5, say), on the CPU kind and
with the gptlib they began with. The screen and the full experiment run two queues side by side, one thread
each. The ledgers are added to `benchmarks/modern_runs.jsonl`, from which the section of RESULTS.md is
written (no flag: only rewritten). The runs use the committed gptlib (`git archive HEAD`), as the lab's
benchmark does; a rung that goes on, the commit it began with.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import BASE, DATA, RULE, WORK, machine_kind, read_ledger, run_queues, snapshot  # noqa: E402

RECORDS = Path(__file__).with_name("modern_runs.jsonl")
# every baseline is lesson 04's GPT: the `cpu` preset took the untied head and ReLU² on 2026-12-06, after
# these experiments began, and a rung asks what one piece adds to GPT-2's pieces (lab.BASE pins them too)
GPT2 = "--tied-head true --mlp gelu"
SCREEN = f"{BASE} --max-steps 400 --precision bf16"  # the lab's trial at the steps it pinned (lab_runs.jsonl)
PIECES = {
    "rmsnorm": "--norm rmsnorm",
    "qk-norm": "--qk-norm true",
    "relu2": "--mlp relu2",
    "untied-head": "--tied-head false",
    "no-bias": "--bias false",
    "muon": "--optimizer muon",
}
ALL = " ".join(PIECES.values())
# after the first screen: Muon at its own, larger learning rates (its update's RMS matches AdamW's at equal
# rates, Moonlight's scale, but modded-nanogpt's tuned rate is about 9 times that here), and the two pieces
# that were not rejected, together
MORE = {
    "muon-lr-3e-3": "--optimizer muon --muon-lr 3e-3",
    "muon-lr-1e-2": "--optimizer muon --muon-lr 1e-2",
    "muon-lr-3e-2": "--optimizer muon --muon-lr 3e-2",
    "untied-qk-norm": "--tied-head false --qk-norm true",
}


def full_base(steps: int) -> str:
    return (
        f"--preset cpu {GPT2} --compile true --max-steps {steps} --precision bf16 --eval-every {steps} "
        f"--checkpoint-every 400 --keep-last 1 --shards {DATA / 'shards/shakespeare-4096'} "
        f"--tokenizer {DATA / 'tokenizers/shakespeare-4096'}"
    )


def line(name: str, base: str, candidate: str, first_seed: int = 1) -> str:
    return (
        f"--name {name} --base {shlex.quote(base)} --candidate {shlex.quote(candidate)} "
        f"--first-seed {first_seed} {RULE}"
    )


def screen() -> None:
    lines = [line(f"screen-{name}", SCREEN, flags) for name, flags in PIECES.items()]
    lines.append(line("screen-all", SCREEN, ALL))
    run_queues([lines[:3], lines[3:]], "screen", snapshot(), RECORDS)


def screen_more() -> None:
    lines = [line(f"screen-{name}", SCREEN, flags) for name, flags in MORE.items()]
    run_queues([lines[::2], lines[1::2]], "more", snapshot(), RECORDS)


# the pieces the screen kept, at the `cpu` preset's size: all of them together, and the untied head alone
FULL = {
    "full-modern": "--tied-head false --optimizer muon --muon-lr 1e-2",
    "full-untied-head": "--tied-head false",
}


def full(steps: int) -> None:
    "Each experiment of FULL in a queue of its own, one thread a trial, the two queues side by side."
    queues = [[line(name, full_base(steps), flags)] for name, flags in FULL.items()]
    run_queues(queues, "full", snapshot(), RECORDS)


# each piece alone against the `cpu` preset's recipe with lesson 04's GPT, at the steps `make run` reaches on
# this CPU kind: the pieces the two experiments above did not take to that length (Muon at the screen's rate)
RUNGS = {
    **{name: flags for name, flags in PIECES.items() if name not in ("untied-head", "muon")},
    "muon-lr-1e-2": MORE["muon-lr-1e-2"],
}


def make_run_steps() -> int:
    """The steps `make run` reaches on this CPU kind: the mean of its committed band's runs (their steps vary
    by 10 % with the machine's speed; a lab experiment pins one number for both arms). The band is the
    preset's as it is now: since the preset took the untied head and ReLU², whose steps run faster, a Zen
    4's band holds about 2,080 steps where the rungs of its earlier band ran 1,892 (`--steps 1892` matches
    them)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from gptlib.expected import cpu_kind, kind_text, load_bands

    kind = cpu_kind()
    bands = [b for b in load_bands() if b.cpu == kind and b.preset == "cpu"]
    if not bands:
        raise SystemExit(
            f"no band of the cpu preset for {kind_text(kind)}: pass --steps (make run's steps here)"
        )
    return round(bands[0].max_steps)


def rungs(steps: int, only: list[str]) -> None:
    """The experiments of RUNGS (or `only` of them) at `steps`, one after another in one queue, both threads
    a trial, as `make run` trains. Every rung's baseline is lesson 04's GPT on the same seeds, so one ledger
    trains each baseline trial once and the later rungs reuse it (two queues would train it twice). A trial
    takes 8-11 minutes at the Zen 5's 3,609 steps and about 8 at the Zen 4's 1,892: the first rung of 3
    seeds 45 minutes to an hour, each further one about half that (a baseline trial is reused only by the
    same gptlib sources on the same CPU kind: its key holds both). Each piece has one rung in the records,
    on the CPU it ran on (its steps and its CPU are part of every trial's key); a rung named again goes on
    from where it stopped (`going_on`)."""
    names = [f"rung-{name}" for name in only or RUNGS]
    lines = [line(name, full_base(steps), RUNGS[name.removeprefix("rung-")]) for name in names]
    records, rev, earlier = read_ledger(RECORDS), "HEAD", []
    if any(r["kind"] == "experiment" and r["name"] in names for r in records):
        rev, earlier = going_on(names, steps, records)
    snap = snapshot(rev)
    sources = {r["code"]["sources"] for r in earlier if r["kind"] == "experiment"}
    if sources and sources != {fingerprint(snap)}:
        raise SystemExit(
            f"error: the gptlib of {rev} is not the one {', '.join(names)} ran: its trials would not be found"
        )
    run_queues([lines], "rungs", snap, RECORDS, threads=2, earlier=earlier)


def fingerprint(snap: Path) -> str:
    "The sources a trial's key holds for the gptlib of a snapshot (`gptlib.lab.code_fingerprint`)."
    code = "from gptlib.lab import code_fingerprint; print(code_fingerprint()['sources'])"
    env = {**os.environ, "PYTHONPATH": str(snap)}
    # run in the snapshot: from the repository, `-c` would import the working tree's gptlib first
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=snap, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def going_on(names: list[str], steps: int, records: list[dict]) -> tuple[str, list[dict]]:
    """Rungs stopped before their rule decided go on from their trials: the commit whose gptlib they ran (a
    snapshot of it has the sources their trials' keys hold, so the lab finds those trials and trains only the
    seeds still asked) and the records to start their ledger with. The records know an experiment by its
    name, so a rung goes on only where its looks stay one experiment's: every rung named is in the records,
    undecided, declared at `steps` on this CPU kind with this torch (a trial's key holds both)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import torch

    from gptlib.expected import cpu_kind

    here = {"ids": {}, **cpu_kind()}
    declared = {r["name"]: r for r in records if r["kind"] == "experiment" and r["name"] in names}
    looks = [r for r in records if r["kind"] == "look" and r["experiment"] in names]

    def problem(name: str) -> str | None:
        if name not in declared:
            return "is not in the records (run it apart from the rungs that go on)"
        if machine_kind(declared[name]["machine"]) != here:
            return "ran on another CPU kind"
        if declared[name]["machine"]["torch"] != torch.__version__:
            return f"ran on torch {declared[name]['machine']['torch']}, not {torch.__version__}"
        if declared[name]["baseline"]["max_steps"] != steps:
            return f"was declared at {declared[name]['baseline']['max_steps']} steps (pass --steps)"
        last = [look for look in looks if look["experiment"] == name][-1:]
        if last and last[0]["decision"] is not None:
            return f"is done ({last[0]['decision']} at {last[0]['n']} seeds)"
        return None

    for name in names:
        if why := problem(name):
            raise SystemExit(f"error: {name} {why}: it cannot go on; name another rung")
    revs = {declared[name]["session"]["commit"] for name in names}
    if len(revs) > 1:
        raise SystemExit(f"error: {', '.join(names)} ran on commits {', '.join(sorted(revs))}: one at a time")
    # every trial: the lab takes those whose keys it asks for (a baseline may be recorded under another rung)
    earlier = [
        r
        for r in records
        if r["kind"] == "trial"
        or (r["kind"] == "experiment" and r["name"] in names)
        or (r["kind"] == "look" and r["experiment"] in names)
    ]
    return revs.pop(), earlier


def section(records: list[dict]) -> str:
    "The section of RESULTS.md: one row per experiment of the records, the screen's first, then the full one."
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from gptlib.expected import kind_text
    from gptlib.lab import summary

    md = ["## Lesson 07's pieces (`benchmarks/modern.py`)", ""]
    trials = [r for r in records if r["kind"] == "trial"]
    if not trials:
        return "\n".join(md + ["No records yet."])

    def kind(record: dict) -> str:  # the CPU a record ran on
        return kind_text(machine_kind(record["machine"]))

    kinds = list(dict.fromkeys(kind(t) for t in trials))
    sessions = sorted({(t["session"]["began"], t["session"]["commit"]) for t in trials if "session" in t})
    md += [
        f"{sessions[0][0]} to {max(t['session']['ended'] for t in trials if 'session' in t)}, "
        f"{' and '.join(kinds)}, torch {trials[0]['machine']['torch']}; commits "
        f"{', '.join(sorted({c for _, c in sessions}))} (their gptlib). Command: `.venv/bin/python "
        "benchmarks/modern.py --screen --screen-more`, then `--full --steps 1300`, then `--rungs`. The rule, "
        "declared before "
        f"the first trial: `{RULE}`.",
        "",
        "The screen: the lab's small trial (`" + BASE.split(" --shards")[0] + " --max-steps 400 "
        "--precision bf16`), one thread a trial, two at a time. The full experiment: the `cpu` preset, "
        "compiled, bf16, 1,300 steps (as `benchmarks/positions.py`; `make run` reached 1,616 steps in its 9 "
        "minutes on a Zen 4 of an earlier round, 3,300-3,800 on the Zen 5, mean 3,609: the Zen 5's rungs' "
        "length), "
        "one thread a trial, two at a time. Bits per byte over the whole held-out split at the last step; a "
        "difference is baseline minus candidate (positive: the candidate is better).",
        "",
    ]
    rung = [r for r in records if r["kind"] == "experiment" and r["name"].startswith("rung-")]
    if rung:  # the rungs' pinned steps: `make run`'s on the CPU kind they ran on
        lengths: dict[tuple[int, str], list[str]] = {}
        for e in rung:
            lengths.setdefault((e["baseline"]["max_steps"], kind(e)), []).append(e["name"])
        md += [
            "The rungs (`--rungs`): each piece alone against the `cpu` preset's recipe with lesson 04's GPT "
            f"(`{GPT2}` since the preset took those two pieces), compiled, bf16, at "
            "`make run`'s steps on the CPU it ran on (its committed band's mean), both threads a trial, one "
            "at a time: "
            + "; ".join(
                f"{steps:,d} steps on the {cpu} ({', '.join(names)})"
                for (steps, cpu), names in lengths.items()
            )
            + ". A rung's two arms always ran on one CPU, at one length.",
            "",
        ]
    md += [
        "| experiment | candidate | seeds | mean difference (bits/byte) | interval | decision | trial "
        "seconds (baseline, candidate) |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    by_key = {t["key"]: t for t in trials}
    order = ("screen", "full", "rung")  # the screen's rows, then the full experiment's, then the rungs'
    for row in sorted(summary(records), key=lambda r: (order.index(r["name"].split("-")[0]), r["name"])):
        changed = ", ".join(f"{k} {a} → {b}" for k, (a, b) in row["changed"].items())
        figures = (
            f"{row['mean']:+.4f} | [{row['lower']:+.4f}, {row['upper']:+.4f}]"
            if row["mean"] is not None
            else "|"
        )
        looks = [r for r in records if r["kind"] == "look" and r["experiment"] == row["name"]]
        seconds = {"baseline": [], "candidate": []}
        for result in looks[-1]["results"] if looks else []:
            for arm in seconds:
                seconds[arm].append(by_key[result["keys"][arm]]["seconds"])
        cost = ", ".join(f"{statistics.median(v):.0f}" for v in seconds.values() if v)
        if not looks:  # stopped before its first look: the trials it has, by arm
            done = [t for t in trials if t["experiment"] == row["name"]]
            figures = " | ".join(f"{t['arm']} seed {t['seed']}: {t['val_bpb']:.4f}" for t in done)
            row["decision"], cost = "stopped", ", ".join(f"{t['seconds']:.0f}" for t in done)
        elif row["decision"] == "running":  # records land when a queue ends: this one was stopped, undecided
            row["decision"] = f"stopped at {row['n']} seeds"
        md.append(f"| {row['name']} | {changed} | {row['n']} | {figures} | **{row['decision']}** | {cost} |")
    return "\n".join(md + ["", NOTES])


NOTES = """How to read it (by hand, from the records of 2026-12-05 on an AMD EPYC Zen 5, and the rungs of
2026-12-05 and 06 on a Zen 4). The screen (400 steps of a 0.9 M-parameter model) kept two pieces: the untied
head (+0.138) and Muon at a rate of its own, 1e-2 (+0.107). Muon at AdamW's 1e-3 lost 0.087 and at 3e-2 lost
0.024: Moonlight's scale gives its update the RMS of AdamW's at equal rates, yet here its best rate was 10
times AdamW's. RMSNorm without gains (-0.029) and ReLU² (-0.010) were rejected; QK-norm (+0.009) and no biases
(+0.001) stayed undecided at 5 seeds, within 0.015 of zero both. All six together (Muon at 1e-3) gave +0.119,
less than the untied head alone.

At the `cpu` preset's size (4.2 M parameters, 1,300 steps) the untied head was kept: +0.044 [+0.021, +0.067]
over 3 seeds (1.891-1.912 against 1.927-1.962 bits/byte). The untied head with Muon at 1e-2 did less on the
one seed it trained (+0.017, where the head alone gave +0.047 on that seed) and took 41 % longer a trial
(839 s against 594 s); it was stopped after that pair, to leave the cores to the others: no decision.
Newton-Schulz's 5 iterations over the 16 block matrices are 18.8 GFLOP a step, 32 % of the model's 58.2
GFLOP at 2,048 tokens a step (at a batch of half a million tokens, as in modded-nanogpt's record, the same
work is about 0.13 %).

At equal time: the `cpu` preset and the same with `--tied-head false`, both trained to a 9-minute budget
side by side (`train start --preset cpu [--tied-head false] --budget 9` on `make run`'s data, one thread
each, the helper's notebook runs and tests sharing the cores): 1,291 steps to **1.9463** bits/byte against
1,273 steps to **1.9076** (0.039 better, 2.0 %); the untied step took 441 ms against 445 ms. Why it pays
here: at 4,096 ids and width 256 the tied matrix is a quarter of the model (1.05 M of 4.2 M parameters);
untying gives the output side a matrix of its own, 25 % more parameters, for almost no compute (the head's
product is the same and the embedding is a lookup).

At `make run`'s own length the gain was gone: `make run` itself (`benchmarks/train.py`, 9 minutes, both
cores, a fresh data folder and compile cache each), three seeds with the head untied and three tied, one at
a time on the same machine the same day: with weight decay 0.1, 1.833, 1.845, 1.838 untied against 1.837,
1.841, 1.830 tied (3,319-3,690 steps against 3,447-3,812), seed by seed -0.004, +0.003, +0.008, the tied
head better by 0.003 on average, within the seeds' spread of 0.011; with weight decay 0.3, 1.820, 1.809,
1.822 untied against 1.815, 1.813, 1.822 tied, the tied head better by 0.001. Both threads ran 3,300-3,800
steps here, three times the experiment's 1,300, about five passes over the training plays. The likely
reason: by then the model memorises, and a million parameters more add to what it can memorise as much as
to what it can predict. Weight decay, which works against memorising at no cost in step time, paid instead:
0.3 gained 0.020 over 0.1 on the tied seeds (0.6 lost 0.006 against 0.3; section Training). The `cpu`
preset kept GPT-2's tied head then and took the decay of 0.3; its band of that kind was made of the three
tied seeds at 0.3. On a slower CPU, where `make run` stops nearer 1,300 steps (a Zen 4 of earlier rounds:
1,443-1,616), the untied head might pay: measured there on 2026-12-06 (the last paragraph).

At `make run`'s length (`--rungs`, 15:10 to 17:19 the same day): the `cpu` preset at 3,609 steps, both threads
a trial, one trial at a time; the baseline's trials of seeds 1-5 trained once and shared by both rungs
(QK-norm's: 1-4). Muon at 1e-2 gained +0.017 [+0.001, +0.033] over 5 seeds (1.795-1.815 against 1.817-1.839
bits/byte), every seed better, yet not clear of the rule's 0.01: undecided at the cap. Its trials took 642 s
against 472 s (medians), 36 % longer, so in `make run`'s 9 minutes it would train about a quarter fewer steps;
that trade was not measured. The screen's +0.107 came at 400 steps of a 0.9 M model, where an optimizer's
faster start weighs most. Published: modded-nanogpt's record 3, where Muon came in, reached 3.28 in 3.7
billion tokens instead of 5 (31.4 to 24.9 minutes on 8 H100s), at half a million tokens a step, where
Newton-Schulz's share of the work is a small fraction of the 32 % it is here. QK-norm was rejected at 4 seeds:
-0.005 [-0.019, +0.009] (1.814-1.829 against 1.817-1.821), each trial 5 % longer. The screen's +0.009 did not
carry to 3,609 steps at a peak rate of 1e-3: what it bounds, attention scores that grow with the weights, is a
danger of higher rates and larger models (Henry et al. 2020; the speedrun took it in record 5 together with
ReLU², zero-initialised projections and padded embeddings, 22.3 to 15.2 minutes, no figure for it alone).
ReLU²'s rung ran the same evening on an AMD EPYC Zen 4 (family 25 model 17, 22:06 to 23:26), at its `make
run`'s length: 1,892 steps, the mean of the band made there first (1,850-1,920 steps, 1.880-1.894 bits/byte;
section Training). It was better on every one of 5 seeds, by 0.009 to 0.048 (1.866-1.891 against 1.886-1.915
bits/byte): +0.021 [-0.001, +0.043], undecided at the cap, its lower end short of 0.01. The screen had
rejected it (-0.010 at 400 steps of the small model). Its step costs nothing more: its trials took 461 s
against 478 s (medians). Published: Primer found it on far larger models, and the speedrun took it only
together with QK-norm, zero-initialised projections and padded embeddings (record 5). Its baseline seeds
spread 0.029 here (0.022 for the Zen 5's 3,609 steps), and seed 2's baseline (1.915) carried the largest
difference, 0.048: without it the mean is +0.014. The stop: the queue was stopped by hand at 23:26, after
ReLU²'s decision, as rung-rmsnorm's first trial began: the session's time.

RMSNorm's and no biases' rungs ran on the same Zen 4 on 2026-12-06 (01:08 to 02:20, `--rungs rmsnorm no-bias
--steps 1892`: ReLU²'s length, against lesson 04's GPT, the baseline's trials shared). RMSNorm without gains
was rejected at 3 seeds: -0.025 [-0.048, -0.003], worse on each (1.916, 1.932, 1.917 against 1.888, 1.915,
1.886), as in the screen (-0.029): LayerNorm's centring and gain were worth more here than the simpler norm,
at no difference in step time (trials 452-475 s against 463-495 s). Dropping the biases gave +0.003 [-0.023,
+0.029] over 3 seeds (seed by seed -0.004, +0.012, +0.000), and the queue was stopped by hand after that third
look, for the session's time, 252 steps into the fourth baseline trial (its checkpoint saved). It went on the
next session from its trials (04:02 to 04:33, `--rungs no-bias --steps 1892`, the gptlib of 55dd800 again,
so that the lab found the first three seeds' trials by their keys, and that trial resumed at step 252, exactly
as a run resumes): seeds 4 and 5 gave -0.011 and +0.004, and the rule stopped at its cap, undecided: +0.0003
[-0.012, +0.013] over 5 seeds, as in the screen (+0.001). The biases are 0.3 % of the parameters; dropping
them neither helped nor hurt here, and saved no time (whole trials 459-481 s against 463-495 s).

In `make run` itself on the same Zen 4 (2026-12-06, `benchmarks/train.py --candidate untied-relu2`, section
Training): ReLU² and the untied head together, on the three seeds of the band, reached 1.820, 1.821 and 1.834
bits/byte against 1.894, 1.880 and 1.888, better by 0.074, 0.059 and 0.054 (+0.063), in 2,030-2,114 steps
against 1,850-1,920: the two pieces that gained at this length or shorter, measured together as a preset is
used. The `cpu` preset took both; its Zen 4 band is these three runs. Since then every baseline here pins
lesson 04's pieces (`--tied-head true --mlp gelu`): a rung still asks what one piece adds to GPT-2's."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screen", action="store_true", help="each piece alone, and all, on the small trial")
    parser.add_argument("--screen-more", action="store_true", help="Muon's rates, the pieces kept, together")
    parser.add_argument("--full", action="store_true", help="the pieces kept, at the cpu preset's size")
    parser.add_argument(
        "--rungs",
        nargs="*",
        choices=sorted(RUNGS),
        help="each piece alone at make run's steps (all: no names)",
    )
    parser.add_argument(
        "--steps", type=int, help="pinned steps: --full's (default 1300), --rungs' (default: make run's here)"
    )
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if args.screen:
        screen()
    if args.screen_more:
        screen_more()
    if args.full:
        full(args.steps or 1300)
    if args.rungs is not None:
        rungs(args.steps or make_run_steps(), args.rungs)
    from _results import write_section

    write_section("modern", section(read_ledger(RECORDS)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
