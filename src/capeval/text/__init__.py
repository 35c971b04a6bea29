"""The word-vector engine under WMD and WEmbSim (``capeval.wmd``, ``capeval.wembsim``): knows no metric.

Modules: ``vectors`` (loading, the packaged GloVe default, Hub files), ``vector_files`` (every common file
format and its fingerprint), ``gensim_pickle`` (gensim's pickled files without running them), ``tokenize`` (the
COCO toolkit's PTB tokenisation in pure Python), ``stopwords``, ``documents`` (batch bag-of-words, mean
embeddings) and ``transport`` (WMD's exact transport problems through POT).
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_PUBLIC = {
    "load_vectors": "capeval.text.vectors",
    "WordVectors": "capeval.text.vectors",
    "ptb_tokenize": "capeval.text.tokenize",
    "coco_tokens": "capeval.text.tokenize",
    "COCO_WMD_STOPWORDS": "capeval.text.stopwords",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
