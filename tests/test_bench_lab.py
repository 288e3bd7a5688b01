"""What benchmarks/lab.py and benchmarks/modern.py make of a lab queue's ledger: an experiment stopped before
its first trial adds no record, the rungs' section names each rung's length and CPU, and a rung already in
the records is not run again."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import lab as bench_lab  # noqa: E402
import modern  # noqa: E402

ZEN4 = {"model": "AMD EPYC", "ids": {"cpu family": "25", "model": "17"}, "features": ["avx512_bf16"]}
ZEN5 = {"model": "AMD EPYC", "features": ["avx512_bf16"]}  # an older record: its ids beside the kind
ZEN5_IDS = {"cpu family": "26", "model": "2"}


def experiment(name, steps, cpu, **machine):
    base = {"max_steps": steps, "qk_norm": False}
    return {
        "kind": "experiment",
        "name": name,
        "baseline": base,
        "candidate": {**base, "qk_norm": True},
        "changed": {"qk_norm": [False, True]},
        "rule": {"min_effect": 0.01, "level": 0.05, "min_seeds": 3, "max_seeds": 5},
        "seed_shift": 0,
        "machine": {"cpu": cpu, "torch": "2.13.0+cpu", **machine},
    }


def trial(name, arm, seed, bpb, cpu, **machine):
    return {
        "kind": "trial",
        "key": f"{name}-{arm}-{seed}",
        "experiment": name,
        "arm": arm,
        "seed": seed,
        "val_bpb": bpb,
        "seconds": 100.0,
        "machine": {"cpu": cpu, "torch": "2.13.0+cpu", **machine},
        "session": {"began": "2026-12-05 21:40", "ended": "2026-12-05 23:30", "commit": "abc1234"},
    }


def test_an_experiment_stopped_before_its_first_trial_adds_no_record():
    records = [
        experiment("rung-a", 100, ZEN4),
        trial("rung-a", "baseline", 1, 1.9, ZEN4),
        experiment("rung-b", 100, ZEN4),  # stopped (or failed) before it trained anything
    ]
    assert bench_lab.measured(records) == records[:2]


def test_the_rungs_section_names_each_rungs_length_and_cpu():
    records = [
        experiment("rung-old", 3609, ZEN5, cpu_ids=ZEN5_IDS),
        trial("rung-old", "baseline", 1, 1.82, ZEN5, cpu_ids=ZEN5_IDS),
        experiment("rung-new", 1900, ZEN4),
        trial("rung-new", "baseline", 1, 1.89, ZEN4),
        trial("rung-new", "candidate", 1, 1.88, ZEN4),
    ]
    text = modern.section(records)
    assert "AMD EPYC family 26 model 2 (avx512_bf16) and AMD EPYC family 25 model 17 (avx512_bf16)" in text
    assert "3,609 steps on the AMD EPYC family 26 model 2 (avx512_bf16) (rung-old)" in text
    assert "1,900 steps on the AMD EPYC family 25 model 17 (avx512_bf16) (rung-new)" in text


def test_a_rung_already_in_the_records_is_refused_before_it_trains(tmp_path, monkeypatch):
    """The records know an experiment by its name: the same rung run again (on another CPU, say) would mix
    its looks with the first one's."""
    records = tmp_path / "modern_runs.jsonl"
    bench_lab.add_records([experiment("rung-relu2", 1900, ZEN4)], records)
    monkeypatch.setattr(modern, "RECORDS", records)
    monkeypatch.setattr(modern, "run_queues", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(SystemExit, match="rung-relu2 already in modern_runs.jsonl"):
        modern.rungs(1900, ["relu2", "rmsnorm"])
