"""The seam between the image-text metrics and the engines that score with them.

CLIPScore, RefCLIPScore and PAC-S score in two halves: encoding (images, captions and references, with the
metric's model and prompt) and scoring the embeddings. An engine that encodes on its own terms — shared image
encodings across metrics and systems (``capeval score``), batches prepared by worker processes (the corpus
engine), encodings shared out across processes (``score_distributed``) — calls the halves through this contract,
and types against it, instead of probing an object for the methods it happens to have.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from capeval.clip.backbones import Backbone


@runtime_checkable
class ImageTextScorer(Protocol):
    """What an engine may call on an image-text metric (``capeval.CLIPScore`` and the classes built on it).

    Attributes:
        name: the metric's name and headline result key.
        backbone: the loaded model the metric encodes with.
        prefix: the prompt joined before every caption and reference.
        batch_size: the encoder's batch size.
        signature: what the scores are reported with.
    """

    name: str
    backbone: Backbone
    prefix: str
    batch_size: int

    @property
    def signature(self) -> str: ...

    def checked_inputs(
        self, predictions: Sequence[str], references: Sequence[Sequence[str]] | None = None
    ) -> tuple[list[str], list[list[str]] | None]:
        """The captions (and references, where the metric reads them) as scoring takes them, or a refusal naming
        the item."""
        ...

    def image_embeddings(self, images: Sequence | None, image_embeds, n: int) -> torch.Tensor:
        """(N, D) L2-normalised image embeddings from images or precomputed embeddings (exactly one)."""
        ...

    def caption_and_reference_embeddings(
        self,
        predictions: Sequence[str],
        references: Sequence[Sequence[str]] | None,
        encode_texts: Callable[[list[str]], torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """(N, D) caption embeddings and, where references are given, each caption's (k_i, D) reference
        embeddings; ``encode_texts`` replaces the metric's own text encoding (same model and prompt)."""
        ...

    def score_embeddings(
        self,
        image_emb: torch.Tensor,
        text_emb: torch.Tensor,
        reference_emb: Sequence[torch.Tensor] | None = None,
    ) -> dict:
        """The result of a call, from the embeddings alone."""
        ...
