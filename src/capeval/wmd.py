"""Word Mover's Distance for captions (Kusner et al. 2015), as the COCO caption toolkit scores it.

Per candidate and reference: lower-cased PTB tokens without punctuation and without the toolkit's stopwords,
out-of-vocabulary words dropped, normalised bag-of-words weights, Euclidean costs between the word vectors
(raw vectors as gensim 3 computed it for the toolkit; ``normalize_vectors=True`` gives gensim 4's default),
exact transport by POT; score = exp(-WMD / sigma) with the best reference, corpus score = mean.

The transport problems are solved by ``capeval.text.transport`` (exact, batched, pruned by a lower bound
that never changes a score).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from capeval.diagnostics.extras import require_extra
from capeval.registry import MetricSpec, Option, Output
from capeval.signature import build_signature
from capeval.text.documents import CaptionBatch, prepare_batch
from capeval.text.stopwords import resolve_stopwords
from capeval.text.tokenize import resolve_tokenizer
from capeval.text.transport import MAX_DOCUMENT_WORDS, WMDResult, best_reference_wmd
from capeval.text.vector_rows import warn_zero_rows, zero_rows_field
from capeval.text.vectors import WordVectors, load_vectors
from capeval.validation import check_options, check_predictions, check_references, warn_empty

SIGMA = 1.0  # tylin/coco-caption pycocoevalcap/wmd/wmd.py: self.sigma = 1.0; score = exp(-WMD / sigma)


class WMD:
    """WMD similarity of captions to their references: exp(-WMD / sigma) with the best reference.

    Args:
        vectors: word vectors: ``None`` for the packaged GloVe-6B-50d, a file, a Hub repo (e.g.
            ``fse/word2vec-google-news-300``, the toolkit's vectors) or loaded vectors; see ``load_vectors``.
        sigma: scale of the distance in the score (1 in the toolkit), a finite number > 0.
        normalize_vectors: unit-length word vectors (gensim 4's ``wmdistance`` default); ``False`` keeps the
            raw vectors, as gensim 3 did for the toolkit. Normalised, words whose vector is all zeros (no
            direction: gensim 4 gives NaN) are out of vocabulary, with a warning; raw, they stay at the origin.
        stopwords: ``"coco"`` (the toolkit's list), ``"none"`` or a set of words.
        tokenizer: ``"ptb"`` (the toolkit's tokenisation without Java) or a callable caption -> tokens.
        prune: skip references whose lower bound shows they cannot be the best (never changes a score).
        num_workers: processes for the transport problems; ``None`` uses them only for large problems.
    """

    name = "wmd"

    def __init__(
        self,
        vectors=None,
        sigma: float = SIGMA,
        normalize_vectors: bool = False,
        stopwords="coco",
        tokenizer="ptb",
        prune: bool = True,
        num_workers: int | None = None,
    ) -> None:
        # Every option is checked before the vectors load (seconds to minutes for large files).
        options = check_options(
            vectors=vectors,
            sigma=sigma,
            normalize_vectors=normalize_vectors,
            prune=prune,
            num_workers=num_workers,
        )
        self.stopwords_label, self.stopwords = resolve_stopwords(stopwords)
        self.tokenizer_label, self.tokenizer = resolve_tokenizer(tokenizer)
        self.sigma = options["sigma"]
        self.normalize_vectors = options["normalize_vectors"]
        self.prune = options["prune"]
        self.num_workers = options["num_workers"]
        require_extra("text", "WMD")
        self.vectors: WordVectors = load_vectors(vectors)
        # A zero vector has no direction: normalised, it would be 0/0 (see capeval.text.vector_rows).
        self.excluded = self.vectors.zero_words if self.normalize_vectors else frozenset()
        warn_zero_rows(self.vectors.tag, self.excluded, self.name)
        self.last_stats: WMDResult | None = None
        self.signature  # noqa: B018 - built once now: a field it refuses fails here, not after a run

    def signature_options(self) -> dict[str, object]:
        return {
            "vectors": self.vectors.tag + zero_rows_field(self.excluded),
            "normalize_vectors": self.normalize_vectors,
            "sigma": self.sigma,
            "stopwords": self.stopwords_label,
            "tokenizer": self.tokenizer_label,
            "references": "best",
        }

    @property
    def signature(self) -> str:
        return build_signature(self.name, self.signature_options(), libraries=("gensim", "POT"))

    def __call__(self, predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict:
        """Score each caption against its references.

        Returns:
            dict: ``wmd`` (mean score), ``scores`` (exp(-WMD/sigma) to the best reference, input order),
            ``distances`` (that reference's WMD; ``inf`` when the candidate or all its references have no
            in-vocabulary word, whose score is then 0), ``signature``.
        """
        predictions = check_predictions(predictions)
        references = check_references(references, len(predictions))
        batch = prepare_batch(
            predictions,
            references,
            self.vectors,
            self.stopwords,
            self.tokenizer,
            self.normalize_vectors,
            exclude=self.excluded,
        )
        _check_document_sizes(batch)
        result = best_reference_wmd(
            batch.documents,
            batch.candidate_doc,
            batch.reference_doc,
            batch.owner,
            prune=self.prune,
            num_workers=self.num_workers,
        )
        self.last_stats = result
        empty, empty_refs = batch.empty_candidates(), batch.empty_references()
        warn_empty(
            "predictions", empty, "their WMD score is 0 (distance inf)", [predictions[i] for i in empty]
        )
        warn_empty(
            "references",
            empty_refs,
            "WMD cannot pick them as the best reference",
            [references[i][k] for i, k in empty_refs],
        )
        distances = result.distances
        scores = np.exp(-distances / self.sigma)  # exp(-inf) = 0: no NaN, no inf in the mean
        return {
            self.name: float(scores.mean()),
            "scores": scores.tolist(),
            "distances": distances.tolist(),
            "signature": self.signature,
        }


def _check_document_sizes(batch: CaptionBatch) -> None:
    """Refuse a caption with more distinct in-vocabulary words than ``MAX_DOCUMENT_WORDS`` (see transport)."""
    sizes = batch.documents.sizes
    big = np.flatnonzero(sizes > MAX_DOCUMENT_WORDS)
    if not len(big):
        return
    why = (
        f"WMD compares captions of at most {MAX_DOCUMENT_WORDS:,} distinct in-vocabulary words: the cost of a "
        "pair grows with the product of both sides' words (two 5,000-word texts need 3.2 GB). Split the text "
        "into captions, or score long texts with another metric"
    )
    over = np.flatnonzero(np.isin(batch.candidate_doc, big))
    if len(over):
        i = int(over[0])
        raise ValueError(
            f"prediction {i} has {int(sizes[batch.candidate_doc[i]]):,} distinct in-vocabulary words "
            f"({len(over)} prediction(s) over the limit); {why}"
        )
    k = int(np.flatnonzero(np.isin(batch.reference_doc, big))[0])
    raise ValueError(
        f"reference {int(batch.position[k])} of item {int(batch.owner[k])} has "
        f"{int(sizes[batch.reference_doc[k]]):,} distinct in-vocabulary words; {why}"
    )


SPEC = MetricSpec(
    name="wmd",
    label="WMD",
    scorer=WMD,
    result_keys=("wmd", "scores", "distances", "signature"),
    options=(
        Option("vectors", None, "capeval: the packaged GloVe-6B-50d (the COCO toolkit used word2vec-300)"),
        Option("sigma", SIGMA, "tylin/coco-caption pycocoevalcap/wmd/wmd.py"),
        Option("normalize_vectors", False, "gensim 3, as the COCO toolkit ran it: raw vectors"),
        Option("stopwords", "coco", "tylin/coco-caption: its stopword list"),
        Option("tokenizer", "ptb", "tylin/coco-caption: PTB tokens", in_module=False),
        Option("prune", True, "capeval: words that cannot change the transport skipped (exact)", signed=False,
               in_module=False),
        Option("num_workers", None, "capeval: transport threads", signed=False),
    ),
    references="required",
    families="vectors",
    extra="text",
    outputs=(Output("wmd", "WMD", uses_references=True, note="every benchmark with references"),),
)  # fmt: skip
SPECS = (SPEC,)
