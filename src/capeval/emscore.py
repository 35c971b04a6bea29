"""EMScore (Shi et al., CVPR 2022): video-caption evaluation by coarse and fine-grained embedding matching.

``EMScore(model=...)(predictions, videos=..., references=...)`` returns the same dict as the evaluate
module. The variant follows the inputs: videos only -> EMScore(X,V); references only -> EMScore(X,X*);
both -> EMScore(X,V,X*). It follows the authors' released code (ShiYaya/emscore): CLIP token embeddings
from start- to end-of-text, no prompt prefix, IDF weights from the references (else the candidates),
every frame of each video by default. With ``checkpoint=`` the PAC-S weights replace CLIP's, which is how
the PAC-S authors score videos (aimagelab/pacscore#1).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence

import torch

from capeval.clip.backbones import DEFAULT_MODEL, Backbone, load_backbone
from capeval.clip.batching import BATCH_SIZE
from capeval.clip.families import pooled_token_id, token_projection, tokenize_texts
from capeval.clip.families import signature_fields as family_fields
from capeval.clip.frame_encoding import encode_videos, frame_embeddings
from capeval.clip.text_encoding import encode_text_tokens
from capeval.clip.video import NUM_FRAMES
from capeval.emscore_matching import (
    IdfTable,
    best_per_candidate,
    check_idf_table,
    coarse,
    combine_variants,
    fine_grained_text,
    fine_grained_video,
    full_scores,
    idf_from_token_ids,
    token_weights,
    uniform_weights,
    video_embedding,
)
from capeval.registry import MetricSpec, Option, Output
from capeval.signature import build_signature
from capeval.validation import (
    check_options,
    check_predictions,
    check_references,
    check_same_length,
    check_signature_text,
)

VIDEO, TEXT, BOTH = "EMScore(X,V)", "EMScore(X,X*)", "EMScore(X,V,X*)"
# How padded positions enter the token/frame maxima: "exclude" (each caption's score depends only on its own
# inputs) or "authors" (ShiYaya/emscore, emscore/utils.py: similarity 0 at a padded position of the batch).
BATCH_PADDING = ("exclude", "authors")
DETAIL_KEYS = ("figr_P", "figr_R", "figr_F", "cogr", "full_P", "full_R", "full_F")


def _optional_references(references, n: int) -> list[list[str]] | None:
    """``None`` or all-empty lists mean no references; otherwise one non-empty list per prediction."""
    if references is None:
        return None
    if isinstance(references, (str, bytes)) or not isinstance(references, Sequence):
        raise TypeError(f"references must be a list of lists of strings, got {type(references).__name__}")
    if len(references) == n and all(isinstance(r, Sequence) and not isinstance(r, str) for r in references):
        empty = [i for i, r in enumerate(references) if len(r) == 0]
        if len(empty) == n:
            return None
        if empty:
            raise ValueError(
                f"references {empty[0]} is an empty list while other predictions have references: "
                "give references for every prediction, or for none (EMScore(X,V) with videos only)"
            )
    return check_references(references, n)


def _backbone(model: str | None, checkpoint, device, dtype) -> tuple[Backbone, str | None]:
    """The backbone and the checkpoint's signature tag, choosing the base model as PAC-S does.

    Without a checkpoint: ``model`` or CLIP ViT-B/32. A converted PAC-S folder (or Hub repo) is a whole model
    and loads as one; an authors' ``.pth`` goes over ``model``, or over the base its architecture names.
    """
    if checkpoint is None:
        return load_backbone(model or DEFAULT_MODEL, device=device, dtype=dtype), None
    from capeval.clip.checkpoints.layout import base_model_for
    from capeval.clip.checkpoints.load import checkpoint_geometry
    from capeval.clip.checkpoints.locate import resolve_checkpoint

    resolved = resolve_checkpoint(checkpoint)
    if resolved.kind == "model_folder" and model is None:
        return load_backbone(str(resolved.path), device=device, dtype=dtype), resolved.tag
    if model is None:
        model = base_model_for(checkpoint_geometry(resolved))
    backbone = load_backbone(model, device=device, dtype=dtype, checkpoint=os.fspath(checkpoint))
    return backbone, backbone.weights


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


class EMScore:
    """EMScore(X,V), EMScore(X,X*) and EMScore(X,V,X*) per caption; corpus score = mean full_F.

    Args:
        model: CLIP backbone, Hub id or local folder; ``None`` = ``openai/clip-vit-base-patch32`` (the authors'
            ViT-B/32), or with a PAC-S checkpoint the base model it was fine-tuned from.
        device: ``None`` = first GPU if any, else CPU.
        dtype: ``"float32"`` (default), ``"float16"`` or ``"bfloat16"``.
        batch_size: encoder batch size for captions and frames (halved automatically on GPU out-of-memory).
        num_frames: frames per video, evenly spaced; ``None`` (default) = every frame, as the authors'
            library; their VATEX-EVAL protocol uses 10.
        idf: ``True`` = IDF from the references of the call (else from its candidates); ``False`` = uniform
            token weights; a list of captions = IDF from that corpus; a mapping token id (int) -> weight (a
            finite number >= 0) = used as given (a ``defaultdict`` or ``IdfTable`` supplies weights for ids it
            lacks); it is checked and copied when the scorer is built, so later changes to it are not seen.
        checkpoint: PAC-S weights loaded over the backbone (the PAC-S authors' video variant).
        num_workers: threads decoding videos ahead of the model.
        progress: progress bars (``None``: only for long runs on a terminal).
        batch_padding: ``"exclude"`` (default): padded positions never enter a maximum, so a caption's score
            depends on its own inputs only. ``"authors"``: the authors' batch-dependent padding, for reproducing
            their numbers exactly: pairs are matched in consecutive batches of ``batch_size`` (in the order
            given; their default 64) and a padded token or frame counts as cosine 0, so a negative true best
            cosine is raised to 0 when a batch neighbour is longer. Recorded in the signature when not the
            default.
    """

    name = "emscore"

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
    ) -> None:
        # Every option is checked before the checkpoint or the model is read.
        options = check_options(
            model=model,
            checkpoint=checkpoint,
            device=device,
            dtype=dtype,
            batch_size=batch_size,
            num_frames=num_frames,
            num_workers=num_workers,
            progress=progress,
        )
        self.num_frames = options["num_frames"]
        if batch_padding not in BATCH_PADDING:
            raise ValueError(
                f"batch_padding={batch_padding!r}: choose from {', '.join(map(repr, BATCH_PADDING))}"
            )
        self.batch_padding = batch_padding
        self.idf = self._check_idf(idf)
        self.backbone, self.checkpoint_tag = _backbone(model, checkpoint, device, dtype)
        token_projection(
            self.backbone
        )  # a family without per-token joint embeddings is refused here, by name
        check_signature_text("model", self.backbone.model_id)
        check_signature_text("checkpoint", self.checkpoint_tag)
        self.batch_size = options["batch_size"]
        self.num_workers = options["num_workers"]
        self.progress = options["progress"]

    @staticmethod
    def _check_idf(idf):
        if isinstance(idf, bool):
            return idf
        if isinstance(idf, Mapping):
            return check_idf_table(idf)
        if isinstance(idf, (str, bytes)) or not isinstance(idf, Sequence):
            raise TypeError(
                f"idf must be True, False, a list of captions or a mapping token id -> weight, got {type(idf).__name__}"
            )
        if len(idf) == 0:
            raise ValueError("idf corpus is an empty list")
        for i, doc in enumerate(idf):
            if not isinstance(doc, str):
                raise TypeError(f"idf corpus item {i} is {type(doc).__name__}, expected a string")
        return list(idf)

    # -- weights -------------------------------------------------------------------------------------
    def _idf_table(self, cand_ids, ref_ids_flat) -> tuple[Mapping | None, str]:
        """The IDF mapping for this call (``None`` = uniform) and how the signature names it."""
        # The token whose state is pooled (CLIP's end-of-text) takes the mean idf, as in the authors' code.
        eos = pooled_token_id(self.backbone)
        if self.idf is False:
            return None, "false"
        if self.idf is True:
            if ref_ids_flat:
                # One document per (candidate, reference) pair, duplicates included, as the authors' corpus.
                return idf_from_token_ids(ref_ids_flat, eos), "references"
            return idf_from_token_ids(cand_ids, eos), "candidates"
        if isinstance(self.idf, IdfTable):  # check_idf_table's copy of the user's mapping
            items = sorted((k, round(v, 8)) for k, v in self.idf.items())
            return self.idf, f"table:{_digest([items, self.idf.default])}"
        ids, _ = tokenize_texts(self.backbone, self.idf)
        return idf_from_token_ids(ids, eos), f"corpus:{len(self.idf)}:{_digest(self.idf)}"

    @staticmethod
    def _weights(all_ids, table, predictions_len: int) -> list[torch.Tensor]:
        if table is None:
            return uniform_weights(all_ids)
        cache: dict[tuple, torch.Tensor] = {}
        out = []
        for i, ids in enumerate(all_ids):
            key = tuple(ids)
            if key not in cache:
                try:
                    cache[key] = token_weights(ids, table)
                except KeyError as err:
                    what = f"prediction {i}" if i < predictions_len else f"reference {i - predictions_len}"
                    raise ValueError(
                        f"idf has no weight for token id {err.args[0]} of {what}: pass a defaultdict, "
                        "capeval.emscore_matching.IdfTable, or a corpus (list of captions) instead"
                    ) from None
            out.append(cache[key])
        return out

    # -- videos ----------------------------------------------------------------------------------------
    def frame_embeddings(self, videos, video_embeds, n: int) -> list[torch.Tensor] | None:
        """Per prediction a (K, D) tensor of L2-normalised frame embeddings, or ``None`` without videos."""
        if videos is not None and video_embeds is not None:
            raise ValueError("pass videos= or video_embeds=, not both")
        if video_embeds is not None:
            return frame_embeddings(video_embeds, n, self.backbone.embed_dim, self.num_frames)
        if videos is None:
            return None
        if isinstance(videos, (str, bytes)):
            raise TypeError("videos must be a list with one video per prediction, got a string")
        check_same_length("videos", videos, n)
        return encode_videos(
            self.backbone,
            videos,
            num_frames=self.num_frames,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            progress=self.progress,
        )

    def signature_options(self, idf_name: str, variant: str, decoded: bool) -> dict[str, object]:
        options: dict[str, object] = {"model": self.backbone.name}
        if self.checkpoint_tag:
            options["checkpoint"] = self.checkpoint_tag
        if variant != TEXT:  # frames are normalised; named only where not OpenAI's constants
            options.update(self.backbone.signature_fields())
        else:  # a family other than CLIP names itself and its text padding (nothing for CLIPModel)
            options.update({k: v for k, v in family_fields(self.backbone).items() if k != "image_resize"})
        options["variant"] = variant.removeprefix("EMScore")
        if variant != TEXT:
            options["num_frames"] = "all" if self.num_frames is None else self.num_frames
        options.update(idf=idf_name, dtype=self.backbone.dtype_name)
        if self.batch_padding != "exclude":  # absent at the default, so existing signatures and caches hold
            options["batch_padding"] = f"{self.batch_padding}:{self.batch_size}"
        if decoded:
            from importlib.metadata import version

            options["av"] = version("av")
        return options

    def _matching(self) -> dict:
        if self.batch_padding == "authors":
            return {"chunk": self.batch_size, "authors_padding": True}
        return {}

    # -- scoring -------------------------------------------------------------------------------------
    def __call__(
        self,
        predictions: Sequence[str],
        references: Sequence[Sequence[str]] | None = None,
        videos: Sequence | None = None,
        video_embeds=None,
    ) -> dict:
        """Score each caption against its video and/or its references.

        Args:
            predictions: candidate captions.
            references: one list of reference captions per prediction, or ``None`` (all-empty lists too).
            videos: one video per prediction: a file path, a list of frames or a (T, H, W, C) array.
            video_embeds: instead of ``videos``, per prediction a (K, D) array of frame embeddings of this
                model (or one (N, K, D) array); sampled by ``num_frames`` and L2-normalised here.

        Returns:
            dict: ``emscore`` (mean full_F of the variant), ``scores`` (per caption), ``variant``,
            ``details`` ({variant: {figr_P, figr_R, figr_F, cogr, full_P, full_R, full_F}} for each variant
            computed), ``signature``.
        """
        predictions, references = self.checked_inputs(predictions, references)
        self.backbone.refresh()  # a model object's weights, as they are for this call
        frames = self.frame_embeddings(videos, video_embeds, len(predictions))
        decoded = videos is not None and any(isinstance(v, (str, os.PathLike)) for v in videos)
        return self.score_frames(predictions, references, frames, decoded)

    def checked_inputs(
        self, predictions: Sequence[str], references: Sequence[Sequence[str]] | None
    ) -> tuple[list[str], list[list[str]] | None]:
        """The captions and references as scoring takes them (all-empty references mean none).

        Raises:
            ValueError, TypeError: no predictions, or a caption or reference list that is refused, by index.
        """
        predictions = check_predictions(predictions)
        if not predictions:
            raise ValueError("no predictions to score")
        return predictions, _optional_references(references, len(predictions))

    def score_frames(
        self,
        predictions: list[str],
        references: list[list[str]] | None,
        frames: list[torch.Tensor] | None,
        decoded: bool = False,
    ) -> dict:
        """The scoring half, for engines that encode the videos themselves (several processes): the captions'
        token embeddings are this metric's own, the frames are given.

        Args:
            predictions, references: from ``checked_inputs``.
            frames: per prediction its (K, D) L2-normalised frame embeddings of this metric's backbone
                (``frame_embeddings``), or None (EMScore(X,X*)).
            decoded: the frames were decoded from video files (PyAV's version then enters the signature).

        Returns:
            dict: as ``__call__``.
        """
        n = len(predictions)
        if frames is None and references is None:
            raise ValueError("emscore needs videos= (or video_embeds=), references=, or both")

        flat_refs = [r for refs in references for r in refs] if references else []
        pooled, tokens, ids = encode_text_tokens(
            self.backbone,
            predictions + flat_refs,
            prefix=None,
            batch_size=self.batch_size,
            progress=self.progress,
        )
        table, idf_name = self._idf_table(ids[:n], ids[n:])
        weights = self._weights(ids, table, n)

        details: dict[str, dict[str, torch.Tensor]] = {}
        if references is not None:
            owner = torch.tensor([i for i, refs in enumerate(references) for _ in refs], dtype=torch.long)
            pairs = torch.stack([owner, torch.arange(n, n + len(flat_refs))], dim=1)
            p, r, f = fine_grained_text(tokens, weights, tokens, weights, pairs, **self._matching())
            cos = coarse(pooled[owner], pooled[n:])
            maxed = [best_per_candidate(v, owner, n) for v in (p, r, f, cos)]
            details[TEXT] = full_scores(*maxed)
        if frames is not None:
            pairs = torch.stack([torch.arange(n), torch.arange(n)], dim=1)
            p, r, f = fine_grained_video(tokens, weights, frames, pairs, **self._matching())
            vid = torch.stack([video_embedding(fr) for fr in frames])
            details[VIDEO] = full_scores(p, r, f, coarse(pooled[:n], vid))
        if frames is not None and references is not None:
            details[BOTH] = combine_variants(details[VIDEO], details[TEXT])
        variant = BOTH if BOTH in details else (VIDEO if VIDEO in details else TEXT)

        per = details[variant]["full_F"]
        return {
            self.name: float(per.mean()),
            "scores": per.tolist(),
            "variant": variant,
            "details": {name: {k: d[k].tolist() for k in DETAIL_KEYS} for name, d in details.items()},
            "signature": build_signature(
                self.name, self.signature_options(idf_name, variant, decoded), ("transformers", "torch")
            ),
        }


SPEC = MetricSpec(
    name="emscore",
    label="EMScore",
    scorer=EMScore,
    result_keys=("emscore", "scores", "variant", "details", "signature"),
    options=(
        Option("model", None, "Shi et al. 2022: the CLIP of the checkpoint, else ViT-B/32"),
        Option("device", None, "capeval: the first GPU if any, else the CPU", signed=False),
        Option("dtype", "float32", "capeval: the authors' precision"),
        Option("batch_size", BATCH_SIZE, "capeval", signed=False),
        Option("num_frames", NUM_FRAMES, "Shi et al. 2022, emscore/utils.py: every frame"),
        Option("idf", True, "Shi et al. 2022: IDF from the references, else the candidates"),
        Option("checkpoint", None, "capeval: PAC-S weights for the CLIP backbone (PAC-S's EMScore)"),
        Option("num_workers", None, "capeval: video-decoding threads", signed=False, in_module=False),
        Option("progress", None, "capeval: a bar on a terminal", signed=False, in_module=False),
        Option("batch_padding", "exclude", "capeval: padding tokens left out (the authors' code counts them)"),
    ),
    videos="optional",
    references="optional",
    per_item=False,  # IDF weights come from the whole call's references
    outputs=(
        # The reference-only variant: VATEX-EVAL without videos. IDF comes from the call's references.
        Output("emscore", "EMScore(X,X*)", uses_references=True,
               note="every benchmark with references, as the reference-only EMScore(X,X*); on VATEX-EVAL the 1- "
               "and 9-reference columns (the videos are not read: EMScore(X,V) and (X,V,X*) are not run by the "
               "harness)"),
    ),
)  # fmt: skip

SPECS = (SPEC,)


__all__ = ["EMScore", "IdfTable", "VIDEO", "TEXT", "BOTH", "BATCH_PADDING"]
