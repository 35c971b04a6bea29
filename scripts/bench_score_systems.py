"""How much does scoring N systems in one ``capeval.score_systems`` call save over N separate runs?

One call encodes each image once for every image metric of a backbone and sends every system's captions to the
text encoder together; N separate runs (one system each, as N invocations of ``capeval score`` would) encode the
images N times. Both run in one process with the model already loaded, so the figure is the scoring work alone
(a separate ``capeval score`` process also pays its start and the model load each time). Medians of --repeats
interleaved runs on examples/shapes (12 images; captions of system k: the example's candidates rotated by k images,
so every system captions every image differently), metrics CLIP-S and RefCLIP-S.

Example:  python scripts/bench_score_systems.py --systems 1 2 4 8 --repeats 5 --model vit-b32
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from capeval.scoring.formats import read_caption_files
from capeval.scoring.systems import score_systems
from capeval_dev.perf.timing import markdown_table, median, time_interleaved

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "shapes"


def _model(name: str, work: Path) -> str:
    if name == "shapes":
        from capeval.shapes import shapes_clip_path

        return str(shapes_clip_path())
    from capeval_dev.perf.models import build_benchmark_clip

    return str(build_benchmark_clip(name, work / name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--model", default="shapes", help="shapes (the committed shapes CLIP) or a random vit-b32 / vit-l14"
    )
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    files = read_caption_files([EXAMPLE / "candidates.json"], EXAMPLE / "images", EXAMPLE / "references.json")
    captions = next(iter(files.systems.values()))
    with tempfile.TemporaryDirectory() as tmp:
        options = dict(
            images=files.images,
            references=files.references,
            metrics=["clipscore", "refclipscore"],
            model=_model(args.model, Path(tmp)),
            device=args.device,
            progress=False,
        )
        score_systems(
            {"warm-up": captions}, **options
        )  # loads the model once, as both pipelines then find it
        rows = []
        for n in args.systems:
            systems = {f"sys{k}": captions[k:] + captions[:k] for k in range(n)}

            def together(systems=systems):
                return score_systems(systems, **options)

            def separately(systems=systems):
                return [score_systems({name: c}, **options) for name, c in systems.items()]

            times, results = time_interleaved({"together": together, "separately": separately}, args.repeats)
            together_result, alone = results["together"], results["separately"]
            worst = max(
                abs(a - b)
                for r in alone
                for name in r.systems
                for key in r.metrics
                for a, b in zip(r.per_item[name][key], together_result.per_item[name][key], strict=True)
            )
            t, s = median(times["together"]), median(times["separately"])
            rows.append([n, len(files.ids), t, s, s / t, worst])
    print(f"model {args.model}, device {args.device}, medians of {args.repeats} interleaved runs")
    print(
        markdown_table(
            ["systems", "images", "one call (s)", "separate runs (s)", "speed-up", "max |score difference|"],
            rows,
        )
    )
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
