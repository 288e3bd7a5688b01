"""Which recorded runs make a CPU kind's band in benchmarks/train.py: the seeds of the `cpu` preset's recipe
as it is now, a candidate the preset adopted among them, other recipes paired on one CPU only, and the
candidates tabled beside the band."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import train as bench  # noqa: E402

from gptlib.train_config import TrainConfig  # noqa: E402

KIND = {"model": "a CPU", "features": ["avx512_bf16"]}
ADOPTED = bench.ADOPTED[0]  # a candidate the preset took


def record(what, seed, bpb, when="2026-12-05 10:00", kind=KIND, name=None, budget=9.0, **fields):
    config = {**TrainConfig.preset("cpu").to_dict(), "seed": seed, **fields}
    return {
        "what": what,
        "name": name,
        "seed": seed,
        "val_bpb": bpb,
        "budget_min": budget,
        "when": when,
        "cpu": kind,
        "config": config,
    }


OLD = {"max_lr": 7e-4}  # a recipe the preset left (or never had)


def test_an_adopted_candidate_of_the_recipe_now_makes_the_band_and_older_recipes_do_not():
    older = [record("make-run", 1337, 1.84, **OLD)] + [
        record("band-seed", s, 1.84, **OLD) for s in (1338, 1339)
    ]
    adopted = [record("candidate-make-run", s, 1.81, name=ADOPTED) for s in (1337, 1338, 1339)]
    tried = [record("candidate-make-run", 1340, 1.70, name="tried")]  # the preset's recipe, not adopted
    elsewhere = [record("band-seed", 1341, 1.80, kind={"model": "another CPU", "features": []})]
    runs = bench.seed_runs(older + adopted + tried + elsewhere, KIND)
    assert runs == adopted
    # the old recipe's seeds, paired with today's seed by seed: old minus new
    assert bench.paired_with(older, runs) == [(s, pytest.approx(0.03)) for s in (1337, 1338, 1339)]
    assert bench.paired_with([record("band-seed", 1338, 1.84, when="2026-12-04 10:00", **OLD)], runs) == []
    # a kind named by its family and model numbers is one CPU on any day
    ids = {**KIND, "ids": {"cpu family": "25", "model": "17"}}
    named = [record("band-seed", 1338, 1.80, kind=ids)]
    earlier = record("band-seed", 1338, 1.84, when="2026-12-04 10:00", kind=ids, **OLD)
    assert bench.paired_with([earlier], named) == [(1338, pytest.approx(0.04))]
    # once the preset moves on, the adopted runs are an earlier recipe's seeds, paired with the new ones
    newer = [record("band-seed", s, 1.79, max_lr=2e-3) for s in (1337, 1338, 1339)]
    lines = bench.earlier_recipes(older + adopted + newer, KIND, newer)
    assert len(lines) == 2 and any("1337: +0.020" in line for line in lines)


def test_a_later_run_of_a_seed_replaces_an_earlier_one_and_without_runs_of_the_recipe_now_the_latest_recipe():
    first, again = record("band-seed", 1338, 1.82), record("band-seed", 1338, 1.83, when="2026-12-05 11:00")
    assert bench.seed_runs([record("make-run", 1337, 1.81), first, again], KIND)[-1] is again
    older = [record("band-seed", s, 1.9, **OLD) for s in (1338, 1339)]
    # a candidate that was not adopted is not a seed of any band, whatever its recipe
    stray = record("candidate-make-run", 1337, 1.7, name="tried", **OLD)
    assert bench.seed_runs(older + [stray], KIND) == older


def test_candidates_beside_the_band_change_its_recipe_by_their_own_fields_under_its_budget():
    runs = [record("band-seed", s, 1.82) for s in (1337, 1338)]
    good = record("candidate-make-run", 1337, 1.80, name="wd", weight_decay=0.9)
    good.update(fields={"weight_decay": 0.9})
    again = dict(good, val_bpb=1.79, when="2026-12-05 12:00")  # the latest of a name and seed counts
    other_budget = dict(good, seed=1338, budget_min=8.0)
    # changes a field that is not its own: over another preset than the band's
    drifted = record("candidate-make-run", 1337, 1.80, name="lr", max_lr=9e-4, weight_decay=0.9)
    drifted.update(fields={"weight_decay": 0.9})
    adopted = record("candidate-make-run", 1339, 1.81, name=ADOPTED)
    candidates, elsewhere = bench.candidates_beside([good, again, other_budget, drifted, adopted], runs)
    assert candidates == [again]
    assert elsewhere == ["wd (8 min)", "lr (9 min)"]
