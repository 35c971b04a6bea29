"""Reading word-vector files: which format a file is in, each format's reader, and the file's fingerprint.

``read_vectors`` turns a file or a folder into a gensim ``KeyedVectors`` and a short content fingerprint;
``capeval.text.vectors`` names them (``WordVectors``), caches them and fetches Hub files. The format of a file
is read from its first bytes (``sniff_format``), not its name: word2vec binary or text (``.bin``, ``.bin.gz``,
fastText ``.vec``), GloVe text, a fastText model ``.bin`` or a gensim ``KeyedVectors.save`` file. A folder
holds one ``*_emb.npy`` + ``*_index.parquet`` pair (the layout of the packaged GloVe) or one gensim
``.kv``/``.model`` file.

No file can run code: gensim pickles go through ``capeval.text.gensim_pickle``, and every other format holds
only numbers and words.
"""

from __future__ import annotations

import gzip
import hashlib
import pickle
import re
import stat
import struct
from pathlib import Path

import numpy as np

from capeval.text.gensim_pickle import UnsafeVectorsFile, load_gensim_vectors
from capeval.text.vector_headers import check_fasttext_header, check_npy_header, check_word2vec_header

_FASTTEXT_MAGIC = 793712314  # gensim.models._fasttext_bin: first int32 of a Facebook fastText .bin


