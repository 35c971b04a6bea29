"""CLIPScore and RefCLIPScore (Hessel et al., EMNLP 2021) as plain callables.

``CLIPScore(model=...)(predictions, images=...)`` returns the same dict as the evaluate module; the
module, the CLI, the Spaces and the Trainer hooks are thin layers over these two classes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from capeval.clip.backbones import DEFAULT_MODEL, Backbone, load_backbone
from capeval.clip.batching import BATCH_SIZE
from capeval.clip.image_encoding import encode_images
from capeval.clip.text_encoding import encode_texts
from capeval.diagnostics.categories import HarmonicMeanWarning, user_stacklevel
from capeval.registry import MetricSpec, Option, Output
from capeval.scores import (
    NEAR_ZERO_DENOMINATOR,
    W_CLIP_S,
    best_reference_cosine,
    clip_s,
    near_zero_denominators,
    ref_clip_s,
)
from capeval.signature import build_signature
from capeval.validation import (
    check_options,
    check_predictions,
    check_references,
    check_same_length,
)


def as_embeddings(embeds, n: int, dim: int, name: str) -> torch.Tensor:
    """Precomputed embeddings (N, D) as an L2-normalised float32 tensor, checked against the model.

    Raises:
        TypeError: not a tensor, array or list of rows of real numbers (a row that is a string, text in a row,
            complex or boolean values).
        ValueError: a shape other than (N, D), or a row holding NaN or inf.
    """
    if isinstance(embeds, (list, tuple)):
        for i, row in enumerate(embeds):
            if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
                raise TypeError(f"{name} row {i} is {type(row).__name__}, expected a list of {dim} numbers")
        try:
            # No dtype here: numpy would quietly read the text "0.5" as a number.
            embeds = np.asarray(embeds)
        except (ValueError, TypeError) as err:
            raise TypeError(f"{name} must be a (N, D) array of numbers: {err}") from None
    if isinstance(embeds, np.ndarray):
        if not (np.issubdtype(embeds.dtype, np.floating) or np.issubdtype(embeds.dtype, np.integer)):
            raise TypeError(f"{name} must be a (N, D) array of real numbers, got dtype {embeds.dtype}")
        embeds = torch.from_numpy(np.asarray(embeds, dtype=np.float32))
    if not isinstance(embeds, torch.Tensor):
        raise TypeError(f"{name} must be a (N, D) tensor or array, got {type(embeds).__name__}")
    if embeds.is_complex() or embeds.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers, got a {embeds.dtype} tensor")
    embeds = embeds.detach().float().cpu()
    if embeds.ndim != 2 or embeds.shape != (n, dim):
        raise ValueError(
            f"{name} has shape {tuple(embeds.shape)}; expected ({n}, {dim}) for {n} predictions and this model"
        )
    bad = ~torch.isfinite(embeds).all(dim=1)
    if bad.any():
        raise ValueError(f"{name} row {int(torch.nonzero(bad)[0])} holds NaN or inf")
    return F.normalize(embeds, dim=-1)


class CLIPScore:
    """Reference-free CLIP-S: w * max(cos(E_image, E_text), 0) per caption, corpus score = mean.

    Args:
        model: CLIP backbone, Hub id or local folder, or a model object with its processor,
            ``(model, processor)`` (``capeval.clip.in_memory``: scored as it is at each call, never cached).
        device: ``None`` = first GPU if any, else CPU.
        dtype: ``"float32"`` (default), ``"float16"`` or ``"bfloat16"``.
        batch_size: encoder batch size (halved automatically on GPU out-of-memory).
        prefix: prompt joined before every caption, as the authors' code does (no ``|``: it goes into the
            signature). ``None`` (default): the model family's, ``"A photo depicts"`` (``PREFIX``) for English
            models, ``""`` for multilingual and Chinese ones (``capeval.clip.families``).
        w: rescaling weight, a finite number > 0.
        num_workers: threads reading images ahead of the model (``None``: chosen by device).
        progress: progress bars (``None``: only for long runs on a terminal).

    Raises:
        TypeError, ValueError: an option of the wrong type or out of range, named (``validation.check_options``),
            before the model is loaded.
    """

    name = "clipscore"

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: str | None = None,
        dtype: str = "float32",
        batch_size: int = BATCH_SIZE,
        prefix: str | None = None,
        w: float = W_CLIP_S,
        num_workers: int | None = None,
        progress: bool | None = None,
        checkpoint: str | None = None,
    ) -> None:
        # Every option is checked before the model loads: a bad one costs nothing. Device and dtype are resolved
        # together, once: the backbone is loaded onto what they resolved to (a '|' in the name of the folder a link
        # leads to is refused there, where the backbone is named).
        options = check_options(
            model=model,
            checkpoint=checkpoint,
            placement=(device, dtype),
            batch_size=batch_size,
            prefix=prefix,
            w=w,
            num_workers=num_workers,
            progress=progress,
        )
        self.backbone: Backbone = load_backbone(model, checkpoint=checkpoint, placement=options["placement"])
        self.batch_size = options["batch_size"]
        # An English prompt means nothing to a multilingual or Chinese text tower: its family's default is "".
        self.prefix = (
            options["prefix"] if options["prefix"] is not None else self.backbone.family.default_prefix
        )
        self.w = options["w"]
        self.num_workers = options["num_workers"]
        self.progress = options["progress"]

    def signature_options(self) -> dict[str, object]:
        options: dict[str, object] = {"model": self.backbone.name}
        if self.backbone.weights:
            options["checkpoint"] = self.backbone.weights
        # image_mean/image_std only where they are not OpenAI's: signatures of OpenAI-normalised models unchanged.
        options.update(self.backbone.signature_fields())
        options.update(prefix=self.prefix, w=self.w, dtype=self.backbone.dtype_name)
        return options

    @property
    def signature(self) -> str:
        return build_signature(self.name, self.signature_options())

    def image_embeddings(self, images: Sequence | None, image_embeds, n: int) -> torch.Tensor:
        """(N, D) L2-normalised image embeddings from images or precomputed embeddings (exactly one)."""
        if (images is None) == (image_embeds is None):
            raise ValueError("pass exactly one of images= (one per prediction) or image_embeds= (N, D)")
        if image_embeds is not None:
            return as_embeddings(image_embeds, n, self.backbone.embed_dim, "image_embeds")
        check_same_length("images", images, n)
        return encode_images(
            self.backbone,
            images,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            progress=self.progress,
        )

    def text_embeddings(self, texts: Sequence[str]) -> torch.Tensor:
        return encode_texts(
            self.backbone, texts, prefix=self.prefix, batch_size=self.batch_size, progress=self.progress
        )

    def __call__(self, predictions: Sequence[str], images: Sequence | None = None, image_embeds=None) -> dict:
        """Score each caption against its image.

        Returns:
            dict: ``clipscore`` (mean), ``scores`` (per caption, input order), ``signature``.
        """
        return self._encode_and_score(predictions, None, images, image_embeds)

    def _encode_and_score(self, predictions, references, images, image_embeds) -> dict:
        """A call: the inputs checked, the images and texts encoded by this metric, the embeddings scored."""
        predictions, references = self.checked_inputs(predictions, references)
        self.backbone.refresh()  # a model object's weights, as they are for this call
        image_emb = self.image_embeddings(images, image_embeds, len(predictions))
        text_emb, reference_emb = self.caption_and_reference_embeddings(predictions, references)
        return self.score_embeddings(image_emb, text_emb, reference_emb)

    def checked_inputs(
        self, predictions: Sequence[str], references: Sequence[Sequence[str]] | None = None
    ) -> tuple[list[str], list[list[str]] | None]:
        """The captions (and references, where this metric reads them) as scoring takes them; CLIP-S reads no
        references (``None`` comes back).

        Raises:
            ValueError, TypeError: no predictions, or a caption or reference list refused, by index.
        """
        predictions = check_predictions(predictions)
        if not predictions:
            raise ValueError("no predictions to score")
        return predictions, None

    def caption_and_reference_embeddings(
        self,
        predictions: Sequence[str],
        references: Sequence[Sequence[str]] | None,
        encode_texts: Callable[[list[str]], torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """(N, D) caption embeddings and, where ``references`` are given, per prediction its (k_i, D) reference
        embeddings, from one pass of the text encoder over both (a string given as a caption and a reference is
        encoded once).

        Args:
            encode_texts: texts -> (M, D) embeddings with this metric's prompt (default ``text_embeddings``);
                an engine passes its own (a cache, several processes).
        """
        encode = encode_texts or self.text_embeddings
        if references is None:
            return encode(list(predictions)), None
        flat_refs = [r for refs in references for r in refs]
        text_emb = encode(list(predictions) + flat_refs)
        n = len(predictions)
        sizes = [len(refs) for refs in references]
        return text_emb[:n], list(torch.split(text_emb[n:], sizes))

    def score_embeddings(
        self,
        image_emb: torch.Tensor,
        text_emb: torch.Tensor,
        reference_emb: Sequence[torch.Tensor] | None = None,
    ) -> dict:
        """The scoring half, for engines that encode themselves (caches, several processes, shared encodings).

        Args:
            image_emb (torch.Tensor): (N, D) L2-normalised image embeddings of this metric's backbone.
            text_emb (torch.Tensor): (N, D) L2-normalised caption embeddings (``text_embeddings``: the prompt
                prefix applied).
            reference_emb: unused by CLIP-S (every image metric takes it, so engines call them alike).

        Returns:
            dict: as ``__call__``.
        """
        per = clip_s(image_emb, text_emb, w=self.w)
        return {self.name: float(per.mean()), "scores": per.tolist(), "signature": self.signature}


class RefCLIPScore(CLIPScore):
    """RefCLIP-S: harmonic mean of CLIP-S and the best-reference cosine (Hessel et al. 2021, eq. 2).

    References are embedded with the same prompt prefix as the candidates, as in the authors' code,
    and the text side is neither clipped nor rescaled unless ``clip_reference_cosine=True`` (the paper's
    formula). Extra args over ``CLIPScore``: ``clip_reference_cosine``.
    """

    name = "refclipscore"

    def __init__(self, *args, clip_reference_cosine: bool = False, **kwargs) -> None:
        check_options(clip_reference_cosine=clip_reference_cosine)
        super().__init__(*args, **kwargs)
        self.clip_reference_cosine = bool(clip_reference_cosine)

    def signature_options(self) -> dict[str, object]:
        return {**super().signature_options(), "clip_reference_cosine": self.clip_reference_cosine}

    def __call__(
        self,
        predictions: Sequence[str],
        references: Sequence[Sequence[str]] | None = None,
        images: Sequence | None = None,
        image_embeds=None,
    ) -> dict:
        """Score each caption against its image and its references.

        Returns:
            dict: ``refclipscore`` (mean), ``scores`` (RefCLIP-S per caption), ``clip_s`` (mean CLIP-S of the
            same captions), ``clip_s_scores`` (CLIP-S per caption), ``signature``. (The CLIP-S part is not named
            ``clipscore``: beside the clipscore module in ``evaluate.combine``, its keys would collide.)
        """
        return self._encode_and_score(predictions, references, images, image_embeds)

    def checked_inputs(
        self, predictions: Sequence[str], references: Sequence[Sequence[str]] | None = None
    ) -> tuple[list[str], list[list[str]] | None]:
        """The captions and their references, checked; references are required.

        Raises:
            ValueError, TypeError: no predictions or no references, or an item refused, by index.
        """
        predictions, _ = super().checked_inputs(predictions)
        if references is None:
            raise ValueError(
                f"{self.name} needs references (one list per prediction); use clipscore without them"
            )
        return predictions, check_references(references, len(predictions))

    def score_embeddings(
        self,
        image_emb: torch.Tensor,
        text_emb: torch.Tensor,
        reference_emb: Sequence[torch.Tensor] | None = None,
    ) -> dict:
        """The scoring half, for engines that encode themselves (caches, several processes, shared encodings).

        Args:
            image_emb (torch.Tensor): (N, D) L2-normalised image embeddings of this metric's backbone.
            text_emb (torch.Tensor): (N, D) L2-normalised caption embeddings (the prompt prefix applied).
            reference_emb: per prediction, its (k_i, D) L2-normalised reference embeddings (k_i >= 1), encoded
                as the captions are.

        Returns:
            dict: as ``__call__``.

        Raises:
            ValueError: no reference embeddings, or not one entry per prediction.
        """
        references = check_reference_embeddings(self.name, reference_emb, len(text_emb))
        clip_per, per = reference_recipe(
            image_emb, text_emb, references, self.w, self.clip_reference_cosine, REFCLIP_S_NAMES
        )
        return {
            self.name: float(per.mean()),
            "scores": per.tolist(),
            "clip_s": float(clip_per.mean()),
            "clip_s_scores": clip_per.tolist(),
            "signature": self.signature,
        }


@dataclass(frozen=True)
class HarmonicNames:
    """How a harmonic-mean metric and its parts are named in its warning."""

    metric: str  # RefCLIP-S
    image_side: str  # CLIP-S
    equation: str  # where the paper writes the clipped formula


REFCLIP_S_NAMES = HarmonicNames("RefCLIP-S", "CLIP-S", "eq. 2")  # Hessel et al. 2021


def check_reference_embeddings(name: str, reference_emb, n: int) -> Sequence[torch.Tensor]:
    """``reference_emb``, one entry per caption, or a refusal naming the metric.

    Raises:
        ValueError: no reference embeddings, or not one entry per caption.
    """
    if reference_emb is None or len(reference_emb) != n:
        given = "none" if reference_emb is None else len(reference_emb)
        raise ValueError(f"{name} needs the reference embeddings of each of the {n} captions, got {given}")
    return reference_emb


def reference_recipe(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    reference_emb: Sequence[torch.Tensor],
    w: float,
    clip_reference_cosine: bool,
    names: HarmonicNames,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RefCLIP-S's recipe (RefPAC-S's too): CLIP-S per caption, and its harmonic mean with the best-reference
    cosine, warning where the mean's terms nearly cancel.

    Args:
        image_emb (torch.Tensor): (N, D) L2-normalised image embeddings.
        text_emb (torch.Tensor): (N, D) L2-normalised caption embeddings.
        reference_emb: per caption, its (k_i, D) L2-normalised reference embeddings (k_i >= 1).
        w: the CLIP-S weight.
        clip_reference_cosine: the paper's max(0, cosine) instead of the authors' unclipped cosine.
        names: the metric's names in its warning.

    Returns:
        tuple: (N,) CLIP-S and (N,) harmonic means.
    """
    n = len(text_emb)
    owner = torch.cat([torch.full((len(r),), i, dtype=torch.long) for i, r in enumerate(reference_emb)])
    ref_emb = torch.cat(list(reference_emb)) if n else text_emb[:0]
    clip_per = clip_s(image_emb, text_emb, w=w)
    best = best_reference_cosine(text_emb, ref_emb, owner, n)
    per = ref_clip_s(clip_per, best, clip_reference_cosine=clip_reference_cosine)
    text_side = best.clamp(min=0) if clip_reference_cosine else best
    _warn_near_zero_denominators(clip_per, text_side, per, clip_reference_cosine, names)
    return clip_per, per


