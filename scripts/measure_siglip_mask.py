"""How far SigLIP's text embeddings move when the tokenizer's attention mask is passed to the model.

SigLIP and SigLIP 2 were trained with every text padded to 64 tokens and no attention mask (big_vision), and the text
tower pools the last position, which is a pad token for any caption shorter than 64. transformers 5's SigLIP
tokenizers return an ``attention_mask`` anyway, and the model card's ``model(**processor(...))`` passes it: the
pooled pad position then attends to the caption's tokens only instead of to the whole padded sequence as in
training. capeval passes no mask (``capeval.clip.families.text_batch``). This script scores the same captions both
ways and prints, per model size, the distance between the two L2-normalised text embeddings and the change in
the image-text cosine that CLIP-S rescales.

No SigLIP weights can be downloaded here, so the models are random (seeded) ``SiglipModel``s with the released
text and vision shapes (base: 12 layers of width 768, 64 text positions; ``--vocab 256000`` is SigLIP 2's Gemma
vocabulary, 32000 SigLIP's) and the captions' ids come from the small Gemma tokenizer of
``capeval_dev.testing.tiny_families`` trained on them (about a token a word, as Gemma's own vocabulary gives). The figures show the size of the effect on these weights, not on the released
ones. capeval's embedding is checked against the model's ids-only call on the way.

    python scripts/measure_siglip_mask.py [--size base|tiny] [--vocab 256000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

CAPTIONS = [  # COCO-style captions, already lower-case so that only the mask differs between the two calls
    "a man riding a wave on top of a surfboard",
    "two dogs playing with a frisbee in the grass",
    "a plate of food with broccoli and rice",
    "a red double decker bus driving down a city street",
    "a cat sitting on a laptop keyboard",
    "a group of people standing around a kitchen",
    "a giraffe standing next to a tall tree",
    "a train traveling down tracks next to a forest",
    "a woman holding an umbrella in the rain",
    "a bathroom with a toilet and a sink",
    "a young boy swinging a baseball bat at a ball",
    "an airplane flying over a snowy mountain range on a clear day",
    "a bowl of fruit on a wooden table",
    "a clock tower in the middle of a town square",
    "a skier going down a steep snowy slope",
    "a teddy bear",
]
SIZES = {
    "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2),
    "base": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12),
}
W = 2.5  # CLIP-S's rescaling (Hessel et al. 2021, sec. 3)


def build(size: str, vocab: int, seed: int):
    import transformers as tf

    from capeval_dev.testing.tiny_families import gemma_tokenizer

    torch.manual_seed(seed)
    tok = gemma_tokenizer(corpus=CAPTIONS)  # trained on the captions: about a token a word, as Gemma's
    image_size = 224 if size == "base" else 32
    text = dict(
        SIZES[size], vocab_size=vocab, max_position_embeddings=64, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    vision = dict(SIZES[size], image_size=image_size, patch_size=16 if size == "base" else 8)
    model = tf.SiglipModel(tf.SiglipConfig(text_config=text, vision_config=vision)).eval()
    images = tf.SiglipImageProcessorPil(size={"height": image_size, "width": image_size}, resample=3)
    return model, tf.SiglipProcessor(image_processor=images, tokenizer=tok)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--vocab", type=int, default=256000, help="text vocabulary (SigLIP 2: 256000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import capeval

    start = time.perf_counter()
    model, processor = build(args.size, args.vocab, args.seed)
    rng = np.random.default_rng(args.seed)
    side = processor.image_processor.size["height"]
    images = [rng.integers(0, 256, (side + 13, side + 29, 3), dtype=np.uint8) for _ in CAPTIONS]
    scorer = capeval.CLIPScore(model=(model, processor), device="cpu", prefix="")
    ours = scorer.text_embeddings(CAPTIONS)
    image = scorer.image_embeddings(images, None, len(images))

    inputs = processor(text=CAPTIONS, padding="max_length", max_length=64, return_tensors="pt")
    with torch.inference_mode():
        ids_only = model.get_text_features(input_ids=inputs["input_ids"]).pooler_output
        masked = model.get_text_features(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]
        ).pooler_output
    ids_only, masked = F.normalize(ids_only.float(), dim=-1), F.normalize(masked.float(), dim=-1)

    same = (ours - ids_only).abs().max().item()
    moved = 1 - (ids_only * masked).sum(-1)  # cosine distance between the two embeddings of each caption
    component = (ids_only - masked).abs().max().item()
    cos_ours, cos_masked = (image * ids_only).sum(-1), (image * masked).sum(-1)
    clip_s = W * cos_ours.clamp(min=0), W * cos_masked.clamp(min=0)
    lengths = inputs["attention_mask"].sum(-1)
    print(
        f"SigLIP {args.size}, text vocabulary {args.vocab}, random weights (seed {args.seed}), "
        f"{len(CAPTIONS)} captions of {int(lengths.min())}-{int(lengths.max())} tokens padded to 64"
    )
    print(f"capeval vs ids-only call:    max |difference| {same:.2e}")
    print(
        f"ids-only vs masked call:     cosine distance {moved.min():.3f} .. {moved.max():.3f} "
        f"(median {moved.median():.3f}); max |component difference| {component:.3f}"
    )
    print(
        f"image-text cosine:           max |change| {(cos_ours - cos_masked).abs().max():.4f} "
        f"(cosines {cos_ours.min():.3f} .. {cos_ours.max():.3f}); "
        f"CLIP-S (w={W}) max |change| {(clip_s[0] - clip_s[1]).abs().max():.4f}"
    )
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
