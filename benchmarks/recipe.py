"""The search behind the `cpu` preset: which recipe writes the best Shakespeare in `make run`'s time budget?

    .venv/bin/python benchmarks/recipe.py [--budget-s 480] [--only NAME ...] [--table-only]

Every candidate is a set of TrainConfig fields on top of the `cpu` preset (and the tokenizer size it needs).
Each trains for the steps the same wall-time budget (`--budget-s`, default 8 minutes: `make run`'s
`--budget` when rounds 1-9 ran, since raised to 9; candidates are compared with each other at equal
minutes, so the rounds keep theirs) gives it on a quiet machine of this CPU kind, on the same 40 plays, and
is scored on the whole of the 2 held-out plays (bits per byte, every window) at its best validation, plus
the sample quality of that checkpoint over 3 seeds (see benchmarks/_budget.py for how the budget becomes a
number of steps: the arithmetic of `gptlib.probe`). The step time differs between the project's CPU kinds
(an Intel Xeon with AMX, AMD EPYCs without), so each kind has its own rounds and its own table: a recipe that
wins on one may lose on the other, where the same minutes buy fewer steps. `MAKE_RUN_CANDIDATES` are the
finalists' kind of run: each trained as `make run` trains the preset, by `benchmarks/train.py --candidate`
(records in train_runs.jsonl, their table in the `train` section). Candidates stay
inside the original design: sinusoidal positions, pre-norm blocks, AdamW, the same code path as `gpt-25m`.

Rank finalists with both threads, one at a time: one thread flatters a narrow model, whose step gains less
from a second core (rounds 5-6: 4 x 128 fitted 2,543 steps in `make run`, not the 2,900 of the one-thread
arithmetic). To screen candidates, run them with OMP_NUM_THREADS=1 on a machine that other work shares:
torch's threads spin while they wait for each other, and on an oversubscribed machine a 2-thread step then
takes several times longer than a 1-thread one (the step counts, fixed by the quiet reference of this CPU
kind, are the same either way).

Results are appended to benchmarks/recipe_runs.jsonl with the CPU kind they were planned for (a candidate
already there for this kind is not run again; delete its line to re-run it); the tables are written to the
`recipe` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _budget import corpus_data, reference_step_s, train_for_budget  # noqa: E402
from _results import machine_line, write_section  # noqa: E402

from gptlib.expected import cpu_kind  # noqa: E402
from gptlib.pipeline import PROMPT  # noqa: E402
from gptlib.train_config import TrainConfig  # noqa: E402

RUNS = Path(__file__).with_name("recipe_runs.jsonl")
SAMPLE_PROMPT = "ROMEO:"  # the prompt every row's samples were drawn after (then after <|bos|>: see FINDINGS)

# name -> (why it is tried, TrainConfig fields over the `cpu` preset in bf16); rounds in the order they ran
CANDIDATES = {
    # round 1: what bf16 alone gives, then one knob at a time: regularization, vocabulary, width and depth,
    # learning rate, batch, context, compilation
    "r1-today": ("the cpu preset as it was (4 x 256, vocab 4096, no dropout, lr 2e-3), in bf16", {}),
    "r1-dropout": (
        "+ dropout 0.1 on embeddings and residual branches (attention kept fused)",
        {"dropout": 0.1},
    ),
    "r1-v2048": ("vocabulary 2,048: a cheaper LM head, more tokens per byte", {"vocab_size": 2048}),
    "r1-lr3e-3": ("peak learning rate 3e-3 (and min 3e-4)", {"max_lr": 3e-3, "min_lr": 3e-4}),
    "r1-v8192": ("vocabulary 8,192: fewer, longer tokens, a costlier LM head", {"vocab_size": 8192}),
    "r1-w192": ("narrower: 4 x 192, more steps", {"n_embd": 192, "n_head": 3}),
    "r1-compile": ("torch.compile, its compile time taken from the budget", {"compile": True}),
    "r1-batch16": ("16 sequences a step (fewer, larger steps)", {"micro_batch": 16}),
    "r1-ctx128": (
        "context 128, 16 sequences a step (same tokens a step)",
        {"context": 128, "micro_batch": 16},
    ),
    "r1-l6w192": ("deeper and narrower: 6 x 192", {"n_layer": 6, "n_embd": 192, "n_head": 3}),
    # round 2: 3e-3 was far worse than 2e-3, so lower rates; and more weight decay against the train/val gap
    "r2-lr1e-3": ("peak learning rate 1e-3 (and min 1e-4)", {"max_lr": 1e-3, "min_lr": 1e-4}),
    "r2-lr1.4e-3": ("peak learning rate 1.4e-3 (and min 1.4e-4)", {"max_lr": 1.4e-3, "min_lr": 1.4e-4}),
    "r2-wd0.3": ("weight decay 0.3 (from 0.1)", {"weight_decay": 0.3}),
    # round 3: both winners of round 2 together, and a still lower rate
    "r3-lr1e-3-wd0.3": (
        "peak learning rate 1e-3 and weight decay 0.3",
        {"max_lr": 1e-3, "min_lr": 1e-4, "weight_decay": 0.3},
    ),
    "r3-lr7e-4": ("peak learning rate 7e-4 (and min 7e-5)", {"max_lr": 7e-4, "min_lr": 7e-5}),
}
XEON = "Intel(R) Xeon(R) Processor"  # the kind rounds 1-3 ran on (their records name no CPU)
# the `cpu` preset as rounds 1-3 found it, under their candidates' changes (its rate was 2e-3 then)
ROUNDS_1_TO_3_BASE = {
    "n_embd": 256,
    "n_head": 4,
    "max_lr": 2e-3,
    "min_lr": 2e-4,
    "cooldown": 1.0,
    "compile": False,  # the preset compiles since 2026-12-02; these rounds ran eager
    "positions": "sinusoidal",  # the preset's attention turns q and k by position since round 11
    "weight_decay": 0.1,  # the preset's until 2026-12-05
    "tied_head": True,  # and lesson 04's GPT: the preset took lesson 07's untied head and ReLU² on 2026-12-06
    "mlp": "gelu",
}

# The AMD EPYC kind (avx512_bf16, no AMX): its steps take about 1.7 times the Xeon's, so `make run`'s
# 8 minutes buy about 1,400 steps of the `cpu` preset instead of 2,600. Round 4 asks what recipe pays in
# fewer steps: the preset as it is, a higher rate (fewer steps may want longer ones), cheaper steps
# (narrower, shallower, a smaller vocabulary, a shorter context: more of them), torch.compile. `auto`
# precision: the faster of fp32 and bf16 by measured steps, as a run picks it.
# the `cpu` preset as rounds 4-7 found it, under their candidates' changes (pinned: a change of the
# preset would otherwise change what the recorded candidates mean); rounds 8-9 set round 7's cooldown in
# their own fields
ROUNDS_4_TO_9_BASE = {**ROUNDS_1_TO_3_BASE, "max_lr": 1e-3, "min_lr": 1e-4}
AMD_CANDIDATES = {
    "a4-today": ("the cpu preset as round 4 found it (4 x 256, vocab 4096, lr 1e-3)", {}),
    "a4-lr1.5e-3": ("peak learning rate 1.5e-3 (and min 1.5e-4)", {"max_lr": 1.5e-3, "min_lr": 1.5e-4}),
    "a4-w192": ("narrower: 4 x 192 (3 heads of 64), cheaper steps", {"n_embd": 192, "n_head": 3}),
    "a4-l3": ("shallower: 3 x 256, cheaper steps", {"n_layer": 3}),
    "a4-v2048": ("vocabulary 2,048: a cheaper LM head, more tokens per byte", {"vocab_size": 2048}),
    "a4-ctx128": (
        "context 128, 16 sequences a step (same tokens a step, cheaper attention)",
        {"context": 128, "micro_batch": 16},
    ),
    "a4-compile": ("torch.compile, its compile time taken from the budget", {"compile": True}),
    # round 5: 1,335 steps of 4.2 M parameters see 0.65 tokens per parameter, far below the ~20 of a
    # compute-optimal run (Hoffmann et al. 2022): a smaller model that sees more tokens in the same minutes
    "a5-today": ("the cpu preset as round 5 found it (4 x 256, no dropout, lr 1e-3): its baseline", {}),
    "a5-w128": ("narrower still: 4 x 128 (4 heads of 32), a third of the work a token", {"n_embd": 128}),
    "a5-w128-lr2e-3": (
        "4 x 128 at peak learning rate 2e-3 (a smaller model takes a larger rate)",
        {"n_embd": 128, "max_lr": 2e-3, "min_lr": 2e-4},
    ),
    "a5-w192-lr2e-3": (
        "4 x 192 at peak learning rate 2e-3",
        {"n_embd": 192, "n_head": 3, "max_lr": 2e-3, "min_lr": 2e-4},
    ),
    "a5-w192-lr3e-3": (
        "4 x 192 at peak learning rate 3e-3: which side of 2e-3 the best rate lies",
        {"n_embd": 192, "n_head": 3, "max_lr": 3e-3, "min_lr": 3e-4},
    ),
    # round 6: round 5's best, 4 x 128 at 2e-3, at 4 x 192's best rate scaled as 1 / width (2e-3 -> 3e-3),
    # and two more layers (depth for the steps that width gave up)
    "a6-w128-lr3e-3": (
        "4 x 128 at peak learning rate 3e-3",
        {"n_embd": 128, "max_lr": 3e-3, "min_lr": 3e-4},
    ),
    "a6-l6w128": (
        "6 x 128 at peak learning rate 2e-3",
        {"n_layer": 6, "n_embd": 128, "max_lr": 2e-3, "min_lr": 2e-4},
    ),
    # round 7: the schedule. Every candidate so far decayed from the end of warmup; a run this short may
    # gain from holding the peak rate longer and decaying only at the end (warmup-stable-decay: Hu et al.
    # 2024; Hagele et al. 2024 found a cooldown of a fifth of the run matching a whole-run cosine)
    "a7-cooldown0.25": (
        "the cosine over the last quarter of the steps only, max_lr held until then",
        {"cooldown": 0.25},
    ),
    "a7-cooldown0.5": ("the cosine over the last half of the steps only", {"cooldown": 0.5}),
    # round 8: on round 7's winner (the preset now: cooldown 0.25), the rate again. A rate held at its peak
    # for three quarters of the run may take a higher peak, and the short decay may go further down (the
    # warmup-stable-decay runs of Hagele et al. 2024 decay to zero); same shape, so no thread-count bias
    "a8-lr1.5e-3": (
        "cooldown 0.25, peak learning rate 1.5e-3 (and min 1.5e-4)",
        {"cooldown": 0.25, "max_lr": 1.5e-3, "min_lr": 1.5e-4},
    ),
    "a8-min1e-5": (
        "cooldown 0.25, the decay down to 1e-5 (a hundredth of the peak, not a tenth)",
        {"cooldown": 0.25, "min_lr": 1e-5},
    ),
    # round 9: 1.5e-3 lost already while held (2.175 bits/byte at step 800 against 2.161), so the other side
    # of 1e-3; and the squared-gradient average over more steps (nanoGPT's small character recipe uses 0.99)
    # for steps of only 2,048 tokens, whose gradients are noisy
    "a9-lr7e-4": (
        "cooldown 0.25, peak learning rate 7e-4, the decay down to 1e-5",
        {"cooldown": 0.25, "max_lr": 7e-4, "min_lr": 1e-5},
    ),
    "a9-beta2-0.99": (
        "cooldown 0.25, the decay down to 1e-5, AdamW beta2 0.99",
        {"cooldown": 0.25, "min_lr": 1e-5, "beta2": 0.99},
    ),
}

# Candidates run as `make run` runs the preset ("m": `make run`; `benchmarks/train.py --candidate NAME`, its
# records and table there): the pipeline with its budget, every thread, seed 1337, the probe and the run's
# own steps setting the end, its fields over the `cpu` preset as it is now (not over a pinned base: the run
# is `make run` with these fields changed). No thread-count arithmetic flatters a narrow model here; each is
# one run, so a gain must beat the preset's own seed spread to count.
# Round 10, on an Intel Xeon whose AMX is hidden (avx512_bf16 and avx512_fp16 only: bf16 steps 1.4x slower
# than fp32, so `auto` trains in fp32, 1,200-1,400 steps of the preset in 9 minutes, 0.6-0.7 tokens per
# parameter): the narrow models of rounds 5-6, now under the held schedule, at their rates of rounds 5-6
# (width and rate change together: 2e-3 at 192 and 3e-3 at 128 scale as 1 / width between themselves, Yang
# et al. 2022, but the preset's 1e-3 at 256 is below that line). Round 10 ran over the preset with the
# sinusoidal table; its records say so (their configs predate `positions`), and they are compared only with
# seeds of that preset
MAKE_RUN_CANDIDATES = {
    "m10-w192-lr2e-3": (
        "4 x 192 (3 heads of 64) at peak learning rate 2e-3",
        {"n_embd": 192, "n_head": 3, "max_lr": 2e-3, "min_lr": 2e-4},
    ),
    "m10-w128-lr3e-3": (
        "4 x 128 (4 heads of 32) at peak learning rate 3e-3",
        {"n_embd": 128, "max_lr": 3e-3, "min_lr": 3e-4},
    ),
    # the preset's 3,300-3,800 steps on a fast CPU read the training plays five times: more decay against it
    "wd-0.3": ("weight decay 0.3 (then the preset's 0.1)", {"weight_decay": 0.3}),
    # once 0.3 paid: lesson 07's untied head on top of it (it lost at 0.1, likely to memorising), and more
    "untied-wd-0.3": ("the head untied, weight decay 0.3", {"tied_head": False, "weight_decay": 0.3}),
    "wd-0.6": ("weight decay 0.6 (the preset's 0.3)", {"weight_decay": 0.6}),
    # a Zen 4's 9 minutes fit about 1,900 steps, half a Zen 5's: lesson 07's two pieces that gained at that
    # length or shorter (the untied head +0.044 at 1,300 steps, ReLU² +0.021 at 1,892), measured together
    "untied-relu2": ("the head untied and ReLU² (lesson 07)", {"tied_head": False, "mlp": "relu2"}),
}
# the candidates the `cpu` preset took: their runs are seeds of the recipe they ran (its band's, while the
# preset is that recipe; an earlier recipe's once it changes), as `--band-seeds` runs would be
ADOPTED = ("wd-0.3", "untied-relu2")


FINDINGS = """What the table says, and what became the `cpu` preset:

