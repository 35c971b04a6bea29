"""Panels of the image metrics: CLIPScore, RefCLIPScore and PAC-S (with RefPAC-S).

One image, several candidate captions (one per line) and, for the reference variants, reference captions
that every candidate is compared with. The captions are ranked by the metric's per-caption score; the
corpus score is their mean, as the metric computes it for a batch.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import gradio as gr

from capeval.clip.tokenization import PREFIX
from capeval.demo.choices import checkpoint_choices, resolve
from capeval.demo.limits import InputError, check_texts, split_lines
from capeval.demo.panel import ModelPanel, Scored, choice_dropdown
from capeval.demo.render import Row
from capeval.demo.uploads import (
    UploadedImage,
    check_image_header,
    check_resized,
    check_uploaded_file,
)
from capeval.scores import W_CLIP_S, W_PAC_S

_MAX_PREFIX_CHARS = 100
_NO_STAND_IN = (
    "The shapes CLIP that the other Spaces fall back on offline is not offered in their place: it has no "
    "PAC-S weights, so what it would score is not PAC-S."
)


class ImagePanel(ModelPanel):
    """Shared inputs and checks of the image panels."""

    references: str = "none"  # "none", "required" or "optional"
    default_w: float = W_CLIP_S

    def build_inputs(self) -> dict:
        from capeval.demo.models import placeholder_captions

        inputs: dict = {
            "image": UploadedImage(label="Image", limits=self.limits, elem_id="image-input", height=280),
            "captions": gr.Textbox(
                label="Candidate captions (one per line)",
                lines=4,
                placeholder=placeholder_captions(self.model_plan),
                elem_id="captions-input",
            ),
        }
        if self.references != "none":
            optional = " (optional: adds RefPAC-S)" if self.references == "optional" else ""
            inputs["references"] = gr.Textbox(
                label=f"Reference captions of the image, one per line{optional}",
                lines=3,
                elem_id="references-input",
            )
        return inputs

    def _model_options(self) -> dict:
        return {"model": choice_dropdown(self.model_choices(), "CLIP model", "model-option")}

    def build_options(self) -> dict:
        return {
            **self._model_options(),
            "prefix": gr.Textbox(value=PREFIX, label="Prompt prefix", max_length=_MAX_PREFIX_CHARS),
            "w": gr.Number(value=self.default_w, label="w (rescaling weight)", minimum=0.1, maximum=10.0),
        }

    def examples(self) -> tuple[list[str], list[list]]:
        from capeval.demo.examples import EXAMPLE_SCENES, candidate_captions, example_image, references_for

        names = ["image", "captions"] + (["references"] if self.references != "none" else [])
        rows = []
        for scene in EXAMPLE_SCENES:
            row = [str(example_image(scene)), "\n".join(candidate_captions(scene))]
            if self.references != "none":
                row.append("\n".join(references_for(scene)))
            rows.append(row)
        return names, rows

    def _common(self, image, captions, references, prefix, w) -> tuple[str, list[str], list[str], float]:
        if not image:
            raise InputError("Upload an image (or click an example), then Score.")
        path = check_uploaded_file(image, self.limits.max_file_size, "image")
        check_image_header(path, self.limits)
        cands = check_texts(split_lines(captions), "caption", self.limits.max_captions, self.limits)
        refs = check_texts(
            split_lines(references),
            "reference",
            self.limits.max_references,
            self.limits,
            required=self.references == "required",
        )
        if prefix is None or len(prefix) > _MAX_PREFIX_CHARS:
            raise InputError(f"The prompt prefix may have at most {_MAX_PREFIX_CHARS} characters.")
        if w is None or not 0.1 <= float(w) <= 10.0:
            raise InputError("w must be between 0.1 and 10.")
        return str(path), cands, refs, float(w)

    def _check_work(self, path: str, scorer) -> None:
        """Refuse the image when its resize for the scorer's model would handle too many pixels."""
        width, height = check_image_header(Path(path), self.limits)
        check_resized(width, height, scorer.backbone.image_size, self.limits)


class CLIPScorePanel(ImagePanel):
    metric = "clipscore"
    title = "CLIPScore"
    headline = "CLIP-S"
    summary = (
        "Upload an image and type candidate captions, one per line. CLIPScore rates how well each caption "
        "fits the image, without references: w * max(cos, 0) of CLIP's image and text embeddings, from 0 "
        "(unrelated) to w = 2.5; with the paper's ViT-B/32 good captions land around 0.7 to 1. Captions are "
        "ranked best first: compare captions of one image, or corpora scored with the same model."
    )
    scale = W_CLIP_S  # the largest CLIP-S

    def header(self) -> str:
        from capeval.demo.models import PAPER_CLIP_S_SENTENCE, clip_s_scale_sentence

        return self.summary.replace(PAPER_CLIP_S_SENTENCE, clip_s_scale_sentence(self.model_plan))

    def score(self, image=None, captions="", model=None, prefix=PREFIX, w=W_CLIP_S) -> Scored:
        from capeval.clipscore import CLIPScore

        path, cands, _, w = self._common(image, captions, None, prefix, w)
        scorer = self.scorer(model, lambda spec: CLIPScore(model=spec, prefix=prefix, w=w))
        self._check_work(path, scorer)
        result = scorer(cands, images=[path] * len(cands))
        rows = [Row(c, s) for c, s in zip(cands, result["scores"], strict=True)]
        return Scored(rows=rows, corpus=result["clipscore"], result=result)


