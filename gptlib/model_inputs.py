"""Checks of what the model is given: token ids, targets, the arguments of `generate`.

Hand-written plumbing, not generated from a notebook: `gptlib.model` (notebook 04) calls these checks first
thing in `GPT.forward` and `generate`, so that a mistake is named instead of surfacing as a traceback from
deep inside torch (on a GPU, an out-of-range id is an asynchronous device-side assert). Two kinds:

- a model and what it is given do not fit together (ids outside its vocabulary, a sequence longer than its
  context, sampling arguments out of range, as `sample --temperature -1` gives): `ConfigError`, one line
  on the command line;
- a caller's bug (ids that are not an integer tensor, or of the wrong shape): `TypeError` / `ValueError`,
  with a traceback.

The checks read only `config.vocab_size` and `config.context`, so this module needs nothing of the model.
"""

from __future__ import annotations

import math

import torch

from .config import ConfigError, checked_int

__all__ = ["check_tokens", "check_targets", "check_sampling"]


def check_tokens(idx, config, name: str = "idx", check_length: bool = True) -> None:
    "Token ids `idx` must be an integer tensor (B, T) of ids in the vocabulary, at most `context` long."
    if not isinstance(idx, torch.Tensor) or idx.dtype not in (torch.int64, torch.int32):
        raise TypeError(
            f"{name} must be an int64 tensor of token ids (B, T), got {getattr(idx, 'dtype', type(idx))}"
        )
    if idx.dim() != 2:
        raise ValueError(f"{name} must have shape (B, T), got {tuple(idx.shape)}")
    if check_length and idx.size(1) > config.context:
        raise ConfigError(f"sequence length {idx.size(1)} exceeds the model's context of {config.context}")
    # reading the ids costs a host sync on an accelerator, so the range is checked on the CPU only
    if idx.device.type == "cpu" and idx.numel() and not torch.compiler.is_compiling():
        low, high = int(idx.min()), int(idx.max())
        if low < 0 or high >= config.vocab_size:
            raise ConfigError(
                f"{name} holds token ids in [{low}, {high}], outside the vocabulary [0, {config.vocab_size})"
            )


def check_targets(targets, idx: torch.Tensor) -> None:
    "Targets: one token id (or -1, left out of the loss) per input position, a tensor of the shape of `idx`."
    if not isinstance(targets, torch.Tensor) or targets.shape != idx.shape:
        raise ValueError(
            f"targets must have the shape of idx {tuple(idx.shape)}, got "
            f"{tuple(getattr(targets, 'shape', ()))}"
        )


def check_sampling(idx, config, max_new_tokens, temperature, top_k, top_p, eos_id) -> None:
    """The arguments of `generate`, all checked before the first token is drawn: a prompt of at least one
    valid token (any length: `generate` keeps its latest `context` tokens), a count >= 0, a finite
    temperature >= 0, a positive top-k, a top-p in (0, 1], an end id of the vocabulary."""
    check_tokens(idx, config, "the prompt", check_length=False)
    if idx.size(1) == 0:
        raise ConfigError("the prompt is empty: give at least one token, e.g. <|bos|>")
    checked_int(max_new_tokens, "max_new_tokens", low=0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise ConfigError(f"temperature must be a number, got {temperature!r}")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ConfigError(f"temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None:
        checked_int(top_k, "top_k", low=1)
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0.0 < top_p <= 1.0):
        raise ConfigError(f"top_p must be in (0, 1] or None, got {top_p!r}")
    if eos_id is not None and not 0 <= checked_int(eos_id, "eos_id") < config.vocab_size:
        raise ConfigError(f"eos_id {eos_id} is not a token id of a {config.vocab_size}-token vocabulary")