- **The learning rate mattered most**: 3e-3 lost 0.10 bits/byte against 2e-3, and 1e-3 gained 0.03 (7e-4 was
  worse again). More weight decay (0.3) helped a little alone and not on top of the lower rate.
- **Regularizing did not pay in 8 minutes**: dropout costs 30 % more per step on this CPU, so the run gets
  fewer steps, and 3.3 passes over the data are not yet enough to overfit (every run's best validation came at
  or within a few steps of its end).
- **The shape stayed**: 16 sequences a step reached the same loss as 8 (half the steps); a vocabulary of 8,192
  was worse per byte in this budget (a costlier head, fewer steps), although its samples had more real words.
- **The preset**: the best candidate, `r2-lr1e-3`, given the whole training time `make run` may spend (2,600
  steps, about 8.5 minutes on 2 cores); `benchmarks/train.py` measured it against the character-level recipe.
  Rounds 4-6 on the AMD EPYC (above) asked whether fewer steps call for a narrower model there.
- The known-word figures above come from samples after `<|bos|>ROMEO:`, that is, at the start of a document:
  the plays open with cast lists in capitals, and so did the samples. `make run` now samples after `Romeo.`
  without `<|bos|>` (mid-text, as training windows start), which raised known words from 88 % to 98 % on the
  same checkpoint.
