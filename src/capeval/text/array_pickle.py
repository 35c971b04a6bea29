"""numpy arrays out of pickle files without running anything in them.

A pickle names the functions that rebuild its objects, and an unpickler that imports whatever a file names runs
code from the file. Here every name resolves through an exact (module, name) table, never an import: numpy's
array, dtype and scalar constructors, bounded by the file's size, and ``_codecs.encode`` for latin1 only. The
gensim reader (``gensim_pickle``) adds gensim's classes to this table; the VATEX-EVAL release (four pickled
arrays, ``capeval.bench.vatex``) uses it as it is.
"""

from __future__ import annotations

import io
import pickle

import numpy as np


class RefusedPickle(pickle.UnpicklingError):
    """A pickle that names something outside the table, or asks for more memory than the file holds."""


def _core():
    return np._core if hasattr(np, "_core") else np.core


def bounded_constructors(limit: int, error: type[Exception] = RefusedPickle) -> tuple[object, object]:
    """numpy's ``_reconstruct`` and ``bytearray`` refusing to allocate more than ``limit`` bytes.

    numpy pickles an array as an empty array of the declared shape, filled afterwards from the file's bytes: a
    few bytes can declare any shape, so the shape is checked against the file's size before allocating.
    """

    def reconstruct(subtype, shape, dtype):
        n = int(np.prod(shape, dtype=object)) if isinstance(shape, tuple) else shape
        if (
            subtype is not np.ndarray
            or not isinstance(n, int)
            or n * max(np.dtype(dtype).itemsize, 1) > limit
        ):
            raise error(
                f"refusing numpy array of shape {shape!r} ({dtype!r}) in a pickle of {limit:,} bytes: it asks for "
                "more memory than the file holds (numpy pickles build empty arrays and fill them from the file)"
            )
        return _core().multiarray._reconstruct(subtype, shape, dtype)

    def bounded_bytearray(*args):
        if args and isinstance(args[0], int) and not isinstance(args[0], bool) and args[0] > limit:
            raise error(f"refusing bytearray({args[0]:,}) in a pickle of {limit:,} bytes")
        return bytearray(*args)

    return reconstruct, bounded_bytearray


def latin1_codec(error: type[Exception] = RefusedPickle):
    """``_codecs.encode`` as protocol-2 pickles use it to hold bytes (Python 3 writing latin1), and nothing else."""

    def encode(text, encoding="latin1", errors="strict"):
        if encoding not in ("latin1", "latin-1") or errors != "strict" or not isinstance(text, str):
            raise error(f"refusing _codecs.encode with encoding {encoding!r} in a pickle")
        return text.encode("latin1")

    return encode


def array_globals(limit: int, error: type[Exception] = RefusedPickle) -> dict[tuple[str, str], object]:
    """The (module, name) table of numpy arrays and dtypes as numpy 1.x and 2.x pickle them, with the bytes
    codec; constructors that allocate are bounded by ``limit`` bytes (the pickle's size)."""
    core = _core()
    reconstruct, bounded_bytearray = bounded_constructors(limit, error)
    allowed: dict[tuple[str, str], object] = {}
    for module in ("numpy.core", "numpy._core"):  # files written by numpy 1.x and 2.x
        allowed[f"{module}.multiarray", "_reconstruct"] = reconstruct
        allowed[f"{module}.multiarray", "scalar"] = core.multiarray.scalar
        allowed[f"{module}.numeric", "_frombuffer"] = core.numeric._frombuffer
    allowed["numpy", "ndarray"] = np.ndarray
    allowed["numpy", "dtype"] = np.dtype
    for name in dir(getattr(np, "dtypes", None)):
        if name.endswith("DType"):
            allowed["numpy.dtypes", name] = getattr(np.dtypes, name)
    for module in ("builtins", "__builtin__"):
        allowed[module, "bytearray"] = bounded_bytearray
    allowed["_codecs", "encode"] = latin1_codec(error)
    return allowed


class TableUnpickler(pickle.Unpickler):
    """An unpickler that resolves names only through ``allowed``; ``what`` names the file kind in refusals.

    Args:
        data: the pickle's bytes.
        allowed: (module, name) -> object, e.g. ``array_globals(len(data))``.
        what: how refusals name the file ("a vectors file", "VATEX-EVAL's human_scores.pkl").
        error: the exception raised on a refusal (a ``pickle.UnpicklingError`` subclass).
    """

    def __init__(self, data: bytes, allowed: dict, what: str, error: type[Exception] = RefusedPickle) -> None:
        super().__init__(io.BytesIO(data), encoding="latin1")
        self._allowed = allowed
        self._what = what
        self._error = error

    def find_class(self, module: str, name: str):
        try:
            return self._allowed[module, name]
        except KeyError:
            raise self._error(
                f"refusing to load {module}.{name} from {self._what}: nothing outside the allowed numpy arrays, "
                "plain values (and, for vectors files, gensim's classes) is read (nothing in the file was executed)"
            ) from None

    def persistent_load(self, pid):
        raise self._error(f"refusing the persistent id {pid!r} in {self._what} (nothing was executed)")
