"""gptlib.train: configuration, the step, the loop, exact resume, checkpoint validation, signals, fp16 skips,
the pipeline."""

from __future__ import annotations

import copy
import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

import pytest
import torch

from gptlib.cli import config_from_args, train_parser
from gptlib.config import ConfigError
from gptlib.data import read_manifest
from gptlib.model import sample_text
from gptlib.pipeline import run_pipeline
from gptlib.run_folder import (
    CheckpointError,
    list_checkpoints,
    load_trained,
    read_checkpoint_meta,
    read_metrics,
    resume_precision,
)
from gptlib.runtime import compile_or_fallback
from gptlib.train import evaluate, train, train_step
from gptlib.train_config import TrainConfig

REPO = Path(__file__).resolve().parent.parent


def tiny(small_data, out, **overrides) -> TrainConfig:
    base = {
        "shards": str(small_data / "shards"),
        "tokenizer": str(small_data / "tokenizer"),
        "out": str(out),
        "max_steps": 12,
        "log_every": 1,
        "eval_every": 6,
        "eval_batches": 2,
        "checkpoint_every": 4,
        "micro_batch": 4,
        "context": 32,
        "vocab_size": 300,  # small_data's tokenizer
        # `auto` picks by timed steps, and on a loaded machine two runs of one test may pick differently
        # (bf16 and fp32 differ in the last digits from the first step): the tests that are about `auto` ask
        "precision": "fp32",
    }
    return TrainConfig.preset("tiny", **{**base, **overrides})


def losses(history):
    return [(r["step"], r["loss"]) for r in history if r["kind"] == "train"]


# --- configuration ---------------------------------------------------------------------------------------


def test_presets_keep_the_original_design():
    c = TrainConfig.preset("gpt-25m")
    assert (c.micro_batch, c.grad_accum, c.context, c.max_steps, c.log_every, c.eval_every) == (
        8,
        4,
        512,
        10_000,
        10,
        100,
    )
    assert (c.max_lr, c.min_lr, c.warmup_steps, c.weight_decay, c.grad_clip) == (6e-4, 6e-5, 50, 0.1, 1.0)
    assert c.lr(0) == pytest.approx(6e-4 / 50) and c.lr(10_000) == pytest.approx(6e-5)


def test_config_rejects_unknown_keys_and_wrong_types():
    with pytest.raises(ValueError, match="max_step"):
        TrainConfig.from_dict({"max_step": 3})
    with pytest.raises(TypeError, match="max_steps"):
        TrainConfig(max_steps="3")
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="fp8")
    with pytest.raises(ValueError, match="unknown TrainConfig preset"):
        TrainConfig.preset("huge")