- Not run in this round: {not_run} (an `r1-v2048` run was cut short by a restart and its partial figures
  discarded; the runs were made two at a time with `OMP_NUM_THREADS=1`, their step counts fixed by the
  quiet 2-thread reference step, see `_budget.py`).
"""


def candidates(kind: str) -> dict:
    "The candidates of this CPU kind's rounds."
    return CANDIDATES if kind == XEON else AMD_CANDIDATES


def run_candidate(name: str, budget_s: float, work: Path, kind: str) -> dict:
    why, fields = candidates(kind)[name]
    precision = "bf16" if kind == XEON else "auto"  # rounds 1-3 fixed bf16, the faster there
    base = ROUNDS_1_TO_3_BASE if kind == XEON else ROUNDS_4_TO_9_BASE
    cfg = TrainConfig.preset("cpu", precision=precision, **{**base, **fields})
    tok_dir, shards = corpus_data(cfg.vocab_size)
    cfg = replace(cfg, tokenizer=str(tok_dir), shards=str(shards))
    prompt = SAMPLE_PROMPT if kind == XEON else PROMPT  # round 4 samples mid-text, as `make run` does
    return {"why": why, **train_for_budget(name, cfg, budget_s, work, prompt=prompt)}


def load_runs() -> dict[tuple[str, str], dict]:
    "The recorded runs by (CPU kind, candidate); rounds 1-3 name no CPU and ran on the Xeon."
    runs = {}
    if RUNS.is_file():
        for line in RUNS.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                runs[(record.get("cpu", {}).get("model", XEON), record["name"])] = record
    return runs


def table(runs: dict[tuple[str, str], dict], kind: str) -> str:
    rows = [
        "| candidate | what changes | params | precision | steps | epochs | best val bits/byte (step) | "
        "known words | known speakers | blank run | stutters |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in candidates(kind):
        if (kind, name) not in runs:
            continue
        r = runs[(kind, name)]
        q = r["quality"]
        speakers = "-" if q["known_speakers"] is None else f"{q['known_speakers']:.0%}"
        rows.append(
            f"| {name} | {r['why']} | {r['params'] / 1e6:.2f} M | {r['config']['precision']} | "
            f"{r['steps']:,d} | {r['epochs']:.1f} | **{r['best_val_bpb']:.3f}** ({r['best_step']}) | "
            f"{q['known_words']:.1%} | {speakers} | {q['longest_blank_run']} | {len(q['stutters'])} |"
        )
    return "\n".join(rows)


# What rounds 4-9 found on the AMD EPYC kind
AMD_FINDINGS = """What rounds 4-9 say on this kind:

