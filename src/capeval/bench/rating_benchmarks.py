"""The rating benchmarks: one human score per caption, and the metric's correlation with it.

Flickr8k-Expert and -CF, Composite, THumB, Polaris and Nebula rate image captions; VATEX-EVAL rates video
captions, scored with 0, 1 and 9 references. Each benchmark has a loader (data folder and options to a
``datasets.Dataset`` under the benchmark's protocol), its scoring settings and its evaluation (per-setting
scores to table cells); ``capeval.bench.benchmarks`` wires them into the registry.
"""

from __future__ import annotations

from pathlib import Path

import datasets

from capeval.bench import protocols as P
from capeval.bench.benchmark_types import Setting, Unit


def _rating_units(ds: datasets.Dataset) -> list[Unit]:
    return [
        Unit(i, c, list(r), img)
        for i, c, r, img in zip(ds["item_id"], ds["candidate"], ds["references"], ds["image"], strict=True)
    ]


# ---------------------------------------------------------------- Flickr8k


def _load_expert(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.flickr8k import load_flickr8k_expert

    ds = load_flickr8k_expert(path, image_root=opts.get("image_root"))
    return P.exclude_candidates_in_references(ds)


def _load_cf(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.flickr8k import load_flickr8k_cf

    return P.remove_judged_from_references(load_flickr8k_cf(path, image_root=opts.get("image_root")))


def _rating_settings(ds, opts):
    return [Setting("default", _rating_units(ds))]


def _eval_expert(ds, scores, opts):
    s = scores["default"]
    out = P.rating_correlations(s, ds, "A", ("kendall_c", "kendall_b"))
    b = P.rating_correlations(s, ds, "B", ("kendall_c", "kendall_b"))
    out.update({"kendall_c_B": b["kendall_c"], "kendall_b_B": b["kendall_b"]})
    return out


def _eval_rating(ds, scores, opts):
    return P.rating_correlations(scores["default"], ds, "A", ("kendall_c", "kendall_b"))


# ---------------------------------------------------------------- Composite


def _load_composite(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.composite import load_composite

    ds = load_composite(path, image_roots=opts.get("image_roots"))
    return P.composite_references(ds, exclude_candidate=not opts.get("composite_keep_references", False))


# ---------------------------------------------------------------- VATEX-EVAL


def _load_vatex(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.vatex import load_vatex_eval

    return load_vatex_eval(path, video_root=opts.get("video_root"))


def _vatex_settings(ds, opts):
    out = []
    for n in (0, 1, 9):
        refs = P.vatex_references(ds["references"], n)
        units = [
            Unit(i, c, refs[k] if refs is not None else None, v)
            for k, (i, c, v) in enumerate(zip(ds["item_id"], ds["candidate"], ds["video"], strict=True))
        ]
        out.append(Setting(f"refs{n}", units, references=n > 0, reference_free=n == 0))
    return out


def _eval_vatex(ds, scores, opts):
    out = {}
    for name in scores:
        r = P.vatex_eval_correlation(scores[name], ds["human_scores"])
        n = name.removeprefix("refs")
        out[f"kendall_{n}ref"] = r["kendall"]
        out[f"spearman_{n}ref"] = r["spearman"]
    return out


# ---------------------------------------------------------------- THumB, Polaris, Nebula


def _load_thumb(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.thumb import load_thumb

    return load_thumb(path, references=opts.get("thumb_references"), image_root=opts.get("image_root"))


def _eval_thumb(ds, scores, opts):
    s = scores["default"]
    out = P.rating_correlations(s, ds, "A", ("pearson", "kendall_b"))
    human = [h[0] for h in ds["human_scores"]]
    sys_all = P.system_level_correlation(s, ds["system"], human)
    sys_machine = (
        P.system_level_correlation(s, ds["system"], human, exclude=["Human"])
        if len(set(ds["system"]) - {"Human"}) >= 3
        else {}
    )
    out["sys_pearson"] = sys_all["pearson"]
    if sys_machine:
        out["sys_pearson_machines"] = sys_machine["pearson"]
    return out


def _load_polaris(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.polaris_nebula import load_polaris

    return load_polaris(path if path.exists() else None, split=opts.get("split", "test"))


def _load_nebula(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.polaris_nebula import load_nebula

    return load_nebula(path if path.exists() else None, split=opts.get("split", "test"))
