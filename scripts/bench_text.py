#!/usr/bin/env python
"""WMD and WEmbSim on the shared benchmarks: WMD speed against a plain gensim loop, Flickr8k-Expert Kendall
tau-c, Pascal-50S accuracy per category.

    .venv/bin/python scripts/bench_text.py                       # everything, default GloVe-6B-50d
    .venv/bin/python scripts/bench_text.py --only speed --repeats 3
    .venv/bin/python scripts/bench_text.py --vectors fse/word2vec-google-news-300 --only flickr8k

Speed: all 5,664 Flickr8k-Expert candidates x 5 references; capeval's time is the median of --repeats runs
after a warm-up and includes tokenisation, gensim's loop is one run on pre-tokenised captions. Both give the
per-candidate scores compared in the output.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmarks", type=Path, default=REPO.parent / "shared" / "benchmarks")
    parser.add_argument("--vectors", default=None, help="word vectors (default: packaged GloVe-6B-50d)")
    parser.add_argument("--only", choices=["speed", "flickr8k", "pascal"], action="append")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--draws", type=int, default=5, help="random reference draws for Pascal-50S")
    parser.add_argument("--normalize-vectors", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if not args.benchmarks.is_dir():
        print(f"no benchmarks at {args.benchmarks}", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")

    from capeval.perf.text import wmd_speed
    from capeval.text import bench
    from capeval.wembsim import WEmbSim
    from capeval.wmd import WMD

    wmd = WMD(vectors=args.vectors, normalize_vectors=args.normalize_vectors)
    wembsim = WEmbSim(vectors=args.vectors, normalize_vectors=args.normalize_vectors)
    todo = args.only or ["speed", "flickr8k", "pascal"]
    results: dict = {"wmd_signature": wmd.signature, "wembsim_signature": wembsim.signature}
    print(f"wmd: {wmd.signature}\nwembsim: {wembsim.signature}\n")
    preds, refs, ratings = bench.flickr8k_expert(args.benchmarks)

    if "speed" in todo:
        speed = wmd_speed(wmd, preds, refs, repeats=args.repeats)
        results["speed"] = speed
        print(f"## WMD speed, Flickr8k-Expert ({speed['candidates']} candidates x 5 references)\n")
        print("| | seconds | candidates/s |\n|---|---|---|")
        print(
            f"| capeval (median of {args.repeats}) | {speed['capeval_seconds']:.2f} | {speed['capeval_candidates_per_s']:.0f} |"
        )
        print(
            f"| gensim wmdistance loop | {speed['gensim_seconds']:.2f} | {speed['gensim_candidates_per_s']:.0f} |"
        )
        print(
            f"\nspeed-up {speed['speedup']:.1f}x; max |score difference| {speed['max_score_difference']:.2e}, "
            f"max |distance difference| {speed['max_distance_difference']:.2e}; {speed['distinct_pairs']} distinct "
            f"pairs: {speed['solved']} solved, {speed['closed_form']} closed form, {speed['pruned']} pruned\n"
        )

    if "flickr8k" in todo:
        f8k = {}
        for name, metric in (("wmd", wmd), ("wembsim", wembsim)):
            scores = metric(preds, refs)["scores"]
            f8k[name] = {
                "tau_c": bench.kendall_tau(scores, ratings, "c"),
                "tau_b": bench.kendall_tau(scores, ratings, "b"),
            }
        results["flickr8k_expert"] = f8k
        print(f"## Flickr8k-Expert ({len(preds)} pairs, {sum(map(len, ratings))} ratings)\n")
        print("| metric | Kendall tau-c | tau-b |\n|---|---|---|")
        for name, v in f8k.items():
            print(f"| {name} | {100 * v['tau_c']:.1f} | {100 * v['tau_b']:.1f} |")
        print()

    if "pascal" in todo:
        items = bench.pascal50s(args.benchmarks, draws=args.draws)
        pascal = {}
        for name, metric in (("wmd", wmd), ("wembsim", wembsim)):

            def score(p, r, metric=metric):
                return metric(p, r)["scores"]

            fixed = bench.pascal_accuracy(items, score, draw=0)
            drawn = [bench.pascal_accuracy(items, score, draw=d) for d in range(1, args.draws + 1)]
            mean_drawn = {k: sum(d[k] for d in drawn) / len(drawn) for k in ("HC", "HI", "HM", "MM", "mean")}
            pascal[name] = {"fixed_references": fixed, "random_draws": mean_drawn, "draws": args.draws}
        results["pascal50s"] = pascal
        print("## Pascal-50S accuracy (%)\n")
        print("| metric | references | HC | HI | HM | MM | mean |\n|---|---|---|---|---|---|---|")
        for name, v in pascal.items():
            for label, acc in (
                ("file's fixed 5", v["fixed_references"]),
                (f"mean of {args.draws} random draws", v["random_draws"]),
            ):
                cells = " | ".join(f"{100 * acc[c]:.1f}" for c in ("HC", "HI", "HM", "MM", "mean"))
                print(f"| {name} | {label} | {cells} |")
        print()

    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
