"""GPT pretraining from scratch, taught in notebooks: BPE, shards, loader, model, mixed-precision training.

Modules:

- `gptlib.checkpoint`: A training run's folder: checkpoints that resume exactly, and the metrics log.
- `gptlib.cli`: The command line, `python -m gptlib COMMAND ...`: hand-written plumbing that parses arguments and calls the library. Each command group lives in one `_add_*` function below.
- `gptlib.config`: Configuration as dataclasses: one base for `GPTConfig`, `DataConfig` and `TrainConfig`, and the command-line flags generated from their fields.
- `gptlib.corpus`: Where the text comes from: the embedded Shakespeare corpus and local or hosted corpora.
- `gptlib.display`: How a training run is shown: log lines, a progress bar, its curves as a PNG file and live in a notebook.
- `gptlib.files`: Files written safely and read with suspicion: the one place gptlib writes, renames, hashes and locks.
- `gptlib.interop`: Other tools' formats: the tokenizer for tiktoken and Hugging Face, the shards for nanoGPT and llm.c.
- `gptlib.pipeline`: The main job, `python -m gptlib run`: corpus -> tokenizer -> shards -> training -> a sample and plots.
- `gptlib.runtime`: Where and how a training process runs: its device, its place in a `torchrun` group, `torch.compile`, and Ctrl-C / SIGTERM turned into a clean stop.
- `gptlib.workers`: Worker processes: pools whose workers die with their parent, batches shared between helper processes and the caller, and the garbage collector paused while many small objects are made."""

# Hand-written plumbing, except the docstring above: nbdev-export rewrites it from the module docstrings.
# Importing gptlib touches no disk, network or GPU.

__version__ = "0.1.0"
