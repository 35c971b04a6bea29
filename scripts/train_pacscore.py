"""Train PAC-S projections: positive-augmented contrastive fine-tuning of CLIP's final projections.

The data is a `datasets` dataset with one row per (real image, real caption, generated image, generated
caption); a folder written by `save_to_disk` or a Hub dataset, with a training and a validation split.
Defaults are the paper's (lambda_v 0.05, lambda_t 0.1, AdamW lr 1e-4, batch 256, early stopping after 1,500
iterations without a better validation loss). Re-running with the same --output resumes.

Examples:
    .venv/bin/python scripts/train_pacscore.py --model openai/clip-vit-base-patch32 \\
        --dataset my-coco-pacs --output runs/pacs-vit-b32
    .venv/bin/python scripts/train_pacscore.py --shapes-demo --output runs/shapes-pacs [--start shapes]
The trained weights land in <output>/model: use them as capeval.PACScore(checkpoint="<output>/model").
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from capeval.clip.tokenization import PREFIX
from capeval.training import BATCH_SIZE, LAMBDA_T, LAMBDA_V, LR, PATIENCE, PACSTrainConfig, train_pacs
from capeval.training.pacs import COLUMNS

# The shapes demo trains on a few hundred rows: a larger step and smaller batches than COCO needs.
SHAPES_DEMO = dict(lr=1e-3, batch_size=64, eval_every=50, patience=300, max_steps=2000)


def load_splits(name: str, train_split: str, val_split: str | None, val_fraction: float, seed: int):
    import datasets

    local = Path(name)
    data = datasets.load_from_disk(str(local)) if local.is_dir() else datasets.load_dataset(name)
    if isinstance(data, datasets.Dataset):
        data = datasets.DatasetDict({train_split: data})
    if train_split not in data:
        raise SystemExit(f"dataset {name} has no split {train_split!r} (it has {list(data)})")
    if val_split and val_split in data:
        return data[train_split], data[val_split]
    if not 0 < val_fraction < 1:
        raise SystemExit(f"dataset {name} has no split {val_split!r}: pass --val-fraction (e.g. 0.05)")
    parts = data[train_split].train_test_split(test_size=val_fraction, seed=seed)
    return parts["train"], parts["test"]


def shapes_demo(output: Path, args) -> None:
    from capeval.training.shapes_data import (
        caption_ranking_accuracy,
        held_out_scenes,
        random_start_clip,
        shapes_clip_without_projections,
        shapes_pacs_dataset,
    )

    if args.start == "random":
        start, what = random_start_clip(output / "start"), "a random tiny CLIP"
        cfg = dict(SHAPES_DEMO)
    else:
        start, what = shapes_clip_without_projections(output / "start"), "the shapes CLIP, projections reset"
        cfg = dict(SHAPES_DEMO, lr=LR, max_steps=1500)  # the paper's lr is enough from trained encoders
    if args.max_steps:
        cfg["max_steps"] = args.max_steps
    train, val = shapes_pacs_dataset(600, seed=1), shapes_pacs_dataset(150, seed=2)
    images, scenes = held_out_scenes(150)
    before = caption_ranking_accuracy(start, images, scenes)
    result = train_pacs(
        str(start),
        train,
        val,
        output,
        PACSTrainConfig(**cfg),
        device=args.device,
        num_threads=args.threads or 1,
    )
    after = caption_ranking_accuracy(result.output, images, scenes)
    print(f"start: {what} ({start})")
    print(
        f"validation loss {result.initial_val_loss:.4f} -> {result.best_val_loss:.4f} (best at step {result.best_step})"
    )
    print(f"held-out caption ranking top-1 (75 captions, 150 drawings) {before:.3f} -> {after:.3f}")
    print(f"weights: {result.output}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", required=True, help="run folder (model/, training_state.pt, log.jsonl)")
    p.add_argument("--model", default="openai/clip-vit-base-patch32", help="starting CLIP: Hub id or folder")
    p.add_argument(
        "--dataset", help="save_to_disk folder or Hub dataset of (image, caption, generated...) rows"
    )
    p.add_argument("--train-split", default="train")
    p.add_argument("--val-split", default="validation")
    p.add_argument("--val-fraction", type=float, default=0.0, help="split validation off train when absent")
    p.add_argument(
        "--columns", nargs=4, default=list(COLUMNS), metavar=("IMAGE", "CAPTION", "GEN_IMAGE", "GEN_CAPTION")
    )
    p.add_argument("--lambda-v", type=float, default=LAMBDA_V)
    p.add_argument("--lambda-t", type=float, default=LAMBDA_T)
    p.add_argument("--lr", type=float, default=LR)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    p.add_argument(
        "--patience", type=int, default=PATIENCE, help="iterations without a better validation loss"
    )
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--save-every", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefix", default=PREFIX, help="prompt before captions ('' for none)")
    p.add_argument(
        "--no-resume", action="store_true", help="start over even if the output holds a saved state"
    )
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument(
        "--shapes-demo", action="store_true", help="offline demo on the drawn-shapes world (no downloads)"
    )
    p.add_argument(
        "--start", choices=["random", "shapes"], default="random", help="the demo's starting model"
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    output = Path(args.output)
    if args.shapes_demo:
        shapes_demo(output, args)
        return 0
    if not args.dataset:
        p.error("--dataset is required (or --shapes-demo)")
    train, val = load_splits(args.dataset, args.train_split, args.val_split, args.val_fraction, args.seed)
    cfg = PACSTrainConfig(
        lambda_v=args.lambda_v, lambda_t=args.lambda_t, lr=args.lr, weight_decay=args.weight_decay,
        batch_size=args.batch_size, patience=args.patience, eval_every=args.eval_every,
        max_steps=args.max_steps or PACSTrainConfig.max_steps, save_every=args.save_every, seed=args.seed,
        prefix=args.prefix or None, columns=tuple(args.columns),
    )  # fmt: skip
    result = train_pacs(
        args.model,
        train,
        val,
        output,
        cfg,
        resume=not args.no_resume,
        device=args.device,
        num_threads=args.threads,
    )
    print(
        f"validation loss {result.initial_val_loss:.4f} -> {result.best_val_loss:.4f} (best at step {result.best_step})"
    )
    print(f'weights: {result.output}; use capeval.PACScore(checkpoint="{result.output}")')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
