"""The rows of loaded word vectors, checked once per load: NaN or inf refused, all-zero rows found.

A NaN or inf component makes every distance and cosine that touches its word NaN or inf, which WMD and WEmbSim
would turn into a score of 0 without a word said: such files are refused, naming the word and its row.

An all-zero row is a word without a vector (files exported from neural models carry them for padding or unknown
tokens). With raw vectors WMD places it at the origin, as gensim 3 (the COCO toolkit's WMD) does, and the distances
stay finite, so WMD keeps it. It has no direction, though: unit-normalised, gensim 4 divides 0 by 0 and every WMD
touching it is NaN (gensim returns 0.0), and a caption of such words has no cosine. So WMD with
``normalize_vectors=True`` and WEmbSim (cosines of mean vectors, where a zero vector only rescales the mean) treat
those words as out of vocabulary, with a warning naming them, and record their count in the signature
(``vectors=...,zero_rows_oov=K``). Files without zero rows (GloVe, word2vec GoogleNews, fastText) are unaffected.

The scan reads the matrix in chunks, so a memory-mapped matrix is never copied whole: 10-30 ms for the packaged
GloVe-6B-50d (400,000 x 50) once its pages are cached, about 6 GB/s after that.
"""

from __future__ import annotations

import warnings

import numpy as np

from capeval.diagnostics.categories import ZeroVectorWarning, user_stacklevel

_CHUNK_VALUES = 1 << 22  # values per chunk (16 MiB of float32): bounds the scan's temporary memory
_SHOWN = 10  # words named in a message


def _scan(matrix, rows_of: str, where: str, label) -> np.ndarray:
    """Rows of ``matrix`` that are all zero; raise on the first chunk holding a NaN or inf row."""
    n, dim = matrix.shape
    step = max(1, _CHUNK_VALUES // max(dim, 1))
    zero: list[np.ndarray] = []
    for start in range(0, n, step):
        block = np.asarray(matrix[start : start + step])
        # max |x| per row is NaN or inf exactly when the row holds one (np.max propagates NaN), 0 for a zero row.
        peak = np.abs(block).max(axis=1) if dim else np.zeros(len(block))
        bad = np.flatnonzero(~np.isfinite(peak))
        if len(bad):
            found = [int(start + i) for i in bad[:_SHOWN]]
            more = (
                ""
                if len(bad) <= _SHOWN
                else f" and {len(bad) - _SHOWN} more in rows {start}-{start + step - 1}"
            )
            named = ", ".join(f"{label(r)} (row {r})" for r in found)
            raise ValueError(
                f"vectors {where}: the {rows_of} of {named}{more} hold NaN or inf; every distance and "
                "similarity touching them would be NaN. The file is damaged or was saved from a diverged training run"
            )
        zero.append(np.flatnonzero(peak == 0) + start)
    return np.concatenate(zero) if zero else np.zeros(0, dtype=np.int64)


def _check_shape(kv, where: str) -> None:
    """The matrix has one row of ``vector_size`` values per word, and every word's index is one of its rows."""
    vectors, words, index = kv.vectors, kv.index_to_key, kv.key_to_index
    shape = tuple(np.shape(vectors))
    problems = []
    if len(shape) != 2 or shape[0] != len(words) or shape[1] != int(kv.vector_size):
        problems.append(f"a matrix of shape {shape} for {len(words):,} words of {kv.vector_size} dimensions")
    if len(index) != len(words):
        problems.append(f"{len(index):,} indexed words for {len(words):,} listed ones")
    elif index:
        rows = np.fromiter(index.values(), dtype=np.int64, count=len(index))
        if rows.min() < 0 or rows.max() >= len(words):
            problems.append(f"word indices from {rows.min()} to {rows.max()} for {len(words):,} rows")
    if problems:
        raise ValueError(f"vectors {where}: inconsistent vectors: {'; '.join(problems)}")


def check_vector_rows(kv, where: str) -> frozenset[str]:
    """Refuse NaN/inf rows of a gensim ``KeyedVectors``; return the words whose vector is all zeros.

    fastText models are checked in their n-gram buckets too (they compose the vectors of unknown words).

    Args:
        kv: the loaded ``KeyedVectors`` (``vectors`` may be a read-only memory map).
        where: the file or name, as the messages name it.

    Returns:
        frozenset: the words with an all-zero vector.

    Raises:
        ValueError: naming the words (or n-gram buckets) and rows that hold NaN or inf.
    """
    words = kv.index_to_key
    _check_shape(kv, where)

    def word(row: int) -> str:
        return repr(words[row]) if row < len(words) else f"<row {row}>"

    ngrams = getattr(kv, "vectors_ngrams", None)
    if ngrams is not None and getattr(kv, "bucket", 0) and np.ndim(ngrams) == 2 and len(ngrams):
        # First: a bad bucket spreads into the vectors of every word that uses it, the cause is the bucket.
        _scan(ngrams, "character n-gram vectors", where, lambda r: f"bucket {r}")
    zero_rows = _scan(kv.vectors, "vectors", where, word)
    return frozenset(words[int(r)] for r in zero_rows if r < len(words))


def zero_rows_field(excluded: frozenset[str]) -> str:
    """What a signature's ``vectors`` field adds when ``excluded`` zero-vector words are out of vocabulary."""
    return f",zero_rows_oov={len(excluded)}" if excluded else ""


def warn_zero_rows(vectors_tag: str, zero_words: frozenset[str], metric: str) -> None:
    """Say which words a metric treats as out of vocabulary because their vector is all zeros."""
    if not zero_words:
        return
    shown = ", ".join(repr(w) for w in sorted(zero_words)[:_SHOWN])
    more = f" and {len(zero_words) - _SHOWN} more" if len(zero_words) > _SHOWN else ""
    what = f"word(s) of vectors {vectors_tag} have an all-zero vector, which has no direction"
    consequence = "they are treated as out of vocabulary (dropped from captions, as unknown words are)"
    warnings.warn(
        ZeroVectorWarning(
            f"{metric}: {len(zero_words)} {what}; {consequence}: {shown}{more}",
            what=what,
            items=sorted(zero_words),
            consequence=consequence,
        ),
        stacklevel=user_stacklevel(),
    )
