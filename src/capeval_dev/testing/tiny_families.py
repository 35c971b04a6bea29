"""Tiny random dual encoders of every family capeval scores besides CLIPModel, built offline.

Each folder holds what a Hub checkpoint holds: ``config.json``, safetensors weights, the tokenizer files and the
processor files (``preprocessor_config.json`` and ``processor_config.json``) saved by the family's own transformers
processor, so ``AutoProcessor.from_pretrained(folder)`` prepares inputs the way the family was trained. Vocabularies
are made here: a WordPiece ``vocab.txt`` for the BERT tokenizers (ALIGN, Chinese-CLIP), a SentencePiece unigram
model trained on a few sentences for SigLIP's T5 tokenizer, and a ``tokenizers`` Unigram vocabulary for the
XLM-RoBERTa tokenizers (AltCLIP, MetaCLIP 2), and a byte-fallback BPE trained here for the Gemma tokenizer of the
fixed-resolution SigLIP 2 checkpoints (``build_tiny_siglip2``). The networks are random: scores mean nothing, but
every step between a caption or an image and its embedding is the family's.
"""

from __future__ import annotations

from pathlib import Path

import torch

_WORDS = (
    "a an the photo picture depicts shows of on in with and is are two three dog dogs cat cats red blue green "
    "square circle triangle small big running sitting beach grass near under man woman"
).split()
_CHINESE = "一只两个狗猫在草地上跑的照片红色蓝色绿色方形圆形"
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Captions the SentencePiece model is trained on (its pieces come from them).
_CORPUS = [
    "a photo of a dog running on the beach",
    "a red square and a blue circle",
    "two small green triangles near a big square",
    "a cat sitting on the grass with a dog",
    "a man and a woman under a picture",
    "three dogs are running",
]
FAMILY_NAMES = ("siglip", "align", "chinese_clip", "altclip", "metaclip_2")


def _vision(image_size: int = 32) -> dict:
    return dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        image_size=image_size, patch_size=8,
    )  # fmt: skip


def _text(vocab_size: int, positions: int, **extra) -> dict:
    return dict(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=positions, **extra,
    )  # fmt: skip


def bert_tokenizer(folder: Path):
    """A BERT WordPiece tokenizer (lower-casing, Chinese characters split) from a ``vocab.txt`` written here."""
    from transformers import BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + _WORDS + list(_CHINESE)
    vocab += list(_LETTERS) + ["##" + c for c in _LETTERS]
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf-8")
    return BertTokenizer.from_pretrained(str(folder), model_max_length=32)


def siglip_tokenizer(folder: Path, max_length: int = 48):
    """SigLIP's T5-style SentencePiece tokenizer on a unigram model trained here (pad = ``</s>``, as released)."""
    import sentencepiece as spm
    from transformers import SiglipTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(_CORPUS * 20), encoding="utf-8")
    prefix = folder / "spiece"
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=64, model_type="unigram", pad_id=0, eos_id=1,
        unk_id=2, bos_id=-1, minloglevel=2, hard_vocab_limit=False,
    )  # fmt: skip
    corpus.unlink()
    return SiglipTokenizer(vocab_file=str(prefix) + ".model", model_max_length=max_length)


def xlm_roberta_tokenizer(max_length: int):
    """An XLM-RoBERTa tokenizer (``<s>`` ... ``</s>``, pad id 1) on a Unigram vocabulary written here."""
    from transformers import XLMRobertaTokenizer

    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    pieces += [("▁" + w, -2.0) for w in _WORDS] + [("▁", -3.0)]
    pieces += [(c, -5.0) for c in _LETTERS + _CHINESE] + [(c.upper(), -6.0) for c in _LETTERS]
    return XLMRobertaTokenizer(vocab=pieces, model_max_length=max_length)


def gemma_tokenizer(max_length: int = 64, do_lower_case: bool | None = True, corpus: list[str] | None = None):
    """A Gemma tokenizer laid out as the fixed-resolution SigLIP 2 checkpoints ship theirs.

    As the released files (google/siglip2-base-patch16-224: ``tokenizer_config.json`` beside ``tokenizer.json``):
    ``tokenizer_class: GemmaTokenizer`` with ``do_lower_case: true``, Gemma's special ids (``<pad>`` 0, ``<eos>`` 1,
    ``<bos>`` 2, ``<unk>`` 3, ``<mask>`` 4). As transformers' SigLIP 2 conversion script builds the tokenizer:
    ``<eos>`` added and no ``<bos>`` (big_vision tokenised with ``bos="no", eos="sticky"``), padding on the right;
    64 text positions, the length SigLIP 2 was trained with. The vocabulary is a byte-fallback BPE trained on a few
    sentences (Gemma's byte pieces ``<0x00>``..``<0xFF>`` included, so capitals and accents never become ``<unk>``).
    ``do_lower_case=None`` leaves the flag out of the files; ``corpus`` replaces the sentences it is trained on.
    """
    import json

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import GemmaTokenizer

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    backend = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    # GemmaTokenizer's normaliser; merges are learnt within words ("▁dog", never "g▁a"), as SentencePiece learnt
    # Gemma's, so a caption gets about a token a word.
    backend.normalizer = normalizers.Replace(" ", "▁")
    backend.pre_tokenizer = pre_tokenizers.Split(pattern="▁", behavior="merged_with_next")
    trainer = trainers.BpeTrainer(
        vocab_size=1000, special_tokens=specials + [f"<0x{b:02X}>" for b in range(256)], show_progress=False
    )
    backend.train_from_iterator([" " + line for line in (corpus or _CORPUS) * 5], trainer)
    merges = [tuple(m) for m in json.loads(backend.to_str())["model"]["merges"]]
    flag = {} if do_lower_case is None else {"do_lower_case": do_lower_case}
    return GemmaTokenizer(
        vocab=backend.get_vocab(), merges=merges, add_bos_token=False, add_eos_token=True, padding_side="right",
        model_max_length=max_length, **flag,
    )  # fmt: skip


