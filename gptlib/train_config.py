"""A training run's configuration: groups of fields, each step's learning rate, presets.

Hand-written plumbing. `TrainConfig` is everything a run depends on: the model's shape
(`gptlib.model.GPTConfig`'s fields), then five groups, each a small dataclass and a heading of `train start
--help`: the data, the optimization, the schedule (with the learning rate of each step, notebook 05's warmup
and cosine with an optional hold), the compute and the bookkeeping. Each field declares on itself whether it
may change when a run resumes and whether it decides a run's curves. `TRAIN_PRESETS` are named values of it.
It is kept apart from the loop (`gptlib.train`) as nanoGPT keeps its `config/` files apart from its
`train.py`: a reader finds the loop without 250 lines of fields before it, and what only reads a
configuration (the bands of `gptlib.expected`) does not import the loop. Notebook 06 shows and explains it
(its appendix *the configuration and the command line*)."""

from dataclasses import dataclass

import torch
from torch import nn

from .config import Config, ConfigError, opt
from .model import GPT, GPT_PRESETS
from .modern import ModernConfig, Muon, build_model, muon_groups
from .optim import PRECISIONS, lr_at, make_adamw

__all__ = [
    "RunData",
    "Optimization",
    "Schedule",
    "Compute",
    "Bookkeeping",
    "TrainConfig",
    "TRAIN_PRESETS",
    "make_model",
    "make_optimizer",
]


@dataclass
class RunData(Config):
    "data: the shards, the tokenizer, and the run folder"

    shards: str = opt("", "a folder made by gptlib.data.prepare", compared=False)
    tokenizer: str = opt("", "the tokenizer folder the shards were made with", compared=False)
    # a run folder may be moved, so `out` may change on resume
    out: str = opt(
        "", "the run folder: checkpoints, metrics.jsonl, plots, samples", resumable=True, compared=False
    )
    # continued pretraining: a new run's first weights (a resume loads its own checkpoint, and refuses a
    # changed init_from: the run it continues began from those weights)
    init_from: str = opt("", "a run folder: a new run starts from its best checkpoint's weights (same shape)")


@dataclass
class Optimization(Config):
    "optimization: what every step computes, fixed for the life of a run"

    micro_batch: int = opt(8, "sequences per forward/backward pass", low=1)
    grad_accum: int = opt(4, "micro-batches per optimizer step (per process)", low=1)
    max_lr: float = opt(6e-4, "the learning rate at the end of warmup", positive=True)
    min_lr: float = opt(6e-5, "the learning rate at the end of the cosine decay", positive=True)
    weight_decay: float = opt(
        0.1, "decoupled weight decay of the weight matrices and embeddings (times each group's rate)", low=0.0
    )
    beta1: float = opt(0.9, "AdamW's decay of the gradient's running mean", low=0.0, below=1.0)
    beta2: float = opt(0.95, "AdamW's decay of the squared gradient's running mean", low=0.0, below=1.0)
    # lesson 07: Muon moves the blocks' weight matrices by their orthogonalized momentum (gptlib.modern.Muon)
    optimizer: str = opt(
        "adamw", "adamw, or muon (the blocks' matrices; AdamW for the rest)", choices=("adamw", "muon")
    )
    muon_lr: float = opt(0.0, "with --optimizer muon: the Muon matrices' max_lr (0: max_lr)", low=0.0)
    grad_clip: float = opt(
        1.0, "the largest gradient norm; larger gradients are scaled down to it", positive=True
    )
    # a band is the envelope of several seeds: not compared
    seed: int = opt(
        1337, "seeds the initial weights, dropout and the order of the batches", low=0, compared=False
    )


