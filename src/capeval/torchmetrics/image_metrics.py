"""CLIP-S, RefCLIP-S and PAC-S as torchmetrics metrics: each batch scored at ``update``, per-sample scores kept."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from capeval.clip.backbones import DEFAULT_MODEL
from capeval.clip.batching import BATCH_SIZE
from capeval.clip.tokenization import PREFIX
from capeval.clipscore import CLIPScore as _CLIPScore
from capeval.clipscore import RefCLIPScore as _RefCLIPScore
from capeval.pacscore import PACScore as _PACScore
from capeval.scores import W_CLIP_S, W_PAC_S
from capeval.torchmetrics.metric import CapevalMetric, split_arguments
from capeval.validation import check_options


class ImageMetric(CapevalMetric):
    """What the image metrics share: the options checked when the metric is made, each batch scored at ``update``
    by the capeval callable and its per-sample values kept, one float64 list state each.

    A subclass spells its keywords in its ``__init__`` and hands them on as ``super().__init__(locals())``; it
    declares ``name``, ``scorer_class`` and ``kept``.
    """

    # {state: the callable's per-sample result key}; the state is called f"{name}_{state}".
    kept: dict[str, str] = {"scores": "scores"}

    def __init__(self, arguments: dict[str, Any]) -> None:
        options, torchmetrics_options = split_arguments(arguments)
        check_options(**options)  # now, not at the first update: the model itself loads there
        super().__init__(options, **torchmetrics_options)
        for state in self.kept:
            self._add_list_state(f"{self.name}_{state}")

    def update(
        self,
        preds: Sequence[str],
        images: Sequence | None = None,
        references: Sequence[Sequence[str]] | None = None,
        image_embeds=None,
    ) -> None:
        """Score a batch: B captions, their B images (or ``image_embeds``, (B, D)) and B lists of references."""
        self._keep(self.scorer(preds, references, images=images, image_embeds=image_embeds))

    def _keep(self, out: dict[str, Any]) -> None:
        # A value the callable gives only for some inputs (RefPAC-S, with references) is kept when it is there.
        for state, key in self.kept.items():
            if key in out:
                self._append(f"{self.name}_{state}", out[key])


class CLIPScore(ImageMetric):
    """CLIP-S (Hessel et al. 2021) per batch: ``update(preds, images=...)`` (or ``image_embeds=``).

    Args:
        model, device, dtype, batch_size, prefix, w, num_workers, progress, checkpoint: as for
            ``capeval.CLIPScore``, except ``device=None``: the metric's device (see the module's docstring).
        sync_on_compute, process_group, compute_on_cpu: torchmetrics' options of every ``Metric``.

    ``compute()`` is the mean CLIP-S, a float64 scalar tensor; ``per_sample()`` the (N,) scores.
    """

    name = "clipscore"
    scorer_class = _CLIPScore
    plot_lower_bound = 0.0

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: str | None = None,
        dtype: str = "float32",
        batch_size: int = BATCH_SIZE,
        prefix: str | None = None,  # the family's: "A photo depicts" for English models
        w: float = W_CLIP_S,
        num_workers: int | None = None,
        progress: bool | None = None,
        checkpoint: str | None = None,
        *,
        sync_on_compute: bool = True,
        process_group: Any = None,
        compute_on_cpu: bool = False,
    ) -> None:
        super().__init__(locals())

    def update(self, preds: Sequence[str], images: Sequence | None = None, image_embeds=None) -> None:
        """Score a batch: ``preds`` (B captions) against ``images`` (B images) or ``image_embeds`` (B, D)."""
        self._keep(self.scorer(preds, images=images, image_embeds=image_embeds))


class RefCLIPScore(ImageMetric):
    """RefCLIP-S (Hessel et al. 2021, eq. 2) per batch: ``update(preds, images=..., references=...)``.

    Args: those of ``CLIPScore`` and ``clip_reference_cosine`` (as for ``capeval.RefCLIPScore``).

    ``compute()`` is the mean RefCLIP-S; ``results()`` adds ``clip_s`` and ``clip_s_scores``.
    """

    name = "refclipscore"
    scorer_class = _RefCLIPScore
    kept = {"scores": "scores", "clip_s": "clip_s_scores"}

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: str | None = None,
        dtype: str = "float32",
        batch_size: int = BATCH_SIZE,
        prefix: str | None = None,  # the family's: "A photo depicts" for English models
        w: float = W_CLIP_S,
        num_workers: int | None = None,
        progress: bool | None = None,
        checkpoint: str | None = None,
        clip_reference_cosine: bool = False,
        *,
        sync_on_compute: bool = True,
        process_group: Any = None,
        compute_on_cpu: bool = False,
    ) -> None:
        super().__init__(locals())

    def _results(self) -> dict[str, Any]:
        clip_s = self._scores("refclipscore_clip_s")
        return {**super()._results(), "clip_s": float(clip_s.mean()), "clip_s_scores": clip_s.tolist()}


class PACScore(ImageMetric):
    """PAC-S (Sarto et al. 2023) per batch: ``update(preds, images=..., references=None)``.

    Args: as for ``capeval.PACScore`` (``checkpoint`` required), ``device=None`` as in ``CLIPScore``, and
    torchmetrics' ``sync_on_compute``, ``process_group``, ``compute_on_cpu``.

    ``compute()`` is the mean PAC-S (the callable's headline ``pacscore``). When every update gives references,
    RefPAC-S is kept too: ``results()`` has ``refpacscore`` and ``refpacscore_scores``, ``refpacscore()`` the
    corpus RefPAC-S as a tensor. References in some updates and not in others are refused.
    """

    name = "pacscore"
    scorer_class = _PACScore
    plot_lower_bound = 0.0
    kept = {"scores": "scores", "ref_scores": "refpacscore_scores"}

    def __init__(
        self,
        checkpoint: str | os.PathLike | None = None,
        model: str | None = None,
        device: str | None = None,
        dtype: str = "float32",
        batch_size: int = BATCH_SIZE,
        prefix: str = PREFIX,
        w: float = W_PAC_S,
        num_workers: int | None = None,
        progress: bool | None = None,
        clip_reference_cosine: bool = False,
        *,
        sync_on_compute: bool = True,
        process_group: Any = None,
        compute_on_cpu: bool = False,
    ) -> None:
        if checkpoint is None:
            from capeval.clip.checkpoints.load import missing_checkpoint_help

            raise ValueError(missing_checkpoint_help())
        super().__init__(locals())

    def update(
        self,
        preds: Sequence[str],
        images: Sequence | None = None,
        references: Sequence[Sequence[str]] | None = None,
        image_embeds=None,
    ) -> None:
        """Score a batch: B captions, their B images (or ``image_embeds``) and, optionally, B reference lists."""
        scored = int(self._cat("pacscore_scores").numel())
        with_refs = int(self._cat("pacscore_ref_scores").numel())
        if scored and (references is None) != (with_refs == 0):
            had = "with" if with_refs else "without"
            raise ValueError(
                f"PACScore: this batch has {'no ' if references is None else ''}references but the {scored} "
                f"predictions before it were scored {had} them: give references in every update or in none"
            )
        super().update(preds, images, references, image_embeds)

    def _ref_scores(self) -> torch.Tensor | None:
        refs = self._cat("pacscore_ref_scores")
        if refs.numel() == 0:
            return None
        if refs.numel() != self._per_sample().numel():
            raise ValueError(
                f"PACScore: {refs.numel()} of {self._per_sample().numel()} predictions were given references "
                "(across processes): give references for every prediction or for none"
            )
        return refs

    def refpacscore(self) -> torch.Tensor:
        """The corpus RefPAC-S (mean), a float64 scalar tensor; an error when no update gave references."""
        with self._synced():
            refs = self._ref_scores()
            if refs is None:
                raise ValueError("PACScore: no update gave references, so there is no RefPAC-S")
            return refs.mean().clone()

    def _results(self) -> dict[str, Any]:
        out = super()._results()
        refs = self._ref_scores()
        if refs is not None:
            out.update(refpacscore=float(refs.mean()), refpacscore_scores=refs.tolist())
        return out
