"""How much the authors' batch-dependent padding moves EMScore on VATEX-EVAL-shaped inputs.

EMScore's authors (ShiYaya/emscore, emscore/utils.py, ``em_cos_score``) match ``batch_size`` consecutive pairs
at once, padded with zeros, and take the maxima over padded positions too, so a padded 0 beats a negative true
cosine. capeval excludes padding by default; ``batch_padding="authors"`` reproduces their arithmetic. This
script scores VATEX-EVAL's own captions (the 6 candidates per video in the file's order, as the authors' demo
batches them, with its 9 references) both ways and prints the per-caption change and the change in the VATEX-EVAL
Kendall tau-b / Spearman rho against the human ratings.

The VATEX videos are not available here, so the videos are synthetic: clips of the shapes world encoded by the
committed shapes CLIP (the only trained CLIP offline), one pool clip per VATEX video, cut to a VATEX-like frame
count (10-s clips at 24, 25 or 30 fps minus 0-5 frames: 235-300 frames) or sampled to 10 frames. Figures for
EMScore(X,V) therefore show the padding's size on this model's cosines, not the published model's; the tau of
EMScore(X,V) is against videos that do not show the captions and only its change is of interest.

    python scripts/measure_emscore_padding.py --data-dir ../shared/benchmarks [--limit 3000] [--batch-size 64]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from capeval.bench.protocols import vatex_eval_correlation
from capeval.bench.vatex import load_vatex_eval
from capeval.emscore import EMScore
from capeval.shapes import draw_frames, random_scene, shapes_clip_path

FPS = (24, 25, 30)  # VATEX clips are 10 s of YouTube video at its native frame rate
POOL = 24


def vatex_frame_counts(n_videos: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 10 * rng.choice(FPS, size=n_videos) - rng.integers(0, 6, size=n_videos)


def pool_frames(scorer: EMScore, longest: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    clips = [
        draw_frames(random_scene(rng), n_frames=longest, rng=int(rng.integers(1 << 30))) for _ in range(POOL)
    ]
    return [f.numpy() for f in scorer.frame_embeddings(clips, None, len(clips))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="../shared/benchmarks")
    parser.add_argument("--limit", type=int, default=None, help="first N videos (6 captions each)")
    parser.add_argument("--batch-size", type=int, default=64, help="the authors' batch (their default 64)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    ds = load_vatex_eval(Path(args.data_dir) / "vatex_eval")
    if args.limit:
        ds = ds.select(range(min(len(ds), 6 * args.limit)))
    cands, refs, human = ds["candidate"], ds["references"], ds["human_scores"]
    video_ids = ds["video_id"]
    order = {v: i for i, v in enumerate(dict.fromkeys(video_ids))}
    counts = vatex_frame_counts(len(order), args.seed)
    model = str(shapes_clip_path())
    base = EMScore(model=model, device="cpu", progress=False)
    pool = pool_frames(base, int(counts.max()), args.seed)
    embeds = [pool[order[v] % POOL][: counts[order[v]]] for v in video_ids]
    print(f"{len(cands)} captions of {len(order)} videos; frames per video {counts.min()}-{counts.max()}; "
          f"shapes CLIP {model}; authors' batch {args.batch_size}")  # fmt: skip

    settings = [
        ("EMScore(X,V), all frames", None, {"video_embeds": embeds}),
        ("EMScore(X,V), 10 frames", 10, {"video_embeds": embeds}),
        ("EMScore(X,X*), 9 refs", None, {"references": refs}),
        ("EMScore(X,X*), 1 ref", None, {"references": [r[:1] for r in refs]}),
        ("EMScore(X,V,X*), all frames, 9 refs", None, {"video_embeds": embeds, "references": refs}),
        ("EMScore(X,V,X*), 10 frames, 9 refs", 10, {"video_embeds": embeds, "references": refs}),
    ]
    print("| setting | max abs change of figr_P / figr_R / full_F | median abs change of full_F | captions changed "
          "| negative figr_P or figr_R (exclude) | tau-b exclude -> authors | rho exclude -> authors |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for label, frames, inputs in settings:
        out = {}
        for mode in ("exclude", "authors"):
            scorer = EMScore(model=model, device="cpu", num_frames=frames, batch_size=args.batch_size,
                             batch_padding=mode, progress=False)  # fmt: skip
            result = scorer(cands, **inputs)
            out[mode] = {k: np.array(v) for k, v in result["details"][result["variant"]].items()}
        delta = {k: np.abs(out["authors"][k] - out["exclude"][k]) for k in ("figr_P", "figr_R", "full_F")}
        negative = np.mean((out["exclude"]["figr_P"] < 0) | (out["exclude"]["figr_R"] < 0))
        corr = {m: vatex_eval_correlation(d["full_F"], human) for m, d in out.items()}
        print(
            f"| {label} | {delta['figr_P'].max():.4f} / {delta['figr_R'].max():.4f} / {delta['full_F'].max():.4f} "
            f"| {np.median(delta['full_F']):.4f} | {np.mean(delta['full_F'] > 1e-6):.1%} | {negative:.1%} "
            f"| {corr['exclude']['kendall']:.2f} -> {corr['authors']['kendall']:.2f} "
            f"| {corr['exclude']['spearman']:.2f} -> {corr['authors']['spearman']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