def test_cli_rejects_unknown_flags_and_wrong_types(capsys):
    assert config_from_args(["--preset", "cpu", "--max-steps", "5", "--compile", "true"]).max_steps == 5
    for argv in (["--max-stepz", "5"], ["--max-steps", "five"], ["--compile", "maybe"]):
        with pytest.raises(SystemExit) as e:
            config_from_args(argv)
        assert e.value.code == 2
    assert "unrecognized arguments: --max-stepz" in capsys.readouterr().err
    result = subprocess.run(
        [sys.executable, "-m", "gptlib", "train", "start", "--bogus", "1"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 2 and "--bogus" in result.stderr


def test_every_flag_explains_its_field():
    shown = " ".join(train_parser().format_help().split())
    for f in fields(TrainConfig):
        text = f.metadata.get("help", "")
        assert len(text) > 10, f"TrainConfig.{f.name} has no description"
        assert " ".join(text.split()) in shown, f"--{f.name.replace('_', '-')} does not show its description"


def test_a_tokenizer_of_another_size_is_refused_before_anything_is_written(small_data, tmp_path):
    with pytest.raises(ConfigError, match="has 300 ids but vocab_size is 512"):
        train(tiny(small_data, tmp_path / "run", vocab_size=512), log=None, progress=False)
    assert not (tmp_path / "run").exists()


# --- the step and the loop --------------------------------------------------------------------------------


def test_train_step_takes_what_it_uses_and_is_the_step_written_out(small_data):
    """`train_step` on a bare model, optimizer, scaler and batches (no run, no state object) is the step
    written out by hand: the learning rate set, the micro-batch losses averaged, one clip, one AdamW step."""
    from gptlib.model import GPT
    from gptlib.optim import choose_precision, make_adamw

    torch.manual_seed(0)
    model = GPT(tiny(small_data, "unused").model_config())
    twin = copy.deepcopy(model)
    micro = [(torch.randint(0, 300, (2, 16)), torch.randint(0, 300, (2, 16))) for _ in range(2)]
    optimizer, by_hand = make_adamw(model, lr=1e-3, fused=False)[0], make_adamw(twin, lr=1e-3, fused=False)[0]
    scaler, fp32 = torch.amp.GradScaler("cpu", enabled=False), choose_precision("cpu", "fp32")
    loss, norm, scale, skipped = train_step(
        model, optimizer, scaler, iter(micro), 2e-3, precision=fp32, grad_accum=2, grad_clip=0.5
    )
    for group in by_hand.param_groups:
        group["lr"] = 2e-3
    total = torch.zeros(())
    for x, y in micro:
        _, part = twin(x, y)
        (part / 2).backward()
        total += part.detach()
    want_norm = torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.5)
    by_hand.step()
    assert torch.equal(loss, total / 2) and torch.equal(norm, want_norm) and (scale, skipped) == (1.0, False)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))
    assert all(p.grad is None for p in model.parameters()), "the gradients are cleared for the next step"


def test_tiny_run_lowers_the_loss_and_writes_metrics(small_data, tmp_path):
    history = train(
        tiny(small_data, tmp_path / "run", max_steps=30, eval_every=30, max_lr=1e-2), log=None, progress=False
    )
    train_losses = [loss for _, loss in losses(history)]
    assert sum(train_losses[-5:]) / 5 < train_losses[0] - 0.3
    val = [r for r in history if r["kind"] == "val"]
    assert val and 0 < val[-1]["val_bpb"] < 8 and val[-1]["val_loss"] > 0
    assert read_metrics(tmp_path / "run") == history
    assert {"loss", "lr", "grad_norm", "loss_scale", "skipped", "tokens_per_s", "mfu"} <= set(history[1])


def test_kill_and_resume_equals_uninterrupted_bit_for_bit(small_data, tmp_path):
    cfg = tiny(small_data, tmp_path / "a", dropout=0.1, grad_accum=2, loader_workers=1)
    full = train(cfg, log=None, progress=False)
    resumed_cfg = replace(cfg, out=str(tmp_path / "b"))
    first = train(resumed_cfg, until_step=7, log=None, progress=False)
    assert losses(first) == losses(full)[:7]
    assert [p.name for p in list_checkpoints(tmp_path / "b")][-1] == "step-0000007"
    second = train(resumed_cfg, log=None, progress=False)
    assert any("resuming from step-0000007" in r.get("message", "") for r in second)
    assert losses(second) == losses(full)  # the records of steps 1-7 are kept, 8-12 recomputed: all identical
    assert [r["val_loss"] for r in second if r["kind"] == "val"] == [
        r["val_loss"] for r in full if r["kind"] == "val"
    ]
    for a, b in zip(
        load_trained(tmp_path / "a", "latest")[0].parameters(),
        load_trained(tmp_path / "b", "latest")[0].parameters(),
    ):
        assert torch.equal(a, b)


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_corrupted_or_mismatched_checkpoints_are_refused_and_nothing_is_overwritten(small_data, tmp_path):
    cfg = tiny(small_data, tmp_path / "run", max_steps=8)
    train(cfg, until_step=4, log=None, progress=False)
    run = tmp_path / "run"
    before = _snapshot(run)

    with pytest.raises(CheckpointError, match="different configuration.*n_embd"):
        train(replace(cfg, n_embd=32), log=None, progress=False)
    assert _snapshot(run) == before

    weights = list_checkpoints(run)[-1] / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    before = _snapshot(run)
    with pytest.raises(CheckpointError, match="corrupted"):
        train(cfg, log=None, progress=False)
    assert _snapshot(run) == before

    meta_path = list_checkpoints(run)[-1] / "checkpoint.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(CheckpointError, match="version 99"):
        read_checkpoint_meta(meta_path.parent)
    meta_path.write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        train(cfg, log=None, progress=False)