def _warn_near_zero_denominators(image_side, text_side, per, clip_reference_cosine: bool, names) -> None:
    """Warn, naming the items, where the harmonic mean's terms nearly cancel (the authors' formula, kept)."""
    items = near_zero_denominators(image_side, text_side).tolist()
    if not items:
        return
    ref, plain = names.metric, names.image_side
    shown = "; ".join(
        f"item {i}: {plain} {float(image_side[i]):.4g}, best-reference cosine {float(text_side[i]):.4g}, "
        f"{ref} {float(per[i]):.4g}"
        for i in items[:5]
    )
    more = f" (and {len(items) - 5} more: items {items[5:25]})" if len(items) > 5 else ""
    fix = (
        f"; clip_reference_cosine=True gives the paper's formula ({names.equation}), which clips the cosine at 0"
        if not clip_reference_cosine
        else ""
    )
    warnings.warn(
        f"{ref}: {plain} + best-reference cosine is near zero for {len(items)} item(s) (|sum| < "
        f"{NEAR_ZERO_DENOMINATOR:g} x (|{plain}| + |cosine|)), where the authors' harmonic mean 2ab/(a+b) "
        f"leaves the range of its terms: {shown}{more}{fix}",
        HarmonicMeanWarning,
        stacklevel=user_stacklevel(),
    )


