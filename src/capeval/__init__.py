"""capeval: caption-evaluation metrics as Hugging Face ``evaluate`` modules and plain callables.

>>> import capeval
>>> metric = capeval.load("clipscore")            # the packaged evaluate module, offline
>>> scorer = capeval.CLIPScore(model="openai/clip-vit-base-patch32")

The package in wings (ARCHITECTURE.md): the metric callables at the top (``clipscore``, ``pacscore``,
``emscore``, ``wmd``, ``wembsim``, their maths in ``scores`` and ``emscore_matching``); the engines below them
(``clip/`` for CLIP embeddings, ``text/`` for word vectors); ``corpus/`` for large corpora; ``bench/``,
``demo/``, ``training/``, ``integrations/``, ``torchmetrics/``, ``perf/`` and ``testing/`` on top.

``__all__`` is the public API (docs/reference/python-api.md); ``dir(capeval)`` shows it and the dunders only.
"""

from capeval._lazy import lazy_exports

__version__ = "0.2.0"

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
    "compare": "capeval.significance.paired_tests",
    "compare_many": "capeval.significance.paired_tests",
    "Comparison": "capeval.significance.paired_tests",
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
__all__ = sorted(_PUBLIC)  # the names docs/reference/python-api.md lists; a test keeps the two equal
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
