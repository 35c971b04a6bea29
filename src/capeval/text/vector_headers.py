"""Counts in word-vector file headers, checked against what the file can hold before anything is allocated.

Readers allocate what a header promises: gensim's word2vec readers allocate count x dim floats from the first line,
its fastText reader allocates the matrix its header declares (``np.fromfile`` allocates the whole count before
reading) and loops over the declared words without stopping at the end of the file, and numpy allocates the
declared shape of an array read from a zip member. A header claiming 2,000,000,000 rows took a minute to end in
``MemoryError``. Here every such count is compared with the bytes that could hold it, and a header that claims
more is refused, naming the file, the claimed count and the possible one.

For gzip files the bound is deflate's largest expansion, ``GZIP_MAX_RATIO`` times the compressed size.
"""

from __future__ import annotations

import gzip
import struct
import zipfile
from pathlib import Path

import numpy as np

# zlib's technical details (https://www.zlib.net/zlib_tech.html): deflate's maximum compression ratio is 1032:1,
# so a gzip file never holds more than 1032 times its size.
GZIP_MAX_RATIO = 1032
FLOAT_BYTES = 4  # word2vec binary and fastText .bin store float32 (gensim reads them as REAL = float32)
_FASTTEXT_HEADER = struct.Struct(
    "<2i12id"
)  # magic, version; dim ... lr_update_rate; t (fasttext.cc, args.cc)
_FASTTEXT_DICT = struct.Struct("<3i2q")  # size, nwords, nlabels, ntokens, pruneidx_size (dictionary.cc save)
_FASTTEXT_WORD_TAIL = 9  # after a word's bytes and its \0: int64 count, int8 entry type
_GIB = 2**30


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def content_bound(path: Path) -> tuple[int, str]:
    """The most bytes the file can hold once decompressed, and how that bound was found (for messages)."""
    size = path.stat().st_size
    if _is_gzip(path):
        return size * GZIP_MAX_RATIO, f"a gzip file of {size:,} bytes holds at most {GZIP_MAX_RATIO}x that"
    return size, f"{size:,} bytes"


def _open(path: Path):
    return gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")


def _amount(n: int) -> str:
    return f"{n / _GIB:,.1f} GiB" if n >= _GIB else f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n:,} bytes"


def _refuse(path: Path, claim: str, possible: str, count: int, dim: int) -> ValueError:
    return ValueError(
        f"vectors {path}: its header claims {claim}, but the file can hold at most {possible}; refusing to "
        f"allocate {_amount(count * max(dim, 1) * FLOAT_BYTES)} for it: the file is truncated or corrupt (or crafted)"
    )


def check_word2vec_header(path: Path, binary: bool) -> None:
    """Refuse a word2vec text/binary header (``count dim``) whose rows cannot fit in the file.

    A text row is at least a 1-character word, ``dim`` times a space and a digit, and a newline; a binary row a
    1-byte word, a space and ``dim`` float32 values.

    Raises:
        ValueError: a count or dimension below 1, or more rows than the file can hold.
    """
    with _open(path) as f:
        header = f.readline(256)
    parts = header.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return  # not a header this check understands: the reader's own error names the file
    count, dim = int(parts[0]), int(parts[1])
    if count < 1 or dim < 1:
        raise ValueError(
            f"vectors {path}: its header claims {count} words of {dim} dimensions; both must be >= 1"
        )
    bound, how = content_bound(path)
    row = 2 + FLOAT_BYTES * dim if binary else 1 + 2 * dim
    possible = max(bound - len(header), 0) // row
    if count > possible:
        kind = "binary" if binary else "text"
        raise _refuse(
            path,
            f"{count:,} words of {dim:,} dimensions",
            f"{possible:,} such rows ({how}; a {kind} row takes at least {row:,} bytes)",
            count,
            dim,
        )


class _Reader:
    """Buffered reads that say where the file ended."""

    def __init__(self, f, path: Path) -> None:
        self.f, self.path, self.buf, self.pos, self.offset = f, path, b"", 0, 0

    def take(self, n: int, what: str) -> bytes:
        while len(self.buf) - self.pos < n:
            more = self.f.read(max(1 << 20, n))
            if not more:
                raise ValueError(f"vectors {self.path}: the file ends inside {what} (truncated)")
            self.buf = self.buf[self.pos :] + more
            self.pos = 0
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        self.offset += n
        return out

    def skip_word(self, index: int) -> None:
        while True:
            end = self.buf.find(b"\0", self.pos)
            if end >= 0:
                self.offset += end + 1 - self.pos
                self.pos = end + 1
                return
            more = self.f.read(1 << 20)
            if not more:
                raise ValueError(
                    f"vectors {self.path}: the file ends inside word {index} of its vocabulary (truncated)"
                )
            self.offset += len(self.buf) - self.pos
            self.buf, self.pos = more, 0


