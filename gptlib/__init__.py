"""GPT pretraining from scratch, taught in notebooks: BPE, shards, loader, model, mixed-precision training.

Modules:

- `gptlib.cli`: The command line, `python -m gptlib COMMAND ...`: hand-written plumbing that parses arguments and calls the library. Each command group lives in one `_add_*` function below.
- `gptlib.corpus`: Where the text comes from: the embedded Shakespeare corpus and local or hosted corpora."""

# Hand-written plumbing, except the docstring above: nbdev-export rewrites it from the module docstrings.
# Importing gptlib touches no disk, network or GPU.

__version__ = "0.1.0"
