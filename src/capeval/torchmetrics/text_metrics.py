"""WMD and WEmbSim as torchmetrics metrics: each batch scored at ``update``, per-sample scores kept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from capeval.scores import WEMBSIM_ABSOLUTE_COSINE
from capeval.torchmetrics.metric import CapevalMetric, split_arguments
from capeval.wembsim import REDUCTION
from capeval.wembsim import WEmbSim as _WEmbSim
from capeval.wmd import SIGMA
from capeval.wmd import WMD as _WMD


class WMD(CapevalMetric):
    """WMD similarity (the COCO toolkit's protocol) per batch: ``update(preds, references=...)``.

    Args: as for ``capeval.WMD`` (``vectors``, ``sigma``, ``normalize_vectors``, ``stopwords``, ``tokenizer``,
    ``prune``, ``num_workers``), and torchmetrics' ``sync_on_compute``, ``process_group``, ``compute_on_cpu``.
    The vectors load when the metric is made.

    ``compute()`` is the mean exp(-WMD/sigma) to the best reference; ``results()`` adds ``distances``.
    """

    name = "wmd"
    scorer_class = _WMD
    plot_lower_bound = 0.0
    plot_upper_bound = 1.0

    def __init__(
        self,
        vectors=None,
        sigma: float = SIGMA,
        normalize_vectors: bool = False,
        stopwords="coco",
        tokenizer="ptb",
        prune: bool = True,
        num_workers: int | None = None,
        *,
        sync_on_compute: bool = True,
        process_group: Any = None,
        compute_on_cpu: bool = False,
    ) -> None:
        options, torchmetrics_options = split_arguments(locals())
        super().__init__(options, **torchmetrics_options)
        self.scorer  # noqa: B018 - the vectors load now: a bad option or file fails here, not mid-validation
        self._add_list_state("wmd_scores")
        self._add_list_state("wmd_distances")

    def update(self, preds: Sequence[str], references: Sequence[Sequence[str]]) -> None:
        """Score a batch: B captions against B lists of references."""
        out = self.scorer(preds, references)
        self._append("wmd_scores", out["scores"])
        self._append("wmd_distances", out["distances"])

    def _results(self) -> dict[str, Any]:
        return {**super()._results(), "distances": self._cat("wmd_distances").tolist()}


class WEmbSim(CapevalMetric):
    """WEmbSim (Sharif et al. 2020) per batch: ``update(preds, references=...)``.

    Args: as for ``capeval.WEmbSim`` (``vectors``, ``reduction``, ``stopwords``, ``normalize_vectors``,
    ``tokenizer``, ``absolute_cosine``), and torchmetrics' ``sync_on_compute``, ``process_group``,
    ``compute_on_cpu``. The vectors load when the metric is made.

    ``compute()`` is the mean WEmbSim; ``results()`` has ``wembsim``, ``scores`` and ``signature`` (the per-reference
    cosines of the callable's ``reference_scores`` are not kept).
    """

    name = "wembsim"
    scorer_class = _WEmbSim
    plot_upper_bound = 1.0

    def __init__(
        self,
        vectors=None,
        reduction: str = REDUCTION,
        stopwords="coco",
        normalize_vectors: bool = False,
        tokenizer="ptb",
        absolute_cosine: bool = WEMBSIM_ABSOLUTE_COSINE,
        *,
        sync_on_compute: bool = True,
        process_group: Any = None,
        compute_on_cpu: bool = False,
    ) -> None:
        options, torchmetrics_options = split_arguments(locals())
        super().__init__(options, **torchmetrics_options)
        self.scorer  # noqa: B018 - the vectors load now
        self._add_list_state("wembsim_scores")

    def update(self, preds: Sequence[str], references: Sequence[Sequence[str]]) -> None:
        """Score a batch: B captions against B lists of references."""
        self._append("wembsim_scores", self.scorer(preds, references)["scores"])