@dataclass
class Schedule(Config):
    "schedule: the run's length and its learning rate's shape"

    # the run's length may change on resume, as long as the cosine ends at the step it did
    max_steps: int = opt(10_000, "optimizer steps of the whole run", low=1, resumable=True, compared=False)
    warmup_steps: int = opt(50, "steps of linear warmup up to max_lr", low=0)
    decay_steps: int = opt(
        0, "the step where the cosine reaches min_lr (0: max_steps)", low=0, resumable=True, compared=False
    )
    # the decay may be kept for the run's last steps, max_lr held until then: the steps before it then do
    # not depend on where the run ends, so that a budget's run can move its end as it goes (gptlib.probe)
    cooldown: float = opt(
        1.0,
        "the share of the run, at its end, over which the learning rate decays (1: every step after warmup)",
        positive=True,
        high=1.0,
    )
    # or a time: a new run times a few of its real steps and sets max_steps to fit (`gptlib.probe.Budget`);
    # a resume keeps the steps the run was planned with. At most a year: a plan counts steps in floats
    budget: float = opt(
        0.0,
        "minutes the training may take, validations and checkpoints included: sets max_steps (0: no budget)",
        low=0.0,
        high=525_600.0,
        resumable=True,
        compared=False,
    )


@dataclass
class Compute(Config):
    "compute: where and how the steps run"

    # the device, compiling and the loader's processes may change on resume; the precision may not, as a
    # bf16 step and an fp32 step compute different numbers (a band holds one precision of its own)
    device: str = opt("auto", "auto, cpu, cuda, cuda:N or mps", resumable=True, compared=False)
    precision: str = opt(
        "auto",
        "auto, fp32, bf16 or fp16 (see gptlib.optim.choose_precision)",
        choices=PRECISIONS,
        compared=False,
    )
    compile: bool = opt(
        False, "torch.compile the model (eager if compiling fails)", resumable=True, compared=False
    )
    init_scale: float = opt(65536.0, "the loss scaler's starting scale (fp16 only)", positive=True)
    loader_workers: int = opt(
        0,
        "batch-reading worker processes (0: read in the training process)",
        low=0,
        resumable=True,
        compared=False,
    )


@dataclass
class Bookkeeping(Config):
    "bookkeeping: when to log, validate and save; none of it changes what a step computes"

    log_every: int = opt(10, "steps between log lines", low=1, resumable=True, compared=False)
    eval_every: int = opt(100, "steps between validations", low=1, resumable=True, compared=False)
    # compared: a validation of 20 batches gives another figure than one of every window
    eval_batches: int = opt(
        20, "micro-batches per validation (0: every window of the validation split)", low=0, resumable=True
    )
    checkpoint_every: int = opt(
        500,
        "steps between checkpoints (also one at the end and on a signal)",
        low=1,
        resumable=True,
        compared=False,
    )
    keep_last: int = opt(2, "checkpoints kept besides the best one", low=1, resumable=True, compared=False)
    # many passes over a small corpus overfit: said once, and stopped when asked (gptlib.overfitting)
    patience: int = opt(
        5,
        "validations since the best bits/byte, the latest more than 2 percent above it, before the run "
        "warns that it overfits (0: never)",
        low=0,
        resumable=True,
        compared=False,
    )
    stop_rising: bool = opt(
        False,
        "stop the run where it warns that validation has risen (the best checkpoint is kept)",
        resumable=True,
        compared=False,
    )


