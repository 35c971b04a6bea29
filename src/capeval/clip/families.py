"""Dual-encoder families: which transformers model classes capeval scores with, and each one's conventions.

A family is decided by the ``model_type`` of a model's ``config.json``. Each keeps what it was trained with:

- its image processor's geometry and normalisation, read by transformers itself from the model's
  ``preprocessor_config.json`` (so a key the file omits takes the processor class's default), turned into
  ``capeval.clip.image_geometry.ProcessorGeometry`` and per-channel constants for the fast uint8 path
  (``capeval.clip.image_processors``, decided with the constants in ``capeval.clip.image_constants``);
- its tokenizer, run as it is (its own lower-casing, special tokens, truncation that keeps the closing token),
  with two exceptions: SigLIP 2's released tokenizer files ask for lower-casing (``do_lower_case: true`` in
  ``tokenizer_config.json``; big_vision lower-cased every text before its Gemma tokenizer), and transformers'
  ``GemmaTokenizer`` ignores the flag, so capeval lower-cases (ASCII, as big_vision) before tokenising
  (``lower_cases``; the signature says ``lowercase=ascii``); and SigLIP's captions spelling a special token
  (``<eos>``, ``</s>``, ``<pad>``) are text, as big_vision's SentencePiece read them, where transformers would put
  the special id (``special_tokens_as_text``); what a loaded tokenizer decides (its text length, whether captions
  are lower-cased) is read with the tokenizer's checks in ``capeval.clip.tokenizer_check``;
- its text padding: SigLIP pools the hidden state at the *last* position, a pad token in training (big_vision
  padded every text to 64 tokens and gave the tower no attention mask; transformers' ``SiglipModel`` docs: "make
  sure to set padding='max_length' as that's how the model was trained"), so its texts are padded to the
  tokenizer's length on the tokenizer's side and no mask is passed. The other towers either attend causally and
  pool at end-of-text (CLIP, MetaCLIP 2) or are bidirectional with an attention mask and pool at the first token
  (ALIGN, Chinese-CLIP, AltCLIP): padding cannot change their pooled output, so they are padded to the longest
  caption of a batch, with the mask.

Per-token joint-space embeddings (EMScore's fine-grained matching): in every family here the pooled text embedding
is a linear map applied to the final hidden state of one position (CLIP and MetaCLIP 2: ``text_projection`` of the
layer-normed end-of-text state; SigLIP: ``text_model.head`` of the layer-normed last position; ALIGN, Chinese-CLIP
and AltCLIP: ``text_projection`` of the first, [CLS], state). Applying the same map to every position gives token
embeddings in the space the pooled one lives in, which is how EMScore's authors defined them for CLIP. A family
whose pooling is not such a map has ``token_projection = None`` and EMScore refuses it by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from capeval.clip.image_geometry import ProcessorGeometry
from capeval.clip.tokenization import PREFIX, TOKENIZATION_REVISION, ascii_lower, tokenize_captions_cut


@dataclass(frozen=True)
class Family:
    """What scoring with one transformers model class needs.

    Attributes:
        name: the config's ``model_type`` (``clip``, ``siglip``, ...).
        model_class: the transformers class loaded.
        config_class: its config class.
        text_padding: ``"longest"`` (to the longest caption of a batch, with an attention mask) or
            ``"max_length"`` (to the text length, on the tokenizer's side, no mask: SigLIP).
        multilingual: trained on captions in many languages (or Chinese only): no English prompt by default.
        token_projection: attribute path of the linear map from final hidden states to the joint space
            (``None``: no per-token joint embedding, EMScore refuses the family).
        max_length: the text length its processor pads/truncates to when the tokenizer does not say
            (``None``: the tokenizer's ``model_max_length``).
        positions_after_pad: RoBERTa-style position ids, numbered from ``pad_token_id + 1`` (AltCLIP).
        pools_first: the pooled text state is the first token's ([CLS]), not end-of-text's.
        follows_do_lower_case: the ``do_lower_case`` of its tokenizer files is what it was trained with, and capeval
            lower-cases captions where that says so and the transformers tokenizer does not (``lower_cases``).
        special_text: CLIP's BPE only: whose special-token spellings a caption is read with
            (``capeval.clip.tokenization.tokenize_captions``): ``"openai"``, or ``"open_clip"`` for OpenCLIP files.
        special_tokens_as_text: a caption spelling one of the tokenizer's special tokens (``<eos>``, ``</s>``,
            ``<pad>``) is text, not that token (transformers' ``split_special_tokens``): SentencePiece, which the
            authors tokenised with, never matches its control pieces in text.
        tokenization: the revision of capeval's reading of its captions (``TOKENIZATION_REVISION`` where the last
            change of that reading touched the family), named in signatures from 2 on.
        is_clip: the family is CLIP's (``name == "clip"``).
        default_prefix: the prompt when none is given: CLIP-S's English one, or none for multilingual/Chinese
            models.
    """

    name: str
    model_class: str
    config_class: str
    text_padding: str = "longest"
    multilingual: bool = False
    token_projection: str | None = "text_projection"
    max_length: int | None = None
    positions_after_pad: bool = False
    pools_first: bool = False
    follows_do_lower_case: bool = False
    special_text: str = "openai"
    special_tokens_as_text: bool = False
    tokenization: int = 1
    # Derived once, when the family is declared: read as plain attributes, they cost no call into this module from
    # the code that loads and names a model.
    is_clip: bool = field(init=False, repr=False, compare=False)
    default_prefix: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_clip", self.name == "clip")
        object.__setattr__(self, "default_prefix", "" if self.multilingual else PREFIX)

    def classes(self):
        """(config class, model class) from transformers."""
        import transformers

        try:
            return getattr(transformers, self.config_class), getattr(transformers, self.model_class)
        except AttributeError as err:
            raise ValueError(
                f"model family {self.name} needs transformers' {self.model_class}, which transformers "
                f"{transformers.__version__} installed here lacks: upgrade transformers"
            ) from err


CLIP = Family("clip", "CLIPModel", "CLIPConfig", tokenization=TOKENIZATION_REVISION)
# OpenCLIP weights files (capeval.clip.open_clip_files): a CLIPModel whose captions go through open_clip's tokenizer.
OPEN_CLIP_FILE = Family(
    "clip", "CLIPModel", "CLIPConfig", special_text="open_clip", tokenization=TOKENIZATION_REVISION
)
FAMILIES: dict[str, Family] = {
    "clip": CLIP,  # OpenAI, MetaCLIP (1) and LAION OpenCLIP conversions of any size
    "siglip": Family(
        "siglip",
        "SiglipModel",
        "SiglipConfig",
        text_padding="max_length",
        token_projection="text_model.head",
        follows_do_lower_case=True,
        special_tokens_as_text=True,  # big_vision's SentencePiece (T5's, Gemma's) read "<eos>" as "<", "eos", ">"
        tokenization=TOKENIZATION_REVISION,
    ),  # SigLIP and the fixed-resolution SigLIP 2 checkpoints (model_type "siglip", Gemma tokenizer)
    # AlignProcessor's text defaults: padding="max_length", max_length=64 (transformers processing_align.py).
    "align": Family("align", "AlignModel", "AlignConfig", max_length=64, pools_first=True),
    "chinese_clip": Family(
        "chinese_clip", "ChineseCLIPModel", "ChineseCLIPConfig", multilingual=True, pools_first=True
    ),
    "altclip": Family(
        "altclip",
        "AltCLIPModel",
        "AltCLIPConfig",
        multilingual=True,
        positions_after_pad=True,
        pools_first=True,
    ),
    "metaclip_2": Family("metaclip_2", "MetaClip2Model", "MetaClip2Config", multilingual=True),
}
# Families transformers has but the fixed-size uint8 image pipeline cannot feed, with the reason.
REFUSED: dict[str, str] = {
    "siglip2": (
        "Siglip2Model is SigLIP 2's NaFlex variant: its processor cuts each image into a variable number of "
        "patches at its own aspect ratio (pixel_attention_mask, spatial_shapes), which capeval's fixed-size image "
        "batches do not carry. The fixed-resolution SigLIP 2 checkpoints (google/siglip2-base-patch16-224, ...) "
        "are SiglipModel and are supported"
    ),
}


def family_and_class(config, where: str) -> tuple[Family, type]:
    """The family of a loaded config, by its ``model_type``, and the transformers model class it loads with.

    Raises:
        ValueError: a family capeval refuses (named, with the reason), or one it does not know (the supported
            ones listed), or a model class without ``get_image_features`` and ``get_text_features``.
    """
    model_type = getattr(config, "model_type", None)
    if model_type in REFUSED:
        raise ValueError(
            f"{where} has model_type {model_type!r}, which capeval does not score: {REFUSED[model_type]}"
        )
    family = FAMILIES.get(model_type)
    if family is None:
        known = ", ".join(f"{f.name} ({f.model_class})" for f in FAMILIES.values())
        raise ValueError(
            f"{where} has model_type {model_type!r}: not a dual encoder capeval knows. Supported families: {known}"
        )
    _, model_class = family.classes()
    missing = [m for m in ("get_image_features", "get_text_features") if not hasattr(model_class, m)]
    if missing:
        raise ValueError(f"{where}: {family.model_class} has no {' or '.join(missing)}; capeval needs both")
    return family, model_class


def embed_dim(config) -> int:
    """The joint embedding size: ``projection_dim``, or SigLIP's text ``projection_size``."""
    dim = getattr(config, "projection_dim", None)
    if dim is None:
        dim = config.text_config.projection_size
    return int(dim)


# -- texts -------------------------------------------------------------------------------------------------


def tokenize_texts(backbone, texts: list[str]) -> tuple[list[list[int]], int]:
    """``tokenize_texts_cut``'s ids and how many of the texts were cut to the context length."""
    encoded, cut_rows = tokenize_texts_cut(backbone, texts)
    return encoded, len(cut_rows)


def tokenize_texts_cut(backbone, texts: list[str]) -> tuple[list[list[int]], list[int]]:
    """Token ids of captions for ``backbone`` (prefix already joined) and how many were cut to its length.

    CLIP: the authors' cleaning and BPE (``tokenize_captions``), special-token text read as the family says. Other
    families: their tokenizer as it is, cutting over-long captions with its own truncation (which keeps the closing
    special token), special-token spellings in a caption read as text where the family says so (SigLIP). A backbone whose tokenizer files ask for lower-casing that its tokenizer skips
    (``Backbone.lowercase``: SigLIP 2) has its texts lower-cased first.
    """
    if getattr(backbone, "lowercase", False):
        # Here, before either path (CLIP's word cache included): every caption, reference, prompt and idf text
        # reaches the tokenizer through this function, so none is tokenised un-lowered.
        texts = [ascii_lower(t) for t in texts]
    family = getattr(backbone, "family", CLIP)
    if family.is_clip:
        return tokenize_captions_cut(backbone.tokenizer, texts, backbone.context_length, family.special_text)
    tok, limit = backbone.tokenizer, backbone.context_length
    if not texts:
        return [], []
    as_text = {"split_special_tokens": True} if family.special_tokens_as_text else {}
    encoded = [
        list(x)
        for x in tok(list(texts), add_special_tokens=True, truncation=False, verbose=False, **as_text)[
            "input_ids"
        ]
    ]
    long_rows = [i for i, ids in enumerate(encoded) if len(ids) > limit]
    if long_rows:
        cut = tok(
            [texts[i] for i in long_rows],
            add_special_tokens=True,
            truncation=True,
            max_length=limit,
            **as_text,
        )
        for i, ids in zip(long_rows, cut["input_ids"], strict=True):
            encoded[i] = list(ids)
    return encoded, long_rows


def text_batch(backbone, ids, pad_batch) -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
    """The text tower's inputs for a batch of id sequences: (input_ids (B, L), attention mask or None, the
    position of each sequence's first token).

    Args:
        pad_batch: ``capeval.clip.text_encoding.pad_batch`` (right padding to the longest, with the mask).
    """
    family = getattr(backbone, "family", CLIP)
    tok = backbone.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    if family.text_padding != "max_length":
        input_ids, mask = pad_batch(ids, pad)
        return input_ids, mask, [0] * len(ids)
    length = backbone.context_length
    input_ids = torch.full((len(ids), length), pad, dtype=torch.long)
    left = getattr(tok, "padding_side", "right") == "left"
    starts = []
    for row, x in enumerate(ids):
        start = length - len(x) if left else 0
        input_ids[row, start : start + len(x)] = torch.tensor(x, dtype=torch.long)
        starts.append(start)
    return input_ids, None, starts


def token_projection(backbone):
    """The linear map from the text tower's final hidden states to the joint space (EMScore's token embeddings).

    Raises:
        ValueError: the family has none (named, with the reason).
    """
    family = getattr(backbone, "family", CLIP)
    if family.token_projection is None:
        raise ValueError(
            f"model family {family.name} ({family.model_class}) has no per-token text embedding in the joint space "
            "(its pooled text embedding is not one linear map of a position's hidden state), so EMScore's "
            "fine-grained matching is undefined for it"
        )
    module = backbone.model
    for part in family.token_projection.split("."):
        module = getattr(module, part)
    return module


def pooled_token_id(backbone) -> int:
    """The id of the token whose final state the text tower pools: [CLS] (``<s>``) for towers that pool the first
    token, else end-of-text. EMScore gives it the corpus's mean idf, as its authors give CLIP's end-of-text."""
    family = getattr(backbone, "family", CLIP)
    tok = backbone.tokenizer
    if family.pools_first:
        return tok.cls_token_id if tok.cls_token_id is not None else tok.bos_token_id
    return tok.eos_token_id


def signature_fields(backbone) -> dict[str, str]:
    """What the family changes in a score, for signatures: for families other than CLIP their name, image geometry
    and text padding; for every family its tokenisation revision from 2 on (``Family.tokenization``)."""
    family = getattr(backbone, "family", CLIP)
    fields = {}
    if not family.is_clip:
        fields["family"] = family.name
    # An OpenCLIP file trained with open_clip's "squash" resize is CLIP otherwise, so only the resize is named.
    if isinstance(backbone.image_size, ProcessorGeometry):
        fields["image_resize"] = backbone.image_size.describe()
    if not family.is_clip:
        fields["text"] = f"{family.text_padding}:{backbone.context_length}"
    if getattr(backbone, "lowercase", False):
        # Only where capeval lower-cases and transformers does not (SigLIP 2): other signatures stay as they were.
        fields["lowercase"] = "ascii"
    if family.tokenization > 1:
        fields["tokenization"] = str(family.tokenization)
    return fields
