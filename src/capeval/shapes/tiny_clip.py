"""Tiny CLIP models for tests and offline demos, with the real CLIP tokenizer.

The tokenizer is rebuilt offline from the authors' BPE merges (``bpe_simple_vocab_16e6.txt.gz`` in the
``openai-clip`` package), so vocabulary (49,408), start/end-of-text ids (49,406 / 49,407) and truncation are
exactly those of the released models; only the network is small and random.
"""

from __future__ import annotations

import gzip
from functools import lru_cache
from pathlib import Path

import torch

from capeval.clip.backbones import write_preprocessor_config
from capeval.clip.image_constants import OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD

VOCAB_SIZE = 49408  # 256 bytes x 2 + 48,894 merges + start/end-of-text
BOS_ID, EOS_ID = 49406, 49407
N_MERGES = 49152 - 256 - 2  # as clip/simple_tokenizer.py slices the merges file


def _bytes_to_unicode() -> dict[int, str]:
    from capeval_dev.testing.openai_reference import simple_tokenizer_module

    return simple_tokenizer_module().bytes_to_unicode()


@lru_cache(maxsize=1)
def clip_vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The authors' vocabulary and merges, built the way ``SimpleTokenizer.__init__`` builds them."""
    from capeval_dev.testing.openai_reference import bpe_path

    lines = gzip.open(bpe_path()).read().decode("utf-8").split("\n")
    merges = [tuple(m.split()) for m in lines[1 : N_MERGES + 1]]
    symbols = list(_bytes_to_unicode().values())
    symbols = symbols + [s + "</w>" for s in symbols]
    symbols += ["".join(m) for m in merges]
    symbols += ["<|startoftext|>", "<|endoftext|>"]
    return {s: i for i, s in enumerate(symbols)}, merges


def build_clip_tokenizer():
    """A transformers ``CLIPTokenizer`` on the real CLIP vocabulary, built without network."""
    from transformers import CLIPTokenizer

    vocab, merges = clip_vocab_and_merges()
    tok = CLIPTokenizer(vocab=dict(vocab), merges=list(merges))
    tok.model_max_length = 77
    return tok


def tiny_clip_config(
    hidden_size: int = 32,
    layers: int = 2,
    heads: int = 2,
    image_size: int = 32,
    patch_size: int = 8,
    projection_dim: int = 16,
    text_hidden_size: int | None = None,
    vision_hidden_size: int | None = None,
):
    """A ``CLIPConfig`` with CLIP's real text geometry (49,408 ids, 77 positions) and tiny widths."""
    from transformers import CLIPConfig

    text = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=text_hidden_size or hidden_size,
        intermediate_size=4 * (text_hidden_size or hidden_size),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        max_position_embeddings=77,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=EOS_ID,
        hidden_act="quick_gelu",
    )
    vision = dict(
        hidden_size=vision_hidden_size or hidden_size,
        intermediate_size=4 * (vision_hidden_size or hidden_size),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        image_size=image_size,
        patch_size=patch_size,
        hidden_act="quick_gelu",
    )
    return CLIPConfig(text_config=text, vision_config=vision, projection_dim=projection_dim)


def vit_b32_config():
    """The real ViT-B/32 geometry (for speed benchmarks with random weights)."""
    from transformers import CLIPConfig

    return CLIPConfig(
        text_config=dict(
            vocab_size=VOCAB_SIZE, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
            num_attention_heads=8, max_position_embeddings=77, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
            pad_token_id=EOS_ID, hidden_act="quick_gelu",
        ),
        vision_config=dict(
            hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
            image_size=224, patch_size=32, hidden_act="quick_gelu",
        ),
        projection_dim=512,
    )  # fmt: skip


def vit_l14_config():
    """The real ViT-L/14 geometry (224 px input), for speed benchmarks with random weights."""
    from transformers import CLIPConfig

    return CLIPConfig(
        text_config=dict(
            vocab_size=VOCAB_SIZE, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
            num_attention_heads=12, max_position_embeddings=77, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
            pad_token_id=EOS_ID, hidden_act="quick_gelu",
        ),
        vision_config=dict(
            hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
            image_size=224, patch_size=14, hidden_act="quick_gelu",
        ),
        projection_dim=768,
    )  # fmt: skip


def save_clip_folder(model, tokenizer, folder: str | Path) -> Path:
    """Save model (safetensors), tokenizer and preprocessing constants as one transformers folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    # Tiny CLIPs normalise pixels as OpenAI's CLIP does (the shapes CLIP was trained so).
    write_preprocessor_config(
        folder, model.config.vision_config.image_size, OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD
    )
    return folder


def build_tiny_clip(folder: str | Path | None = None, seed: int = 0, config=None, **config_kwargs):
    """A random CLIP with the real tokenizer; saved as a transformers folder when ``folder`` is given.

    Args:
        folder: where to save it (``evaluate``/``load_backbone`` then take that path as ``model``).
        seed: weight initialisation seed.
        config: a ``CLIPConfig`` (default: ``tiny_clip_config(**config_kwargs)``).

    Returns:
        (model, tokenizer) when ``folder`` is None, else the folder path.
    """
    from transformers import CLIPModel

    config = config or tiny_clip_config(**config_kwargs)
    torch.manual_seed(seed)
    model = CLIPModel(config).eval()
    tokenizer = build_clip_tokenizer()
    if folder is None:
        return model, tokenizer
    return save_clip_folder(model, tokenizer, folder)
