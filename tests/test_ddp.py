"""DDP on CPU: two processes under torchrun (gloo) with the same global batch follow one process's loss
curve."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gptlib.run_folder import list_checkpoints, read_checkpoint_meta, read_metrics
from gptlib.train import train
from gptlib.train_config import TrainConfig

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_two_processes_match_one_process_with_the_same_global_batch(small_data, tmp_path):
    common = {
        "shards": str(small_data / "shards"),
        "tokenizer": str(small_data / "tokenizer"),
        "max_steps": 6,
        "log_every": 1,
        "eval_every": 6,
        "eval_batches": 2,
        "checkpoint_every": 6,
        "context": 32,
        "dropout": 0.0,
        "vocab_size": 300,  # small_data's tokenizer
        "precision": "fp32",  # auto times the machine's steps: both runs must compute in one precision
    }
    single = train(
        TrainConfig.preset("tiny", out=str(tmp_path / "one"), micro_batch=8, **common),
        log=None,
        progress=False,
    )

    flags = [f"--{k.replace('_', '-')}={v}" for k, v in common.items()]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "gptlib",
        "train",
        "start",
        "--preset",
        "tiny",
        f"--out={tmp_path / 'two'}",
        "--micro-batch=4",
        *flags,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "cpu x 2" in result.stdout  # one log, from rank 0

    one = [r["loss"] for r in single if r["kind"] == "train"]
    two = [r["loss"] for r in read_metrics(tmp_path / "two") if r["kind"] == "train"]
    assert len(one) == len(two) == 6
    assert one[-1] < one[0]
    for a, b in zip(one, two):  # the same windows each step; only the order of float sums differs
        assert abs(a - b) < 1e-3, (one, two)
    meta = read_checkpoint_meta(list_checkpoints(tmp_path / "two")[-1])
    assert meta["world_size"] == 2 and meta["step"] == 6