def test_mfu_never_exceeds_one_when_the_measured_peak_was_too_low(small_data, tmp_path, monkeypatch):
    import gptlib.train as train_module

    monkeypatch.setattr(
        train_module, "peak_flops", lambda device, precision: (1e3, "measured on a busy machine")
    )
    history = train(tiny(small_data, tmp_path / "run", max_steps=6), log=None, progress=False)
    mfus = [r["mfu"] for r in history if r["kind"] == "train"]
    assert mfus and all(0 < m <= 1.0 + 1e-9 for m in mfus), mfus


def test_a_run_does_not_resume_on_shards_prepared_again(small_data, tmp_path):
    shards = tmp_path / "shards"
    shutil.copytree(small_data / "shards", shards)
    cfg = tiny(small_data, tmp_path / "run", shards=str(shards), max_steps=8)
    train(cfg, until_step=4, log=None, progress=False)
    assert (
        read_checkpoint_meta(list_checkpoints(tmp_path / "run")[-1])["data_key"]
        == read_manifest(shards)["key"]
    )
    manifest = json.loads((shards / "manifest.json").read_text())
    (shards / "manifest.json").write_text(json.dumps({**manifest, "key": "0" * 64}))  # as if prepared again
    with pytest.raises(CheckpointError, match="other shards"):
        train(cfg, log=None, progress=False)


def test_checkpoints_keep_the_last_n_and_the_best(small_data, tmp_path):
    train(
        tiny(small_data, tmp_path / "run", max_steps=12, checkpoint_every=2, eval_every=2, keep_last=2),
        log=None,
        progress=False,
    )
    names = [p.name for p in list_checkpoints(tmp_path / "run")]
    assert names[-2:] == ["step-0000010", "step-0000012"] and len(names) <= 3
    state = torch.load(list_checkpoints(tmp_path / "run")[-1] / "state.pt", weights_only=True)
    assert set(state) == {"optimizer", "scaler", "ranks", "step"} and state["step"] == 12


def test_sigterm_saves_a_valid_checkpoint_and_exits_143(small_data, tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "gptlib",
        "train",
        "start",
        "--preset",
        "tiny",
        "--shards",
        str(small_data / "shards"),
        "--tokenizer",
        str(small_data / "tokenizer"),
        "--out",
        str(out),
        "--max-steps",
        "100000",
        "--log-every",
        "1",
        "--eval-every",
        "100000",
        "--checkpoint-every",
        "100000",
        "--micro-batch",
        "4",
        "--context",
        "32",
        "--vocab-size",
        "300",
        "--precision",  # auto measures the machine, and the in-process reference below must do the same
        "fp32",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline and len(read_metrics(out) if (out / "metrics.jsonl").exists() else []) < 4
    ):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr  # the shell's code for SIGTERM, after the checkpoint
    assert "SIGTERM" in stdout
    meta = read_checkpoint_meta(list_checkpoints(out)[-1])
    stopped_at = meta["step"]
    assert stopped_at >= 3
    model, tokenizer, _ = load_trained(out, "latest")
    assert isinstance(sample_text(model, tokenizer, "ROMEO:", 5), str)
    # resuming after the signal continues exactly like a run that was never stopped
    cfg = TrainConfig.from_dict(meta["config"])
    resumed = train(cfg, until_step=stopped_at + 3, log=None, progress=False)
    reference = train(
        replace(cfg, out=str(tmp_path / "reference")), until_step=stopped_at + 3, log=None, progress=False
    )
    assert losses(resumed) == losses(reference) and len(losses(reference)) == stopped_at + 3