def _save(model, processor, folder: Path) -> Path:
    model.save_pretrained(str(folder), safe_serialization=True)
    processor.save_pretrained(str(folder))
    return folder


def build_tiny_family(name: str, folder: str | Path) -> Path:
    """Save a tiny random model of family ``name`` (one of ``FAMILY_NAMES``) with its tokenizer and processor.

    Geometries differ on purpose: SigLIP and Chinese-CLIP resize to a square without cropping, ALIGN resizes to
    40x40 and crops 32 with EfficientNet's rescale offset, AltCLIP and MetaCLIP 2 resize the shorter side and crop.

    Returns:
        Path: the folder.
    """
    import transformers as tf

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed({n: i for i, n in enumerate(FAMILY_NAMES)}.get(name, 99))
    if name == "siglip":
        tok = siglip_tokenizer(folder / "_spm")
        config = tf.SiglipConfig(
            text_config=_text(len(tok), 48, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id),
            vision_config=_vision(),
        )
        images = tf.SiglipImageProcessorPil(size={"height": 32, "width": 32}, resample=3)
        model, processor = tf.SiglipModel(config), tf.SiglipProcessor(image_processor=images, tokenizer=tok)
    elif name == "align":
        tok = bert_tokenizer(folder / "_vocab")
        vision = dict(
            image_size=32, width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=16, kernel_sizes=[3, 3],
            in_channels=[32, 16], out_channels=[16, 16], strides=[1, 2], num_block_repeats=[1, 1],
            expand_ratios=[1, 2], depthwise_padding=[],
        )  # fmt: skip
        config = tf.AlignConfig(text_config=_text(len(tok), 64), vision_config=vision, projection_dim=16)
        images = tf.EfficientNetImageProcessorPil(
            size={"height": 40, "width": 40}, do_center_crop=True, crop_size={"height": 32, "width": 32},
            rescale_offset=True, include_top=False, resample=3,
        )  # fmt: skip
        model, processor = tf.AlignModel(config), tf.AlignProcessor(image_processor=images, tokenizer=tok)
    elif name == "chinese_clip":
        tok = bert_tokenizer(folder / "_vocab")
        config = tf.ChineseCLIPConfig(
            text_config=_text(len(tok), 64), vision_config=_vision(), projection_dim=16
        )
        images = tf.ChineseCLIPImageProcessorPil(
            size={"height": 32, "width": 32}, do_center_crop=False, resample=3
        )
        model = tf.ChineseCLIPModel(config)
        processor = tf.ChineseCLIPProcessor(image_processor=images, tokenizer=tok)
    elif name == "altclip":
        tok = xlm_roberta_tokenizer(max_length=24)
        text = _text(len(tok), 26, pad_token_id=1, bos_token_id=0, eos_token_id=2, project_dim=16)
        config = tf.AltCLIPConfig(text_config=text, vision_config=_vision(), projection_dim=16)
        images = tf.CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
        model, processor = tf.AltCLIPModel(config), tf.AltCLIPProcessor(image_processor=images, tokenizer=tok)
    elif name == "metaclip_2":
        tok = xlm_roberta_tokenizer(max_length=20)
        text = _text(len(tok), 20, pad_token_id=1, bos_token_id=0, eos_token_id=2)
        config = tf.MetaClip2Config(text_config=text, vision_config=_vision(), projection_dim=16)
        images = tf.CLIPImageProcessorPil(
            size={"shortest_edge": 36}, crop_size={"height": 32, "width": 32},
            image_mean=[0.5, 0.4, 0.3], image_std=[0.2, 0.25, 0.3],
        )  # fmt: skip
        model, processor = tf.MetaClip2Model(config), tf.CLIPProcessor(image_processor=images, tokenizer=tok)
    else:
        raise ValueError(f"unknown tiny family {name!r}: one of {', '.join(FAMILY_NAMES)}")
    _save(model.eval(), processor, folder)
    for scratch in ("_spm", "_vocab"):
        if (folder / scratch).is_dir():
            for f in (folder / scratch).iterdir():
                f.unlink()
            (folder / scratch).rmdir()
    return folder


def build_tiny_siglip2(folder: str | Path, do_lower_case: bool | None = True) -> Path:
    """Save a tiny random fixed-resolution SigLIP 2: a ``SiglipModel`` (model_type ``siglip``, as the released
    google/siglip2-*-patchNN-RES checkpoints) with the Gemma tokenizer of ``gemma_tokenizer`` and a
    ``SiglipProcessor``.

    Returns:
        Path: the folder.
    """
    import transformers as tf

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(len(FAMILY_NAMES) + 1)  # a seed no family of build_tiny_family uses
    tok = gemma_tokenizer(do_lower_case=do_lower_case)
    text = _text(
        len(tok),
        64,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    config = tf.SiglipConfig(text_config=text, vision_config=_vision())
    images = tf.SiglipImageProcessorPil(size={"height": 32, "width": 32}, resample=3)
    return _save(
        tf.SiglipModel(config).eval(), tf.SiglipProcessor(image_processor=images, tokenizer=tok), folder
    )
