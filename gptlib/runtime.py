"""Where and how a training process runs: device, `torchrun` group, compile, RNGs, signals.

Hand-written plumbing, not generated from a notebook: 06_training explains why each exists; nothing here
is about GPTs. The device and the distributed group are decided once (`setup_distributed`), and callers
ask the returned `Distributed` (`is_main`, `all_reduce_sum`) instead of reading `RANK` again. The random
generators a training process draws from (torch's, numpy's and Python's) are seeded, captured and restored
here (`seed_everything`, `rng_state`, `set_rng_state`), so that a checkpoint can hold them; `torch.compile`
is tried and falls back to eager (`training_module`); Ctrl-C and SIGTERM become a flag (`StopRequest`).
How much memory a device has (`memory_bytes`) is asked here too, so that sizes too large for it are refused
before torch tries to allocate them (`MemoryShortage`).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

from .errors import GptlibError

__all__ = [
    "DeviceError",
    "MemoryShortage",
    "memory_bytes",
    "Distributed",
    "resolve_device",
    "setup_distributed",
    "seed_everything",
    "rng_state",
    "set_rng_state",
    "compile_or_fallback",
    "training_module",
    "StopRequest",
]


class DeviceError(GptlibError, ValueError):
    "A device this machine does not have, or a name that is not a device (`--device`)."


class MemoryShortage(GptlibError, MemoryError):
    """Sizes that ask for more memory than the device has, refused before anything is allocated: torch's
    allocator would fail with a traceback, or the system would kill the process without a word."""


def memory_bytes(device: torch.device) -> int | None:
    """The memory tensors on `device` live in: the GPU's for CUDA, else this machine's RAM (an Apple GPU
    shares it); None where the system does not say."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # a system without these names (Windows)
        return None


