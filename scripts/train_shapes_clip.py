"""Train the shapes CLIP (a tiny CLIP that understands capeval's drawn-shapes world) and check it.

    .venv/bin/python scripts/train_shapes_clip.py                  # retrain the committed model in place
    .venv/bin/python scripts/train_shapes_clip.py --out /tmp/shapes-clip --steps 50

Seeded: the same seed, torch version and --threads give the same weights. The defaults (1 thread) are
those of the committed model at src/capeval/shapes/assets/shapes-clip/. After training, the model is
evaluated on held-out drawings through capeval's public API and the accuracies are printed (and written
to training.json beside the weights).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from capeval.shapes import shapes_clip_path
    from capeval.shapes.training import ShapesTrainConfig

    defaults = ShapesTrainConfig()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=shapes_clip_path(), help="model folder to write")
    for f in fields(ShapesTrainConfig):
        value = getattr(defaults, f.name)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (changes the weights slightly)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (the committed model) or cuda")
    parser.add_argument(
        "--eval-images", type=int, default=600, help="held-out drawings to evaluate on (0: skip)"
    )
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument(
        "--eval-only",
        action="store_true",
        help="only evaluate the model at --out (and update its training.json)",
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    from capeval.shapes.training import evaluate_shapes_clip, train_shapes_clip

    torch.set_num_threads(args.threads)
    record = Path(args.out) / "training.json"
    if args.eval_only:
        result = json.loads(record.read_text()) if record.is_file() else {}
    else:
        cfg = ShapesTrainConfig(
            **{f.name: getattr(args, f.name) for f in fields(ShapesTrainConfig) if hasattr(args, f.name)}
        )
        result = train_shapes_clip(args.out, cfg, log_every=args.log_every, device=args.device)
        result.update(threads=args.threads, device=args.device, torch=torch.__version__)
        print(
            f"trained in {result['seconds']:.0f} s ({args.threads} thread(s)), final loss {result['final_loss']:.4f}"
        )
    if args.eval_images:
        metrics = evaluate_shapes_clip(args.out, n_images=args.eval_images)
        result["held_out"] = metrics
        for key, value in metrics.items():
            print(f"  {key:>22}: {value:.4f}" if isinstance(value, float) else f"  {key:>22}: {value}")
    record.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
