#!/usr/bin/env python
"""EMScore on VATEX-EVAL (Shi et al. 2022): Kendall tau-b and Spearman per annotator, averaged, x 100.

Protocol of the authors' VATEX-EVAL-demo.py: 0, 1 or 9 references (the first n of each video), 10 frames
per video evenly spaced, metric scores rounded to 4 decimals before the correlations. Without videos (none
are distributed with the benchmark's text files) only the reference-only variant EMScore(X,X*) runs, for 1
and 9 references; with ``--video-root`` (the VATEX clips) or ``--video-feats`` (the authors' cached
per-frame CLIP features, ``<video_id>.pt``) EMScore(X,V) and EMScore(X,V,X*) run too.

The authors compute IDF on the VATEX training captions (``--idf-corpus``, their
``vatex_train_en_annotations.json``); without it the IDF comes from the references of the call
(capeval's default).

Examples:
    # the smoke figure (random and shapes tiny CLIPs, reference-only):
    python scripts/emscore_vatex.py --model random --model shapes
    # the paper's setting on GPU, with the authors' cached ViT-B/32 frame features and training-set IDF:
    python scripts/emscore_vatex.py --model openai/clip-vit-base-patch32 --video-feats feats/ \\
        --idf-corpus vatex_train_en_annotations.json --refs 0 1 9
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "benchmarks" / "vatex_eval"
QUANTITIES = ("figr_P", "figr_R", "figr_F", "cogr", "full_P", "full_R", "full_F")


def resolve_model(name: str, workdir: Path) -> tuple[str, str]:
    """(model path or id, label): ``random`` = the random tiny CLIP of the tests, ``shapes`` = the shapes CLIP."""
    if name == "random":
        from capeval.shapes.tiny_clip import build_tiny_clip

        return str(build_tiny_clip(workdir / "random-tiny-clip", seed=0)), "random tiny CLIP (seed 0)"
    if name == "shapes":
        from capeval.shapes import shapes_clip_path

        return str(shapes_clip_path()), "shapes CLIP"
    return name, name


def load_video_feats(folder: Path, video_ids: list[str]):
    """The authors' cached per-frame features (``<video_id>.pt`` tensors), loaded without unpickling code."""
    import torch

    cache = {}
    for vid in dict.fromkeys(video_ids):
        path = folder / f"{vid}.pt"
        if not path.is_file():
            raise FileNotFoundError(f"no cached features for video {vid} ({path})")
        cache[vid] = torch.load(path, map_location="cpu", weights_only=True)
    return [cache[v] for v in video_ids]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="vid_cans_score_dict.json or its folder")
    parser.add_argument(
        "--model", action="append", help="'random', 'shapes', a Hub id or a folder (repeatable)"
    )
    parser.add_argument("--checkpoint", help="PAC-S weights loaded over the model (the PAC-S video metric)")
    parser.add_argument(
        "--refs", type=int, nargs="+", default=[0, 1, 9], help="reference counts (default 0 1 9)"
    )
    parser.add_argument("--video-root", help="folder of the VATEX clips <video_id>.mp4")
    parser.add_argument("--video-feats", help="folder of the authors' cached frame features <video_id>.pt")
    parser.add_argument("--num-frames", type=int, default=10, help="frames per video (the protocol's 10)")
    parser.add_argument(
        "--idf-corpus", help="JSON {video_id: [captions]} (the authors' VATEX training captions)"
    )
    parser.add_argument("--limit", type=int, help="score only the first N candidates (quick runs)")
    parser.add_argument("--device")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--all-quantities", action="store_true", help="also correlate figr_*, cogr, full_P/R")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args(argv)

    from capeval.bench import load_vatex_eval, vatex_eval_correlation, vatex_references
    from capeval.emscore import EMScore

    ds = load_vatex_eval(args.data, video_root=args.video_root)
    if args.limit:
        ds = ds.select(range(min(args.limit, len(ds))))
    cands, refs_all, human = ds["candidate"], ds["references"], ds["human_scores"]
    videos = video_embeds = None
    if args.video_root:
        videos = ds["video"]
    elif args.video_feats:
        video_embeds = load_video_feats(Path(args.video_feats), ds["video_id"])
    idf = True
    if args.idf_corpus:
        corpus = json.loads(Path(args.idf_corpus).read_text(encoding="utf-8"))
        idf = [c for caps in corpus.values() for c in caps]

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.model or ["random", "shapes"]:
            model, label = resolve_model(name, Path(tmp))
            scorer = EMScore(
                model=model,
                checkpoint=args.checkpoint,
                device=args.device,
                dtype=args.dtype,
                batch_size=args.batch_size,
                num_frames=args.num_frames,
                idf=idf,
            )
            for n_refs in args.refs:
                refs = vatex_references(refs_all, n_refs)
                if refs is None and videos is None and video_embeds is None:
                    print(
                        f"[skip] {label}, {n_refs} refs: needs --video-root or --video-feats", file=sys.stderr
                    )
                    continue
                start = time.perf_counter()
                out = scorer(cands, references=refs, videos=videos, video_embeds=video_embeds)
                seconds = time.perf_counter() - start
                for variant, details in out["details"].items():
                    for q in QUANTITIES if args.all_quantities else ("full_F",):
                        corr = vatex_eval_correlation(details[q], human)
                        rows.append(
                            {
                                "model": label,
                                "refs": n_refs,
                                "variant": variant,
                                "quantity": q,
                                "kendall_b": round(corr["kendall"], 2),
                                "spearman": round(corr["spearman"], 2),
                                "seconds": round(seconds, 1),
                                "signature": out["signature"],
                            }
                        )
                print(
                    f"[done] {label}, {n_refs} refs: {len(cands)} candidates in {seconds:.1f} s",
                    file=sys.stderr,
                )

    print(
        f"VATEX-EVAL, {len(cands)} candidates; Kendall tau-b / Spearman rho x 100, averaged over 3 annotators\n"
    )
    print("| model | refs | variant | quantity | tau-b | rho |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['refs']} | {r['variant']} | {r['quantity']} | {r['kendall_b']:.2f} | {r['spearman']:.2f} |"
        )
    print()
    for sig in dict.fromkeys(r["signature"] for r in rows):
        print(f"signature: `{sig}`")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