@pytest.mark.parametrize("log_every", [1, 4])
def test_fp16_overflow_skips_the_step_and_is_logged(small_data, tmp_path, log_every):
    """Every step fp16's scaler skips has its own record, between the log lines too (its `skipped` is a
    value the host holds already: logging it reads nothing more from the device)."""
    history = train(
        tiny(
            small_data,
            tmp_path / "run",
            max_steps=6,
            precision="fp16",
            init_scale=2.0**40,
            log_every=log_every,
        ),
        log=None,
        progress=False,
    )
    records = [r for r in history if r["kind"] == "train"]
    assert records[0]["skipped_now"] and records[0]["loss_scale"] == 2.0**40
    assert records[1]["loss_scale"] == 2.0**39  # halved after the overflow
    assert records[-1]["skipped"] == sum(r["skipped_now"] for r in records) >= 1


def test_bits_per_byte_counts_text_bytes_and_leaves_out_specials(small_data):
    from gptlib.model import GPT
    from gptlib.optim import choose_precision
    from gptlib.tokenizer import Tokenizer

    tok = Tokenizer.load(small_data / "tokenizer")
    model = GPT(tiny(small_data, "unused").model_config())
    x = torch.tensor([[tok.bos_id, 65, 66, 256]])  # 256: the first merged token
    y = torch.tensor([[65, 66, 256, tok.eos_id]])
    result = evaluate(
        model, [(x, y)], torch.from_numpy(tok.token_byte_lengths()).long(), choose_precision("cpu", "fp32")
    )
    logits, _ = model(x)
    nll = torch.nn.functional.cross_entropy(logits[0], y[0], reduction="none")
    n_bytes = 1 + 1 + len(tok.decode_bytes([256]))
    assert result["val_loss"] == pytest.approx(nll.mean().item(), rel=1e-5)
    assert result["val_bpb"] == pytest.approx(nll[:3].sum().item() / (n_bytes * 0.6931471805599453), rel=1e-5)


