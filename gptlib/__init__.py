"""gptlib: GPT pretraining from scratch, taught in notebooks.

Hand-written plumbing. The modules, from text to a trained model (each generated from its notebook
except `corpus` and `cli`):

    corpus     where text comes from (the embedded Shakespeare corpus, local and hosted corpora)
    tokenizer  01_bpe       byte-level BPE trained from scratch
    data       02_data      documents -> shuffled, split, memory-mapped token shards
    loader     03_loader    shards -> a streaming, resumable batch loader
    model      04_model     the decoder-only transformer
    optim      05_optim     AdamW groups, the LR schedule, mixed precision, MFU
    train      06_training  the training loop, checkpoints, sampling
    cli        `python -m gptlib ...`

Importing gptlib touches no disk, network or GPU.
"""

__version__ = "0.1.0"
