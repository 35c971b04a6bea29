"""PAC-S fine-tuning: positive-augmented contrastive learning of CLIP's two final projections.

Sarto et al. (CVPR 2023) fine-tune only the visual and textual projections of CLIP with

    L = L(V, T) + lambda_v L(V', T) + lambda_t L(V, T')

where V, T are real images and captions, V' generated images (of the real captions) and T' generated
captions (of the real images), and each L is CLIP's symmetric InfoNCE over the batch at the model's own
temperature (``logit_scale``, not trained). Defaults are the paper's: lambda_v = 0.05, lambda_t = 0.1,
AdamW at lr 1e-4, batch 256, early stopping on the validation loss with a patience of 1,500 iterations.
The authors' training code is not public; choices it would settle are options here (``eval_every``,
``weight_decay``, ``prefix``) and are recorded with the weights.

Because the encoders are frozen, each image and caption is encoded once (``capeval.training.features``) and
the projections are trained on those features: the same optimisation, without re-running the encoders.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from capeval.clip.tokenization import PREFIX

logger = logging.getLogger(__name__)

LAMBDA_V = 0.05  # Sarto et al. 2023, implementation details: weight of the generated-image term
LAMBDA_T = 0.1  # Sarto et al. 2023, implementation details: weight of the generated-caption term
LR = 1e-4  # Sarto et al. 2023, implementation details: AdamW learning rate
BATCH_SIZE = 256  # Sarto et al. 2023, implementation details
PATIENCE = 1500  # Sarto et al. 2023, implementation details: iterations without a better validation loss
STATE_FILE = "training_state.pt"
LOG_FILE = "log.jsonl"
COLUMNS = ("image", "caption", "generated_image", "generated_caption")


@dataclass
class PACSTrainConfig:
    """Hyper-parameters of PAC-S fine-tuning (saved with the weights and checked on resume)."""

    lambda_v: float = LAMBDA_V
    lambda_t: float = LAMBDA_T
    lr: float = LR
    weight_decay: float = 0.01  # torch's AdamW default; the paper does not state one
    batch_size: int = BATCH_SIZE
    patience: int = PATIENCE
    eval_every: int = 100  # validation cadence in iterations (not stated in the paper)
    max_steps: int = 100_000
    save_every: int = 500  # resumable-state cadence in iterations
    seed: int = 0
    prefix: str | None = PREFIX  # the scoring prompt, so the projections learn the text they will score
    columns: tuple[str, str, str, str] = COLUMNS

    def validate(self) -> None:
        for name in ("batch_size", "patience", "eval_every", "max_steps", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_size < 2:
            raise ValueError("batch_size must be >= 2: a contrastive loss needs negatives")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def info_nce(image_emb: torch.Tensor, text_emb: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """CLIP's symmetric InfoNCE: row i of each side is the positive of row i of the other.

    Args:
        image_emb (torch.Tensor): (B, D), L2-normalised.
        text_emb (torch.Tensor): (B, D), L2-normalised.
        scale: exp(logit_scale), the inverse temperature.

    Returns:
        torch.Tensor: scalar, the mean of the image-to-text and text-to-image cross-entropies.
    """
    logits = scale * image_emb @ text_emb.t()
    target = torch.arange(len(logits), device=logits.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target))


def pacs_loss(
    vis_proj: torch.nn.Module,
    txt_proj: torch.nn.Module,
    feats: dict[str, torch.Tensor],
    scale: torch.Tensor,
    lambda_v: float,
    lambda_t: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """L = L(V, T) + lambda_v L(V', T) + lambda_t L(V, T') on one batch of pre-projection features.

    Returns:
        (loss, parts): the scalar loss and its three terms as floats (``real``, ``gen_image``, ``gen_caption``).
    """
    v = F.normalize(vis_proj(feats["image"]), dim=-1)
    t = F.normalize(txt_proj(feats["caption"]), dim=-1)
    v_gen = F.normalize(vis_proj(feats["generated_image"]), dim=-1)
    t_gen = F.normalize(txt_proj(feats["generated_caption"]), dim=-1)
    real, gen_image, gen_caption = info_nce(v, t, scale), info_nce(v_gen, t, scale), info_nce(v, t_gen, scale)
    loss = real + lambda_v * gen_image + lambda_t * gen_caption
    return loss, {"real": real.item(), "gen_image": gen_image.item(), "gen_caption": gen_caption.item()}


@torch.no_grad()
def validation_loss(vis_proj, txt_proj, feats: dict[str, torch.Tensor], scale, cfg: PACSTrainConfig) -> float:
    """The training loss over the validation features, in fixed consecutive batches, weighted by batch size."""
    n = len(feats["image"])
    total, count = 0.0, 0
    for start in range(0, n, cfg.batch_size):
        idx = slice(start, min(n, start + cfg.batch_size))
        if idx.stop - idx.start < 2:
            continue  # a batch of one has no negatives
        batch = {k: v[idx] for k, v in feats.items()}
        loss, _ = pacs_loss(vis_proj, txt_proj, batch, scale, cfg.lambda_v, cfg.lambda_t)
        total += loss.item() * (idx.stop - idx.start)
        count += idx.stop - idx.start
    if count == 0:
        raise ValueError("the validation set needs at least 2 rows")
    return total / count


@dataclass
class TrainResult:
    """What a run did: ``output`` is the transformers folder of the best projections."""

    output: Path
    steps: int
    best_step: int
    best_val_loss: float
    initial_val_loss: float
    stopped_early: bool
    history: list[dict] = field(default_factory=list)


class _Sampler:
    """Shuffled epochs from a seeded generator; its whole state is tensors and ints (resumable)."""

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        self.n, self.batch_size = n, min(batch_size, n)
        self.gen = torch.Generator().manual_seed(seed)
        self.perm = torch.randperm(n, generator=self.gen)
        self.pos = 0

    def next(self) -> torch.Tensor:
        if self.pos + self.batch_size > self.n:  # drop the short tail: every batch has batch_size rows
            self.perm = torch.randperm(self.n, generator=self.gen)
            self.pos = 0
        idx = self.perm[self.pos : self.pos + self.batch_size]
        self.pos += self.batch_size
        return idx

    def state(self) -> dict:
        return {"gen": self.gen.get_state(), "perm": self.perm, "pos": self.pos}

    def load(self, state: dict) -> None:
        self.gen.set_state(state["gen"])
        self.perm, self.pos = state["perm"], int(state["pos"])


def _save_state(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)  # a crash mid-write never leaves a half state file


def train_pacs(
    model: str,
    train_dataset,
    val_dataset,
    output_dir: str | Path,
    cfg: PACSTrainConfig | None = None,
    resume: bool = True,
    device: str | None = None,
    progress: bool | None = None,
    num_threads: int | None = None,
) -> TrainResult:
    """Fine-tune a CLIP's projections with PAC-S's loss; save the best ones as a transformers folder.

    Args:
        model: the starting CLIP (Hub id or folder), e.g. ``openai/clip-vit-base-patch32``.
        train_dataset, val_dataset: ``datasets.Dataset`` with the four columns of ``cfg.columns``
            (real image, real caption, generated image, generated caption); images in any form capeval reads.
        output_dir: receives ``model/`` (the best weights, usable as ``PACScore(checkpoint=...)``),
            ``training_state.pt`` (resumable state) and ``log.jsonl`` (losses).
        cfg: hyper-parameters (default: the paper's).
        resume: continue from ``output_dir/training_state.pt`` when it exists (same model and config).
        device: where to train; ``None`` = first GPU if any.
        progress: progress bars (``None``: on a terminal only).
        num_threads: CPU threads for torch during the run (``None``: leave torch's setting). Training the
            projections is many small matrix products: on a busy CPU one thread is much faster than two.

    Returns:
        TrainResult.
    """
    previous = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        return _train(model, train_dataset, val_dataset, output_dir, cfg, resume, device, progress)
    finally:
        torch.set_num_threads(previous)


def _train(model, train_dataset, val_dataset, output_dir, cfg, resume, device, progress) -> TrainResult:
    from tqdm.auto import tqdm

    from capeval.clip.backbones import load_backbone
    from capeval.training.features import tuple_features

    cfg = cfg or PACSTrainConfig()
    cfg.validate()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    backbone = load_backbone(model, device=device, dtype="float32")
    dev = backbone.device
    record = {**asdict(cfg), "columns": list(cfg.columns), "model": backbone.name}
    record |= {"train_rows": len(train_dataset), "val_rows": len(val_dataset)}
    state = _read_state(out / STATE_FILE, record) if resume else None

    disable = None if progress is None else not progress
    total = len(train_dataset) + len(val_dataset)
    with tqdm(total=total, desc="encoding", unit="row", disable=disable) as bar:
        train = tuple_features(backbone, train_dataset, cfg.columns, cfg.prefix, progress=bar)
        val = tuple_features(backbone, val_dataset, cfg.columns, cfg.prefix, progress=bar)
    if len(train["image"]) < 2:
        raise ValueError("the training set needs at least 2 rows")
    train = {k: v.to(dev) for k, v in train.items()}
    val = {k: v.to(dev) for k, v in val.items()}

    run = _Run(backbone, cfg, len(train["image"]), dev)
    if state is not None:
        run.load(state)
        logger.info("resumed from %s at step %d (best %.4f @ %d)", out / STATE_FILE, run.step, *run.best_at())
    else:
        run.start(validation_loss(run.vis, run.txt, val, run.scale, cfg))

    stopped_early = run.since_best >= cfg.patience
    bar = tqdm(total=cfg.max_steps, initial=run.step, desc="PAC-S", unit="it", disable=disable)
    with bar, open(out / LOG_FILE, "a") as log:
        while run.step < cfg.max_steps and not stopped_early:
            loss, parts = run.train_step(train)
            bar.update(1)
            if run.step % cfg.eval_every == 0 or run.step == cfg.max_steps:
                val_loss = validation_loss(run.vis, run.txt, val, run.scale, cfg)
                run.observe(val_loss)
                entry = {"step": run.step, "loss": loss, **parts, "val_loss": val_loss}
                entry["best_val_loss"] = run.best["val_loss"]
                run.history.append(entry)
                log.write(json.dumps(entry) + "\n")
                log.flush()
                bar.set_postfix(loss=f"{loss:.4f}", val=f"{val_loss:.4f}")
                logger.info(
                    "step %d loss %.4f val %.4f (best %.4f @ %d)", run.step, loss, val_loss, *run.best_at()
                )
                stopped_early = run.since_best >= cfg.patience
            if run.step % cfg.save_every == 0 or stopped_early or run.step == cfg.max_steps:
                _save_state(out / STATE_FILE, run.state(record))

    provenance = {"trained_from": backbone.name, "config": record, "best_step": run.best["step"]}
    provenance |= {"best_val_loss": run.best["val_loss"], "initial_val_loss": run.initial}
    folder = save_trained_model(backbone, run.best["vis"], run.best["txt"], out / "model", provenance)
    return TrainResult(
        folder, run.step, run.best["step"], run.best["val_loss"], run.initial, stopped_early, run.history
    )


def _read_state(path: Path, record: dict) -> dict | None:
    """The saved state of an interrupted run, if any; refused when it was made with other settings."""
    from capeval.clip.checkpoints.files import torch_load_weights

    if not path.is_file():
        return None
    state = torch_load_weights(path)
    saved = json.loads(state["config"])
    free = ("max_steps", "patience", "save_every")  # may change between a run and its continuation
    mismatch = {k: (saved.get(k), v) for k, v in record.items() if k not in free and saved.get(k) != v}
    if mismatch:
        raise ValueError(
            f"{path} was written with other settings (saved, now): {mismatch}; use another output_dir"
        )
    return state


class _Run:
    """The trainable projections, their optimiser, the batch sampler and the early-stopping bookkeeping."""

    def __init__(self, backbone, cfg: PACSTrainConfig, n_train: int, dev: torch.device) -> None:
        self.cfg = cfg
        self.vis = copy.deepcopy(backbone.model.visual_projection).float().to(dev).requires_grad_(True)
        self.txt = copy.deepcopy(backbone.model.text_projection).float().to(dev).requires_grad_(True)
        self.scale = (
            backbone.model.logit_scale.detach().float().exp().to(dev)
        )  # the model's temperature, fixed
        self.opt = torch.optim.AdamW(
            [self.vis.weight, self.txt.weight], lr=cfg.lr, weight_decay=cfg.weight_decay
        )
        self.sampler = _Sampler(n_train, cfg.batch_size, cfg.seed)
        self.dev = dev
        self.step = self.since_best = 0
        self.initial = math.inf
        self.best: dict = {}
        self.history: list[dict] = []

    def _weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.vis.weight.detach().clone(), self.txt.weight.detach().clone()

    def start(self, val_loss: float) -> None:
        self.initial = val_loss
        vis, txt = self._weights()
        self.best = {"val_loss": val_loss, "step": 0, "vis": vis, "txt": txt}
        self.history = [{"step": 0, "val_loss": val_loss}]

    def best_at(self) -> tuple[float, int]:
        return self.best["val_loss"], self.best["step"]

    def train_step(self, feats: dict[str, torch.Tensor]) -> tuple[float, dict[str, float]]:
        idx = self.sampler.next().to(self.dev)
        batch = {k: v[idx] for k, v in feats.items()}
        loss, parts = pacs_loss(self.vis, self.txt, batch, self.scale, self.cfg.lambda_v, self.cfg.lambda_t)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(
                f"loss is {loss.item()} at step {self.step + 1}; lower lr (now {self.cfg.lr})"
            )
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.step += 1
        self.since_best += 1
        return loss.item(), parts

    def observe(self, val_loss: float) -> None:
        if val_loss < self.best["val_loss"]:
            vis, txt = self._weights()
            self.best = {"val_loss": val_loss, "step": self.step, "vis": vis, "txt": txt}
            self.since_best = 0

    def state(self, record: dict) -> dict:
        """Everything needed to continue, as tensors, numbers and JSON strings (``weights_only`` loadable)."""
        return {
            "config": json.dumps(record),
            "step": self.step,
            "since_best": self.since_best,
            "initial_val_loss": self.initial,
            "vis": self.vis.weight.detach().cpu(),
            "txt": self.txt.weight.detach().cpu(),
            "optimizer": self.opt.state_dict(),
            "sampler": self.sampler.state(),
            "best_val_loss": self.best["val_loss"],
            "best_step": self.best["step"],
            "best_vis": self.best["vis"].cpu(),
            "best_txt": self.best["txt"].cpu(),
            "history": json.dumps(self.history),
        }

    def load(self, state: dict) -> None:
        with torch.no_grad():
            self.vis.weight.copy_(state["vis"])
            self.txt.weight.copy_(state["txt"])
        self.opt.load_state_dict(state["optimizer"])
        self.sampler.load(state["sampler"])
        self.step, self.since_best = int(state["step"]), int(state["since_best"])
        self.initial = float(state["initial_val_loss"])
        self.best = {
            "val_loss": float(state["best_val_loss"]),
            "step": int(state["best_step"]),
            "vis": state["best_vis"].to(self.dev),
            "txt": state["best_txt"].to(self.dev),
        }
        self.history = json.loads(state["history"])


def save_trained_model(
    backbone, vis_weight: torch.Tensor, txt_weight: torch.Tensor, folder: Path, provenance: dict
) -> Path:
    """The backbone with new projections, saved as a self-contained transformers folder (safetensors)."""
    from capeval.clip.checkpoints.convert import save_model_folder

    model = copy.deepcopy(backbone.model).float().cpu()
    with torch.no_grad():
        model.visual_projection.weight.copy_(vis_weight)
        model.text_projection.weight.copy_(txt_weight)
    return save_model_folder(model, backbone, folder, provenance)
