"""GPT pretraining from scratch, taught in notebooks: BPE, shards, loader, model, mixed-precision training.

Modules:

- `gptlib.checkpoint`: A training run's folder: checkpoints that resume exactly, and the metrics log.
- `gptlib.cli`: The command line, `python -m gptlib COMMAND ...`: hand-written plumbing that parses arguments and calls the library. Each command group lives in one `_add_*` function below.
- `gptlib.config`: Configuration as dataclasses, and the command-line flags generated from their fields.
- `gptlib.corpus`: Where the text comes from: the embedded Shakespeare corpus and local or hosted corpora.
- `gptlib.display`: How a training run is shown: log lines, a progress bar, its curves as a PNG file and live in a notebook.
- `gptlib.errors`: The errors a user can cause: the command line prints them as one `error: ...` line and exits 2.
- `gptlib.exercises`: The exercises' checkers: in each notebook the learner writes a core piece of GPT pretraining (a BPE merge step and encoding, a document read from a shard, a batch's x and y, an AdamW update, the learning-rate schedule, gradient accumulation, the loss scaler's rule, a training step), and its checker says whether it passes, what is wrong, or that it is not done yet.
- `gptlib.files`: Files written safely and read with suspicion: the one place gptlib writes, renames, hashes and locks.
- `gptlib.interop`: Other tools' formats: the tokenizer for tiktoken and Hugging Face, the shards for nanoGPT and llm.c.
- `gptlib.loader`: Token shards become an endless, seeded, resumable stream of (x, y) training batches: windows of context + 1 tokens read from memory-mapped shards, shuffled by window index with a seeded permutation per epoch, sharded across ranks so that each sees its own windows, and a deterministic pass over a split for validation.
- `gptlib.model`: The decoder-only transformer (GPT): attention, blocks, positions, initialisation, sampling.
- `gptlib.model_inputs`: Checks of what the model is given: token ids, targets, the arguments of `generate`.
- `gptlib.optim`: The optimizer side of training: AdamW parameter groups (decay on matrices only), a warmup-cosine learning rate, gradient clipping, gradient accumulation, mixed precision (bf16 or fp16 autocast, a dynamic loss scaler, the choice made by measurement on a CPU), and model FLOPs utilization against a datasheet or measured peak.
- `gptlib.pipeline`: The main job, `python -m gptlib run`: corpus -> tokenizer -> shards -> training -> a sample and plots.
- `gptlib.quality`: Reading a run: the losses that need no neural network, and how much of a sample is words and speaker names of the training text rather than artefact (runs of blank lines, letters stuttering).
- `gptlib.runtime`: Where and how a training process runs: its device, its place in a `torchrun` group, `torch.compile`, and Ctrl-C / SIGTERM turned into a clean stop.
- `gptlib.train`: The training loop: the run's configuration and presets, one optimizer step (micro-batches under autocast, the loss scaler, clipping), validation in bits per byte over the held-out split, what a checkpoint must hold to resume bit for bit, the loop that ties them together (also under torchrun), and sampling from the trained model.
- `gptlib.workers`: Worker processes: pools whose workers die with their parent, batches shared between helper processes and the caller, and the garbage collector paused while many small objects are made."""

# Hand-written plumbing, except the docstring above: nbdev-export rewrites it from the module docstrings.
# Importing gptlib touches no disk, network or GPU.

__version__ = "0.1.0"
