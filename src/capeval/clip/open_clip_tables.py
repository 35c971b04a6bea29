"""open_clip's ViT CLIP architectures and pretrained tags, as far as they decide a transformers ``CLIPModel``.

Read from mlfoundations/open_clip at commit 89fb801: ``src/open_clip/model_configs/<name>.json`` for the
architectures, ``src/open_clip/pretrained.py`` for the tags (``_pcfg``: OpenAI's mean/std, bicubic, resize the
shorter side and centre-crop, unless a tag says otherwise) and ``model.py`` for the defaults a config leaves out
(``CLIPVisionCfg.head_width = 64``, ``mlp_ratio = 4.0``; ``nn.LayerNorm``'s eps 1e-5; ``nn.GELU`` unless
``quick_gelu``).

Only what a state dict cannot say is here: attention heads (vision ``width // head_width``, text ``heads``) and
the activation; widths, depths, patch and MLP sizes are read from the tensors and checked against the entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from capeval.clip.image_constants import (
    INCEPTION_IMAGE_MEAN,
    INCEPTION_IMAGE_STD,
    OPENAI_IMAGE_MEAN,
    OPENAI_IMAGE_STD,
)

OPEN_CLIP_COMMIT = "89fb801"  # mlfoundations/open_clip, where the tables below were read
LAYER_NORM_EPS = 1e-5  # open_clip model.py: torch.nn.LayerNorm's default
HEAD_WIDTH = 64  # open_clip CLIPVisionCfg.head_width default
QUICKGELU_SUFFIX = "-quickgelu"  # open_clip's model_configs: the same architecture with QuickGELU


@dataclass(frozen=True)
class OpenClipArchitecture:
    """One ``model_configs/<name>.json`` of a ViT CLIP transformers' ``CLIPModel`` can hold."""

    embed_dim: int
    image_size: int
    patch_size: int
    vision_width: int
    vision_layers: int
    vision_head_width: int
    text_width: int
    text_heads: int
    text_layers: int
    context_length: int = 77
    vocab_size: int = 49408
    quick_gelu: bool = False

    @property
    def vision_heads(self) -> int:
        return self.vision_width // self.vision_head_width


def _arch(embed, image, patch, v_width, v_layers, t_width, t_heads, t_layers, head_width=HEAD_WIDTH):
    return OpenClipArchitecture(
        embed, image, patch, v_width, v_layers, head_width, t_width, t_heads, t_layers
    )


_BASE_ARCHITECTURES: dict[str, OpenClipArchitecture] = {
    "ViT-B-32": _arch(512, 224, 32, 768, 12, 512, 8, 12),
    "ViT-B-32-256": _arch(512, 256, 32, 768, 12, 512, 8, 12),
    "ViT-B-16": _arch(512, 224, 16, 768, 12, 512, 8, 12),
    "ViT-B-16-plus-240": _arch(640, 240, 16, 896, 12, 640, 10, 12),
    "ViT-L-14": _arch(768, 224, 14, 1024, 24, 768, 12, 12),
    "ViT-L-14-336": _arch(768, 336, 14, 1024, 24, 768, 12, 12),
    "ViT-H-14": _arch(1024, 224, 14, 1280, 32, 1024, 16, 24, head_width=80),
    "ViT-H-14-378": _arch(1024, 378, 14, 1280, 32, 1024, 16, 24, head_width=80),
    "ViT-g-14": _arch(1024, 224, 14, 1408, 40, 1024, 16, 24, head_width=88),  # mlp_ratio 4.3637
    "ViT-bigG-14": _arch(1280, 224, 14, 1664, 48, 1280, 20, 32, head_width=104),  # mlp_ratio 4.9231
}
# Every "<name>-quickgelu" config open_clip ships is its base with "quick_gelu": true.
_QUICKGELU = ("ViT-B-32", "ViT-B-16", "ViT-L-14", "ViT-L-14-336", "ViT-H-14", "ViT-H-14-378")
ARCHITECTURES: dict[str, OpenClipArchitecture] = {
    **_BASE_ARCHITECTURES,
    **{
        f"{name}{QUICKGELU_SUFFIX}": OpenClipArchitecture(
            **{**_BASE_ARCHITECTURES[name].__dict__, "quick_gelu": True}
        )
        for name in _QUICKGELU
    },
}


