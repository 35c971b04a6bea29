"""capeval: caption-evaluation metrics as Hugging Face ``evaluate`` modules and plain callables.

>>> import capeval
>>> metric = capeval.load("clipscore")            # the packaged evaluate module, offline
>>> scorer = capeval.CLIPScore(model="openai/clip-vit-base-patch32")
"""

from __future__ import annotations

from importlib import import_module

__version__ = "0.1.0"

# Public names, imported on first use so `import capeval` stays light (no torch until needed).
_LAZY = {
    "CLIPScore": "capeval.clipscore",
    "RefCLIPScore": "capeval.clipscore",
    "WMD": "capeval.text.wmd",
    "WEmbSim": "capeval.text.wembsim",
    "load_vectors": "capeval.text.vectors",
    "PACScore": "capeval.pacscore",
    "EMScore": "capeval.emscore",
    "load_backbone": "capeval.backbones",
    "encode_images": "capeval.encoding",
    "encode_texts": "capeval.encoding",
    "load": "capeval.modules",
    "module_path": "capeval.modules",
    "METRICS": "capeval.modules",
    "make_compute_metrics": "capeval.training_hooks",
    "score_distributed": "capeval.distributed",
    "score_corpus": "capeval.corpus",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    if name in {
        "scores",
        "encoding",
        "backbones",
        "images",
        "tokenization",
        "signature",
        "validation",
        "testing",
        "bench",
    }:
        return import_module(f"capeval.{name}")
    raise AttributeError(f"module 'capeval' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
