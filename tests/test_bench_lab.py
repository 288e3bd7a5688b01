"""What benchmarks/lab.py and benchmarks/modern.py make of a lab queue's ledger: an experiment stopped before
its first trial adds no record, the rungs' section names each rung's length and CPU, a rung already in the
records goes on from its trials only where it stays one experiment, and a queue adds each record once."""

import sys
from pathlib import Path

import pytest
import torch

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


def look(name, n, decision, keys):
    results = [{"seeds": {}, "keys": {"baseline": b, "candidate": c}} for b, c in keys]
    return {"kind": "look", "experiment": name, "n": n, "results": results, "decision": decision}


SESSION = {"began": "2026-12-06 01:08", "ended": "2026-12-06 02:20", "commit": "55dd800"}


def stopped_rungs():
    """rung-a trained the baselines of seeds 1-3 and was rejected; rung-b reused them and stopped, undecided,
    at 3 seeds; rung-c ran on another CPU; rung-d, on another commit, stopped before its first look."""
    code = {"code": {"sources": "gptlib of 55dd800"}}
    records = [{**experiment("rung-a", 1900, ZEN4), "session": SESSION, **code}]
    records += [trial("rung-a", arm, s, 1.9, ZEN4) for s in (1, 2, 3) for arm in ("baseline", "candidate")]
    records.append(
        look("rung-a", 3, "reject", [(f"rung-a-baseline-{s}", f"rung-a-candidate-{s}") for s in (1, 2, 3)])
    )
    records.append({**experiment("rung-b", 1900, ZEN4), "session": SESSION, **code})
    records += [trial("rung-b", "candidate", s, 1.9, ZEN4) for s in (1, 2, 3)]
    records.append(
        look("rung-b", 3, None, [(f"rung-a-baseline-{s}", f"rung-b-candidate-{s}") for s in (1, 2, 3)])
    )
    records.append({**experiment("rung-c", 1900, ZEN5, cpu_ids=ZEN5_IDS), "session": SESSION, **code})
    records.append({**experiment("rung-d", 1900, ZEN4), "session": {**SESSION, "commit": "abc1234"}, **code})
    records.append(trial("rung-d", "candidate", 1, 1.9, ZEN4))
    return records


@pytest.fixture
def on_zen4(tmp_path, monkeypatch):
    "modern.py's records in a temporary folder, on a Zen 4, with nothing trained or snapshot for real."
    import gptlib.expected

    records = tmp_path / "modern_runs.jsonl"
    bench_lab.add_records(stopped_rungs(), records)
    monkeypatch.setattr(modern, "RECORDS", records)
    monkeypatch.setattr(gptlib.expected, "cpu_kind", lambda: ZEN4)
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    monkeypatch.setattr(modern, "fingerprint", lambda snap: "gptlib of 55dd800")
    rungs = {"a": "--qk-norm true", "b": "--bias false", "c": "--mlp relu2", "d": "--norm rmsnorm"}
    monkeypatch.setattr(modern, "RUNGS", rungs)
    monkeypatch.setattr(modern, "snapshot", lambda rev="HEAD": pytest.fail("snapshot taken"))
    monkeypatch.setattr(modern, "run_queues", lambda *a, **k: pytest.fail("trained"))
    return monkeypatch


@pytest.mark.parametrize(
    "names, steps, why",
    [
        (["a"], 1900, "rung-a is done \\(reject at 3 seeds\\)"),
        (["c"], 1900, "rung-c ran on another CPU kind"),
        (["b"], 2000, "rung-b was declared at 1900 steps"),
        (["b", "new"], 1900, "rung-new is not in the records"),
        (["b", "d"], 1900, "rung-b, rung-d ran on commits 55dd800, abc1234"),
    ],
)
def test_a_rung_in_the_records_that_cannot_go_on_is_refused_before_it_trains(on_zen4, names, steps, why):
    """The records know an experiment by its name: a rung decided, run on another CPU or at another length
    would mix its looks with the first run's, and a new rung beside one going on (or rungs of two commits)
    would run another gptlib than theirs."""
    on_zen4.setitem(modern.RUNGS, "new", "--norm rmsnorm")
    with pytest.raises(SystemExit, match=f"error: {why}"):
        modern.rungs(steps, names)


