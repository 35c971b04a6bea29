"""What streaming in-memory images through an evaluate module's add_batch costs (capeval stores them losslessly).

An in-memory 640x480 image given to ``clipscore.add_batch`` is checked and encoded (an RGB PIL image or an array:
the .npy bytes of its array; PNG only for the 1/LA/P/I;16 modes) before evaluate writes it to its Arrow cache; a
path is stored as the path. This reports, per image, the median time of add_batch with PIL images, with uint8
arrays and with paths to the same pixels, and each as a ratio to CLIP's own preprocessing of that image (read,
bicubic resize, centre crop: what scoring costs before the model runs, on any backbone). Two pictures: noise and a
drawn scene (flat colours).
Example:  python scripts/bench_evaluate_inputs.py --batch 16 --repeats 7
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import evaluate
import numpy as np
from PIL import Image

from capeval.clip.images import preprocess_image
from capeval.shapes import Scene, draw
from capeval_dev.perf.timing import markdown_table, median, time_interleaved

REPO = Path(__file__).resolve().parents[1]
SIZE = (640, 480)


def pictures() -> dict[str, Image.Image]:
    rng = np.random.default_rng(0)
    noise = Image.fromarray(rng.integers(0, 256, (SIZE[1], SIZE[0], 3), dtype=np.uint8))
    scene = draw(Scene("red", "circle", "left")).convert("RGB").resize(SIZE, Image.BICUBIC)
    return {"noise": noise, "drawn scene": scene}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=16, help="images per add_batch call")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    captions = ["a picture"] * args.batch
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # evaluate's default: stored rows go to an Arrow file on disk (here a temporary cache folder).
        module = evaluate.load(str(REPO / "metrics" / "clipscore"), cache_dir=tmp)
        for name, image in pictures().items():
            path = str(Path(tmp) / f"{name}.png")
            image.save(path)
            array = np.asarray(image)

            def add(images):
                module.add_batch(predictions=captions, images=images)

            runs = {
                "PIL": lambda image=image: add([image] * args.batch),
                "array": lambda array=array: add([array] * args.batch),
                "path": lambda path=path: add([path] * args.batch),
                "preprocess": lambda image=image: [
                    preprocess_image(image, 0, 224) for _ in range(args.batch)
                ],
            }
            times, _ = time_interleaved(runs, args.repeats)
            per_image = {k: median(v) / args.batch * 1e3 for k, v in times.items()}
            for kind in ("PIL", "array", "path"):
                rows.append(
                    [
                        name,
                        kind,
                        per_image[kind],
                        per_image["preprocess"],
                        per_image[kind] / per_image["preprocess"],
                    ]
                )
    header = ["picture", "add_batch input", "ms / image", "CLIP preprocessing ms / image", "ratio"]
    print(f"{SIZE[0]}x{SIZE[1]} RGB, batches of {args.batch}, medians of {args.repeats} interleaved runs")
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
