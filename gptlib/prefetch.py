"""Batches made ahead in torch DataLoader workers, and their copy to the device.

Hand-written plumbing, not generated from a notebook. Notebook 03 (`gptlib.loader`) teaches what a batch is:
batch `k` of a run is a pure function of the seed and `k`, so any process can make any batch and the
loader's state is one number. This module only arranges for batches to be made ahead of time, in worker
processes, and moved to the accelerator; it never decides which tokens a batch holds.

- `EndlessSteps`: a sampler counting batch numbers from wherever the loader stands;
- `worker_loader`: torch's `DataLoader` over a dataset whose item `k` is batch `k`: persistent workers, two
  batches ahead each, pinned memory on CUDA, and a random generator of its own;
- `batches_from`: the stream of batches from a step on, made in this process or by the workers;
- `to_device`: a batch on the model's device, copied asynchronously from pinned memory on CUDA.

Workers pay off when a batch costs real time next to a training step: a fast GPU consuming hundreds of batches
a second, long contexts, shards on a slow or network disk, per-batch transformations. On a CPU the batch
costs far less than the step and the trip through a worker (a pickle, a shared-memory copy) costs more than
the batch, so the training process makes its own (`num_workers=0`; notebook 03 measures both).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

__all__ = ["EndlessSteps", "worker_loader", "batches_from", "to_device"]


class EndlessSteps(Sampler):
    """Batch numbers `start, start + 1, ...` forever. The `DataLoader` reads `start` each time iteration
    begins, so restarting the stream at any batch is one assignment; there are no epochs to end it (the
    dataset crosses epochs on its own)."""

    def __init__(self, start: int = 0):
        self.start = start

    def __iter__(self):
        return itertools.count(self.start)


def worker_loader(dataset: Dataset, num_workers: int, pin_memory: bool, seed: int) -> DataLoader:
    """A `DataLoader` whose `num_workers` persistent workers make whole batches of `dataset` (item `k` is
    batch `k`, so no collation: `batch_size=None`) ahead of time, two each, in the order of an endless
    sampler: batch `loader.sampler.start` first. Persistent: started once, not once per `iter`, which a
    resume calls again."""
    return DataLoader(
        dataset,
        batch_size=None,
        sampler=EndlessSteps(),
        num_workers=num_workers,
        prefetch_factor=2,
        persistent_workers=True,
        pin_memory=pin_memory,
        # its own generator: starting workers draws their base seed from it, not from torch's global random
        # state, so the training loop's random numbers (dropout) are the same with and without workers
        generator=torch.Generator().manual_seed(seed),
    )


def batches_from(dataset: Dataset, step: int, loader: DataLoader | None) -> Iterator:
    """Batches `step, step + 1, ...` of `dataset`: made in this process when there is no `loader`, else by
    its workers, restarted at `step`. A new `iter` over persistent workers drops the batches they had made
    ahead; since batch `k` depends on `k` alone, nothing else about them needs resetting."""
    if loader is None:
        return map(dataset.__getitem__, itertools.count(step))
    loader.sampler.start = step
    return iter(loader)


def to_device(x: torch.Tensor, y: torch.Tensor, device: torch.device, pin_memory: bool):
    """The batch on `device`. On the CPU there is no copy at all. To a GPU, from pinned (page-locked) host
    memory the copy runs asynchronously (`non_blocking`), overlapping the step the GPU is still computing;
    from ordinary memory it would first be staged through a pinned buffer, synchronously."""
    if device.type == "cpu":
        return x, y
    if pin_memory and not x.is_pinned():  # workers pin their batches already; in-process ones are pinned here
        x, y = x.pin_memory(), y.pin_memory()
    return x.to(device, non_blocking=pin_memory), y.to(device, non_blocking=pin_memory)
