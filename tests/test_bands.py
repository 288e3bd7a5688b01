"""gptlib.expected: bands made from seeds, found for a run's recipe and CPU kind (or refused, saying why),
judged by the fraction of the schedule, drawn behind the curves; the committed bands are of today's
presets."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gptlib.display import draw_history, save_plots
from gptlib.expected import (
    ABOVE,
    BANDS,
    Curve,
    _verdict,
    band_for,
    cpu_kind,
    judge,
    kind_text,
    load_bands,
    make_band,
    place,
    recipe_of,
    save_bands,
)
from gptlib.files import DocumentError
from gptlib.train_config import TrainConfig

KIND = {"model": "Test CPU", "features": ["avx512_bf16"]}
CONFIG = TrainConfig.preset("tiny").to_dict()


def history(max_steps: int, offset: float, precision: str = "bf16", log_every: int = 5) -> list[dict]:
    """A run's records: losses falling from 6 to 4 along the schedule, shifted by `offset`, validations at
    the middle and the end."""
    records = [
        {"kind": "event", "step": 0, "message": "new run", "max_steps": max_steps, "precision": precision}
    ]
    for step in range(log_every, max_steps + 1, log_every):
        loss = 6 - 2 * step / max_steps + offset
        figures = {
            "lr": 1e-3,
            "grad_norm": 1.0,
            "loss_scale": 1.0,
            "tokens_per_s": 1e4,
        }  # what the plot reads
        records.append({"kind": "train", "step": step, "loss": loss, **figures})
    for step in (max_steps // 2, max_steps):
        loss = 6.2 - 2 * step / max_steps + offset
        records.append({"kind": "val", "step": step, "val_loss": loss, "val_bpb": loss / 2.4})
    records.append({"kind": "event", "step": max_steps, "message": f"finished {max_steps} steps in 1 s"})
    return records


def band(offsets=(0.0, 0.02, 0.04), steps=(100, 104, 96)):
    runs = [({**CONFIG, "seed": i}, history(n, o)) for i, (n, o) in enumerate(zip(steps, offsets))]
    return make_band("tiny, test", "tiny", runs, source="tests", kind=KIND)


def test_a_band_is_the_min_and_max_of_its_seeds_along_the_schedule():
    b = band()
    assert b.precision == "bf16" and b.max_steps == pytest.approx(100) and len(b.runs) == 3
    low, high = b.val_bpb.at(1.0)
    assert low == pytest.approx(4.2 / 2.4) and high == pytest.approx(4.24 / 2.4)
    low, high = b.train_loss.at(0.5)
    assert low == pytest.approx(5.0, abs=0.03) and high == pytest.approx(5.04, abs=0.03)
    assert b.val_loss.at(0.1) is None  # before the first validation of every seed: no band
    assert Curve([0.0, 1.0], [0.0, 2.0], [1.0, 3.0]).at(0.25) == pytest.approx((0.5, 1.5))


def test_bands_round_trip_through_a_file_and_a_damaged_one_is_refused(tmp_path):
    save_bands([band()], tmp_path / "bands" / "tiny.json")  # its folder made too
    (loaded,) = load_bands(tmp_path / "bands")
    assert loaded == band()
    (tmp_path / "tiny.json").write_text(json.dumps({"format": "gptlib-bands", "version": 1, "bands": [{}]}))
    with pytest.raises(DocumentError, match="malformed"):
        load_bands(tmp_path)
    (tmp_path / "tiny.json").write_text("{")
    with pytest.raises(DocumentError, match="not valid JSON"):
        load_bands(tmp_path)


def test_a_band_is_found_for_its_recipe_and_cpu_kind_only():
    bands = [band()]
    found, line = band_for({**CONFIG, "seed": 7, "max_steps": 99}, "bf16", KIND, bands)
    assert found is bands[0] and "3 seeds" in line
    other_cpu = {"model": "Other CPU", "features": []}
    found, line = band_for(CONFIG, "bf16", other_cpu, bands)
    assert found is None and "Other CPU (no bf16/fp16 units)" in line and "Test CPU (avx512_bf16)" in line
    found, line = band_for(CONFIG, "fp32", KIND, bands)
    assert found is None and "in fp32" in line
    found, line = band_for({**CONFIG, "max_lr": 0.1}, "bf16", KIND, bands)
    assert found is None and "no expected band for this recipe" in line and "`tiny`" in line
    # a band made before a field existed (its runs never set it) does not judge a recipe that has it
    older = replace(bands[0], config={k: v for k, v in bands[0].config.items() if k != "beta2"})
    found, line = band_for(CONFIG, "bf16", KIND, [older])
    assert found is None and "no expected band for this recipe" in line


def test_judging_a_run_inside_near_and_outside_the_band():
    b = band()
    inside = judge(history(100, 0.03), b)
    assert "inside" in inside[0] and inside[-1].startswith("inside the expected band of 3 seeds")
    near = judge(history(100, 0.06), b)  # 0.02 above, the seeds spread 0.04: noise
    assert "seed-to-seed noise" in " ".join(near) and ABOVE not in near
    far = judge(history(100, 0.5), b)
    assert ABOVE in far and "above by" in far[0]
    below = judge(history(100, -0.5), b)
    assert "below by" in below[0] and "more steps" in below[-1]
    short = judge(history(60, 0.03), b)  # judged by the fraction, with a word on the step count
    assert short[0].startswith("this run had 60 steps") and "inside" in short[1]
    other = judge(history(100, 0.03, precision="fp32"), b)
    assert other[0] == "this run trained in fp32, the band's runs in bf16"


def test_a_gap_and_a_spread_that_differ_never_print_alike():
    # 06's stored run: 0.0101 below a band whose seeds spread 0.0097 ("below by 0.010, more than ... (0.010)")
    line, where = _verdict("val", 1.9929, (2.0030, 2.0127), "bits/byte")
    assert where == -1 and "below by 0.0101, more than the seeds spread (0.0097)" in line, line
    line, where = _verdict("val", 2.0327, (2.0030, 2.0127), "bits/byte")
    assert where == 1 and "above by 0.020, more than the seeds spread (0.010)" in line, line


def test_the_training_loss_is_judged_over_the_last_tenth_not_its_last_noisy_batches():
    """Batch losses jump by more than seeds differ: a run whose last two log lines are high by chance, and
    whose last tenth is like the band's, is inside."""
    b = band()
    run = history(100, 0.03)
    train = [r for r in run if r["kind"] == "train"]
    for r in train[-2:]:
        r["loss"] += 0.15  # two unlucky batches at the end
    for r in train[-8:-2]:
        r["loss"] -= 0.05  # and a few lucky ones before them
    lines = judge(run, b)
    assert lines[1].startswith("train loss (last tenth)") and "more than the seeds" not in lines[1], lines
    assert ABOVE not in lines and lines[-1].startswith("inside the expected band")
    far = history(100, 0.03)
    for r in far:
        if r["kind"] == "train" and r["step"] >= 90:
            r["loss"] += 0.5  # the whole last tenth high: the verdict says so
    assert ABOVE in judge(far, b)