# the bases last group first: a dataclass collects its fields from the far end of its ancestry
@dataclass
class TrainConfig(Bookkeeping, Compute, Schedule, Optimization, RunData, ModernConfig):
    """Everything a training run depends on, in groups: the model's shape (every `GPTConfig` field;
    `vocab_size` is the number of token ids, the tokenizer's and the model's alike), then the data, the
    optimization, the schedule, the compute and the bookkeeping (the classes above, one flag group each in
    `--help`). The resolved config is saved with every checkpoint. Each field declares its class once, on the
    field: `resumable` (where and how the run goes on, not what it computes: it may change when a run is
    resumed; any other change is refused, `gptlib.run_folder.check_checkpoint`) and `compared=False` (it does
    not decide a run's curves: runs that differ in it share an expected band, `gptlib.expected`)."""

    def check(self) -> None:
        super().check()
        # a cosine "down" to a larger min_lr would raise the learning rate as training ends
        if self.min_lr > self.max_lr:
            raise ConfigError(f"need min_lr <= max_lr, got min_lr={self.min_lr}, max_lr={self.max_lr}")
        # a rate nothing uses would still change the recipe (its band, a lab trial's key)
        if self.muon_lr and self.optimizer != "muon":
            raise ConfigError(
                f"muon_lr={self.muon_lr} is the rate of Muon's matrices: it needs optimizer=muon"
            )

    def model_config(self) -> ModernConfig:
        "The model's part of this config: its `ModernConfig` fields (`GPTConfig`'s and the modern pieces')."
        return ModernConfig.from_dict({f: getattr(self, f) for f in ModernConfig.__dataclass_fields__})

    def decay_start(self, end: int | None = None) -> int:
        """The step where the cosine begins, in a run whose decay ends at `end` (default: `decay_steps`, or
        `max_steps`): the end of warmup, or later, when the decay is only the run's last `cooldown`."""
        end = end or self.decay_steps or self.max_steps
        return max(min(self.warmup_steps, end), end - max(1, round(self.cooldown * end)))

    def lr(self, step: int) -> float:
        """The learning rate of `step`: warmup, max_lr held until `decay_start()` (no hold at cooldown 1),
        then the cosine down to min_lr at `decay_steps` (or `max_steps`): lr_at's schedule, its cosine
        delayed by the hold (warmup-stable-decay: Hu et al. 2024, MiniCPM; Hägele et al. 2024)."""
        end = self.decay_steps or self.max_steps
        warmup = min(self.warmup_steps, end)  # a run shorter than its warmup still decays in order
        hold = self.decay_start() - warmup  # the steps at max_lr between the warmup and the cosine
        if warmup <= step < warmup + hold:
            return self.max_lr
        return lr_at(
            step - hold if step >= warmup + hold else step,
            max_lr=self.max_lr,
            min_lr=self.min_lr,
            warmup_steps=warmup,
            decay_steps=end - hold,
        )