def test_compile_failure_falls_back_to_eager(monkeypatch):
    from gptlib.model import GPT, GPTConfig
    from gptlib.optim import choose_precision

    def broken_compile(model, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", broken_compile)
    model = GPT(GPTConfig.preset("tiny", vocab_size=64))
    x = torch.randint(0, 64, (2, 8))
    rng = torch.get_rng_state()
    module, note = compile_or_fallback(model, (x, x), choose_precision("cpu"))
    assert module is model and "no compiler here" in note
    assert torch.equal(torch.get_rng_state(), rng) and all(p.grad is None for p in model.parameters())


def test_pipeline_reuses_finished_stages_and_samples(small_data, tmp_path, capsys):
    texts = str(small_data / "texts")
    overrides = {
        "vocab_size": 300,
        "max_steps": 6,
        "eval_every": 3,
        "checkpoint_every": 3,
        "micro_batch": 4,
        "context": 32,
    }
    config = TrainConfig.preset("tiny", **overrides)
    first = run_pipeline("tiny", root=tmp_path, corpus=texts, config=config, sample_tokens=10, progress=False)
    assert (Path(first["run"]) / "training.png").stat().st_size > 1000
    assert (Path(first["run"]) / "sample.txt").read_text().startswith(first["prompt"])  # the held-out text's
    assert first["step"] == 6 and first["val_bpb"] > 0
    capsys.readouterr()
    second = run_pipeline(
        "tiny", root=tmp_path, corpus=texts, config=config, sample_tokens=10, progress=False
    )
    out = capsys.readouterr().out
    assert "reused" in out and second["sample"] == first["sample"] and second["val_loss"] == first["val_loss"]


def test_pipeline_retrains_when_the_corpus_is_edited_and_refuses_to_mix_runs(small_data, tmp_path, capsys):
    texts = tmp_path / "texts"
    shutil.copytree(small_data / "texts", texts)
    overrides = {
        "vocab_size": 300,
        "max_steps": 3,
        "eval_every": 3,
        "checkpoint_every": 3,
        "micro_batch": 4,
        "context": 32,
    }
    config = TrainConfig.preset("tiny", **overrides)
    run_pipeline("tiny", root=tmp_path, corpus=str(texts), config=config, sample_tokens=5, progress=False)
    tokenizer_dir = next((tmp_path / "tokenizers").glob("texts-*-300"))  # named after the folder
    trained_on = json.loads((tokenizer_dir / "trained_on.json").read_text())
    with open(sorted(texts.glob("*.txt"))[0], "a", encoding="utf-8") as f:
        f.write("\nExit, pursued by a bear. " * 50)
    capsys.readouterr()
    with pytest.raises(CheckpointError, match="cannot continue.*delete"):
        run_pipeline("tiny", root=tmp_path, corpus=str(texts), config=config, sample_tokens=5, progress=False)
    out = capsys.readouterr().out
    assert "reused" not in out, "neither the tokenizer nor the shards of the old corpus are reused"
    retrained_on = json.loads((tokenizer_dir / "trained_on.json").read_text())
    assert retrained_on["corpus_stamp"] != trained_on["corpus_stamp"]


def test_sample_command_prints_text(small_data, tmp_path):
    train(tiny(small_data, tmp_path / "run", max_steps=4), log=None, progress=False)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gptlib",
            "sample",
            "--run",
            str(tmp_path / "run"),
            "--prompt",
            "ROMEO:",
            "--max-new-tokens",
            "8",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ROMEO:")


def test_a_resume_may_change_only_the_fields_marked_resumable(small_data, tmp_path):
    cfg = tiny(small_data, tmp_path / "run", max_steps=8)
    full = train(replace(cfg, out=str(tmp_path / "full")), log=None, progress=False)
    train(cfg, until_step=4, log=None, progress=False)
    with pytest.raises(
        CheckpointError, match=r"different configuration \(max_lr: checkpoint 0.003 vs now 0.001\)"
    ):
        train(replace(cfg, max_lr=1e-3), log=None, progress=False)
    # where and how it runs, and when it logs, validates and saves: the same steps follow
    elsewhere = replace(cfg, log_every=2, eval_every=3, keep_last=3, loader_workers=1)
    resumed = losses(train(elsewhere, log=None, progress=False))
    assert set(resumed) <= set(losses(full)) and [s for s, _ in resumed] == [1, 2, 3, 4, 6, 8]


def test_a_checkpoint_saved_before_a_model_field_existed_resumes_with_its_default(small_data, tmp_path):
    """A run saved before `positions` existed trained with sinusoidal positions, the field's default: it
    resumes exactly, and a resume asking for rotary ones is refused, naming the field."""
    cfg = tiny(small_data, tmp_path / "run", max_steps=8)
    full = train(replace(cfg, out=str(tmp_path / "full")), log=None, progress=False)
    train(cfg, until_step=4, log=None, progress=False)
    meta_path = list_checkpoints(tmp_path / "run")[-1] / "checkpoint.json"
    meta = json.loads(meta_path.read_text())
    for part in ("config", "model_config"):
        del meta[part]["positions"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="positions: checkpoint 'sinusoidal' vs now 'rotary'"):
        train(replace(cfg, positions="rotary"), log=None, progress=False)
    assert losses(train(cfg, log=None, progress=False)) == losses(full)


def test_a_resume_never_moves_the_end_of_the_learning_rate_decay(small_data, tmp_path):
    cfg = tiny(small_data, tmp_path / "run", max_steps=8)
    train(cfg, log=None, progress=False)
    with pytest.raises(
        CheckpointError, match="move the end of the learning-rate decay from step 8 to 12.*--decay-steps 8"
    ):
        train(replace(cfg, max_steps=12), log=None, progress=False)
    longer = train(replace(cfg, max_steps=12, decay_steps=8), log=None, progress=False)
    lrs = {r["step"]: r["lr"] for r in longer if r["kind"] == "train"}
    assert lrs[8] > cfg.min_lr and lrs[9] == lrs[12] == cfg.min_lr, (
        "past the decay's end the run trains at min_lr"
    )
    assert [s for s, _ in losses(longer)] == list(range(1, 13))


def test_sample_text_reads_a_prompt_mid_document_and_starts_a_document_without_one(small_data, monkeypatch):
    """A prompt is continued as text from the middle of a play: no <|bos|> before it. An empty prompt starts
    a document at <|bos|>, which the returned text leaves out."""
    from gptlib.model import GPT, GPTConfig
    from gptlib.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(small_data / "tokenizer")
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=tokenizer.n_vocab, dropout=0.0))
    read = []  # the ids each call hands to generate
    generate = model.generate
    monkeypatch.setattr(
        model, "generate", lambda idx, *a, **k: read.append(idx[0].tolist()) or generate(idx, *a, **k)
    )
    prompt = "Romeo.\n"
    text = sample_text(model, tokenizer, prompt, 12, seed=3)
    assert read[-1] == tokenizer.encode(prompt) and text.startswith(prompt)
    empty = sample_text(model, tokenizer, "", 12, seed=3)
    assert read[-1] == [tokenizer.bos_id] and "<|bos|>" not in empty