def test_place_names_the_band_then_judges(tmp_path):
    found, lines = place(history(100, 0.01), {**CONFIG, "seed": 3}, KIND, [band()])
    assert found is not None and lines[0].startswith("expected band: tiny, test") and len(lines) >= 3
    found, lines = place(history(100, 0.01), CONFIG, {"model": "Other", "features": []}, [band()])
    assert found is None and lines == [lines[0]] and "no expected band for this CPU kind" in lines[0]


def test_the_band_is_drawn_behind_the_curves(tmp_path):
    from matplotlib.figure import Figure

    fig = Figure()
    draw_history(fig, history(100, 0.01), band=band())
    loss_ax = fig.axes[0]
    assert len(loss_ax.collections) == 2  # the train and the validation envelopes, shaded
    assert any("expected train (3 seeds)" in t.get_text() for t in loss_ax.get_legend().get_texts())
    fig = Figure()
    draw_history(fig, history(100, 0.01)[1:], band=band())  # no start record yet: no band to place
    assert len(fig.axes[0].collections) == 0
    assert save_plots(history(100, 0.01), tmp_path / "training.png", band=band()).stat().st_size > 0


def cpuinfo(family: int, model: int) -> str:
    "Two processors of /proc/cpuinfo as an AMD EPYC of `family` and `model` writes them."
    one = (
        "processor\t: {}\nvendor_id\t: AuthenticAMD\ncpu family\t: {}\nmodel\t\t: {}\n"
        "model name\t: AMD EPYC\nflags\t\t: fpu avx512f avx512_bf16\n\n"
    )
    return one.format(0, family, model) + one.format(1, family, model)


def test_the_cpu_kind_is_read_from_cpuinfo():
    assert cpu_kind(cpuinfo(25, 17)) == {
        "model": "AMD EPYC",
        "ids": {"cpu family": "25", "model": "17"},
        "features": ["avx512_bf16"],
    }
    assert kind_text(cpu_kind(cpuinfo(25, 17))) == "AMD EPYC family 25 model 17 (avx512_bf16)"
    # where cpuinfo has no numbers (another system), the name and the units alone name the kind
    bare = cpu_kind("model name\t: Some CPU\nflags\t: fpu\n")
    assert bare["ids"] == {} and kind_text(bare) == "Some CPU (no bf16/fp16 units)"
    assert kind_text({**bare, "ids": {"model": "7"}}) == "Some CPU model 7 (no bf16/fp16 units)"


def test_a_zen_4_is_not_judged_by_a_zen_5_band():
    """Both say `AMD EPYC` with the same bf16 units, but a Zen 5 runs the cpu preset's step about twice as
    fast: its band would judge a Zen 4's run by steps the Zen 4 never had."""
    zen4, zen5 = cpu_kind(cpuinfo(25, 17)), cpu_kind(cpuinfo(26, 2))
    bands = [replace(band(), cpu=zen5)]
    assert band_for(CONFIG, "bf16", zen5, bands)[0] is bands[0]
    found, line = band_for(CONFIG, "bf16", zen4, bands)
    assert found is None and "family 25 model 17" in line and "family 26 model 2" in line


def test_the_committed_bands_are_of_the_presets_as_they_are_now():
    """A band made for an older preset would judge today's runs against another recipe: remaking the band
    is part of changing the preset."""
    bands = load_bands(BANDS)
    assert bands, "no committed band"
    for b in bands:
        preset = TrainConfig.preset(b.preset).to_dict()
        assert recipe_of(b.config) == recipe_of(preset), b.name
        assert len(b.runs) >= 3 and b.train_loss.fraction and b.val_bpb.at(1.0) is not None
        # a CPU kind without its family and model numbers would never match one read from a Linux machine
        assert set(b.cpu) == {"model", "ids", "features"} and set(b.cpu["ids"]) == {"cpu family", "model"}
    # one band per preset, precision and kind: a second would never be found (`band_for` takes the first)
    assert len({(b.preset, b.precision, kind_text(b.cpu)) for b in bands}) == len(bands)
