"""Lesson 07's rungs measured with the lab: which pieces of today's small-model recipes pay on two CPU cores.

    .venv/bin/python benchmarks/modern.py [--screen] [--full]

`--screen`: each piece of `gptlib.modern` alone against lesson 04's GPT trained with AdamW, and all of them
together, on the lab's small trial (`benchmarks/lab.py`: 2 layers of width 128, context 128, 400 bf16 steps
pinned there) with paired seeds, under the lab's rule. `--full`: the pieces chosen from the screen together
against the `cpu` preset at the steps `make run` reaches on this machine (`--steps`), compiled, bf16, paired
seeds. Two queues run side by side, one thread each; the ledgers are added to
`benchmarks/modern_runs.jsonl`, from which the section of RESULTS.md is written (no flag: only rewritten).
The runs use the committed gptlib (`git archive HEAD`), as the lab's benchmark does.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import BASE, DATA, RULE, WORK, run_queues, snapshot  # noqa: E402

RECORDS = Path(__file__).with_name("modern_runs.jsonl")
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
        f"--preset cpu --compile true --max-steps {steps} --precision bf16 --eval-every {steps} "
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


def full(steps: int, candidate: str) -> None:
    # one experiment, its trials one after the other on both cores (two threads a trial), at most 4 seeds
    rule = RULE.replace("--max-seeds 5", "--max-seeds 4")
    experiment = line("full-modern", full_base(steps), candidate).replace(RULE, rule)
    run_queues([[experiment]], "full", snapshot(), RECORDS, threads=2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screen", action="store_true", help="each piece alone, and all, on the small trial")
    parser.add_argument("--screen-more", action="store_true", help="Muon's rates, the pieces kept, together")
    parser.add_argument("--full", metavar="FLAGS", help="these pieces against the cpu preset at --steps")
    parser.add_argument("--steps", type=int, default=3700, help="the full trial's pinned steps")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if args.screen:
        screen()
    if args.screen_more:
        screen_more()
    if args.full:
        full(args.steps, args.full)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
