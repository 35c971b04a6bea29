"""The CLIP engine: models, checkpoints, images, frames and captions to L2-normalised embeddings.

It knows nothing of metrics, corpora, benchmarks or demos (a test walks the imports). Modules, bottom up:

- ``checkpoints/``: reading weight files safely, the authors' layouts, PAC-S conversion;
- ``image_constants``: a model's image mean/std, by the origin of its weights or its preprocessor config;
- ``backbones``: loading a CLIP model once per process (device, dtype, preprocessing constants);
- ``images``, ``video``, ``tokenization``: inputs to pixels, frames and token ids, as the authors made them;
- ``batching``: out-of-memory back-off, de-duplication, progress;
- ``image_encoding``, ``text_encoding``, ``frame_encoding``: the pipelines that overlap reading and the model.
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_PUBLIC = {
    "DEFAULT_MODEL": "capeval.clip.backbones",
    "Backbone": "capeval.clip.backbones",
    "load_backbone": "capeval.clip.backbones",
    "resolve_device": "capeval.clip.backbones",
    "resolve_dtype": "capeval.clip.backbones",
    "clear_cache": "capeval.clip.backbones",
    "BATCH_SIZE": "capeval.clip.batching",
    "unique_indices": "capeval.clip.batching",
    "run_with_backoff": "capeval.clip.batching",
    "image_key": "capeval.clip.images",
    "load_image": "capeval.clip.images",
    "preprocess_image": "capeval.clip.images",
    "PREFIX": "capeval.clip.tokenization",
    "clean_caption": "capeval.clip.tokenization",
    "tokenize_captions": "capeval.clip.tokenization",
    "NUM_FRAMES": "capeval.clip.video",
    "VATEX_EVAL_NUM_FRAMES": "capeval.clip.video",
    "decode_video": "capeval.clip.video",
    "sample_indices": "capeval.clip.video",
    "write_video": "capeval.clip.video",
    "encode_images": "capeval.clip.image_encoding",
    "encode_texts": "capeval.clip.text_encoding",
    "encode_text_tokens": "capeval.clip.text_encoding",
    "encode_videos": "capeval.clip.frame_encoding",
    "frame_embeddings": "capeval.clip.frame_encoding",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
