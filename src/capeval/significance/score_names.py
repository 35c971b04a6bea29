"""How a score column is named wherever scores are shown and compared: the n-gram baselines' table names, and
"sentence <name>" for BLEU and METEOR's per-caption scores, whose mean is not their corpus score."""

from __future__ import annotations

# The table names of pycocoevalcap's metrics, as the papers print them.
BASELINE_NAMES = {
    "bleu1": "BLEU-1",
    "bleu2": "BLEU-2",
    "bleu3": "BLEU-3",
    "bleu4": "BLEU-4",
    "meteor": "METEOR",
    "rougeL": "ROUGE-L",
    "cider": "CIDEr",
    "spice": "SPICE",
}
# pycocoevalcap's corpus BLEU and METEOR come from the whole corpus's statistics, not the mean of the per-caption
# scores: a per-caption score (or a mean of them) of these is named "sentence <name>" wherever it is shown.
CORPUS_NOT_MEAN = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor")
SENTENCE = "sentence"


def sentence_name(key: str) -> str:
    """The name of a baseline's per-caption scores: ``sentence BLEU-4`` for BLEU and METEOR, whose corpus
    score (named ``BLEU-4``) is not their mean; the table name otherwise."""
    name = BASELINE_NAMES.get(key, key)
    return f"{SENTENCE} {name}" if key in CORPUS_NOT_MEAN else name
