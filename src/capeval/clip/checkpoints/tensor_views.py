"""The sizes a pickled checkpoint's tensors declare, held to the bytes its file holds, before anything copies them.

A tensor in a ``torch.save`` file is a view: a shape, strides and an offset over a storage whose bytes the file
holds. ``torch.load(weights_only=True)`` checks that the view stays inside its storage, not that the storage holds
as many elements as the view names: stride 0 repeats one element over any shape, so a 2 KB file can declare a
(40000, 32000) float32 tensor over one value, loaded as a view that costs nothing, until the first ``.clone()``,
``.contiguous()``, ``.to(dtype)`` or NaN check allocates its 5.1 GB. Real weights are stored whole: every element
of a tensor has its own place in the file. So a tensor whose strides make elements share a place (zero or
overlapping strides) is refused, naming it, and so is a file whose tensors declare more than
``MAX_DECLARED_TO_FILE_BYTES`` times its size in all (a storage named under many names: a weight tied under two
names counts twice, which the bound allows). Safetensors files cannot do this: each header entry's shape must
match its byte range, which the safetensors reader checks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

# Sum of the tensors' declared bytes over the file's size: a tensor tied under two names counts twice.
MAX_DECLARED_TO_FILE_BYTES = 2


def _size(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _tensors(obj, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a loaded checkpoint (dicts, lists and tuples nested), named by its keys joined with ``/``;
    each container visited once (an unpickled object can hold itself)."""
    stack, seen = [(prefix, obj)], set()
    while stack:
        name, value = stack.pop()
        if isinstance(value, torch.Tensor):
            yield name or "(the file's only object)", value
            continue
        if isinstance(value, Mapping):
            children = [(str(k), v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            children = [(str(i), v) for i, v in enumerate(value)]
        else:
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        stack.extend((f"{name}/{key}" if name else key, child) for key, child in reversed(children))


def view_problem(tensor: torch.Tensor) -> str | None:
    """Why a loaded tensor is not a whole tensor over its own storage (phrased after its name), or None.

    A dense tensor on the CPU whose elements each have their own place in its storage: the view fits inside the
    storage and no two elements share a place (each stride, dimensions sorted by stride, passes the span of the
    smaller ones). Only shapes, strides and storage sizes are read: no element is touched.
    """
    if tensor.layout != torch.strided or tensor.is_nested:
        layout = "nested" if tensor.is_nested else str(tensor.layout).removeprefix("torch.")
        return f"is a {layout} tensor of shape {tuple(tensor.shape)}; weights are dense tensors"
    if tensor.device.type != "cpu":
        return f"is a tensor on {tensor.device.type} (no data in the file); weights are CPU tensors"
    if tensor.numel() == 0:
        return None
    shape, strides, item = tuple(tensor.shape), tuple(tensor.stride()), tensor.element_size()
    held = tensor.untyped_storage().nbytes() // item
    declared = (
        f"declares shape {shape}, {tensor.numel():,} elements ({_size(tensor.numel() * item)} as "
        f"{str(tensor.dtype).removeprefix('torch.')}), over a storage of {held:,} element(s) ({_size(held * item)})"
    )
    reach = tensor.storage_offset() + sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + 1
    if reach > held:
        return f"{declared}: its view reaches element {reach:,}, past the storage's end"
    span = 0
    for stride, n in sorted((s, n) for n, s in zip(shape, strides, strict=True) if n > 1):
        if stride <= span:
            return (
                f"{declared}: its strides {strides} make elements share a place, so the first copy of it would "
                "allocate the whole declared size"
            )
        span += (n - 1) * stride
    return None


def check_declared_sizes(obj, path: Path) -> None:
    """Refuse a loaded checkpoint whose tensors declare more elements than the file holds, before any copy.

    Args:
        obj: what ``torch.load(path, weights_only=True)`` returned (a state dict, or dicts and lists of tensors).
        path: the file it was read from (its size bounds the total).

    Raises:
        ValueError: naming the file and the tensor (``view_problem``), or the file and the total declared.
    """
    total, largest = 0, ("", 0)
    for name, tensor in _tensors(obj):
        why = view_problem(tensor)
        if why:
            raise ValueError(
                f"{path}: tensor {name!r} {why}; refused before any copy. Real weights store every element: "
                "re-save the state dict from a trusted copy"
            )
        nbytes = tensor.numel() * tensor.element_size()
        total += nbytes
        largest = max(largest, (name, nbytes), key=lambda pair: pair[1])
    limit = MAX_DECLARED_TO_FILE_BYTES * path.stat().st_size
    if total > limit:
        raise ValueError(
            f"{path}: its tensors declare {_size(total)} in all, more than {MAX_DECLARED_TO_FILE_BYTES} times the "
            f"file's {_size(path.stat().st_size)} (largest: {largest[0]!r}, {_size(largest[1])}): storages named "
            "under many names, which copies would multiply; refused before any copy"
        )
