"""Worker processes that die with their parent, the work shared with them, a paused GC.

Pools whose workers die with their parent, batches shared between helper processes and the caller, and the
garbage collector paused while many small objects are made. Hand-written plumbing, not generated from a
notebook: 01_bpe teaches the tokenizer, and its back-ends (`gptlib.bpe_backends`: the documents counted in
parallel and the counts added, many texts encoded at once) stand on these helpers.

- `default_workers()`, `resolve_workers(n)`: how many processes to use when the caller does not say.
- `worker_pool(n)`: a `ProcessPoolExecutor` whose workers exit when the process that started them dies.
- `text_batches(texts, batch_chars, workers)`: documents grouped into batches of about `batch_chars`
  characters.
- `share_batches(...)`: every batch handled once, by a helper process or, while all are busy, by the caller.
- `map_with(obj, method, items, ...)`: `[method(obj, item) for item in items]` in worker processes.
- `gc_paused()`: the cyclic garbage collector paused.

Why workers must die with their parent. A worker of `ProcessPoolExecutor` waits for work on a pipe whose
write end it holds too (it was forked with it), so when the parent is killed (`kill -9`, or SIGTERM, which
Python does not catch) the worker never sees end-of-file: it would wait for good, holding its memory and the
parent's stdout (a `| tee` never ends). So every worker, first thing, arranges to exit with its parent:

- on Linux the kernel sends it SIGKILL when the parent dies (`prctl(PR_SET_PDEATHSIG)`, through ctypes);
- everywhere, a daemon thread polls `os.getppid()` every `WATCH_SECONDS` and exits once it has changed (the
  orphan was adopted by another process), for systems without `prctl`;
- a parent that died before either was in place is caught at once: `os.getppid()` is already not the parent.

Linux sends the signal when the *thread* that started the worker ends, so a pool must be used and shut down
by the thread that made it (every pool here lives inside one function call).

Why workers ignore Ctrl-C. A terminal sends SIGINT to every process of the foreground group, workers
included. A worker interrupted while it writes its result into the pipe the pool reads leaves half a message
there, and the pool's reader thread waits for the rest for good: the command hangs in `shutdown`, and Ctrl-C
again cannot end it. Elsewhere the worker would print a `KeyboardInterrupt` traceback of its own. So a
worker ignores SIGINT (its first act) and the parent alone handles it: leaving the pool's `with` block on
an exception cancels the work not yet begun and waits for what the workers are doing (one batch each, a
moment), then the command line says `interrupted` and exits 130.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from itertools import chain, repeat

__all__ = [
    "WATCH_SECONDS",
    "default_workers",
    "resolve_workers",
    "worker_pool",
    "text_batches",
    "share_batches",
    "map_with",
    "gc_paused",
]

WATCH_SECONDS = 0.5  # how often a worker's watchdog thread checks that its parent is alive
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def default_workers() -> int:
    "Processes to use when the caller does not say: the CPUs this process may run on, at most 8."
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def resolve_workers(workers: int | None) -> int:
    "`workers` as an int of at least 1, or `default_workers()` when it is None."
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return workers


# --- workers that die with their parent -------------------------------------------------------------------


def _signal_on_parent_death() -> None:
    "Linux only: ask the kernel to SIGKILL this process when its parent dies. Elsewhere, nothing."
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no C library to call (musl, sandboxes): nothing to ask the kernel
        return  # on purpose: the watchdog thread (`_watch_parent`) still ends the worker with its parent


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_SECONDS)
    os._exit(1)  # orphaned: nobody will read our results


def _start_worker(parent: int | None, initializer: Callable | None, initargs: tuple) -> None:
    """The initializer of every pool worker: exit with the parent (`parent` is the pid the worker must have
    as its parent, or None when it is a fork server whose pid the pool does not know), ignore Ctrl-C (the
    parent handles it, see the module docstring), then `initializer`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _signal_on_parent_death()
    if parent is None:
        parent = os.getppid()
    elif os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="gptlib-watch-parent", daemon=True).start()
    if initializer is not None:
        initializer(*initargs)


class _Pool(ProcessPoolExecutor):
    """A `ProcessPoolExecutor` whose `with` block, when it ends in an exception (Ctrl-C included), cancels the
    work not yet begun rather than doing it all before the exception may go on."""

    def __exit__(self, exc_type, exc, traceback) -> bool:
        self.shutdown(wait=True, cancel_futures=exc_type is not None)
        return False


