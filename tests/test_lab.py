"""gptlib.lab and `lab run|queue|show`: the t bound, the rule on synthetic differences, pairing, the ledger's
resume after a kill, bit-exact reruns, bad input."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
import torch

import gptlib.lab as lab
import gptlib.train
from gptlib.cli import main
from gptlib.config import ConfigError
from gptlib.lab import Experiment, Ledger, Rule, judge, run_experiment, t_cdf, t_quantile
from gptlib.run_folder import load_trained
from gptlib.train import train
from gptlib.train_config import TrainConfig


def tiny(small_data, **overrides) -> TrainConfig:
    "A trial of seconds: the `tiny` preset on small_data (its 300-id tokenizer), pinned in fp32."
    base = {
        "shards": str(small_data / "shards"),
        "tokenizer": str(small_data / "tokenizer"),
        "max_steps": 12,
        "log_every": 4,
        "eval_every": 12,
        "eval_batches": 2,
        "checkpoint_every": 4,
        "micro_batch": 4,
        "context": 32,
        "vocab_size": 300,
        "precision": "fp32",
    }
    return TrainConfig.preset("tiny", **{**base, **overrides})


def positions_experiment(small_data, **rule) -> Experiment:
    "The tiny model's rotary positions against its sinusoidal table."
    return Experiment(
        "positions",
        tiny(small_data, positions="sinusoidal"),
        tiny(small_data, positions="rotary"),
        Rule(**{"min_seeds": 2, "max_seeds": 3, **rule}),
    )


def base_flags(small_data) -> str:
    return (
        f"--preset tiny --shards {small_data / 'shards'} --tokenizer {small_data / 'tokenizer'} "
        "--max-steps 6 --eval-every 6 --eval-batches 2 --checkpoint-every 6 --micro-batch 4 --context 32 "
        "--vocab-size 300 --precision fp32"
    )


# --- the t bound and the rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "p, df, table",
    [(0.975, 2, 4.3027), (0.95, 5, 2.0150), (0.975, 10, 2.2281), (0.99, 1, 31.8205), (0.995, 30, 2.7500)],
)
def test_t_quantile_matches_the_printed_table(p, df, table):
    assert t_quantile(p, df) == pytest.approx(table, abs=1e-4)
    assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-10)
    assert t_quantile(1 - p, df) == pytest.approx(-table, abs=1e-4)


def test_t_quantile_approaches_the_normal_for_many_degrees_of_freedom():
    assert t_quantile(0.975, 100_000) == pytest.approx(1.95996, abs=1e-4)


def test_the_rule_keeps_a_clear_win_at_its_first_look():
    verdict = judge([0.050, 0.052, 0.048], Rule(min_effect=0.01, min_seeds=3, max_seeds=6))
    assert verdict.decision == "keep" and verdict.lower > 0.01
    assert verdict.mean == pytest.approx(0.05)


def test_the_rule_rejects_an_effect_surely_below_the_minimum():
    verdict = judge([0.001, -0.001, 0.0005, 0.0], Rule(min_effect=0.01, min_seeds=3, max_seeds=6))
    assert verdict.decision == "reject" and verdict.upper < 0.01


def test_the_rule_asks_for_another_seed_then_stops_undecided_at_the_cap():
    rule = Rule(min_effect=0.01, min_seeds=3, max_seeds=4)
    noisy = [0.03, -0.01, 0.02, 0.0]
    assert judge(noisy[:3], rule).decision is None
    assert judge(noisy, rule).decision == "undecided"


def test_the_rule_does_not_decide_before_min_seeds():
    assert judge([0.05, 0.05001], Rule(min_seeds=3, max_seeds=4)).decision is None


def test_looking_after_every_seed_keeps_the_false_keep_rate_under_the_level():
    "Null experiments (true difference 0, min effect 0): the Bonferroni looks keep at most `level` of them."
    rule, generator = Rule(min_effect=0.0, level=0.05, min_seeds=3, max_seeds=8), random.Random(0)
    keeps, naive_keeps = 0, 0
    for _ in range(4000):
        differences = [generator.gauss(0.0, 0.01) for _ in range(rule.max_seeds)]
        verdicts = [judge(differences[:n], rule) for n in range(rule.min_seeds, rule.max_seeds + 1)]
        first = next(v.decision for v in verdicts if v.decision)
        keeps += first == "keep"
        naive = Rule(min_effect=0.0, level=0.05 * rule.looks, min_seeds=3, max_seeds=8)  # each look at 0.05
        naive_keeps += any(judge(differences[:n], naive).decision == "keep" for n in range(3, 9))
    assert keeps / 4000 < 0.05
    assert naive_keeps / 4000 > 0.05  # what the correction is for: looking six times at 5 % each


@pytest.mark.parametrize(
    "values, message",
    [
        ({"level": 0.7}, "level must be below 0.5"),
        ({"level": 0.0}, "level must be positive"),
        ({"min_effect": -0.1}, "min_effect must be at least"),
        ({"min_seeds": 1}, "min_seeds must be at least 2"),
        ({"min_seeds": 5, "max_seeds": 3}, "min_seeds <= max_seeds"),
    ],
)
def test_bad_rule_values_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        Rule(**values)


def test_seeds_are_added_until_the_rule_decides(tmp_path, monkeypatch, small_data):
    "Synthetic results: the differences 0.03, 0.01, 0.05, 0.04, 0.04 decide `keep` at the fifth seed."
    wanted = {1: 0.03, 2: 0.01, 3: 0.05, 4: 0.04, 5: 0.04, 6: 0.04}
    trained = []

    def fake_trial(cfg, threads):
        trained.append((cfg.positions, cfg.seed))
        value = 2.0 - (wanted[cfg.seed] if cfg.positions == "rotary" else 0.0)
        return {"val_bpb": value, "steps": cfg.max_steps, "precision": cfg.precision, "seconds": 0.0}

    monkeypatch.setattr(lab, "run_trial", fake_trial)
    experiment = positions_experiment(small_data, min_effect=0.005, min_seeds=3, max_seeds=6)
    ledger = Ledger(tmp_path / "lab.jsonl")
    verdict = run_experiment(experiment, ledger, tmp_path / "runs", log=None)
    assert verdict.decision == "keep" and verdict.n == 5
    assert trained == [(p, s) for s in range(1, 6) for p in ("sinusoidal", "rotary")]
    looks = ledger.looks("positions")
    assert [(r["n"], r["decision"]) for r in looks] == [(3, None), (4, None), (5, "keep")]
    assert [r["baseline"] - r["candidate"] for r in looks[-1]["results"]] == pytest.approx(
        [wanted[s] for s in range(1, 6)]
    )


# --- the experiment's trials ------------------------------------------------------------------------------


def test_both_arms_see_the_same_batches_and_an_aa_shift_other_ones(tmp_path, monkeypatch, small_data):
    loaders = []

    class Recording(gptlib.train.BatchLoader):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.seen = []
            loaders.append(self)

        def __next__(self):
            x, y = super().__next__()
            self.seen.append(x.clone())
            return x, y

    monkeypatch.setattr(gptlib.train, "BatchLoader", Recording)
    experiment = positions_experiment(small_data, min_seeds=2, max_seeds=2)
    run_experiment(experiment, Ledger(tmp_path / "lab.jsonl"), tmp_path / "runs", log=None)
    assert len(loaders) == 4  # baseline and candidate of seed 1, then of seed 2
    for baseline, candidate in (loaders[0:2], loaders[2:4]):
        assert len(baseline.seen) == 12
        assert all(torch.equal(a, b) for a, b in zip(baseline.seen, candidate.seen, strict=True))
    assert not torch.equal(loaders[0].seen[0], loaders[2].seen[0])  # another seed, other batches
    shifted = Experiment(
        "aa", tiny(small_data), tiny(small_data), Rule(min_seeds=2, max_seeds=2), seed_shift=7
    )
    assert (shifted.arm("baseline", 0).seed, shifted.arm("candidate", 0).seed) == (1, 8)


def test_a_trial_reruns_bit_for_bit(tmp_path, small_data):
    cfg = tiny(small_data, seed=5)
    first = lab.run_trial(replace(cfg, out=str(tmp_path / "a")), threads=1)
    second = lab.run_trial(replace(cfg, out=str(tmp_path / "b")), threads=1)
    assert first["val_bpb"] == second["val_bpb"]  # exactly: the same bits
    weights = [load_trained(tmp_path / d, "latest")[0].state_dict() for d in "ab"]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_a_killed_experiment_resumes_without_retraining_and_decides_the_same(
    tmp_path, monkeypatch, small_data
):
    experiment = positions_experiment(small_data)
    whole = Ledger(tmp_path / "whole.jsonl")
    expected = run_experiment(experiment, whole, tmp_path / "whole-runs", log=None)

    # killed half-way through the first arm: its run folder holds a checkpoint at step 4
    code, where = lab.code_fingerprint(), lab.machine(1)
    first = experiment.arm("baseline", 0)
    folder = tmp_path / "runs" / lab.trial_key(first, code, where)[:20]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the lab trains it (the threads are part of a trial's key)
    try:
        history = train(replace(first, out=str(folder)), until_step=4, log=None, progress=False)
    finally:
        torch.set_num_threads(threads)
    assert history[-1]["stopped"]
    ledger = Ledger(tmp_path / "lab.jsonl")
    # then killed again after one arm-seed: the half-trained arm resumed and finished, nothing more
    assert run_experiment(experiment, ledger, tmp_path / "runs", max_trials=1, log=None) is None
    (trial,) = ledger.trials().values()
    assert trial["resumed"] and trial["seed"] == 1 and trial["arm"] == "baseline"

    trained = []
    real = lab.run_trial
    monkeypatch.setattr(lab, "run_trial", lambda cfg, threads: trained.append(cfg.seed) or real(cfg, threads))
    verdict = run_experiment(experiment, ledger, tmp_path / "runs", log=None)
    assert verdict == expected  # the same differences to the last bit, the same decision
    assert len(trained) == 2 * verdict.n - 1  # the first arm-seed was not trained again
    assert {k: t["val_bpb"] for k, t in ledger.trials().items()} == {
        k: t["val_bpb"] for k, t in whole.trials().items()
    }
    assert (
        run_experiment(experiment, ledger, tmp_path / "runs", log=None) == expected
    )  # all in the ledger now
    assert len(trained) == 2 * verdict.n - 1


def test_the_rule_is_declared_before_the_first_trial_and_cannot_change(tmp_path, monkeypatch, small_data):
    ledger = Ledger(tmp_path / "lab.jsonl")

    def no_trial(cfg, threads):
        declared = [r for r in ledger.records() if r["kind"] == "experiment"]
        assert declared and declared[0]["rule"]["min_effect"] == 0.01
        return None  # as if stopped by a signal

    monkeypatch.setattr(lab, "run_trial", no_trial)
    assert run_experiment(positions_experiment(small_data), ledger, tmp_path / "runs", log=None) is None
    with pytest.raises(lab.LabError, match="declared with another rule"):
        run_experiment(positions_experiment(small_data, min_effect=0.02), ledger, tmp_path / "runs", log=None)


# --- the command line ---------------------------------------------------------------------------------


def test_a_queue_runs_its_experiments_and_show_tables_them(tmp_path, capsys, small_data):
    base = base_flags(small_data)
    queue = tmp_path / "queue.txt"
    queue.write_text(
        "# two experiments\n"
        f"--name rotary --base '{base}' --baseline '--positions sinusoidal' --candidate '--positions rotary' "
        "--min-seeds 2 --max-seeds 2\n"
        f"--name aa --base '{base}' --seed-shift 100 --min-seeds 2 --max-seeds 2\n",
        encoding="utf-8",
    )
    ledger = tmp_path / "lab.jsonl"
    assert main(["lab", "queue", str(ledger), str(queue)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab-runs", "lab.jsonl", "queue.txt"]
    capsys.readouterr()
    assert main(["lab", "show", str(ledger)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].startswith("rotary ") and "positions sinusoidal->rotary" in table[1]
    assert table[2].startswith("aa ") and "(A/A)" in table[2]
    header = json.loads(ledger.read_text().splitlines()[0])
    assert header == {"format": "gptlib-lab-ledger", "version": 1}


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--candidate", "--positionz rotary"], "--candidate: unrecognized arguments: --positionz"),
        (["--candidate", "--positions rotary", "--level", "0.7"], "level must be below 0.5"),
        (
            ["--candidate", "--positions rotary", "--min-seeds", "4", "--max-seeds", "3"],
            "min_seeds <= max_seeds",
        ),
        ([], "the candidate is the baseline"),
        (["--candidate", "--seed 3"], "the lab sets --seed itself"),
        (["--candidate", "--max-steps 7"], "the two arms must share max_steps"),
        (["--base", "--preset tiny --precision fp32", "--candidate", "--positions rotary"], "needs its data"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(tmp_path, capsys, small_data, flags, message):
    argv = [
        "lab",
        "run",
        str(tmp_path / "lab.jsonl"),
        "--name",
        "x",
        "--base",
        base_flags(small_data),
        *flags,
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "lab.jsonl").exists()  # refused before any work


def test_unpinned_precision_and_a_damaged_ledger_are_refused(tmp_path, capsys, small_data):
    flags = base_flags(small_data).replace("--precision fp32", "--precision auto")
    assert (
        main(["lab", "run", str(tmp_path / "a.jsonl"), "--name", "x", "--base", flags, "--seed-shift", "1"])
        == 2
    )
    assert "precision is auto" in capsys.readouterr().err
    damaged = tmp_path / "b.jsonl"
    damaged.write_text('{"format": "gptlib-lab-ledger", "version": 1}\n{"kind": "trial", "val_bpb": 2.\n')
    assert main(["lab", "show", str(damaged)]) == 2
    assert "line 2 is not JSON" in capsys.readouterr().err
    assert main(["lab", "show", str(tmp_path / "none.jsonl")]) == 2
    assert "no ledger at" in capsys.readouterr().err


def test_a_bad_queue_line_is_named_before_any_work(tmp_path, capsys, small_data):
    queue = tmp_path / "queue.txt"
    line = f"--name a --base '{base_flags(small_data)}' --seed-shift 1000"
    queue.write_text(f"{line}\n{line.replace('--name a', '--name b')} --max-seeds 1\n", encoding="utf-8")
    assert main(["lab", "queue", str(tmp_path / "lab.jsonl"), str(queue)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {queue} line 2: ") and "max_seeds must be at least 2" in err
    assert not (tmp_path / "lab.jsonl").exists()


def test_help_of_every_lab_verb_gives_its_guide(capsys):
    for verbs in (["lab"], ["lab", "run"], ["lab", "queue"], ["lab", "show"], ["lab", "pin"]):
        assert main([*verbs, "-h"]) == 0
    shown = capsys.readouterr().out
    assert shown.count("How to propose a change, run it and read the decision") == 2  # lab and lab run
    assert "--min-effect" in shown and "--seed-shift" in shown


def test_an_aa_shift_below_the_cap_and_an_arm_that_stops_itself_are_refused(small_data):
    """A shift smaller than the seed cap would make one arm's trial the other's (the same run reused, the
    differences not independent); an arm that stops when validation rises would not train its pinned steps."""
    rule = Rule(min_seeds=2, max_seeds=4)
    with pytest.raises(ConfigError, match="smaller than the seed cap"):
        Experiment("aa", tiny(small_data), tiny(small_data), rule, seed_shift=3)
    Experiment("aa", tiny(small_data), tiny(small_data), rule, seed_shift=4)  # no trial shared
    with pytest.raises(ConfigError, match="stop-rising"):
        Experiment("x", tiny(small_data), tiny(small_data, stop_rising=True, max_lr=1e-3), rule)


def test_a_trial_key_changes_with_the_data_behind_the_same_paths(small_data, tmp_path):
    "Shards made again at the same path from other text have another key: their trials are not reused."
    cfg = tiny(small_data)
    code, where = {"sources": "s"}, {"cpu": "c", "torch": "t", "threads": 1}
    before = lab.trial_key(cfg, code, where)
    manifest = small_data / "shards" / "manifest.json"
    saved = manifest.read_text()
    try:
        document = json.loads(saved)
        document["key"] = "another-key"
        manifest.write_text(json.dumps(document))
        assert lab.trial_key(cfg, code, where) != before
    finally:
        manifest.write_text(saved)
    assert lab.trial_key(cfg, code, where) == before


def test_an_empty_ledger_reads_as_a_new_one(tmp_path):
    ledger = Ledger(tmp_path / "lab.jsonl")
    ledger.path.touch()
    assert ledger.records() == []
    ledger.append({"kind": "pin", "steps": 3})
    assert [r["kind"] for r in ledger.records()] == ["pin"]
