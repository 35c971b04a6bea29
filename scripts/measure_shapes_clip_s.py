"""Measure the CLIP-S range of the shapes CLIP, the figures the CLIPScore Space's header states offline.

    .venv/bin/python scripts/measure_shapes_clip_s.py

Every scene of the shapes world (75) is drawn at the demo's 224 x 224 and scored (w = 2.5, prefix "A photo
depicts") with the captions a demo example offers: its canonical caption and three hard negatives with the
colour, the shape or the position wrong (``capeval.demo.examples.candidate_captions``). Prints min, median
and max of each group, then the same to two decimals (the range rounded outward) in the form of
``capeval.demo.models.SHAPES_CLIP_S``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv: list[str] | None = None) -> int:
    import capeval
    from capeval.demo.examples import IMAGE_SIZE, candidate_captions
    from capeval.shapes import all_scenes, caption, draw, shapes_clip_path

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args(argv)
    scorer = capeval.CLIPScore(model=str(shapes_clip_path()))
    groups: dict[str, list[float]] = {"right": [], "wrong": []}
    for scene in all_scenes():
        captions = candidate_captions(scene)
        scores = scorer(captions, images=[draw(scene, size=IMAGE_SIZE)] * len(captions))["scores"]
        for text, score in zip(captions, scores, strict=True):
            groups["right" if text == caption(scene) else "wrong"].append(score)
    # Two decimals, the range rounded outward so that it holds every score measured.
    figures = {
        name: (
            float(np.floor(np.min(s) * 100) / 100),
            round(float(np.median(s)), 2),
            float(np.ceil(np.max(s) * 100) / 100),
        )
        for name, s in groups.items()
    }
    exact = {name: [round(float(f(s)), 4) for f in (np.min, np.median, np.max)] for name, s in groups.items()}
    print(f"min, median, max: {exact}")
    print(f"{len(all_scenes())} scenes; {', '.join(f'{n}: {len(s)} captions' for n, s in groups.items())}")
    print(f"SHAPES_CLIP_S = {figures}")
    print(f"signature: {scorer.signature}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
