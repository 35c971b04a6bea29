"""WEmbSim (Sharif et al., DICTA 2020): |cosine| of the mean word embeddings of a caption and its references.

Each caption becomes the mean of the vectors of its tokens (the paper's MOWE) after stopword and
out-of-vocabulary removal; the similarity of two captions is the absolute cosine of their means (the paper's
eq. 2; ``absolute_cosine=False`` keeps the sign); a candidate's score combines them over its references by ``mean`` (the
paper), ``max`` or ``min``; the corpus score is the mean. Tokenisation and stopwords are the ones of the WMD
metric (the COCO toolkit's PTB tokens and NLTK-derived list), so both embedding metrics see the same words.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from capeval.diagnostics.extras import require_extra
from capeval.registry import MetricSpec, Option, Output
from capeval.scores import WEMBSIM_ABSOLUTE_COSINE, reduce_over_references, reference_cosines
from capeval.signature import build_signature
from capeval.text.documents import mean_embeddings, prepare_batch
from capeval.text.stopwords import resolve_stopwords
from capeval.text.tokenize import resolve_tokenizer
from capeval.text.vector_rows import warn_zero_rows, zero_rows_field
from capeval.text.vectors import WordVectors, load_vectors
from capeval.validation import check_options, check_predictions, check_references, warn_empty

REDUCTIONS = ("mean", "max", "min")
REDUCTION = "mean"  # Sharif et al. 2020: the cosines with the references are averaged


class WEmbSim:
    """WEmbSim: cosine of mean word embeddings, candidate vs each reference, combined over references.

    Args:
        vectors: word vectors (``None``: the packaged GloVe-6B-50d); see ``capeval.text.load_vectors``.
        reduction: ``"mean"`` over references (the paper), ``"max"`` or ``"min"``.
        stopwords: ``"coco"`` (default, the NLTK-derived list of the COCO toolkit), ``"none"`` or a set.
        normalize_vectors: average unit-length word vectors instead of raw ones.
        tokenizer: ``"ptb"`` or a callable caption -> tokens.
        absolute_cosine: ``True`` (default) takes |cos| as the paper's eq. 2 writes it
            (``capeval.scores.reference_cosines``); ``False`` keeps the signed cosine (capeval 0.1's form), which
            scores a caption whose mean embedding points away from a reference's below 0. On Flickr8k-Expert and
            Pascal-50S with GloVe-6B-50d both give the same figures (metrics/wembsim/README.md).

    Words whose vector is all zeros are out of vocabulary (with a warning): they have no direction, only rescale
    a raw mean (no cosine changes) and are 0/0 normalised.
    """

    name = "wembsim"

    def __init__(
        self,
        vectors=None,
        reduction: str = REDUCTION,
        stopwords="coco",
        normalize_vectors: bool = False,
        tokenizer="ptb",
        absolute_cosine: bool = WEMBSIM_ABSOLUTE_COSINE,
    ) -> None:
        if not isinstance(reduction, str) or reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        # Every option is checked before the vectors load (seconds to minutes for large files).
        options = check_options(
            vectors=vectors, normalize_vectors=normalize_vectors, absolute_cosine=absolute_cosine
        )
        self.absolute_cosine = options["absolute_cosine"]
        self.reduction = reduction
        self.stopwords_label, self.stopwords = resolve_stopwords(stopwords)
        self.normalize_vectors = options["normalize_vectors"]
        self.tokenizer_label, self.tokenizer = resolve_tokenizer(tokenizer)
        require_extra("text", "WEmbSim")
        self.vectors: WordVectors = load_vectors(vectors)
        warn_zero_rows(self.vectors.tag, self.vectors.zero_words, self.name)
        self.signature  # noqa: B018 - built once now: a field it refuses fails here, not after a run

    def signature_options(self) -> dict[str, object]:
        return {
            "vectors": self.vectors.tag + zero_rows_field(self.vectors.zero_words),
            "normalize_vectors": self.normalize_vectors,
            "stopwords": self.stopwords_label,
            "tokenizer": self.tokenizer_label,
            "reduction": self.reduction,
            # Always named: signatures from before this option (none) meant the signed cosine, which is no
            # longer the default, so a cache keyed by them must not answer for the default.
            "absolute_cosine": self.absolute_cosine,
        }

    @property
    def signature(self) -> str:
        return build_signature(self.name, self.signature_options(), libraries=("gensim", "numpy"))

    def __call__(self, predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict:
        """Score each caption against its references.

        Returns:
            dict: ``wembsim`` (mean score), ``scores`` (per caption, input order), ``reference_scores``
            (per caption, the cosine with each reference; ``None`` for a reference without in-vocabulary
            words, which is left out of the combination), ``signature``. A caption without in-vocabulary
            words, or whose references all lack them, scores 0.
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
            exclude=self.vectors.zero_words,
        )
        centroids = mean_embeddings(batch.documents)
        cosines = reference_cosines(
            centroids, batch.candidate_doc, batch.reference_doc, batch.owner, absolute=self.absolute_cosine
        )
        scores = reduce_over_references(cosines, batch.owner, len(predictions), self.reduction)
        empty, empty_refs = batch.empty_candidates(), batch.empty_references()
        warn_empty("predictions", empty, "their WEmbSim score is 0", [predictions[i] for i in empty])
        warn_empty(
            "references",
            empty_refs,
            "WEmbSim leaves them out of their caption's combination",
            [references[i][k] for i, k in empty_refs],
        )
        per_ref = [None if not np.isfinite(c) else float(c) for c in cosines]
        split = np.cumsum([len(refs) for refs in references])[:-1]
        return {
            self.name: float(scores.mean()),
            "scores": scores.tolist(),
            "reference_scores": [list(x) for x in np.split(np.array(per_ref, dtype=object), split)],
            "signature": self.signature,
        }


SPEC = MetricSpec(
    name="wembsim",
    label="WEmbSim",
    scorer=WEmbSim,
    result_keys=("wembsim", "scores", "reference_scores", "signature"),
    options=(
        Option("vectors", None, "capeval: the packaged GloVe-6B-50d"),
        Option("reduction", REDUCTION, "Sharif et al. 2020: the mean over references"),
        Option("stopwords", "coco", "capeval: the COCO toolkit's list, as WMD"),
        Option("normalize_vectors", False, "capeval: raw vectors, as WMD"),
        Option("tokenizer", "ptb", "capeval: PTB tokens, as WMD", in_module=False),
        Option("absolute_cosine", WEMBSIM_ABSOLUTE_COSINE, "Sharif et al. 2020's code"),
    ),
    references="required",
    families="vectors",
    extra="text",
    outputs=(Output("wembsim", "WEmbSim", uses_references=True, note="every benchmark with references"),),
)  # fmt: skip
SPECS = (SPEC,)
