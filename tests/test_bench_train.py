"""Which recorded runs make a CPU kind's band in benchmarks/train.py: the seeds of the `cpu` preset's recipe
as it is now, a candidate the preset adopted among them, other recipes paired on the same day only."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import train as bench  # noqa: E402

from gptlib.train_config import TrainConfig  # noqa: E402

KIND = {"model": "a CPU", "features": ["avx512_bf16"]}


def record(what, seed, bpb, when="2026-12-05 10:00", kind=KIND, name=None, **fields):
    config = {**TrainConfig.preset("cpu").to_dict(), "seed": seed, **fields}
    return {
        "name": name,
        "what": what,
        "seed": seed,
        "val_bpb": bpb,
        "budget_min": 9.0,
        "when": when,
        "cpu": kind,
        "config": config,
    }


NOW = TrainConfig.preset("cpu").weight_decay
OLD = NOW / 3  # a recipe the preset left


def test_a_candidate_of_the_recipe_now_makes_the_band_and_older_recipes_do_not():
    older = [record("make-run", 1337, 1.84, weight_decay=OLD)] + [
        record("band-seed", s, 1.84, weight_decay=OLD) for s in (1338, 1339)
    ]
    adopted = [record("candidate-make-run", s, 1.81, name="c") for s in (1337, 1338, 1339)]
    other = [record("candidate-make-run", 1340, 1.70, name="d", weight_decay=OLD * 2)]
    elsewhere = [record("band-seed", 1341, 1.80, kind={"model": "another CPU", "features": []})]
    runs = bench.seed_runs(older + adopted + other + elsewhere, KIND)
    assert runs == adopted
    # the old recipe's seeds, paired with today's seed by seed: old minus new
    assert bench.paired_with(older, runs) == [(s, pytest.approx(0.03)) for s in (1337, 1338, 1339)]
    assert (
        bench.paired_with([record("band-seed", 1338, 1.84, when="2026-12-04 10:00", weight_decay=OLD)], runs)
        == []
    )


def test_a_later_run_of_a_seed_replaces_an_earlier_one_and_without_runs_of_the_recipe_now_the_latest_recipe():
    first, again = record("band-seed", 1338, 1.82), record("band-seed", 1338, 1.83, when="2026-12-05 11:00")
    assert bench.seed_runs([record("make-run", 1337, 1.81), first, again], KIND)[-1] is again
    older = [record("band-seed", s, 1.9, weight_decay=OLD) for s in (1338, 1339)]
    # a candidate of yet another recipe is not a seed of any band
    stray = record("candidate-make-run", 1337, 1.7, name="d", weight_decay=OLD * 2)
    assert bench.seed_runs(older + [stray], KIND) == older
