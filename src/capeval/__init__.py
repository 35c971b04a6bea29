"""capeval: caption-evaluation metrics as Hugging Face ``evaluate`` modules and plain callables.

>>> import capeval
>>> metric = capeval.load("clipscore")            # the packaged evaluate module, offline
>>> scorer = capeval.CLIPScore(model="openai/clip-vit-base-patch32")

The package in wings (ARCHITECTURE.md): the metric callables at the top (``clipscore``, ``pacscore``,
``emscore``, ``wmd``, ``wembsim``, their maths in ``scores`` and ``emscore_matching``); the engines below them
(``clip/`` for CLIP embeddings, ``text/`` for word vectors); ``corpus/`` for large corpora; ``bench/``,
``demo/``, ``training/``, ``integrations/``, ``perf/`` and ``testing/`` on top.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings
from importlib import import_module

from capeval._lazy import lazy_exports

__version__ = "0.1.0"

# Public names, imported on first use so `import capeval` stays light (no torch until needed).
_PUBLIC = {
    "CLIPScore": "capeval.clipscore",
    "RefCLIPScore": "capeval.clipscore",
    "PACScore": "capeval.pacscore",
    "EMScore": "capeval.emscore",
    "WMD": "capeval.wmd",
    "WEmbSim": "capeval.wembsim",
    "METRICS": "capeval.registry",
    "load_vectors": "capeval.text.vectors",
    "load_backbone": "capeval.clip.backbones",
    "encode_images": "capeval.clip.image_encoding",
    "encode_texts": "capeval.clip.text_encoding",
    "encode_videos": "capeval.clip.frame_encoding",
    "load": "capeval.integrations.evaluate_modules",
    "module_path": "capeval.integrations.evaluate_modules",
    "install_modules": "capeval.integrations.module_cache",
    "GuardedMetric": "capeval.integrations.evaluate_inputs",
    "VIDEO_FEATURE": "capeval.integrations.evaluate_storage",
    "make_compute_metrics": "capeval.integrations.trainer",
    "score_distributed": "capeval.corpus.distributed",
    "score_corpus": "capeval.corpus.run",
    "score_systems": "capeval.scoring.systems",
    "compare": "capeval.bench.significance",
    "compare_many": "capeval.bench.significance",
    "Comparison": "capeval.bench.significance",
    # The defaults the evaluate modules declare, each defined (with its source) beside the code it configures.
    "DEFAULT_MODEL": "capeval.clip.backbones",
    "BATCH_SIZE": "capeval.clip.batching",
    "PREFIX": "capeval.clip.tokenization",
    "NUM_FRAMES": "capeval.clip.video",
    "W_CLIP_S": "capeval.scores",
    "W_PAC_S": "capeval.scores",
    "WMD_SIGMA": "capeval.wmd:SIGMA",
    "WEMBSIM_REDUCTION": "capeval.wembsim:REDUCTION",
    "WEMBSIM_ABSOLUTE_COSINE": "capeval.scores",
}
_public_getattr, __dir__ = lazy_exports(__name__, _PUBLIC, globals())


def __getattr__(name: str):
    """Public names, then sub-packages and modules (``capeval.bench.run_benchmark`` after ``import capeval``)."""
    if name in _PUBLIC:
        return _public_getattr(name)
    if not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Module paths before the layout of release 0.2 -> where their code lives now. Importing an old path still
# works for one release, with a DeprecationWarning, and gives the new module itself (not a copy).
MOVED_MODULES = {
    "capeval.backbones": "capeval.clip.backbones",
    "capeval.batching": "capeval.clip.batching",
    "capeval.checkpoints": "capeval.clip.checkpoints",
    "capeval.checkpoints.files": "capeval.clip.checkpoints.files",
    "capeval.checkpoints.layout": "capeval.clip.checkpoints.layout",
    "capeval.checkpoints.locate": "capeval.clip.checkpoints.locate",
    "capeval.images": "capeval.clip.images",
    "capeval.tokenization": "capeval.clip.tokenization",
    "capeval.encoding": "capeval.clip",  # image and caption encoders: both exported by capeval.clip
    "capeval.text_encoding": "capeval.clip.text_encoding",
    "capeval.video": "capeval.clip",  # decoding and frame encoding: both exported by capeval.clip
    "capeval.corpus_cli": "capeval.corpus.cli",
    "capeval.corpus_sources": "capeval.corpus.sources",
    "capeval.embedding_cache": "capeval.corpus.embedding_cache",
    "capeval.distributed": "capeval.corpus.distributed",
    "capeval.modules": "capeval.integrations.evaluate_modules",
    "capeval.training_hooks": "capeval.integrations.trainer",
    "capeval.publish": "capeval.integrations.hub",
    "capeval.text.wmd": "capeval.wmd",
    "capeval.text.wembsim": "capeval.wembsim",
}


# Public module paths whose code lives in a wing: the same alias, without a warning (these paths stay).
MODULE_ALIASES = {
    "capeval.torchmetrics": "capeval.integrations.torchmetrics",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old module path to the module that replaced it, warning once per path, and a public alias
    (``MODULE_ALIASES``) to its module without a warning."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED_MODULES or fullname in MODULE_ALIASES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        if spec.name in MODULE_ALIASES:
            new = MODULE_ALIASES[spec.name]
        else:
            new = MOVED_MODULES[spec.name]
            warnings.warn(
                f"{spec.name} moved to {new}; the old path stops working in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
        module = import_module(new)
        spec.loader_state = module.__spec__  # importlib sets the alias spec on the module: put its own back
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())
