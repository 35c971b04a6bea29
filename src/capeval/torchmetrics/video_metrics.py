"""EMScore as a torchmetrics metric: videos encoded at ``update``, the captions scored at ``compute`` with IDF
over the whole corpus (the texts kept as UTF-8 bytes in uint8 tensors, which torchmetrics can gather)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from capeval.clip.batching import BATCH_SIZE
from capeval.clip.video import NUM_FRAMES
from capeval.emscore import BATCH_PADDING
from capeval.emscore import EMScore as _EMScore
from capeval.signature import parse_signature
from capeval.torchmetrics.metric import CapevalMetric, split_arguments
from capeval.validation import OPTION_RULE_NAMES, check_options, check_predictions, check_references


def _inputs_named(videos: bool, references: bool) -> str:
    return {(True, True): "videos and references", (True, False): "videos only"}.get(
        (videos, references), "references only"
    )


def _pack_texts(texts: Sequence[str]) -> tuple[bytes, list[int]]:
    encoded = [t.encode("utf-8") for t in texts]
    return b"".join(encoded), [len(e) for e in encoded]


def _unpack_texts(data: torch.Tensor, lengths: torch.Tensor) -> list[str]:
    raw = data.to(torch.uint8).cpu().numpy().tobytes()
    out, start = [], 0
    for n in lengths.long().tolist():
        out.append(raw[start : start + n].decode("utf-8"))
        start += n
    return out


class EMScore(CapevalMetric):
    """EMScore (Shi et al. 2022): ``update(preds, videos=..., references=...)`` keeps what ``compute`` scores.

    Args: as for ``capeval.EMScore`` (``model``, ``device``, ``dtype``, ``batch_size``, ``num_frames``, ``idf``,
    ``checkpoint``, ``num_workers``, ``progress``, ``batch_padding``), ``device=None`` as in ``CLIPScore``, and
    torchmetrics' ``sync_on_compute``, ``process_group``, ``compute_on_cpu``.

    Videos (or ``video_embeds``) are encoded at ``update``; the captions are scored at ``compute`` with IDF from
    the whole corpus (module docstring). ``compute()`` is the mean full_F of the variant the inputs allow
    (videos, references or both: the same in every update); ``results()`` is ``capeval.EMScore``'s dict.
    ``batch_padding="authors"`` pads by batches of ``batch_size`` in the gathered order (rank by rank under DDP).
    """

    name = "emscore"
    scorer_class = _EMScore
    _STATES = {
        "pred_bytes": torch.uint8,
        "pred_lengths": torch.long,
        "ref_bytes": torch.uint8,
        "ref_lengths": torch.long,
        "ref_counts": torch.long,
        "frames": torch.float32,
        "frame_counts": torch.long,
        "decoded": torch.uint8,
    }

    def __init__(
        self,
        model: str | None = None,
        device: str | None = None,
        dtype: str = "float32",
        batch_size: int = BATCH_SIZE,
        num_frames: int | None = NUM_FRAMES,
        idf: bool | Mapping | Sequence[str] = True,
        checkpoint: str | None = None,
        num_workers: int | None = None,
        progress: bool | None = None,
        batch_padding: str = "exclude",
        *,
        sync_on_compute: bool = True,
        process_group: Any = None,
        compute_on_cpu: bool = False,
    ) -> None:
        options, torchmetrics_options = split_arguments(locals())
        # idf and batch_padding are EMScore's own: check_options has rules for the options metrics share.
        check_options(**{name: value for name, value in options.items() if name in OPTION_RULE_NAMES})
        if batch_padding not in BATCH_PADDING:
            raise ValueError(
                f"batch_padding={batch_padding!r}: choose from {', '.join(map(repr, BATCH_PADDING))}"
            )
        options["idf"] = _EMScore._check_idf(idf)
        super().__init__(options, **torchmetrics_options)
        for name, dtype in self._STATES.items():
            self._add_list_state(f"emscore_{name}", dtype)

    def update(
        self,
        preds: Sequence[str],
        videos: Sequence | None = None,
        references: Sequence[Sequence[str]] | None = None,
        video_embeds=None,
    ) -> None:
        """Keep a batch: B captions, their B videos (or ``video_embeds``) and/or B lists of references."""
        preds = check_predictions(preds)
        n = len(preds)
        if n == 0:
            raise ValueError("EMScore: an update without predictions")
        references = None if references is None else check_references(references, n)
        frames = self.scorer.frame_embeddings(videos, video_embeds, n)
        if frames is None and references is None:
            raise ValueError("EMScore needs videos= (or video_embeds=), references=, or both")
        seen = int(self._cat("emscore_pred_lengths").numel())
        if seen:
            had_videos = bool(self._cat("emscore_frame_counts").gt(0).any())
            had_refs = bool(self._cat("emscore_ref_counts").gt(0).any())
            if had_videos != (frames is not None) or had_refs != (references is not None):
                raise ValueError(
                    f"EMScore: this batch gives {_inputs_named(frames is not None, references is not None)} but "
                    f"the {seen} predictions before it were given {_inputs_named(had_videos, had_refs)}: every "
                    "update must give the same inputs (one EMScore variant per corpus)"
                )
        data, lengths = _pack_texts(preds)
        self._append("emscore_pred_bytes", data, torch.uint8)
        self._append("emscore_pred_lengths", lengths, torch.long)
        flat_refs = [r for refs in references for r in refs] if references is not None else []
        data, lengths = _pack_texts(flat_refs)
        self._append("emscore_ref_bytes", data, torch.uint8)
        self._append("emscore_ref_lengths", lengths, torch.long)
        self._append(
            "emscore_ref_counts", [len(r) for r in references] if references else [0] * n, torch.long
        )
        # Frames decoded from files bring PyAV's version into the signature, as the callable's own signature has it.
        decoded = videos is not None and any(isinstance(v, (str, os.PathLike)) for v in videos)
        self._append("emscore_decoded", [int(decoded)], torch.uint8)
        if frames is None:
            self._append("emscore_frame_counts", [0] * n, torch.long)
            return
        self._append("emscore_frames", torch.cat(frames), torch.float32)
        self._append("emscore_frame_counts", [len(f) for f in frames], torch.long)

    def _inputs(self) -> dict[str, Any]:
        """The kept corpus as ``capeval.EMScore``'s arguments."""
        preds = _unpack_texts(
            self._cat("emscore_pred_bytes", torch.uint8), self._cat("emscore_pred_lengths", torch.long)
        )
        if not preds:
            raise ValueError("EMScore: no predictions were kept: call update() before compute()")
        ref_counts = self._cat("emscore_ref_counts", torch.long)
        frame_counts = self._cat("emscore_frame_counts", torch.long)
        for what, counts in (("references", ref_counts), ("videos", frame_counts)):
            given = counts.gt(0)
            if given.any() and not given.all():
                raise ValueError(
                    f"EMScore: {int(given.sum())} of {len(preds)} predictions were given {what} (across "
                    f"processes): give {what} for every prediction or for none"
                )
        references = None
        if ref_counts.gt(0).all():
            flat = _unpack_texts(
                self._cat("emscore_ref_bytes", torch.uint8), self._cat("emscore_ref_lengths", torch.long)
            )
            ends = ref_counts.cumsum(0).tolist()
            references = [flat[end - k : end] for k, end in zip(ref_counts.tolist(), ends, strict=True)]
        video_embeds = None
        if frame_counts.gt(0).all():
            dim = self.scorer.backbone.embed_dim
            frames = self._cat("emscore_frames", torch.float32).reshape(-1, dim)
            video_embeds = list(torch.split(frames, frame_counts.tolist()))
        return {"predictions": preds, "references": references, "video_embeds": video_embeds}

    def _results(self) -> dict[str, Any]:
        out = self.scorer(**self._inputs())
        name, fields = parse_signature(out["signature"])
        if self._cat("emscore_decoded", torch.uint8).any() and "av" not in fields:
            from importlib.metadata import version

            libraries = list(fields)[list(fields).index("capeval") :]
            options = {k: v for k, v in fields.items() if k not in libraries}
            options["av"] = version("av")
            fields = {**options, **{k: fields[k] for k in libraries}}
            out["signature"] = "|".join([name, *(f"{k}={v}" for k, v in fields.items())])
        return out

    def _per_sample(self) -> torch.Tensor:
        return torch.tensor(self._results()["scores"], dtype=torch.float64, device=self.device)

    def compute(self) -> torch.Tensor:
        """The corpus EMScore (mean full_F of the variant), scored here with IDF over the whole corpus."""
        return torch.tensor(self._results()[self.name], dtype=torch.float64, device=self.device)