- `a4-today` ran before the `cpu` preset dropped its dropout (its record's config says dropout 0.1, which
  costs steps here as on the Xeon): it is not the preset as it is now; `a5-today` is, with round 5's
  reference step (0.300 s, the median of the probes of four `make run`s; round 4's 0.333 s had dropout in it).
- **In the search's arithmetic, narrower models win**: the preset, 4 x 256 at 1e-3, fits 1,524 steps (0.7
  tokens per parameter) and reaches 2.068; 4 x 192 at 2e-3 2.047 in 2,172 steps; 4 x 128 at 2e-3 2.036 in
  2,912.
- **A narrower model takes a higher rate**: 3e-3 lost to 2e-3 at 4 x 192 (2.061) but won at 4 x 128
  (**2.024**, the best of the search on this kind), as a rate scaled as 1 / width says (Yang et al. 2022,
  muP: 2e-3 x 192 / 128 = 3e-3). Two more layers (6 x 128 at 2e-3, 2,271 steps) reached 2.026, with fewer
  of their samples' speaker names real (71 %).
- **One thread flatters a narrow model.** Rounds 5-6 ran two at a time with one thread each, their steps
  fixed by one-thread ratios to the reference step (0.53 for 4 x 128). At two threads, as `make run`
  trains, a 128-wide step gains less from the second core: `make run` with the preset set to `a6-w128-lr3e-3`
  probed 181 ms a step in bf16 (1.33x fp32's), fitted 2,543 steps (not about 2,900), and reached **2.049**
  bits/byte in 7.8 minutes, 95.3 % of its sample words found in the training text (record
  `candidate-make-run` in `train_runs.jsonl`). The preset's own three seeds span 2.043-2.089 (97.8 % words
  for seed 1337).