def worker_pool(
    workers: int, initializer: Callable | None = None, initargs: tuple = ()
) -> ProcessPoolExecutor:
    """A `ProcessPoolExecutor` of `workers` processes (started the default way) whose workers exit when this
    process dies, even by SIGKILL, and leave Ctrl-C to it. `initializer(*initargs)` then runs in each worker,
    as usual. Leaving its `with` block on an exception cancels the work not yet begun."""
    method = multiprocessing.get_start_method(allow_none=False)
    parent = os.getpid() if method in ("fork", "spawn") else None  # "forkserver": the server is the parent
    return _Pool(workers, initializer=_start_worker, initargs=(parent, initializer, initargs))


# --- sharing work -----------------------------------------------------------------------------------------


def text_batches(texts: Iterable[str], batch_chars: int | None, workers: int) -> Iterator[list[str]]:
    """Documents grouped into lists of about `batch_chars` characters, each checked to be a str. By default
    a list is cut into four batches per worker (into one batch below 2M characters, where starting
    processes costs more than it saves) and a stream into batches of 1M characters."""
    if isinstance(texts, (str, bytes)):
        raise TypeError("texts must be an iterable of str (documents), not a single str: wrap it in a list")
    if batch_chars is None:
        if isinstance(texts, (list, tuple)) and all(isinstance(text, str) for text in texts):
            total = sum(map(len, texts))
            batch_chars = total + 1 if total < 1 << 21 else min(max(total // (4 * workers), 1 << 18), 1 << 22)
        else:
            batch_chars = 1 << 20
    batch, size = [], 0
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"document {index} is a {type(text).__name__}, not a str (decode files as UTF-8)")
        batch.append(text)
        size += len(text)
        if size >= batch_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def share_batches(
    batches: Iterable[list],
    helper: Callable,
    args: tuple = (),
    *,
    here: Callable[[object], None],
    done: Callable[[list, object], None],
    workers: int,
) -> None:
    """Handle every batch (a list) once. `workers - 1` helper processes take one batch each at a time and
    return `helper(batch, *args)` (a module-level function); meanwhile this process handles the batches no
    helper is free for, an item at a time (`here(item)`), handing the next batch to a helper as soon as one
    is free, so that all finish together. `done(batch, result)` is called here for every batch once it is
    finished, with `result=None` for the batches handled here. With one worker or a single batch, no
    process is started."""
    batches = iter(batches)
    started = [batch for batch in (next(batches, None), next(batches, None)) if batch is not None]
    batches = chain(started, batches)
    if workers == 1 or len(started) < 2:
        for batch in batches:
            for item in batch:
                here(item)
            done(batch, None)
        return
    helpers = workers - 1
    with worker_pool(helpers) as pool:
        pending = deque()  # (future, batch), oldest first: at most one batch per helper

        def keep_helpers_busy() -> None:
            while pending and pending[0][0].done():
                future, batch = pending.popleft()
                done(batch, future.result())
            while len(pending) < helpers and (batch := next(batches, None)) is not None:
                pending.append((pool.submit(helper, batch, *args), batch))

        keep_helpers_busy()
        for batch in batches:  # the batches no helper was free for
            for item in batch:
                here(item)
                keep_helpers_busy()
            done(batch, None)
        for future, batch in pending:
            done(batch, future.result())


_SHARED = None  # in each worker of `map_with`: its copy of the object


def _keep(obj) -> None:
    global _SHARED
    _SHARED = obj


def _apply(method: Callable, items: list, args: tuple) -> list:
    return [method(_SHARED, item, *args) for item in items]


def map_with(obj, method: Callable, items: list, *args, workers: int) -> list:
    """`[method(obj, item, *args) for item in items]`, computed by `workers` processes that each receive a
    copy of `obj` once (pickled), in groups of items (four per worker); the results come back in order."""
    size = max(1, len(items) // (4 * workers))
    groups = [items[i : i + size] for i in range(0, len(items), size)]
    with worker_pool(workers, _keep, (obj,)) as pool:
        return list(chain.from_iterable(pool.map(_apply, repeat(method), groups, repeat(args))))


# --- the garbage collector --------------------------------------------------------------------------------


@contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector. Code that makes many small lists and tuples, none in a
    reference cycle (BPE training keeps ~100,000 alive), would otherwise trigger collections that walk every
    live object of the process, for nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
