"""The kept samples as DataComp's resharder reads them: a ``.npy`` of sorted 128-bit uids.

DataComp (mlfoundations/datacomp) names each sample of its pools by ``uid``, 32 hexadecimal characters that
img2dataset keeps in each sample's ``.json`` (``--save_additional_columns '["uid"]'``). Its filters
(``baselines/apply_filter.py``) save the uids they keep as a NumPy array of dtype ``"u8,u8"``: per uid the pair
(value of its first 16 hex digits, value of its last 16), i.e. the high and low 64 bits of the 128-bit number,
sorted (NumPy orders such pairs by the first field, then the second), saved with ``np.save``.

``resharder.py`` loads that file (``load_subset``: the ``.npy`` magic, then ``np.load(mmap_mode="r")`` and a dtype
check), and for each input sample reads ``uid`` from its ``.json``, splits ``int(uid, 16)`` into the same pair,
and counts its matches with two ``np.searchsorted`` calls, so the array must be sorted: given the same 13 uids in
reverse order, the resharder wrote one sample 13 times and no other, without an error (its own count check saw 13
outputs for 13 uids). A sample is written as many times as its pair appears (``<uid>-0``, ``<uid>-1``, ...), so a
pair listed twice writes the sample twice; here each uid is written once.

Two samples with one uid cannot be told apart by the resharder: listing the uid selects both. ``ResharderSubset``
names the uids that several kept keys share; a kept and a dropped sample that share one cannot be seen from the
kept set alone (``shared_uids`` finds them in the whole pool).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from capeval.corpus.output_files import write_atomically

UID_DTYPE = np.dtype("u8,u8")  # apply_filter.py's and resharder.py's dtype: (high 64 bits, low 64 bits)
_UID = re.compile(r"[0-9a-fA-F]{32}")  # ASCII only: int(..., 16) would also take "0x", "_" and other digits


@dataclass(frozen=True)
class ResharderSubset:
    """What ``write_resharder_uids`` wrote: ``count`` distinct uids, and the uids given by more than one key."""

    path: Path
    count: int
    repeated: dict[str, list[str]] = field(default_factory=dict)  # uid (lower case) -> the keys that gave it


def uid_pair(uid: Any, key: Any) -> tuple[int, int]:
    """The (high, low) 64-bit halves of a DataComp uid, as ``apply_filter.py`` splits it.

    Raises:
        ValueError: ``uid`` is not text of exactly 32 hexadecimal characters (naming ``key``).
    """
    if not isinstance(uid, str):
        raise ValueError(f"key {key!r} has a uid of type {type(uid).__name__} ({uid!r:.60}), not text")
    if not _UID.fullmatch(uid):
        raise ValueError(
            f"key {key!r} has the uid {uid!r:.60}, not 32 hexadecimal characters (DataComp's uids are 128-bit "
            "hex strings)"
        )
    return int(uid[:16], 16), int(uid[16:], 16)


def resharder_uids(keys_and_uids: Iterable[tuple[Any, Any]]) -> tuple[np.ndarray, dict[str, list[str]]]:
    """The sorted, distinct uid pairs of ``(key, uid)`` pairs, and the uids that several keys gave.

    Returns:
        tuple: an array (N,) of ``UID_DTYPE``, sorted, each uid once; and uid -> keys for repeated uids.

    Raises:
        ValueError: a uid is not 32 hexadecimal characters, naming its key (nothing is returned).
    """
    keys_of: dict[tuple[int, int], list] = {}
    for key, uid in keys_and_uids:
        keys_of.setdefault(uid_pair(uid, key), []).append(key)
    pairs = np.array(list(keys_of), dtype=UID_DTYPE)
    pairs.sort()
    repeated = {f"{hi:016x}{lo:016x}": keys for (hi, lo), keys in keys_of.items() if len(keys) > 1}
    return pairs, repeated


def write_resharder_uids(
    keys_and_uids: Iterable[tuple[Any, Any]], path: str | os.PathLike, inside: str | os.PathLike | None = None
) -> ResharderSubset:
    """Write the uids of the kept samples as DataComp's resharder reads them (``--subset-file``).

    Args:
        keys_and_uids: ``(key, uid)`` of each kept sample; the key only names a sample in messages.
        path: the ``.npy`` file, written whole or not at all (through a temporary file beside it).
        inside: the run's output folder, below which nothing on the way to ``path`` may be a link (default:
            ``path``'s folder).

    Returns:
        ResharderSubset: the count written and the uids several keys shared (each written once).

    Raises:
        ValueError: a uid is not 32 hexadecimal characters, naming its key; no file is written.
    """
    pairs, repeated = resharder_uids(keys_and_uids)
    path = Path(path)
    folder = Path(inside) if inside is not None else path.parent
    # A file object: np.save given a name would add ".npy" to it.
    write_atomically(path, lambda fh: np.save(fh, pairs, allow_pickle=False), "wb", inside=folder)
    return ResharderSubset(path, len(pairs), repeated)


def shared_uids(keys_and_uids: Iterable[tuple[Any, Any]]) -> dict[str, list[str]]:
    """The uids that several samples of a pool carry (lower case -> their keys): the resharder cannot keep one of
    them without the others. Uids that are not 32 hexadecimal characters are refused as in ``uid_pair``."""
    return resharder_uids(keys_and_uids)[1]
