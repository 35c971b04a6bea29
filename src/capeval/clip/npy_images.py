"""Arrays stored as ``.npy`` bytes: how capeval keeps an in-memory array or tensor image unchanged through
evaluate's Arrow cache (``{"bytes": <.npy>, "path": None}``, a datasets Image dict), and reads it back safely.

numpy's own format keeps the dtype and shape exactly (PNG or TIFF would turn floats into 8-bit levels). Reading
never unpickles (``allow_pickle=False``) and takes the shape from the header first, so the caller can refuse an
image by its size before the array is allocated.
"""

from __future__ import annotations

import io

import numpy as np

NPY_MAGIC = b"\x93NUMPY"


def is_npy(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` starts like a ``.npy`` file (an image file never does)."""
    return bytes(data[: len(NPY_MAGIC)]) == NPY_MAGIC


def npy_bytes(arr: np.ndarray) -> bytes:
    """The ``.npy`` file of an array (numbers only: object arrays are refused by numpy, unpickled never)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(arr), allow_pickle=False)
    return buffer.getvalue()


def npy_header(data: bytes | bytearray | memoryview, what: str) -> tuple[tuple[int, ...], np.dtype]:
    """``(shape, dtype)`` from the header alone, checked against the bytes that follow it.

    Raises:
        ValueError: not a ``.npy`` file, a header numpy cannot read, an object dtype, or fewer data bytes than the
            header declares (a truncated file).
    """
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
    except ValueError as err:
        raise ValueError(f"{what}: not a readable .npy array: {err}") from err
    if dtype.hasobject:
        raise ValueError(f"{what}: a .npy array of Python objects is refused (it would need unpickling)")
    declared = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    available = len(data) - stream.tell()
    if available < declared:
        raise ValueError(f"{what}: the .npy array is truncated ({available} of {declared} data bytes)")
    return tuple(shape), dtype


def read_npy(data: bytes | bytearray | memoryview, what: str) -> np.ndarray:
    """The array of ``.npy`` bytes (call ``npy_header`` first to check its size); never unpickles."""
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as err:
        raise ValueError(f"{what}: not a readable .npy array: {err}") from err
