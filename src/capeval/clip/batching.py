"""Batches shared by the image, caption and video encoders: out-of-memory back-off, de-duplication, progress."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Callable, Iterator, Sequence

import torch

from capeval.diagnostics.categories import BatchSizeWarning, user_stacklevel

BATCH_SIZE = 64  # default encoder batch; halved automatically on GPU out-of-memory


def _is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def _free_device_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


class _BatchSize:
    """The current batch size, kept across calls once out-of-memory has lowered it."""

    def __init__(self, value: int) -> None:
        self.value = value


def run_with_backoff(
    run: Callable[[list[int]], torch.Tensor],
    order: Sequence[int],
    batch_size: int,
    device: torch.device,
    what: str,
    size: _BatchSize | None = None,
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """Call ``run`` on consecutive chunks of ``order``, halving the chunk on out-of-memory.

    Yields:
        (chunk, output) pairs; the chunks cover ``order`` once, in order.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    size = size or _BatchSize(batch_size)
    size.value = min(size.value, batch_size)
    start = 0
    while start < len(order):
        chunk = list(order[start : start + size.value])
        try:
            out = run(chunk)
        except (torch.OutOfMemoryError, RuntimeError) as err:
            if not _is_oom(err) or size.value == 1:
                raise
            _free_device_memory(device)
            size.value = max(1, size.value // 2)
            warnings.warn(
                f"out of memory encoding {what}: batch size lowered to {size.value}",
                BatchSizeWarning,
                stacklevel=user_stacklevel(),
            )
            continue
        yield chunk, out
        start += len(chunk)


class _NoBar:
    """What ``progress_bar`` gives when no bar is wanted: its counter and nothing else (a disabled tqdm still costs
    its construction, every batch the corpus engine scores)."""

    def __init__(self, total: int) -> None:
        self.total, self.n = total, 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc) -> None:
        return None


def progress_bar(total: int, desc: str, progress: bool | None):
    if progress is False:
        return _NoBar(total)
    from tqdm.auto import tqdm

    # None: a bar only on a terminal and only for work worth watching.
    disable = (not progress) if progress is not None else (total < 512 or None)
    return tqdm(total=total, desc=desc, unit="it", disable=disable, dynamic_ncols=True)


def unique_indices(keys: Sequence) -> tuple[list[int], list[int]]:
    """First occurrence of each distinct key, and for every input the position of its key among them."""
    first: dict = {}
    inverse = []
    uniques = []
    for i, k in enumerate(keys):
        j = first.get(k)
        if j is None:
            j = first[k] = len(uniques)
            uniques.append(i)
        inverse.append(j)
    return uniques, inverse


@contextlib.contextmanager
def gc_paused():
    """No automatic cyclic garbage collection inside (reference counting still frees everything acyclic).

    Tokenising creates a few container objects per caption, which sets off Python's full collections: each walks
    the ~400,000 objects torch and transformers keep alive (0.3-0.5 s on this project's CPU) with the GIL held,
    stalling the tokenizer thread and the thread feeding the model alike.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
