"""capeval's six metrics as ``torchmetrics.Metric`` subclasses, for Lightning's ``self.log`` and multi-GPU runs.

>>> from capeval.torchmetrics import CLIPScore
>>> metric = CLIPScore(model="openai/clip-vit-base-patch32")  # doctest: +SKIP
>>> metric.update(["a dog on a beach"], images=[image])  # doctest: +SKIP
>>> metric.compute()  # tensor(0.7712, dtype=torch.float64): capeval.CLIPScore's "clipscore"  # doctest: +SKIP

Each class scores with capeval's own callable (``capeval.CLIPScore``, ...) built from the same options, so
``compute()`` equals that callable on the concatenated inputs of every ``update`` (of every process), and
``results()`` returns the callable's dict. What each keeps between ``update`` and ``compute``:

- CLIP-S, RefCLIP-S, PAC-S, WMD, WEmbSim: a caption's score depends on its own inputs only, so each batch is
  scored at ``update`` and only the per-sample scores are kept (float64 tensors on the metric's device,
  concatenated across processes by torchmetrics, ``dist_reduce_fx="cat"``); the corpus score is their mean.
- EMScore: its IDF weights come from the references (else the candidates) of the whole corpus, so a caption's
  score depends on every other caption. ``update`` encodes the videos (the expensive part) and keeps the frame
  embeddings; the captions and references are kept as UTF-8 bytes in uint8 tensors (torchmetrics syncs tensors
  only, and bytes give back the exact strings), and ``compute`` runs ``capeval.EMScore`` once on everything with
  the kept frame embeddings as ``video_embeds``. Across processes every rank gathers all texts and frames and
  computes the same IDF and the same scores (text encoding is repeated per rank; frames are not re-encoded).
  ``idf=False``, a mapping or a list of captions makes IDF independent of the scored corpus, with the same result.

The encoder runs on the metric's device (``metric.to("cuda")``, or where Lightning puts the LightningModule, one
GPU per process under DDP) unless ``device=`` names one; it is loaded at the first ``update`` (the options are
checked when the metric is made) and cached per device by ``capeval.load_backbone``. A ``model=`` given as a
loaded model object is left where it is (``device=None`` is passed on).

Under DDP, ``compute()``, ``per_sample()`` and ``results()`` gather from every process (call them on all ranks);
per-sample scores come rank by rank, each in its update order.
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_PUBLIC = {
    "CLIPScore": "capeval.torchmetrics.image_metrics",
    "RefCLIPScore": "capeval.torchmetrics.image_metrics",
    "PACScore": "capeval.torchmetrics.image_metrics",
    "WMD": "capeval.torchmetrics.text_metrics",
    "WEmbSim": "capeval.torchmetrics.text_metrics",
    "EMScore": "capeval.torchmetrics.video_metrics",
    "CapevalMetric": "capeval.torchmetrics.metric",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(
    __name__, _PUBLIC, globals(), requires=("torchmetrics", "capeval.torchmetrics")
)
