"""Training PAC-S projections yourself (``scripts/train_pacscore.py`` is the command line).

>>> from capeval.training import PACSTrainConfig, train_pacs
>>> result = train_pacs("openai/clip-vit-base-patch32", train_ds, val_ds, "runs/pacs")  # doctest: +SKIP
>>> capeval.PACScore(checkpoint=str(result.output))  # doctest: +SKIP
"""

from __future__ import annotations

from capeval.training.pacs import (
    BATCH_SIZE,
    LAMBDA_T,
    LAMBDA_V,
    LR,
    PATIENCE,
    PACSTrainConfig,
    TrainResult,
    info_nce,
    pacs_loss,
    train_pacs,
    validation_loss,
)

__all__ = [
    "BATCH_SIZE",
    "LAMBDA_T",
    "LAMBDA_V",
    "LR",
    "PATIENCE",
    "PACSTrainConfig",
    "TrainResult",
    "info_nce",
    "pacs_loss",
    "train_pacs",
    "validation_loss",
]
