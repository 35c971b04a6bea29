"""Training and evaluating the shapes CLIP: a tiny ``CLIPModel`` that understands the drawn-shapes world.

Training uses CLIP's symmetric contrastive loss on freshly drawn images and captions. Images go through
capeval's own preprocessing (``resize_and_crop`` + ``normalize_pixels``) and captions through capeval's
tokenization with the CLIPScore prompt, so the saved model scores correctly through the public API.
A batch may hold several drawings of one scene: those pairs count as positives of each other (the
targets are spread over every caption of the same scene) instead of as false negatives.

Evaluation only uses the public API (``load_backbone``, ``encode_images``, ``encode_texts``) on held-out
drawings: other seeds, other canvas sizes (non-square included), other backgrounds.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from capeval.clip.image_constants import OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD
from capeval.clip.images import normalize_pixels, resize_and_crop
from capeval.clip.tokenization import PREFIX, tokenize_captions, with_prefix
from capeval.shapes.drawing import draw, redraw_variant
from capeval.shapes.scenes import COLORS, POSITIONS, SHAPES, Scene, all_scenes, caption, paraphrase
from capeval.shapes.tiny_clip import build_clip_tokenizer, save_clip_folder, tiny_clip_config


@dataclass
class ShapesTrainConfig:
    """Everything that decides the trained weights (with the torch version and thread count).

    The defaults produce the committed model at ``shapes.shapes_clip_path()``.
    """

    seed: int = 0
    steps: int = 800
    batch_size: int = 75  # one drawing of each of the 75 scenes, in random order
    lr: float = 2e-3
    warmup_steps: int = 60
    weight_decay: float = 0.0
    image_size: int = 96  # model input: drawings are resized and centre-cropped to this
    patch_size: int = 12  # 8 x 8 patches: 96 px tells circles from squares better than 64 px, same cost
    width: int = 64  # text and vision width; the token embedding is 49,408 x width
    layers: int = 3
    heads: int = 4
    projection_dim: int = 64
    # CLIP initialises position embeddings with std 0.02, far below a patch's content embedding: on plain
    # backgrounds the model then sees where the shape is only weakly and often stalls with position
    # unlearned (loss stuck near log 5). A larger start makes position as visible as colour and shape.
    position_init_std: float | None = 0.5
    p_canonical: float = 0.5  # share of captions in canonical wording (the rest are paraphrases)
    p_prefix: float = 0.8  # share of captions preceded by CLIPScore's prompt "A photo depicts"
    p_variant: float = 0.4  # share of images from redraw_variant (other sizes, scales, backgrounds)
    save_dtype: str = "float16"  # storage dtype of the saved weights (load_backbone casts to its dtype)


def zero_untrained_token_rows(table: torch.Tensor, initial: torch.Tensor) -> int:
    """Set to zero every row of a token table still equal to its initial value; returns how many.

    Training touches only the rows of tokens its captions use (51 of CLIP's 49,408): AdamW without weight
    decay leaves a row whose gradient was always zero bit for bit at its random start. Those rows carry no
    learned meaning, and stored as zeros they compress to nothing in the wheel (the table is 6.3 MB of random
    float16 otherwise). A caption made only of trained tokens scores exactly as before; one holding another
    token now reads a zero row instead of noise.

    Args:
        table (torch.Tensor): (V, D) the trained token embedding, changed in place.
        initial (torch.Tensor): (V, D) the same table before training.
    """
    untrained = (table == initial.to(table.dtype)).all(dim=1)
    with torch.no_grad():
        table[untrained] = 0
    return int(untrained.sum())


def build_shapes_clip(cfg: ShapesTrainConfig):
    """A fresh (untrained) model of the config's geometry, seeded, with the real CLIP tokenizer."""
    from transformers import CLIPModel

    config = tiny_clip_config(
        hidden_size=cfg.width,
        layers=cfg.layers,
        heads=cfg.heads,
        image_size=cfg.image_size,
        patch_size=cfg.patch_size,
        projection_dim=cfg.projection_dim,
    )
    torch.manual_seed(cfg.seed)
    model = CLIPModel(config)
    if cfg.position_init_std is not None:
        torch.nn.init.normal_(
            model.vision_model.embeddings.position_embedding.weight, std=cfg.position_init_std
        )
    return model, build_clip_tokenizer()


class _Batches:
    """Draws training batches: pixels (B, 3, S, S), padded token ids (B, L), mask, scene labels (B,)."""

    def __init__(self, cfg: ShapesTrainConfig, tokenizer, context_length: int) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed + 1)
        self.scenes = all_scenes()
        self.tokenizer = tokenizer
        self.context_length = context_length
        self._ids: dict[str, list[int]] = {}
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def _token_ids(self, text: str) -> list[int]:
        ids = self._ids.get(text)
        if ids is None:
            ids = tokenize_captions(self.tokenizer, [text], self.context_length)[0][0]
            self._ids[text] = ids
        return ids

    def _text(self, scene: Scene) -> str:
        r = self.rng
        text = caption(scene) if r.random() < self.cfg.p_canonical else paraphrase(scene, r)
        return with_prefix(text, PREFIX) if r.random() < self.cfg.p_prefix else text

    def _image(self, scene: Scene) -> np.ndarray:
        r = self.rng
        if r.random() < self.cfg.p_variant:
            img = redraw_variant(scene, r)
        else:
            img = draw(scene, r)
        return resize_and_crop(img, self.cfg.image_size)

    def __call__(self):
        n = self.cfg.batch_size
        if n < len(self.scenes):
            labels = self.rng.sample(range(len(self.scenes)), n)
        else:
            labels = [i % len(self.scenes) for i in range(n)]
            self.rng.shuffle(labels)
        pixels = np.stack([self._image(self.scenes[k]) for k in labels])
        ids = [self._token_ids(self._text(self.scenes[k])) for k in labels]
        longest = max(len(x) for x in ids)
        input_ids = torch.full((n, longest), self.pad, dtype=torch.long)
        mask = torch.zeros((n, longest), dtype=torch.long)
        for row, x in enumerate(ids):
            input_ids[row, : len(x)] = torch.tensor(x)
            mask[row, : len(x)] = 1
        x = normalize_pixels(torch.from_numpy(pixels), OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD)
        return x, input_ids, mask, torch.tensor(labels)