class RefCLIPScorePanel(ImagePanel):
    metric = "refclipscore"
    title = "RefCLIPScore"
    headline = "RefCLIP-S"
    references = "required"
    scale = None
    summary = (
        "Upload an image, type candidate captions and reference captions (one per line). RefCLIPScore is "
        "the harmonic mean of CLIPScore and the caption's best cosine to a reference in CLIP's text space: "
        "high only when a caption fits both the image and the references. Captions are ranked best first."
    )

    def score(self, image=None, captions="", references="", model=None, prefix=PREFIX, w=W_CLIP_S) -> Scored:
        from capeval.clipscore import RefCLIPScore

        path, cands, refs, w = self._common(image, captions, references, prefix, w)
        scorer = self.scorer(model, lambda spec: RefCLIPScore(model=spec, prefix=prefix, w=w))
        self._check_work(path, scorer)
        result = scorer(cands, [refs] * len(cands), images=[path] * len(cands))
        rows = [
            Row(c, s, {"CLIP-S": cs})
            for c, s, cs in zip(cands, result["scores"], result["clip_s_scores"], strict=True)
        ]
        return Scored(
            rows=rows,
            corpus=result["refclipscore"],
            corpus_extra={"CLIP-S": result["clip_s"]},
            result=result,
        )


class PACScorePanel(ImagePanel):
    metric = "pacscore"
    title = "PAC-S"
    headline = "PAC-S"
    references = "optional"
    default_w = W_PAC_S
    summary = (
        "Upload an image and type candidate captions (one per line); add references for RefPAC-S. PAC-S is "
        "CLIPScore computed with CLIP fine-tuned by positive-augmented contrastive learning, w = 2. "
        "Captions are ranked by PAC-S, best first."
    )
    scale = W_PAC_S  # the largest PAC-S

    def banner(self) -> str | None:
        return None  # PAC-S scores with its own weights or not at all: no CLIP stands in (see notice)

    @cached_property
    def checkpoint_problem(self) -> str | None:
        """Why the configured PAC-S weights cannot be used now (decided once, at start-up), or ``None``."""
        from capeval.demo.models import checkpoint_problem

        choices = checkpoint_choices()
        return checkpoint_problem(choices[0].spec) if choices else None

    def notice(self) -> str | None:
        if checkpoint_choices():
            if self.checkpoint_problem is None:
                return None
            return f"**PAC-S cannot score on this server now**: {self.checkpoint_problem}. {_NO_STAND_IN}"
        from capeval.clip.checkpoints.load import missing_checkpoint_help

        return (
            "**PAC-S weights are not configured on this server**, so scoring will refuse to run. "
            f"{missing_checkpoint_help()} The operator sets `CAPEVAL_DEMO_CHECKPOINT` to them. {_NO_STAND_IN}"
        )

    def build_options(self) -> dict:
        return {
            "checkpoint": choice_dropdown(checkpoint_choices(), "PAC-S checkpoint", "checkpoint-option"),
            "prefix": gr.Textbox(value=PREFIX, label="Prompt prefix", max_length=_MAX_PREFIX_CHARS),
            "w": gr.Number(value=self.default_w, label="w (rescaling weight)", minimum=0.1, maximum=10.0),
        }

    def score(
        self, image=None, captions="", references="", checkpoint=None, prefix=PREFIX, w=W_PAC_S
    ) -> Scored:
        from capeval.pacscore import PACScore

        path, cands, refs, w = self._common(image, captions, references, prefix, w)
        choices = checkpoint_choices()
        if not choices:
            from capeval.clip.checkpoints.load import missing_checkpoint_help

            raise InputError(missing_checkpoint_help())
        spec = resolve(choices, checkpoint, "checkpoint").spec
        if self.checkpoint_problem is not None:
            raise InputError(f"PAC-S cannot score on this server now: {self.checkpoint_problem}.")
        scorer = PACScore(checkpoint=spec, prefix=prefix, w=w)
        self._check_work(path, scorer)
        n = len(cands)
        result = scorer(cands, [refs] * n if refs else None, images=[path] * n)
        if refs:
            rows = [
                Row(c, s, {"RefPAC-S": r})
                for c, s, r in zip(cands, result["scores"], result["refpacscore_scores"], strict=True)
            ]
            extra = {"RefPAC-S": result["refpacscore"]}
        else:
            rows = [Row(c, s) for c, s in zip(cands, result["scores"], strict=True)]
            extra = {}
        return Scored(rows=rows, corpus=result["pacscore"], corpus_extra=extra, result=result)
