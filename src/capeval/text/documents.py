"""Captions as normalised bags of in-vocabulary words, prepared once per batch for WMD and WEmbSim.

Every distinct caption string is tokenised once, every distinct bag of words is one document, and every word
of the batch is embedded once: a reference shared by many candidates costs nothing extra.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from capeval.text.tokenize import coco_tokens
from capeval.text.vectors import WordVectors


@dataclass
class Documents:
    """Distinct documents of a batch in CSR layout.

    Attributes:
        ptr: (n_docs + 1,) int64; document ``k`` owns entries ``ptr[k]:ptr[k+1]``.
        words: (nnz,) int64 row of each distinct word in ``embeddings``.
        weights: (nnz,) float64 normalised word counts (count / in-vocabulary length), as gensim's nBOW.
        embeddings: (n_words, D) float64 vectors of the batch vocabulary.
        vocabulary: (n_words,) the words.
        tokens: per document, its in-vocabulary tokens in order (what gensim receives).
    """

    ptr: np.ndarray
    words: np.ndarray
    weights: np.ndarray
    embeddings: np.ndarray
    vocabulary: list[str]
    tokens: list[list[str]]

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.ptr)

    def __len__(self) -> int:
        return len(self.ptr) - 1


@dataclass
class PreparedTexts:
    """``doc[i]``: the document of text ``i``; ``oov[i]``: its dropped out-of-vocabulary tokens."""

    doc: np.ndarray
    oov: list[list[str]]
    documents: Documents


def _checked_tokens(tokenizer: Callable[[str], list[str]], text: str) -> Sequence[str]:
    """``tokenizer(text)``, refused unless it is a sequence of strings: a custom tokenizer returning one string
    would have its characters taken for words."""
    tokens = tokenizer(text)
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Sequence):
        raise TypeError(
            f"the tokenizer returned {type(tokens).__name__} for the caption {text!r:.60}; "
            "expected a list of token strings"
        )
    for t in tokens:
        if not isinstance(t, str):
            raise TypeError(
                f"the tokenizer returned the token {t!r:.40} ({type(t).__name__}) for the caption {text!r:.60}; "
                "tokens must be strings"
            )
    return tokens


def prepare(
    texts: Sequence[str],
    vectors: WordVectors,
    stopwords: frozenset[str],
    tokenizer: Callable[[str], list[str]],
    normalize: bool = False,
    exclude: frozenset[str] = frozenset(),
) -> PreparedTexts:
    """Tokenise, drop stopwords and out-of-vocabulary words, and embed the batch vocabulary once.

    Args:
        texts: every caption of the batch (candidates and references together).
        vectors: the word vectors.
        stopwords: words removed after tokenisation.
        tokenizer: caption -> tokens (punctuation already removed), e.g. ``coco_tokens``.
        normalize: unit-length word vectors (gensim 4's default) instead of raw ones (gensim 3's).
        exclude: words treated as out of vocabulary although the vectors hold them (all-zero rows).
    """
    kv = vectors.keyed_vectors
    text_index: dict[str, int] = {}
    doc_index: dict[tuple, int] = {}
    docs: list[list[str]] = []
    bags: list[Counter] = []
    text_doc = np.empty(len(texts), dtype=np.int64)
    oov: list[list[str]] = []
    per_text: list[tuple[int, list[str]]] = []
    contains = kv.__contains__
    if exclude:
        known = contains

        def contains(word: str) -> bool:
            return word not in exclude and known(word)

    for i, text in enumerate(texts):
        j = text_index.get(text)
        if j is not None:
            text_doc[i] = per_text[j][0]
            oov.append(per_text[j][1])
            continue
        tokens = [t for t in _checked_tokens(tokenizer, text) if t not in stopwords]
        kept = [t for t in tokens if contains(t)]
        dropped = [t for t in tokens if not contains(t)] if len(kept) != len(tokens) else []
        bag = Counter(kept)
        key = tuple(sorted(bag.items()))
        k = doc_index.get(key)
        if k is None:
            k = doc_index[key] = len(docs)
            docs.append(kept)
            bags.append(bag)
        text_index[text] = len(per_text)
        per_text.append((k, dropped))
        text_doc[i] = k
        oov.append(dropped)
    vocab_index: dict[str, int] = {}
    ptr = np.zeros(len(docs) + 1, dtype=np.int64)
    words: list[int] = []
    weights: list[float] = []
    for k, (tokens, bag) in enumerate(zip(docs, bags, strict=True)):
        length = float(len(tokens))
        for word, count in bag.items():
            words.append(vocab_index.setdefault(word, len(vocab_index)))
            weights.append(count / length)
        ptr[k + 1] = len(words)
    vocabulary = list(vocab_index)
    embeddings = vectors.embed(vocabulary, normalize=normalize)
    documents = Documents(
        ptr=ptr,
        words=np.asarray(words, dtype=np.int64),
        weights=np.asarray(weights, dtype=np.float64),
        embeddings=embeddings,
        vocabulary=vocabulary,
        tokens=docs,
    )
    return PreparedTexts(doc=text_doc, oov=oov, documents=documents)


def default_tokenizer(text: str) -> list[str]:
    return coco_tokens(text)


@dataclass
class CaptionBatch:
    """Candidates and their references as the documents of one batch (what WMD and WEmbSim compare).

    Attributes:
        documents: the batch's distinct documents.
        candidate_doc: (N,) the document of each candidate.
        reference_doc: (M,) the document of each reference, all references flattened in input order.
        owner: (M,) the candidate each reference belongs to.
        position: (M,) its index among that candidate's references.
    """

    documents: Documents
    candidate_doc: np.ndarray
    reference_doc: np.ndarray
    owner: np.ndarray
    position: np.ndarray

    def empty_candidates(self) -> list[int]:
        """Candidates left without any in-vocabulary word."""
        return np.flatnonzero(self.documents.sizes[self.candidate_doc] == 0).tolist()

    def empty_references(self) -> list[tuple[int, int]]:
        """(candidate, position) of each reference left without any in-vocabulary word."""
        empty = np.flatnonzero(self.documents.sizes[self.reference_doc] == 0)
        return [(int(self.owner[k]), int(self.position[k])) for k in empty]


def prepare_batch(
    predictions: Sequence[str],
    references: Sequence[Sequence[str]],
    vectors: WordVectors,
    stopwords: frozenset[str],
    tokenizer: Callable[[str], list[str]],
    normalize: bool = False,
    exclude: frozenset[str] = frozenset(),
) -> CaptionBatch:
    """``prepare`` over candidates and their references together (a reference shared by several candidates
    is one document); arguments as ``prepare``'s, ``references`` one list per prediction."""
    lengths = [len(refs) for refs in references]
    owner = np.repeat(np.arange(len(predictions)), lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    flat = [r for refs in references for r in refs]
    prepared = prepare([*predictions, *flat], vectors, stopwords, tokenizer, normalize, exclude=exclude)
    return CaptionBatch(
        documents=prepared.documents,
        candidate_doc=prepared.doc[: len(predictions)],
        reference_doc=prepared.doc[len(predictions) :],
        owner=owner,
        position=np.arange(len(flat)) - starts[owner],
    )


def mean_embeddings(docs: Documents) -> np.ndarray:
    """(n_docs, D) mean word embedding of each document (zeros for an empty one).

    The nBOW weights are count / length, so the weighted sum is the mean over the tokens.
    """
    import scipy.sparse as sp  # here, not at import: capeval.wmd is imported for its declaration alone

    bow = sp.csr_matrix((docs.weights, docs.words, docs.ptr), shape=(len(docs), max(len(docs.vocabulary), 1)))
    emb = docs.embeddings if len(docs.vocabulary) else np.zeros((1, docs.embeddings.shape[1]))
    return np.asarray(bow @ emb)
