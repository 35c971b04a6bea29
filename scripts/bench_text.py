#!/usr/bin/env python
"""WMD and WEmbSim on the shared benchmarks: WMD speed against a plain gensim loop, Flickr8k-Expert Kendall
tau-c, Pascal-50S accuracy per category.

    .venv/bin/python scripts/bench_text.py                       # everything, default GloVe-6B-50d
    .venv/bin/python scripts/bench_text.py --only speed --repeats 3
    .venv/bin/python scripts/bench_text.py --vectors fse/word2vec-google-news-300 --only flickr8k

Speed: all 5,664 Flickr8k-Expert candidates x 5 references; capeval's time is the median of --repeats runs
after a warm-up and includes tokenisation, gensim's loop is one run on pre-tokenised captions. Both give the
per-candidate scores compared in the output.

The data and the statistics are those of ``capeval bench`` (:mod:`capeval.bench`): Flickr8k-Expert from the
official files less the 158 pairs whose candidate is one of its own references, Kendall tau with each expert
rating as its own row; Pascal-50S with the consensus labels, the JSON file's fixed 5 references and the
protocol's seeded draws of 5 of the image's ``pascal50S.mat`` sentences, a metric tie counting half. Correlations
and accuracies are x 100, as ``capeval bench`` reports them.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _pascal_accuracy(metric, ds, references: list[list[str]], categories: list[str]) -> dict[str, float]:
    """Accuracy (x 100) per category and mean of ``metric`` on the pairs of ``ds``, each pair's two candidates
    scored against ``references[i]``, plus ``ties``: how many pairs the metric scored alike (each counted 1/2).
    """
    from capeval.bench import accuracy_by_category

    cands = [c for pair in ds["candidates"] for c in pair]
    refs = [r for r in references for _ in range(2)]
    s = np.asarray(metric(cands, refs)["scores"]).reshape(-1, 2)
    out = accuracy_by_category(s[:, 0], s[:, 1], ds["label"], ds["category"], categories, ties="half")
    out["ties"] = int((s[:, 0] == s[:, 1]).sum())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmarks", type=Path, default=REPO.parent / "shared" / "benchmarks")
    parser.add_argument("--vectors", default=None, help="word vectors (default: packaged GloVe-6B-50d)")
    parser.add_argument("--only", choices=["speed", "flickr8k", "pascal"], action="append")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--draws", type=int, default=5, help="random reference draws for Pascal-50S (0: the fixed 5 only)"
    )
    parser.add_argument("--normalize-vectors", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if not args.benchmarks.is_dir():
        print(f"no benchmarks at {args.benchmarks}", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")

    from capeval.bench import (
        draw_references,
        exclude_candidates_in_references,
        load_flickr8k_expert,
        load_pascal50s,
        load_pascal50s_json,
        rating_correlations,
    )
    from capeval.bench.protocols import PASCAL_N_REFS, PASCAL_SEED
    from capeval.wembsim import WEmbSim
    from capeval.wmd import WMD
    from capeval_dev.perf.text import wmd_speed

    wmd = WMD(vectors=args.vectors, normalize_vectors=args.normalize_vectors)
    wembsim = WEmbSim(vectors=args.vectors, normalize_vectors=args.normalize_vectors)
    todo = args.only or ["speed", "flickr8k", "pascal"]
    results: dict = {"wmd_signature": wmd.signature, "wembsim_signature": wembsim.signature}
    print(f"wmd: {wmd.signature}\nwembsim: {wembsim.signature}\n")
    expert = exclude_candidates_in_references(load_flickr8k_expert(args.benchmarks / "flickr8k"))
    preds, refs = expert["candidate"], expert["references"]

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
            tau = rating_correlations(metric(preds, refs)["scores"], expert, "A", ("kendall_c", "kendall_b"))
            f8k[name] = {"tau_c": tau["kendall_c"], "tau_b": tau["kendall_b"]}
        results["flickr8k_expert"] = f8k
        n_ratings = sum(map(len, expert["human_scores"]))
        print(f"## Flickr8k-Expert ({len(expert)} pairs, {n_ratings} ratings)\n")
        print("| metric | Kendall tau-c | tau-b |\n|---|---|---|")
        for name, v in f8k.items():
            print(f"| {name} | {v['tau_c']:.1f} | {v['tau_b']:.1f} |")
        print()

    if "pascal" in todo:
        categories = ["HC", "HI", "HM", "MM"]
        fixed_ds = load_pascal50s_json(args.benchmarks / "pascal50s")
        settings = [("fixed_references", fixed_ds, [fixed_ds["references"]])]
        if args.draws:
            # The rows of the .mat loader carry all of the image's sentences but the two candidates; the
            # protocol's draws (those of `capeval bench run pascal50s`) pick 5 of them per pair.
            drawn_ds = load_pascal50s(args.benchmarks / "pascal50s")
            draws = draw_references(drawn_ds["references"], PASCAL_N_REFS, args.draws, PASCAL_SEED)
            settings.append(("random_draws", drawn_ds, draws))
        pascal = {}
        for name, metric in (("wmd", wmd), ("wembsim", wembsim)):
            pascal[name] = {"draws": args.draws}
            for key, ds, ref_sets in settings:
                per_set = [_pascal_accuracy(metric, ds, drawn, categories) for drawn in ref_sets]
                pascal[name][key] = {k: float(np.mean([a[k] for a in per_set])) for k in per_set[0]}
        results["pascal50s"] = pascal
        print("## Pascal-50S accuracy (%)\n")
        print("| metric | references | HC | HI | HM | MM | mean |\n|---|---|---|---|---|---|---|")
        for name, v in pascal.items():
            for label, key in (
                ("file's fixed 5", "fixed_references"),
                (f"mean of {args.draws} random draws", "random_draws"),
            ):
                if key in v:
                    cells = " | ".join(f"{v[key][c]:.1f}" for c in [*categories, "mean"])
                    print(f"| {name} | {label} | {cells} |")
        print()

    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