def require_regular_file(path: Path) -> None:
    """Refuse, from its ``stat`` and before any byte is read, a vectors path that is a device, pipe or socket
    (``/dev/zero`` never ends, a pipe blocks forever).

    Raises:
        ValueError: not a regular file.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ValueError(f"vectors {path}: no such file") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"vectors {path}: not a regular file (a device, pipe or socket); refused unread")


def read_npy_parquet(npy: Path, parquet: Path) -> tuple[object, str]:
    """A ``.npy`` matrix (memory-mapped) with the parquet index of its words, and the matrix's fingerprint.

    Raises:
        ValueError: a truncated or corrupt file, or a matrix whose rows do not match the words.
    """
    import pyarrow.parquet as pq
    from gensim.models import KeyedVectors

    require_regular_file(npy)
    require_regular_file(parquet)
    check_npy_header(npy)
    try:
        matrix = np.load(npy, mmap_mode="r", allow_pickle=False)
        n_words = pq.ParquetFile(parquet).metadata.num_rows
        if matrix.ndim == 2 and n_words == matrix.shape[0]:  # else the message below, without reading it
            table = pq.read_table(parquet)
    except (ValueError, OSError, EOFError) as e:
        raise ValueError(f"vectors {npy} / {parquet}: truncated or corrupt ({e})") from e
    if matrix.ndim != 2 or n_words != matrix.shape[0]:
        raise ValueError(
            f"vectors {npy}: {matrix.shape} rows do not match the {n_words} words of {parquet.name}"
        )
    words = table.column(0).to_pylist()
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise ValueError(
            f"vectors {npy}: {matrix.shape} rows do not match the {len(words)} words of {parquet.name}"
        )
    kv = KeyedVectors(vector_size=int(matrix.shape[1]), count=0, dtype=matrix.dtype)
    kv.index_to_key = words
    kv.key_to_index = {w: i for i, w in enumerate(words)}
    kv.vectors = matrix
    return kv, _file_fingerprint(npy)


def read_vectors(path: Path, fingerprint: str | None = None) -> tuple[object, str]:
    """The vectors of a file or folder in any format read here, with their fingerprint.

    Args:
        path: a vectors file, or a folder holding one npy + parquet pair or one gensim file.
        fingerprint: the content tag to keep (a Hub commit); ``None`` computes one from the file.

    Returns:
        ``(keyed_vectors, fingerprint)``.

    Raises:
        ValueError: an unknown format, a truncated or corrupt file, a file that holds no words.
    """
    if path.is_dir():
        npys = sorted(path.glob("*_emb.npy"))
        parquets = sorted(path.glob("*_index.parquet"))
        if len(npys) == 1 and len(parquets) == 1:
            return read_npy_parquet(npys[0], parquets[0])
        saved = sorted([*path.glob("*.kv"), *path.glob("*.model")])
        if len(saved) == 1:
            return read_vectors(saved[0], fingerprint)
        raise ValueError(
            f"vectors folder {path}: expected one *_emb.npy with one *_index.parquet, or one .kv/.model file"
        )
    require_regular_file(path)
    fmt = sniff_format(path)
    fingerprint = fingerprint or _file_fingerprint(path)
    try:
        if fmt in ("word2vec-binary", "word2vec-text"):
            check_word2vec_header(path, binary=fmt == "word2vec-binary")
        elif fmt == "fasttext-bin":
            check_fasttext_header(path)
        kv = _read(path, fmt)
    except UnsafeVectorsFile as e:
        raise ValueError(f"vectors {path}: {e}") from e
    except ValueError as e:
        if str(e).startswith(f"vectors {path}"):
            raise
        raise ValueError(f"vectors {path} ({fmt}): truncated or corrupt file ({e})") from e
    except (EOFError, OSError, struct.error, pickle.UnpicklingError, UnicodeDecodeError, IndexError) as e:
        raise ValueError(
            f"vectors {path} ({fmt}): truncated or corrupt file ({type(e).__name__}: {e})"
        ) from e
    if len(kv.index_to_key) == 0:
        raise ValueError(f"vectors {path} ({fmt}) holds no words")
    return kv, fingerprint


def _read(path: Path, fmt: str):
    from gensim.models import KeyedVectors

    if fmt == "word2vec-binary":
        return KeyedVectors.load_word2vec_format(str(path), binary=True)
    if fmt == "word2vec-text":
        return KeyedVectors.load_word2vec_format(str(path), binary=False)
    if fmt == "glove-text":
        return KeyedVectors.load_word2vec_format(str(path), binary=False, no_header=True)
    if fmt == "fasttext-bin":
        from gensim.models.fasttext import load_facebook_vectors

        return load_facebook_vectors(str(path))
    if fmt == "gensim":
        return load_gensim_vectors(path)
    raise ValueError(f"vectors {path}: unknown format {fmt!r}")


def sniff_format(path: Path) -> str:
    """The vectors format of a file from its first bytes.

    Returns:
        ``word2vec-binary``, ``word2vec-text``, ``glove-text``, ``fasttext-bin`` or ``gensim``.

    Raises:
        ValueError: an empty file or none of these formats.
    """
    with open(path, "rb") as f:
        head = f.read(65536)
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as f:
                head = f.read(65536)
        except (OSError, EOFError) as e:
            raise ValueError(f"vectors {path}: truncated or corrupt gzip file ({e})") from e
    if not head:
        raise ValueError(f"vectors {path}: empty file")
    if len(head) >= 4 and struct.unpack("<i", head[:4])[0] == _FASTTEXT_MAGIC:
        return "fasttext-bin"
    if head[:1] == b"\x80":
        return "gensim"
    if head.startswith(b"\x93NUMPY"):
        raise ValueError(
            f"vectors {path}: a bare .npy has no words; pass its folder (with the *_index.parquet) or the .kv file"
        )
    first, _, rest = head.partition(b"\n")
    if re.fullmatch(rb"\s*\d+\s+\d+\s*", first):
        try:
            rest.decode("utf-8")
            return "word2vec-text"
        except UnicodeDecodeError as e:
            # A cut multi-byte character at the end of the sample is still text.
            if e.start >= len(rest) - 4 and len(head) == 65536:
                return "word2vec-text"
            return "word2vec-binary"
    try:
        line = first.decode("utf-8").rstrip()
    except UnicodeDecodeError:
        line = ""
    parts = line.split(" ")
    if len(parts) >= 3:
        try:
            [float(x) for x in parts[1:]]
            return "glove-text"
        except ValueError:
            pass
    raise ValueError(
        f"vectors {path}: unknown vector format (expected word2vec text/binary, GloVe text, fastText .vec/.bin "
        f"or a gensim KeyedVectors file; first bytes {head[:24]!r})"
    )


def _file_fingerprint(path: Path) -> str:
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        if size > 2 << 20:
            f.seek(size - (1 << 20))
            h.update(f.read())
    return h.hexdigest()[:10]
