"""PAC-S and RefPAC-S (Sarto et al., CVPR 2023) as a plain callable (weights conversion: ``capeval.clip.checkpoints``).

PAC-S is CLIP-S computed with CLIP whose two final projections were fine-tuned by positive-augmented
contrastive learning: PAC-S(c, v) = w * max(cos(E_c, E_v), 0) with w = 2.0, and RefPAC-S the harmonic mean
of PAC-S and the best cosine between the candidate and its references. As in the authors' code
(``evaluation/pac_score/pac_score.py``), candidates and references both get the prompt "A photo depicts",
images get the preprocessing of the model the weights were fine-tuned from (ViT-B/32: OpenAI's CLIP mean/std;
OpenCLIP ViT-L/14 laion2b_s32b_b82k: mean = std = 0.5, from open_clip's pretrained table, as the authors'
``compute_metrics.py`` gets it from ``open_clip.create_model_and_transforms``), and the reference side is neither
clipped nor rescaled (``RefPACScore`` in ``pac_score.py`` takes ``np.max`` of the raw cosines) unless
``clip_reference_cosine=True`` gives the paper's eq. 5-6, which clip it at 0.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from capeval.clip.batching import BATCH_SIZE
from capeval.clip.checkpoints.layout import base_model_for
from capeval.clip.checkpoints.load import checkpoint_geometry, missing_checkpoint_help
from capeval.clip.checkpoints.locate import resolve_checkpoint
from capeval.clip.tokenization import PREFIX
from capeval.clipscore import CLIPScore, HarmonicNames, check_reference_embeddings, reference_recipe
from capeval.registry import MetricSpec, Option, Output
from capeval.scores import W_PAC_S, clip_s
from capeval.validation import check_options, check_references, check_signature_text

REFPAC_S_NAMES = HarmonicNames("RefPAC-S", "PAC-S", "eq. 5-6")  # Sarto et al. 2023


class PACScore(CLIPScore):
    """PAC-S per caption, and RefPAC-S when references are given.

    Args:
        checkpoint: PAC-S weights: the authors' ``.pth``, a converted folder, a Hub repo ``org/name`` or a
            Hub file ``org/name/file.pth``. Required: there is no PAC-S without them.
        model: the CLIP the weights go into (its config, tokenizer and preprocessing). ``None`` picks it
            from the checkpoint: the converted folder itself, or for a ``.pth`` the model the published
            checkpoint of that architecture was fine-tuned from (ViT-B/32: ``openai/clip-vit-base-patch32``,
            ViT-L/14: ``laion/CLIP-ViT-L-14-laion2B-s32B-b82K``).
        device, dtype, batch_size, prefix, w, num_workers, progress: as for ``CLIPScore``; ``w`` defaults
            to 2.0.
        clip_reference_cosine: RefPAC-S with max(0, best-reference cosine) as the paper's eq. 5-6 write it;
            ``False`` (default) keeps the authors' code, unclipped. Named in the signature only when ``True``.

    Raises:
        ValueError: no checkpoint (the message says where to get one), or one that does not fit ``model``.
        FileNotFoundError: the checkpoint is not where it was said to be.
    """

    name = "pacscore"

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
    ) -> None:
        if checkpoint is None:
            raise ValueError(missing_checkpoint_help())
        # The options first: reading the checkpoint (below) is already work a bad option should not cost.
        check_options(
            checkpoint=checkpoint,
            model=model,
            device=device,
            dtype=dtype,
            batch_size=batch_size,
            prefix=prefix,
            w=w,
            num_workers=num_workers,
            progress=progress,
            clip_reference_cosine=clip_reference_cosine,
        )
        resolved = resolve_checkpoint(checkpoint)
        check_signature_text("checkpoint", resolved.tag)
        options = dict(
            device=device,
            dtype=dtype,
            batch_size=batch_size,
            prefix=prefix,
            w=w,
            num_workers=num_workers,
            progress=progress,
        )
        if resolved.kind == "model_folder" and model is None:
            # A converted checkpoint is a whole model: load it as one, nothing goes on top.
            super().__init__(model=str(resolved.path), **options)
            self.checkpoint_tag = resolved.tag
            self.model_name = self.checkpoint_tag
        else:
            if model is None:
                model = base_model_for(checkpoint_geometry(resolved))
            super().__init__(model=model, checkpoint=os.fspath(checkpoint), **options)
            self.checkpoint_tag = self.backbone.weights
            self.model_name = self.backbone.name
        self.clip_reference_cosine = bool(clip_reference_cosine)

    def signature_options(self) -> dict[str, object]:
        options: dict[str, object] = {"model": self.model_name, "checkpoint": self.checkpoint_tag}
        options.update(self.backbone.signature_fields())
        options.update(prefix=self.prefix, w=self.w, dtype=self.backbone.dtype_name)
        if self.clip_reference_cosine:  # only when set: signatures from before the option stay valid
            options["clip_reference_cosine"] = True
        return options

    def __call__(
        self,
        predictions: Sequence[str],
        references: Sequence[Sequence[str]] | None = None,
        images: Sequence | None = None,
        image_embeds=None,
    ) -> dict:
        """Score each caption against its image, and against its references when given.

        Returns:
            dict: ``pacscore`` (mean PAC-S), ``scores`` (PAC-S per caption); with references also
            ``refpacscore`` (mean RefPAC-S) and ``refpacscore_scores``; ``signature``.
        """
        return self._encode_and_score(predictions, references, images, image_embeds)

    def checked_inputs(
        self, predictions: Sequence[str], references: Sequence[Sequence[str]] | None = None
    ) -> tuple[list[str], list[list[str]] | None]:
        """The captions and, when given, their references, checked (PAC-S alone without them).

        Raises:
            ValueError, TypeError: no predictions, or an item refused, by index.
        """
        predictions, _ = super().checked_inputs(predictions)
        if references is None:
            return predictions, None
        return predictions, check_references(references, len(predictions))

    def score_embeddings(
        self,
        image_emb: torch.Tensor,
        text_emb: torch.Tensor,
        reference_emb: Sequence[torch.Tensor] | None = None,
    ) -> dict:
        """The scoring half (see ``CLIPScore.score_embeddings``): PAC-S, and RefPAC-S where ``reference_emb``
        (per prediction, its (k_i, D) reference embeddings) is given."""
        if reference_emb is None:
            per = clip_s(image_emb, text_emb, w=self.w)
            return {"pacscore": float(per.mean()), "scores": per.tolist(), "signature": self.signature}
        references = check_reference_embeddings(self.name, reference_emb, len(text_emb))
        pac_per, refpac_per = reference_recipe(
            image_emb, text_emb, references, self.w, self.clip_reference_cosine, REFPAC_S_NAMES
        )
        return {
            "pacscore": float(pac_per.mean()),
            "scores": pac_per.tolist(),
            "refpacscore": float(refpac_per.mean()),
            "refpacscore_scores": refpac_per.tolist(),
            "signature": self.signature,
        }


_NOTE = "benchmarks whose images are given (--image-root)"
SPEC = MetricSpec(
    name="pacscore",
    label="PACScore",
    scorer=PACScore,
    result_keys=("pacscore", "scores", "refpacscore", "refpacscore_scores", "signature"),
    options=(
        Option("checkpoint", None, "Sarto et al. 2023: the authors' released weights",
               required="the authors' weights"),
        Option("model", None, "the base model the checkpoint names"),
        Option("device", None, "capeval: the first GPU if any, else the CPU", signed=False),
        Option("dtype", "float32", "capeval: the authors' precision"),
        Option("batch_size", BATCH_SIZE, "capeval", signed=False),
        Option("prefix", PREFIX, "Sarto et al. 2023's code: CLIP-S's prompt"),
        Option("w", W_PAC_S, "Sarto et al. 2023, sec. 4"),
        Option("num_workers", None, "capeval: image-reading threads", signed=False, in_module=False),
        Option("progress", None, "capeval: a bar on a terminal", signed=False, in_module=False),
        Option("clip_reference_cosine", False, "Sarto et al.'s code: the cosine unclipped"),
    ),
    images="required",
    references="optional",
    outputs=(
        Output("pacscore", "PAC-S", uses_images=True, column="PAC-S", note=_NOTE),
        Output("refpacscore", "RefPAC-S", "refpacscore_scores", uses_references=True, uses_images=True,
               column="RefPAC-S", note=_NOTE),
    ),
    row_columns=("refpacscore",),  # written only for rows with references
)  # fmt: skip
SPECS = (SPEC,)