@dataclass
class Distributed:
    "Where this process stands: rank, world size, device; `is_main` does the logging and checkpointing."

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        "Sum `tensor` over the ranks, in place (nothing to do for one process)."
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)  # gloo has no AVG: callers divide
        return tensor

    def gather(self, obj) -> list:
        "Every rank's `obj`, in rank order."
        if self.world_size == 1:
            return [obj]
        import torch.distributed as dist

        gathered = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def close(self) -> None:
        """Leave the group this process joined. After a clean run the ranks first wait for each other, so
        that none tears gloo down while a peer is still finishing its last collective (a rank of the 2-process
        test once aborted at exit: "terminate called without an active exception"); while an error is
        propagating, at once: its peers may be gone already, and torchrun stops those that are not."""
        if self.owns_group:
            import torch.distributed as dist

            if sys.exc_info()[0] is None:
                dist.barrier()
            dist.destroy_process_group()


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """`auto` picks CUDA (this process's local rank), then MPS, then the CPU. A device this machine does not
    have is a `DeviceError` that says so."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank)
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as e:
        raise DeviceError(f"unknown device {name!r}: use auto, cpu, cuda, cuda:N or mps") from e
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"device {name!r}: this torch has no CUDA or sees no GPU; use --device cpu (or auto)"
            )
        if device.index is None:
            device = torch.device("cuda", local_rank)
        if device.index >= torch.cuda.device_count():
            raise DeviceError(f"device {name!r}: only {torch.cuda.device_count()} GPU(s) are visible")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError(
                f"device {name!r}: MPS (Apple GPUs) is not available here; use --device cpu (or auto)"
            )
    elif device.type != "cpu":
        raise DeviceError(f"device {name!r} is not supported: use auto, cpu, cuda, cuda:N or mps")
    return device


def setup_distributed(device_name: str) -> Distributed:
    """Join the process group `torchrun` describes in the environment (gloo on CPU, NCCL on CUDA); one
    process otherwise."""
    import torch.distributed as dist

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_name, local_rank)
    if world_size == 1:
        return Distributed(0, 1, 0, device)
    owns = not dist.is_initialized()
    if owns:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Distributed(dist.get_rank(), dist.get_world_size(), local_rank, device, owns)


# --- the random generators a training process draws from ----------------------------------------------


def seed_everything(seed: int) -> None:
    "Seed torch's (dropout), numpy's and Python's global generators."
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def rng_state() -> dict:
    "Every random number generator training touches, as tensors, ints and lists (loadable with weights_only)."
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, py_state, gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        # numpy's uint32 key array as int64: a tensor, so that torch.load(weights_only=True) reads it
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "python": [version, list(py_state), gauss],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    "Restore the generators `rng_state` captured: the next random numbers are the ones that would have come."
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, py_state, gauss = state["python"]
    random.setstate((version, tuple(py_state), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --- what a step calls -----------------------------------------------------------------------------------


def compile_or_fallback(model, sample_batch, precision) -> tuple[torch.nn.Module, str]:
    """`torch.compile(model)`, tried on one forward and backward pass; on any failure the eager model.
    The trial's RNG draws (dropout) and gradients are undone. Returns `(module, what happened)`: the trial
    is when the compiling happens, so the note says how long it took (a budget's run pays it)."""
    rng, deterministic = torch.get_rng_state(), torch.are_deterministic_algorithms_enabled()
    started = time.perf_counter()
    if next(model.parameters()).device.type == "cpu":
        # inductor's CPU kernels add some gradients (the embedding's) with atomic adds, whose order differs
        # from run to run: in the deterministic mode they are ordered, at no measured cost (a `cpu` step
        # 1.18x eager's against 1.19x), so a compiled run is reproduced bit for bit, as an eager one is. A
        # GPU's deterministic mode needs its own settings (CUBLAS_WORKSPACE_CONFIG): not done there. It stays
        # on for the compiled module's life; `gptlib.train.train` gives the caller's setting back at its end
        torch.use_deterministic_algorithms(True)
    try:
        compiled = torch.compile(model)
        with precision.autocast():
            _, loss = compiled(*sample_batch)
        loss.backward()
        outcome = (compiled, f"torch.compile on ({time.perf_counter() - started:.0f} s to compile)")
    except Exception as e:  # compilers fail in many ways (no C compiler, unsupported op, ...)
        torch.use_deterministic_algorithms(deterministic)  # eager needs no ordering: as the caller had it
        outcome = (
            model,
            f"torch.compile failed, running eager ({type(e).__name__}: {str(e).splitlines()[0][:120]})",
        )
    model.zero_grad(set_to_none=True)
    torch.set_rng_state(rng)
    return outcome


def training_module(model, dist: Distributed, precision, *, compile: bool = False, sample_batch=None):
    """The module a training step calls, and a note for the log: `model`, compiled when asked (tried on
    `sample_batch`, eager if that fails), wrapped in DDP when there are several ranks. Checkpoints, evaluation
    and sampling keep using the raw `model`."""
    forward, note = model, "torch.compile off"
    if compile:
        forward, note = compile_or_fallback(model, sample_batch, precision)
    if dist.world_size > 1:
        from torch.nn.parallel import DistributedDataParallel

        forward = DistributedDataParallel(
            forward, device_ids=[dist.device.index] if dist.device.type == "cuda" else None
        )
    return forward, note


# --- signals ------------------------------------------------------------------------------------------------


class StopRequest:
    """Turns SIGINT and SIGTERM into a flag the training loop checks after each step (main thread only; the
    processes of a torchrun group agree on it at the next step they all log, validate or save). A second
    Ctrl-C does not wait for the step (set-up and the probe take seconds before the first one): it raises
    KeyboardInterrupt, and the run resumes from its last checkpoint, which a checkpoint's atomic write leaves
    whole. The command line exits with the shell's code for the signal (`cli._shared.signal_exit_code`)."""

    def __init__(self):
        self.signal = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if signum == signal.SIGINT and self.signal == "SIGINT":
            raise KeyboardInterrupt  # the second Ctrl-C: stop now, without a checkpoint of this step
        if signum == signal.SIGINT:
            print("stopping after this step (Ctrl-C again: now, without its checkpoint)", file=sys.stderr)
        self.signal = signal.Signals(signum).name

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False