def test_a_stopped_rung_goes_on_with_its_gptlib_and_its_trials(on_zen4):
    """rung-b goes on from the commit it ran and with its declaration, its look and every trial of the
    records (the baselines it saw are recorded under rung-a), so the lab trains only seeds 4 and 5."""
    calls = {}
    on_zen4.setattr(modern, "snapshot", lambda rev="HEAD": calls.setdefault("rev", rev) and Path("/snap"))
    on_zen4.setattr(
        modern,
        "run_queues",
        lambda queues, tag, snap, path, threads, earlier: calls.update(
            queues=queues, snap=snap, earlier=earlier
        ),
    )
    modern.rungs(1900, ["b"])
    assert calls["rev"] == "55dd800" and calls["snap"] == Path("/snap")
    assert [line.split()[1] for line in calls["queues"][0]] == ["rung-b"]
    kept = [
        (r["kind"], r.get("experiment", r.get("name")), r.get("arm"), r.get("seed")) for r in calls["earlier"]
    ]
    trials = [
        (r["kind"], r["experiment"], r["arm"], r["seed"]) for r in stopped_rungs() if r["kind"] == "trial"
    ]
    assert sorted(kept) == sorted(
        trials + [("experiment", "rung-b", None, None), ("look", "rung-b", None, None)]
    )


def test_a_rung_goes_on_only_with_the_gptlib_its_trials_ran(on_zen4):
    "A snapshot whose gptlib is not the rung's (a commit recorded wrong, say) would train its seeds again."
    on_zen4.setattr(modern, "snapshot", lambda rev="HEAD": Path("/snap"))
    on_zen4.setattr(modern, "fingerprint", lambda snap: "another gptlib")
    with pytest.raises(SystemExit, match="error: the gptlib of 55dd800 is not the one rung-b ran"):
        modern.rungs(1900, ["b"])


def test_a_queue_starts_from_the_earlier_records_and_adds_only_what_is_new(tmp_path, monkeypatch):
    """run_queues writes the earlier records into the queue's ledger before the lab reads it, and adds to the
    records only what the queue recorded since (with the session), not the earlier records again; a queue run
    again over the ledger it left adds nothing twice."""
    records, earlier = tmp_path / "modern_runs.jsonl", stopped_rungs()[8:13]
    bench_lab.add_records(stopped_rungs(), records)
    (tmp_path / "snap").mkdir()
    (tmp_path / "snap" / "COMMIT").write_text("55dd800")
    monkeypatch.setattr(bench_lab, "WORK", tmp_path)
    seen = []

    class Queue:  # the lab's queue: it reads its ledger and appends the trial of seed 4
        def __init__(self, snap, verb, ledger, *rest, threads):
            self.ledger = Path(ledger)

        def wait(self):
            seen.append(bench_lab.read_ledger(self.ledger))
            new = trial("rung-b", "baseline", 4, 1.9, ZEN4)
            del new["session"]
            if new not in seen[-1]:
                bench_lab.add_records([new], self.ledger)
            return 0

    monkeypatch.setattr(bench_lab, "lab", Queue)
    for _ in range(2):
        bench_lab.run_queues(
            [["--name rung-b"]], "rungs", tmp_path / "snap", records, threads=2, earlier=earlier
        )
    assert seen[0] == earlier and seen[1] == earlier + [seen[1][-1]]  # the earlier records written once
    after = bench_lab.read_ledger(records)
    assert after[: len(stopped_rungs())] == stopped_rungs()
    assert [
        (r["kind"], r["arm"], r["seed"], r["session"]["commit"]) for r in after[len(stopped_rungs()) :]
    ] == [("trial", "baseline", 4, "55dd800")]