- **So the model stays 4 x 256 at 1e-3**: the narrow candidate's gain at two threads, about 0.02 bits/byte,
  is inside the spread that the probe's timing gives the preset from run to run; its samples' words are real
  less often; and on the Xeon, where 8 minutes fit 2,300 steps of the preset (1.998), it has not run.
- **Round 7, the schedule, gained more than any shape**: every candidate before decayed its rate from the end
  of warmup. Holding the peak and running the same cosine over the last quarter of the steps reached
  **2.010** in 1,534 steps (the cosine from the end of warmup: 2.068 in 1,524), over the last half 2.023: in
  a run this short, the rate held high for longer moves further, and the short decay at the end still
  anneals (the warmup-stable-decay schedule: Hu et al. 2024, MiniCPM; Hagele et al. 2024). So the preset now
  holds its rate until its last quarter (`cooldown` 0.25), which also lets a budget's run move its end while
  the rate holds (`gptlib.probe.Budget.replan`). In `make run` (two threads, the end moved by the run's own
  step times), seeds 1337-1339 reached 2.026, 2.038 and 2.014 in 1,253-1,454 steps, against 2.089, 2.085 and
  2.043 for the cosine planned once (1,303-1,674 steps): the band of section Training then. Still short of
  2.00 bits/byte in 8 minutes of this kind, by 0.014-0.038; a cooldown of a fifth or a third, and the held
  schedule on the narrow candidates, are not measured yet.