TRAIN_PRESETS = {
    # the model shapes are gptlib.model's presets. `tiny`: seconds, for tests, CI and the notebook's smoke run
    "tiny": {
        **GPT_PRESETS["tiny"].to_dict(),
        "micro_batch": 8,
        "grad_accum": 1,
        "max_steps": 60,
        "max_lr": 3e-3,  # a model this small takes a large rate: 60 steps must show the loss falling
        "min_lr": 3e-4,
        "warmup_steps": 5,
        "log_every": 5,
        "eval_every": 20,
        "eval_batches": 4,
        "checkpoint_every": 20,  # a checkpoint at each validation, so every checkpoint can be ranked
    },
    # the laptop's run, the best of a measured search at 8 minutes of 2 CPU cores (benchmarks/recipe.py, on an
    # Intel Xeon with bf16 matrix units): 2,600 steps x 2,048 tokens, 3.7 epochs. `make run` trains it to a
    # time budget instead (--budget: the steps that fit, gptlib.probe). Its shape is gptlib.model's `cpu`
    # preset, which has no dropout: in this budget dropout cost more steps than it gained
    "cpu": {
        **GPT_PRESETS["cpu"].to_dict(),
        # two of lesson 07's pieces (gptlib.modern), measured together in `make run` on an AMD EPYC Zen 4,
        # whose 9 minutes fit about 2,000 steps: an LM head of its own (1.05 M parameters more for almost no
        # compute) and ReLU² in the MLP. 1.820-1.834 bits/byte against GELU and the tied head's 1.880-1.894,
        # better on each of the band's 3 seeds by 0.054-0.074 (benchmarks/RESULTS.md, section Training). On
        # a Zen 5's 3,600 steps the untied head alone was neutral (memorising); ReLU² was not tried there
        "tied_head": False,
        "mlp": "relu2",
        "micro_batch": 8,
        "grad_accum": 1,  # 16 sequences a step reached the same loss as 8 in the search, in half the steps
        "max_steps": 2600,
        "max_lr": 1e-3,  # the search's best: 3e-3 and 7e-4 were worse
        "min_lr": 1e-4,
        "warmup_steps": 30,
        # the search kept GPT-2's 0.1 (0.3 changed little in its runs of about 2,300 steps); a fast CPU's 9
        # minutes run 3,300-3,800, five passes over the training plays, where the model memorises: 0.3 gained
        # 0.020 bits/byte over 3 paired seeds of `make run` on an AMD EPYC Zen 5 (1.813-1.822 against
        # 1.830-1.841), and 0.6 lost 0.006 against 0.3 (benchmarks/RESULTS.md, section Training)
        "weight_decay": 0.3,
        # max_lr held until the last quarter, then the cosine: 2.010 bits/byte against the whole-run
        # cosine's 2.068 in the search (round 7), and a budget's run can move its end while the rate holds
        # (gptlib.probe)
        "cooldown": 0.25,
        # fused kernels: a step 1.16-1.25x faster in bf16 on the AMD EPYC, for 30-42 s of compiling from an
        # empty cache (6 s from a warm one), which a budget's run pays once, inside its minutes
        "compile": True,
        "log_every": 20,
        "eval_every": 400,
        "eval_batches": 0,  # every window of both held-out plays: the figure `make run` reports
        "checkpoint_every": 400,
    },
    # a model for a GPU: micro-batch 8 x 4 accumulation, context 512, 10,000 steps
    "gpt-25m": {
        **GPT_PRESETS["gpt-25m"].to_dict(),
        "micro_batch": 8,
        "grad_accum": 4,  # 16,384 tokens a step, in micro-batches that fit a small GPU's memory
        "max_steps": 10_000,
        "max_lr": 6e-4,
        "min_lr": 6e-5,
        "warmup_steps": 50,
        "log_every": 10,
        "eval_every": 100,
        "eval_batches": 20,
        "checkpoint_every": 1000,
        "loader_workers": 2,  # a GPU step is short: batches are read ahead in other processes
        # `auto`: on a GPU, the probe times bf16 and fp16 steps where its tensor cores run them, and the
        # micro-batch (accumulation keeping 16,384 tokens a step) and compiling that measure fastest
        # (gptlib.probe). The seed's design trained fp16 with the loss scaler, which every CUDA GPU with
        # tensor cores runs (T4-class ones have no bf16): one flag away, `--precision fp16`
        "precision": "auto",
    },
}
TrainConfig.PRESETS = TRAIN_PRESETS


# what a config builds; here, not in the loop's lesson (06), because lesson 07's pieces come after it


def make_model(cfg: TrainConfig) -> GPT:
    "Lesson 04's GPT, or with lesson 07's pieces where the config asks (`gptlib.modern.build_model`)."
    return build_model(cfg.model_config())


def make_optimizer(cfg: TrainConfig, model: nn.Module, device, matmul_dtype=None) -> torch.optim.Optimizer:
    """AdamW as lesson 05 builds it (decay on the matrices and embeddings, the fused kernel where it runs),
    or lesson 07's Muon for the blocks' matrices, its Newton-Schulz iterations in `matmul_dtype` (the run's
    autocast dtype; None: fp32), at `muon_lr` (0: max_lr) on the same schedule."""
    betas = (cfg.beta1, cfg.beta2)
    if cfg.optimizer == "muon":
        groups = muon_groups(model, cfg.weight_decay, lr_ratio=(cfg.muon_lr or cfg.max_lr) / cfg.max_lr)
        return Muon(groups, lr=cfg.max_lr, betas=betas, ns_dtype=matmul_dtype or torch.float32)
    return make_adamw(model, lr=cfg.max_lr, weight_decay=cfg.weight_decay, betas=betas, device=device)[0]
