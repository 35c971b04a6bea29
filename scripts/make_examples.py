"""Regenerate examples/shapes/: drawn scenes with candidate and reference captions (jmhessel/clipscore layout).

    .venv/bin/python scripts/make_examples.py            # writes examples/shapes/
    capeval ... examples/shapes/candidates.json examples/shapes/images --references_json examples/shapes/references.json

Deterministic: the same seed writes byte-identical files.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    from capeval.shapes import make_example_folder

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "examples" / "shapes")
    parser.add_argument("--n-images", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if (args.out / "images").is_dir():
        shutil.rmtree(args.out / "images")
    info = make_example_folder(args.out, n_images=args.n_images, seed=args.seed)
    for image_id, item in info.items():
        mark = "correct" if item["correct"] else f"wrong {item['wrong']}"
        print(f"{image_id}  {item['candidate']!r:45}  ({mark})")
    print(f"wrote {len(info)} images to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
