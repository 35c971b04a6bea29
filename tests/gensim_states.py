"""Three words and the pickled state of a gensim ``KeyedVectors`` holding them, for the tests of the vectors
readers (capeval.text)."""

from __future__ import annotations

WORDS = ["dog", "cat", "runs"]


def kv_state(**extra) -> dict:
    """The state of a KeyedVectors of WORDS in 4 dimensions, with ``extra`` attributes (pickled with ``build``)."""
    return {
        "index_to_key": WORDS,
        "key_to_index": {w: i for i, w in enumerate(WORDS)},
        "vector_size": 4,
        **extra,
    }
