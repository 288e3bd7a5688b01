"""GPT pretraining from scratch, taught in notebooks: BPE, shards, loader, model, mixed-precision training.

Modules:

- `gptlib.bpe_backends`: The tokenizer's fast back-ends: tiktoken, a cached encoder, the parallel split.
- `gptlib.cli.corpus`: `corpus fetch|show`: the embedded corpus fetched, any corpus measured.
- `gptlib.cli.data`: `data prepare|show|export|import`: token shards made, checked and translated.
- `gptlib.cli.lab`: `lab run|queue|show|pin`: did a change help? Experiments that seed noise cannot fool.
- `gptlib.cli.metrics`: `metrics tensorboard`: a run's metrics.jsonl as TensorBoard event files.
- `gptlib.cli.model`: `model show`: a model preset's sizes, parameters by component and FLOPs.
- `gptlib.cli.run`: `run`: the main job, the whole pipeline on the embedded corpus or on your own text.
- `gptlib.cli.sample`: `sample --run FOLDER`: text from a trained run's best or latest checkpoint.
- `gptlib.cli.tokenizer`: `tokenizer train|encode|decode`: a byte-level BPE tokenizer on the command line.
- `gptlib.cli.train`: `train start|config`: training runs, with a flag for every `TrainConfig` field.
- `gptlib.config`: Configuration as dataclasses, and the command-line flags generated from their fields.
- `gptlib.corpus`: Where the text comes from: the embedded Shakespeare corpus and local or hosted corpora.
- `gptlib.data`: Documents become shuffled, split token shards on disk, in DataTrove's format.
- `gptlib.display`: How a training run is shown: log lines, a progress bar, its curves as a PNG and live.
- `gptlib.errors`: The errors a user can cause: the command line prints one `error: ...` line, exits 2.
- `gptlib.expected`: Expected bands: a preset's curves on a CPU kind, and whether a run landed inside them.
- `gptlib.files`: Files written safely and read with suspicion: every write, rename, hash and lock.
- `gptlib.interop`: Other tools' formats of the shards: nanoGPT's and llm.c's token files, both ways.
- `gptlib.lab`: The lab: did a change help? Baseline against candidate, judged so that noise cannot fool it.
- `gptlib.loader`: Token shards become an endless, seeded, resumable stream of (x, y) training batches.
- `gptlib.model`: The decoder-only transformer (GPT): attention, blocks, positions, initialisation, sampling.
- `gptlib.model_inputs`: Checks of what the model is given: token ids, targets, the arguments of `generate`.
- `gptlib.modern`: Since GPT-2: RMSNorm, QK-norm, ReLU², an untied head and Muon, each an option of the model.
- `gptlib.optim`: The optimizer side of training: AdamW, its schedule, clipping, mixed precision and MFU.
- `gptlib.overfitting`: Validation that has risen for a long stretch: the run says so once, and may stop.
- `gptlib.pipeline`: The main job, `python -m gptlib run`: corpus, tokenizer, shards, training, a sample.
- `gptlib.prefetch`: Batches made ahead in torch DataLoader workers, and their copy to the device.
- `gptlib.probe`: A new run's probe: real steps timed; precision, a GPU's shape and a budget's steps chosen.
- `gptlib.quality`: Reading a run: losses of counting alone, a tokenizer's compression, how samples read.
- `gptlib.run_folder`: A training run's folder: marker, lock, checkpoints, the resume point, the metrics log.
- `gptlib.runtime`: Where and how a training process runs: device, `torchrun` group, compile, RNGs, signals.
- `gptlib.shards`: The shard folder: manifest, verification, reuse, the lock, work folders, publishing.
- `gptlib.tensorboard`: TensorBoard event files of a run's scalars.
- `gptlib.tokenizer`: Byte-level BPE: trained exactly like rustbpe, encoding exactly like tiktoken.
- `gptlib.train`: The training loop: one step, bits per byte, set-up, the loop.
- `gptlib.train_config`: A training run's configuration: groups of fields, each step's learning rate, presets.
- `gptlib.workers`: Worker processes that die with their parent, the work shared with them, a paused GC."""

# Hand-written plumbing, except the docstring above: nbdev-export rewrites it from the module docstrings.
# Importing gptlib touches no disk, network or GPU.

__version__ = "0.1.0"