def check_fasttext_header(path: Path) -> None:
    """Refuse a fastText ``.bin`` whose declared vocabulary or input matrix the file cannot hold.

    Reads the header, walks the vocabulary (gensim's reader would loop forever past the end of a truncated one)
    and compares the input matrix's declared rows x columns with the bytes left, and with the header's
    ``nwords + bucket`` rows of ``dim`` columns, before gensim allocates anything.

    Raises:
        ValueError: naming the file, the declared counts and the possible ones.
    """
    bound, how = content_bound(path)
    with _open(path) as f:
        r = _Reader(f, path)
        _, _, dim, *_ints, bucket, _minn, _maxn, _lr_update, _t = _FASTTEXT_HEADER.unpack(
            r.take(_FASTTEXT_HEADER.size, "its header")
        )
        size, nwords, nlabels, _ntokens, prune = _FASTTEXT_DICT.unpack(
            r.take(_FASTTEXT_DICT.size, "its header")
        )
        if dim < 1 or bucket < 0 or nwords < 0 or size < nwords:
            raise ValueError(
                f"vectors {path}: its fastText header claims dim {dim}, bucket {bucket}, {size} entries of which "
                f"{nwords} words: not a valid model"
            )
        if nlabels > 0:
            raise ValueError(
                f"vectors {path}: a supervised fastText model ({nlabels} labels) has no word vectors"
            )
        min_entries = max(bound - r.offset, 0) // (1 + _FASTTEXT_WORD_TAIL)
        if size > min_entries:
            raise _refuse(
                path,
                f"{size:,} vocabulary entries",
                f"{min_entries:,} ({how}; an entry takes at least {1 + _FASTTEXT_WORD_TAIL} bytes)",
                size,
                1,
            )
        for index in range(size):
            r.skip_word(index)
            r.take(_FASTTEXT_WORD_TAIL, f"word {index} of its vocabulary")
        if prune > 0:
            if 8 * prune > bound - r.offset:
                raise _refuse(
                    path, f"{prune:,} pruned-index entries", f"{(bound - r.offset) // 8:,} ({how})", 0, 0
                )
            r.take(8 * prune, "its pruned-index table")
        quantized = r.take(1, "its matrix header")
        if quantized != b"\0":
            raise ValueError(
                f"vectors {path}: a quantized fastText model (.ftz) cannot be read; use the .bin"
            )
        rows, cols = struct.unpack("<2q", r.take(16, "its matrix header"))
    expected = nwords + bucket
    if (rows, cols) != (expected, dim):
        raise ValueError(
            f"vectors {path}: its input matrix is declared {rows:,} x {cols:,}, but the header's {nwords:,} words "
            f"+ {bucket:,} buckets of {dim} dimensions need {expected:,} x {dim}"
        )
    possible = max(bound - r.offset, 0) // (FLOAT_BYTES * dim)
    if rows > possible:
        raise _refuse(
            path, f"a {rows:,} x {dim:,} input matrix", f"{possible:,} rows of {dim} ({how})", rows, dim
        )


def check_npy_header(path: Path) -> None:
    """Refuse an ``.npy`` whose declared shape needs more bytes than follow its header.

    Raises:
        ValueError: naming the file, the declared shape and the bytes there are.
    """
    with open(path, "rb") as f:
        shape, dtype = _npy_shape(f, path)
        offset = f.tell()
    _check_shape(path, shape, dtype, path.stat().st_size - offset, f"{path.stat().st_size - offset:,} bytes")


def check_npz_member(path: Path, member: str = "val.npy") -> None:
    """Refuse an array in an ``.npz`` (gensim's sidecar of compressed files) larger than its zip member can hold.

    numpy allocates the declared shape before reading; the bound is the member's declared size, and no more than
    deflate's largest expansion of its compressed size.
    """
    try:
        with zipfile.ZipFile(path) as z:
            info = z.getinfo(member)
            with z.open(info) as f:
                shape, dtype = _npy_shape(f, path)
                header = f.tell()
    except (KeyError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise ValueError(f"vectors {path}: truncated or corrupt npz ({e})") from e
    bound = min(info.file_size, info.compress_size * GZIP_MAX_RATIO) - header
    how = f"its {member} holds {info.file_size:,} bytes, {info.compress_size:,} compressed"
    _check_shape(path, shape, dtype, bound, how)


def _npy_shape(f, path: Path) -> tuple[tuple[int, ...], np.dtype]:
    from numpy.lib import format as npy_format

    try:
        version = npy_format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = npy_format.read_array_header_1_0(f)
        else:
            shape, _, dtype = npy_format.read_array_header_2_0(f)
    except (ValueError, OSError, EOFError) as e:
        raise ValueError(f"vectors {path}: truncated or corrupt .npy header ({e})") from e
    return shape, dtype


def _check_shape(path: Path, shape: tuple[int, ...], dtype: np.dtype, available: int, how: str) -> None:
    needed = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if needed > max(available, 0):
        rows = shape[0] if shape else 1
        per_row = needed // max(rows, 1) or 1
        raise ValueError(
            f"vectors {path}: its header claims an array of shape {tuple(shape)} ({dtype}, {needed:,} bytes), but "
            f"the file can hold at most {max(available, 0) // per_row:,} such rows ({how}); refusing to allocate "
            f"{_amount(needed)} for it: the file is truncated or corrupt (or crafted)"
        )