def test_a_resumed_auto_run_keeps_the_precision_it_began_in(small_data, tmp_path, monkeypatch):
    """`precision=auto` times real steps at start-up (gptlib.probe); a resume must not switch precision when
    the measurement comes out otherwise (a busy machine), or it would not continue the run exactly."""
    import gptlib.probe

    monkeypatch.setattr(
        gptlib.probe, "time_steps", lambda steps, most: {"fp32": 0.3, "bf16": 0.1}
    )  # bf16 fast
    cfg = tiny(small_data, tmp_path / "run", precision="auto")
    first = train(cfg, until_step=4, log=None, progress=False)
    meta = read_checkpoint_meta(list_checkpoints(cfg.out)[-1])
    assert meta["precision"] == "bf16"
    assert resume_precision("auto", meta) == "bf16" and resume_precision("fp32", meta) == "fp32"
    assert resume_precision("auto", None) == "auto"
    monkeypatch.setattr(
        gptlib.probe, "time_steps", lambda steps, most: {"fp32": 0.1, "bf16": 0.3}
    )  # now slow
    second = train(cfg, log=None, progress=False)
    started = [r["message"] for r in second if r["kind"] == "event" and "resuming" in r["message"]]
    assert started and "bf16" in started[0], started
    reference = train(
        replace(cfg, out=str(tmp_path / "reference"), precision="bf16"), log=None, progress=False
    )
    assert losses(second) == losses(reference) and len(losses(first)) == 4


@pytest.mark.parametrize("compile", [False, True])
def test_the_loop_reads_the_device_at_its_log_lines_not_at_every_step(
    small_data, tmp_path, monkeypatch, compile
):
    """A GPU runs a step's kernels after the call returns; each read of a tensor's value on the host waits for
    them, so a read per step would keep the GPU from queueing the next step behind this one. Counted on the
    CPU, where every read goes through the same three methods: 40 more steps at the same log interval cost
    the reads of their 2 log lines (loss, gradient norm, the divergence check), not one or more a step."""
    counts = {"reads": 0}
    for name in ("item", "tolist", "__bool__"):
        real = getattr(torch.Tensor, name)

        def counted(self, *args, _real=real, **kwargs):
            counts["reads"] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)

    def reads(steps: int) -> int:
        counts["reads"], out = 0, tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
        cfg = tiny(small_data, out, max_steps=steps, log_every=20, compile=compile)
        train(replace(cfg, eval_every=1000, checkpoint_every=1000), log=None, progress=False)
        return counts["reads"]

    reads(40)  # warm: compiling reads values as it traces, once per process
    forty, eighty = reads(40), reads(80)
    assert 0 < eighty - forty <= 10, (forty, eighty)
