"""Word-embedding caption metrics: WMD (COCO toolkit protocol) and WEmbSim, with their word vectors.

Modules: ``vectors`` (loading every common format, the packaged GloVe default, Hub files), ``tokenize``
(the toolkit's PTB tokenisation in pure Python), ``stopwords``, ``documents`` (batch bag-of-words),
``wmd``, ``wembsim`` and ``bench`` (speed and agreement measurements against gensim).
"""

from __future__ import annotations

from importlib import import_module

_LAZY = {
    "WMD": "capeval.text.wmd",
    "WEmbSim": "capeval.text.wembsim",
    "load_vectors": "capeval.text.vectors",
    "WordVectors": "capeval.text.vectors",
    "ptb_tokenize": "capeval.text.tokenize",
    "coco_tokens": "capeval.text.tokenize",
    "COCO_WMD_STOPWORDS": "capeval.text.stopwords",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'capeval.text' has no attribute {name!r}")