_CLIP_OPTIONS = (
    Option("model", DEFAULT_MODEL, "Hessel et al. 2021 report CLIP-S with ViT-B/32"),
    Option("device", None, "capeval: the first GPU if any, else the CPU", signed=False),
    Option("dtype", "float32", "capeval: the authors' precision"),
    Option("batch_size", BATCH_SIZE, "capeval", signed=False),
    Option("prefix", None, "Hessel et al. 2021, sec. 3 ('A photo depicts'), or the model family's prompt"),
    Option("w", W_CLIP_S, "Hessel et al. 2021, sec. 3"),
    Option("num_workers", None, "capeval: image-reading threads", signed=False, in_module=False),
    Option("progress", None, "capeval: a bar on a terminal", signed=False, in_module=False),
    # The name of run-wide PAC-S weights elsewhere (--checkpoint); here, other weights for the CLIP backbone.
    Option("checkpoint", None, "capeval: the backbone's own weights", in_module=False, run_wide=False),
)
_CLIPSCORE_NOTE = "benchmarks whose images are given (--image-root)"

SPEC = MetricSpec(
    name="clipscore",
    label="CLIPScore",
    scorer=CLIPScore,
    result_keys=("clipscore", "scores", "signature"),
    options=_CLIP_OPTIONS,
    images="required",
    outputs=(Output("clipscore", "CLIP-S", uses_images=True, column="CLIPScore", note=_CLIPSCORE_NOTE),),
)
REF_SPEC = MetricSpec(
    name="refclipscore",
    label="RefCLIPScore",
    scorer=RefCLIPScore,
    result_keys=("refclipscore", "scores", "clip_s", "clip_s_scores", "signature"),
    options=(*_CLIP_OPTIONS, Option("clip_reference_cosine", False, "Hessel et al.'s code: the cosine unclipped")),
    images="required",
    references="required",
    row_columns=("clip_s",),
    outputs=(
        Output("refclipscore", "RefCLIP-S", uses_references=True, uses_images=True, column="RefCLIPScore",
               note=_CLIPSCORE_NOTE),
    ),
)  # fmt: skip
SPECS = (SPEC, REF_SPEC)