def contrastive_loss(
    image_emb: torch.Tensor, text_emb: torch.Tensor, labels: torch.Tensor, scale
) -> torch.Tensor:
    """Symmetric InfoNCE where every pair with the same scene label is a positive.

    Args:
        image_emb (torch.Tensor): (B, D), L2-normalised.
        text_emb (torch.Tensor): (B, D), L2-normalised; row i describes image i.
        labels (torch.Tensor): (B,) scene index of each pair.
        scale: the logit scale (CLIP's exp(logit_scale)).
    """
    logits = scale * image_emb @ text_emb.t()
    same = (labels[:, None] == labels[None, :]).float()
    targets = same / same.sum(dim=1, keepdim=True)
    return 0.5 * (F.cross_entropy(logits, targets) + F.cross_entropy(logits.t(), targets))


def _lr_factor(step: int, cfg: ShapesTrainConfig) -> float:
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return 0.5 * (1.0 + np.cos(np.pi * min(1.0, progress)))


def train_shapes_clip(
    out_dir: str | Path,
    cfg: ShapesTrainConfig | None = None,
    log_every: int = 100,
    log=print,
    device: str = "cpu",
) -> dict:
    """Train the shapes CLIP and save it as a transformers folder.

    Args:
        out_dir: folder to write (model.safetensors, config, tokenizer, preprocessor_config.json).
        cfg: hyper-parameters (default: those of the committed model).
        log_every: print the running loss every this many steps (0: never).
        log: where progress lines go.
        device: where to train (the committed model was trained on the CPU; a GPU gives other weights).

    Returns:
        dict with ``seconds`` (training wall time), ``final_loss`` and the config used.
    """
    cfg = cfg or ShapesTrainConfig()
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    model, tokenizer = build_shapes_clip(cfg)
    initial_table = model.text_model.embeddings.token_embedding.weight.detach().clone()
    model.to(device).train()
    batches = _Batches(cfg, tokenizer, model.config.text_config.max_position_embeddings)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, cfg))
    start = time.perf_counter()
    running = None
    for step in range(cfg.steps):
        pixels, input_ids, mask, labels = (t.to(device) for t in batches())
        img = model.get_image_features(pixel_values=pixels).pooler_output
        txt = model.get_text_features(input_ids=input_ids, attention_mask=mask).pooler_output
        scale = model.logit_scale.exp().clamp(max=100.0)
        loss = contrastive_loss(F.normalize(img, dim=-1), F.normalize(txt, dim=-1), labels, scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        if log_every and ((step + 1) % log_every == 0 or step + 1 == cfg.steps):
            log(f"step {step + 1}/{cfg.steps}  loss {running:.4f}  {time.perf_counter() - start:.0f}s")
    seconds = time.perf_counter() - start
    model.cpu().eval()
    zeroed = zero_untrained_token_rows(model.text_model.embeddings.token_embedding.weight, initial_table)
    if cfg.save_dtype == "float16":
        model = model.half()
    save_clip_folder(model, tokenizer, out_dir)
    return {
        "seconds": seconds,
        "final_loss": running,
        "untrained_token_rows_zeroed": zeroed,
        "config": asdict(cfg),
    }


def held_out_images(n: int, seed: int = 12345) -> tuple[list, list[Scene]]:
    """``n`` drawings never seen in training (own seed), cycling the grid; half of them variants.

    Variants include non-square canvases (160x120, 128x96, 120x160), so the centre crop is exercised.
    """
    rng = random.Random(seed)
    grid = all_scenes()
    scenes = [grid[i % len(grid)] for i in range(n)]
    images = [redraw_variant(s, rng) if i % 2 else draw(s, rng) for i, s in enumerate(scenes)]
    return images, scenes


def evaluate_shapes_clip(
    model: str | Path, n_images: int = 300, seed: int = 12345, prefix: str | None = PREFIX
) -> dict:
    """Accuracy of a shapes CLIP on held-out drawings, through capeval's public encoding API.

    Returns:
        dict with
        ``top1``: share of images whose best caption among all 75 canonical captions is their own;
        ``color_pairs`` / ``shape_pairs`` / ``position_pairs``: share of (image, wrong caption) pairs,
        over every caption differing from the right one in exactly that attribute, where the right
        caption has the higher cosine;
        ``color_all`` / ``shape_all`` / ``position_all``: share of images whose caption beats all of them;
        ``positive``: share of images whose own caption has a positive cosine (CLIP-S > 0);
        ``paraphrase_top1``: as ``top1``, against one paraphrase of every scene instead of the captions;
        ``paraphrase_to_caption``: share of paraphrases whose nearest canonical caption (text to text)
        is their own scene's;
        ``n_images``.
    """
    from capeval.clip.backbones import load_backbone
    from capeval.clip.image_encoding import encode_images
    from capeval.clip.text_encoding import encode_texts

    backbone = load_backbone(str(model), device="cpu")
    images, scenes = held_out_images(n_images, seed)
    grid = all_scenes()
    index = {s: i for i, s in enumerate(grid)}
    img = encode_images(backbone, images)
    txt = encode_texts(backbone, [caption(s) for s in grid], prefix=prefix)
    sims = img @ txt.t()
    truth = torch.tensor([index[s] for s in scenes])
    own = sims[torch.arange(len(scenes)), truth]
    out: dict = {"n_images": len(scenes), "top1": float((sims.argmax(dim=1) == truth).float().mean())}
    out["positive"] = float((own > 0).float().mean())
    for attr in ("color", "shape", "position"):
        wins, pairs, all_wins = 0, 0, 0
        for row, scene in enumerate(scenes):
            others = [index[Scene(**{**asdict(scene), attr: v})] for v in _values(attr, scene)]
            beat = sims[row, others] < own[row]
            wins += int(beat.sum())
            pairs += len(others)
            all_wins += int(beat.all())
        out[f"{attr}_pairs"] = wins / pairs
        out[f"{attr}_all"] = all_wins / len(scenes)

    # Paraphrases: several sets of one paraphrase per scene; image i is ranked against set i % n_sets.
    rng = random.Random(seed + 1)
    n_sets = 4
    para = [paraphrase(s, rng) for _ in range(n_sets) for s in grid]
    para_emb = encode_texts(backbone, para, prefix=prefix).view(n_sets, len(grid), -1)
    hits = [int((img[i] @ para_emb[i % n_sets].t()).argmax()) == int(truth[i]) for i in range(len(scenes))]
    out["paraphrase_top1"] = sum(hits) / len(hits)
    nearest = (para_emb.reshape(-1, para_emb.shape[-1]) @ txt.t()).argmax(dim=1)
    out["paraphrase_to_caption"] = float((nearest == torch.arange(len(grid)).repeat(n_sets)).float().mean())
    return out


def _values(attr: str, scene: Scene) -> list[str]:
    options = {"color": list(COLORS), "shape": list(SHAPES), "position": list(POSITIONS)}
    return [v for v in options[attr] if v != getattr(scene, attr)]
