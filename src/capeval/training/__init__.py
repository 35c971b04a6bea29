"""Training PAC-S projections yourself (``scripts/train_pacscore.py`` is the command line).

>>> from capeval.training import PACSTrainConfig, train_pacs
>>> result = train_pacs("openai/clip-vit-base-patch32", train_ds, val_ds, "runs/pacs")  # doctest: +SKIP
>>> capeval.PACScore(checkpoint=str(result.output))  # doctest: +SKIP
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_PUBLIC = {
    "BATCH_SIZE": "capeval.training.pacs",
    "LAMBDA_T": "capeval.training.pacs",
    "LAMBDA_V": "capeval.training.pacs",
    "LR": "capeval.training.pacs",
    "PATIENCE": "capeval.training.pacs",
    "PACSTrainConfig": "capeval.training.pacs",
    "TrainResult": "capeval.training.pacs",
    "info_nce": "capeval.training.pacs",
    "pacs_loss": "capeval.training.pacs",
    "train_pacs": "capeval.training.pacs",
    "validation_loss": "capeval.training.pacs",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