- **Rounds 8-9, the rate and AdamW around the held schedule, found nothing larger than the noise**: a higher
  peak (1.5e-3) was worse already while held (2.175 bits/byte at step 800 against 2.161) and ended at 2.027;
  the decay down to 1e-5 instead of 1e-4 reached 2.008, with beta2 0.99 on top 2.005 (better by 0.022 at step
  800, by 0.003 once both had decayed), and a lower peak (7e-4, also down to 1e-5) 2.036, against round 7's
  2.010: gains of 0.002-0.005, as large as what the candidates' own step counts (1,488-1,553, each from its
  own timing probe) can explain, and a fifth of the spread of the preset's own seeds in `make run` (0.024
  then). So the preset keeps 1e-3 -> 1e-4 and beta2 0.95: around its rate, in these minutes, the recipe is at
  a plateau near 2.005-2.010 bits/byte for 1,500 steps, and what is left to gain on this kind is steps, not
  knobs. `make run`'s seed 1337 at a quicker hour (1,422 steps, 335 ms a step on average) reached 2.005 with
  the preset unchanged, against 2.026 in 1,293 steps (367 ms) at round 7's hour. torch.compile, from an empty
  cache, then fitted fewer steps into the run than eager steps did: the probe compiled the copy it timed in
  each precision and the run compiled again. Once the probe timed eager copies and only the run's model
  compiled, once (32 s for a step 1.20x faster), the preset compiles, and its seeds at 9 minutes reached
  2.003-2.013 in 1,443-1,558 steps against 2.001-2.025 eager (section Training): the steps that were left
  to gain.