@dataclass(frozen=True)
class PretrainedTag:
    """What ``pretrained.py`` says of one tag: its normalisation, resize and whether it was trained with QuickGELU."""

    mean: tuple[float, float, float] = OPENAI_IMAGE_MEAN
    std: tuple[float, float, float] = OPENAI_IMAGE_STD
    resize_mode: str = "shortest"  # "shortest": shorter side, centre crop; "squash": to the square, no crop
    quick_gelu: bool = False


_Q = PretrainedTag(quick_gelu=True)
_D = PretrainedTag()
_COMMONPOOL_B32 = [
    f"{pool}_{size}"
    for size, pools in (
        ("s128m_b4k", ("datacomp_m", "commonpool_m_clip", "commonpool_m_laion", "commonpool_m_image",
                       "commonpool_m_text", "commonpool_m_basic", "commonpool_m")),
        ("s13m_b4k", ("datacomp_s", "commonpool_s_clip", "commonpool_s_laion", "commonpool_s_image",
                      "commonpool_s_text", "commonpool_s_basic", "commonpool_s")),
    )
    for pool in pools
]  # fmt: skip
_COMMONPOOL_B16 = [
    f"{pool}_s1b_b8k"
    for pool in ("datacomp_l", "commonpool_l_clip", "commonpool_l_laion", "commonpool_l_image",
                 "commonpool_l_text", "commonpool_l_basic", "commonpool_l")
]  # fmt: skip
# (architecture without "-quickgelu", tag) -> PretrainedTag, for the architectures above.
PRETRAINED: dict[tuple[str, str], PretrainedTag] = {
    **{
        ("ViT-B-32", t): _Q
        for t in ("openai", "laion400m_e31", "laion400m_e32", "metaclip_400m", "metaclip_fullcc")
    },
    **{
        ("ViT-B-32", t): _D
        for t in ("laion2b_e16", "laion2b_s34b_b79k", "datacomp_xl_s13b_b90k", *_COMMONPOOL_B32)
    },
    ("ViT-B-32-256", "datacomp_s34b_b86k"): _D,
    **{("ViT-B-16", t): _Q for t in ("openai", "dfn2b", "metaclip_400m", "metaclip_fullcc")},
    **{
        ("ViT-B-16", t): _D
        for t in (
            "laion400m_e31",
            "laion400m_e32",
            "laion2b_s34b_b88k",
            "datacomp_xl_s13b_b90k",
            *_COMMONPOOL_B16,
        )
    },
    ("ViT-B-16-plus-240", "laion400m_e31"): _D,
    ("ViT-B-16-plus-240", "laion400m_e32"): _D,
    **{("ViT-L-14", t): _Q for t in ("openai", "metaclip_400m", "metaclip_fullcc", "dfn2b")},
    **{
        ("ViT-L-14", t): _D
        for t in (
            "laion400m_e31",
            "laion400m_e32",
            "datacomp_xl_s13b_b90k",
            "commonpool_xl_clip_s13b_b90k",
            "commonpool_xl_laion_s13b_b90k",
            "commonpool_xl_s13b_b90k",
            "dfn2b_s39b",
        )
    },  # fmt: skip
    ("ViT-L-14", "laion2b_s32b_b82k"): PretrainedTag(mean=INCEPTION_IMAGE_MEAN, std=INCEPTION_IMAGE_STD),
    ("ViT-L-14-336", "openai"): _Q,
    ("ViT-H-14", "laion2b_s32b_b79k"): _D,
    ("ViT-H-14", "metaclip_fullcc"): _Q,
    ("ViT-H-14", "metaclip_altogether"): _D,
    ("ViT-H-14", "dfn5b"): PretrainedTag(resize_mode="squash", quick_gelu=True),
    ("ViT-H-14-378", "dfn5b"): PretrainedTag(resize_mode="squash", quick_gelu=True),
    ("ViT-g-14", "laion2b_s12b_b42k"): _D,
    ("ViT-g-14", "laion2b_s34b_b88k"): _D,
    ("ViT-bigG-14", "laion2b_s39b_b160k"): _D,
    ("ViT-bigG-14", "metaclip_fullcc"): _Q,
}


def base_name(architecture: str) -> str:
    """The architecture without ``-quickgelu`` (the key of its tags)."""
    return architecture.removesuffix(QUICKGELU_SUFFIX)


def tags_of(architecture: str) -> list[str]:
    """The pretrained tags open_clip lists for an architecture (with or without ``-quickgelu``)."""
    base = base_name(architecture)
    return sorted(tag for arch, tag in PRETRAINED if arch == base)