- **Later, weight decay 0.3 (round 2's candidate on the Xeon)**: on an AMD EPYC Zen 5, whose 9 minutes run
  3,300-3,800 steps (five passes over the training plays), 0.3 gained 0.020 bits/byte over 0.1 in `make run`
  itself (3 paired seeds, `MAKE_RUN_CANDIDATES`, section Training) and became the preset's: what changed
  little in round 2's runs of about 2,300 steps on the Xeon pays once the model memorises.
- **Later, lesson 07's untied head and ReLU² (`untied-relu2`)**: on an AMD EPYC Zen 4 (family 25 model 17),
  whose 9 minutes run about 2,000 steps, the two together reached 1.820, 1.821 and 1.834 bits/byte in
  `make run` against the preset's 1.894, 1.880 and 1.888 on the same seeds (+0.063 on average; section
  Training), and became the preset's. Each had gained alone at that length or shorter (lesson 07's ledger);
  the runs also fitted 2,030-2,114 steps against 1,850-1,920.
- Not run yet: {not_run}.
"""

XEON_HEADER = """### Intel Xeon (amx_bf16): rounds 1-3

Machine: Intel(R) Xeon(R) Processor, 2 cores, torch 2.13.0+cpu (2 threads), Python 3.11.7.

Every candidate trained for the same 8 minutes of this CPU (its step time measured first), in bf16 autocast,
on the same 40 plays; scored on every window of the 2 held-out plays at its best validation, and its samples
(prompt `ROMEO:`, temperature 0.8, top-k 50, 3 seeds) against the training text."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--budget-s", type=float, default=480.0, help="wall seconds of training per candidate"
    )
    parser.add_argument("--only", nargs="*", help="run only these candidates")
    parser.add_argument("--table-only", action="store_true", help="write the table from recipe_runs.jsonl")
    args = parser.parse_args()
    kind = cpu_kind()["model"]
    runs = load_runs()
    if not args.table_only:
        reference_step_s()  # refuses a CPU kind whose rounds these are not (the records name a model only)
        for name in args.only or candidates(kind):
            if (kind, name) in runs:
                continue
            with tempfile.TemporaryDirectory(prefix="gptlib-recipe-") as tmp:
                record = run_candidate(name, args.budget_s, Path(tmp), kind)
            runs[(kind, name)] = record
            with open(RUNS, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            print(json.dumps({k: v for k, v in record.items() if k != "sample"}), flush=True)
    amd = "AMD EPYC"
    md = [
        "## The `cpu` recipe (`benchmarks/recipe.py`)",
        "",
        "### AMD EPYC (avx512_bf16, no AMX): rounds 4-9",
        "",
        machine_line() if kind == amd else "Machine: AMD EPYC, 2 cores, torch 2.13.0+cpu, Python 3.11.7.",
        "",
        "Every candidate trained for the steps an 8-minute budget (`make run`'s then) gives it on a quiet "
        "machine of this kind (`benchmarks/_budget.py`, the arithmetic of `gptlib.probe`), in the faster "
        "precision there, on the same 40 plays; scored on every window of the 2 held-out plays at its best "
        f"validation, and its samples (prompt {PROMPT!r}, temperature 0.8, top-k 50, 3 seeds) against the "
        "training text.",
        "",
        table(runs, amd),
        "",
        AMD_FINDINGS.format(not_run=", ".join(n for n in AMD_CANDIDATES if (amd, n) not in runs) or "none"),
        XEON_HEADER,
        "",
        table(runs, XEON),
        "",
        FINDINGS.format(not_run=", ".join(n for n in CANDIDATES if (XEON, n) not in runs) or "none"),
    ]
    write_section("recipe", "\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
