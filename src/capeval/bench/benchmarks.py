"""The benchmark registry: where each benchmark's files live, what a metric scores, and the table it fills.

A :class:`Benchmark` loads its dataset from a data folder (``<data_dir>/<folder>``, the layout of
``../shared/benchmarks``), turns it into scoring :class:`Setting` s (a setting is one set of inputs a metric
scores: e.g. one random draw of Pascal references, or VATEX-EVAL with 1 reference) and maps per-unit scores to
the columns of the paper's table.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np

from capeval.bench import protocols as P


@dataclass
class Unit:
    """One caption to score: ``item_id`` names it, the rest is exactly what a metric sees."""

    item_id: str
    candidate: str
    references: list[str] | None
    image: object = None


@dataclass
class Setting:
    """One scoring pass over a benchmark. ``references=False``: only reference-free metrics take part;
    ``reference_free=False``: only reference-based ones (a ref-free metric's number sits in another column)."""

    name: str
    units: list[Unit]
    references: bool = True
    reference_free: bool = True


@dataclass
class Benchmark:
    """A benchmark: loader, scoring settings, protocol and table layout."""

    name: str
    title: str
    folder: str
    load: Callable[[Path, dict], datasets.Dataset]
    settings: Callable[[datasets.Dataset, dict], list[Setting]]
    evaluate: Callable[[datasets.Dataset, dict[str, np.ndarray], dict], dict[str, float]]
    columns: list[tuple[str, str]]
    table: str
    notes: list[str] = field(default_factory=list)
    kind: str = "rating"  # rating | pairwise | vatex | system

    def data_path(self, data_dir: str | os.PathLike) -> Path:
        return Path(data_dir).expanduser() / self.folder


def _rating_units(ds: datasets.Dataset) -> list[Unit]:
    return [
        Unit(i, c, list(r), img)
        for i, c, r, img in zip(ds["item_id"], ds["candidate"], ds["references"], ds["image"], strict=True)
    ]


def _pair_units(ds: datasets.Dataset, references: list[list[str]] | None = None) -> list[Unit]:
    refs = references if references is not None else ds["references"]
    units = []
    for i, cands, r, img in zip(ds["item_id"], ds["candidates"], refs, ds["image"], strict=True):
        units.append(Unit(f"{i}/a", cands[0], list(r), img))
        units.append(Unit(f"{i}/b", cands[1], list(r), img))
    return units


def _split_pairs(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return scores[0::2], scores[1::2]


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


# ---------------------------------------------------------------- Pascal-50S / Abstract-50S


def _load_pascal(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.pascal import load_pascal50s, load_pascal50s_json

    if (path / "pair_pascal.mat").is_file():
        return load_pascal50s(path, image_root=opts.get("image_root"))
    return load_pascal50s_json(path, image_root=opts.get("image_root"))


def _load_abstract(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.pascal import load_abstract50s

    votes = opts.get("abstract_votes")
    if votes is None:
        for name in ("abstract50s_votes.json", "consensus_abstract.mat"):
            if (path / name).is_file():
                votes = path / name
    if votes is None:
        raise FileNotFoundError(
            "Abstract-50S human votes are not in the public files (abstract48S.json, abstract_candsB/C.json); "
            "pass them with --abstract-votes (see capeval.bench.pascal.load_abstract50s)"
        )
    return load_abstract50s(path, votes=votes, image_root=opts.get("image_root"))


def _pair_settings(ds, opts):
    n_refs = opts.get("pascal_n_refs", P.PASCAL_N_REFS)
    n_draws = opts.get("pascal_n_draws", P.PASCAL_N_DRAWS)
    refs = ds["references"]
    if all(len(r) <= n_refs for r in refs):
        n_draws = 1  # a fixed set of references (the JSON layout's five): nothing to draw
    draws = P.draw_references(refs, n_refs, n_draws, opts.get("seed", P.PASCAL_SEED))
    return [Setting(f"draw{d}", _pair_units(ds, drawn)) for d, drawn in enumerate(draws)]


def _eval_pairs(order):
    def evaluate(ds, scores, opts):
        labels, cats = ds["label"], ds["category"]
        per_draw = []
        for name in sorted(scores):
            a, b = _split_pairs(scores[name])
            per_draw.append(
                P.accuracy_by_category(
                    a, b, labels, cats, order, ties=opts.get("ties", "half"), seed=opts.get("seed", 0)
                )
            )
        return {k: float(np.mean([d[k] for d in per_draw])) for k in per_draw[0]}

    return evaluate


# ---------------------------------------------------------------- FOIL


def _load_foil(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.foil import load_foil

    return load_foil(path, image_root=opts.get("image_root"))


def _foil_settings(ds, opts):
    refs = ds["references"]
    return [
        Setting("refs1", _pair_units(ds, [list(r[:1]) for r in refs])),
        Setting("refs4", _pair_units(ds, [list(r) for r in refs]), reference_free=False),
    ]


def _eval_foil(ds, scores, opts):
    out = {}
    for name, col in (("refs1", "acc_1ref"), ("refs4", "acc_4ref")):
        if name in scores:
            a, b = _split_pairs(scores[name])
            out[col] = P.accuracy_by_category(
                a, b, ds["label"], ds["category"], ["foil"], ties=opts.get("ties", "half")
            )["foil"]
    if "acc_4ref" not in out and "acc_1ref" in out:
        out["acc_4ref"] = out["acc_1ref"]  # a reference-free metric scores both settings alike
    return out


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
    from capeval.bench.systems import load_thumb

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
    from capeval.bench.hub import load_polaris

    return load_polaris(path if path.exists() else None, split=opts.get("split", "test"))


def _load_nebula(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.hub import load_nebula

    return load_nebula(path if path.exists() else None, split=opts.get("split", "test"))


TAU = [("kendall_c", "τc"), ("kendall_b", "τb")]

BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in [
        Benchmark(
            "flickr8k_expert",
            "Flickr8k-Expert",
            "flickr8k",
            _load_expert,
            _rating_settings,
            _eval_expert,
            [("kendall_c", "τc"), ("kendall_b", "τb"), ("kendall_c_B", "τc (B)"), ("kendall_b_B", "τb (B)")],
            "Hessel et al. 2021, Table 1; Sarto et al. 2023, Table 1",
            [
                "pairs whose candidate is one of its image's references are dropped (158 of the official 5,822)",
                "method A: one row per expert rating; (B): one row per pair, the mean of its three ratings",
            ],
        ),
        Benchmark(
            "flickr8k_cf",
            "Flickr8k-CF",
            "flickr8k",
            _load_cf,
            _rating_settings,
            _eval_rating,
            [("kendall_b", "τb"), ("kendall_c", "τc")],
            "Hessel et al. 2021, Table 1; Sarto et al. 2023, Table 1",
            [
                "rating: fraction of 'yes'; each judged caption removed from its image's references",
                "the published values used the full CrowdFlower file (about 47,830 rows): a partial copy gives "
                "slightly different numbers",
            ],
        ),
        Benchmark(
            "composite",
            "Composite",
            "composite",
            _load_composite,
            _rating_settings,
            _eval_rating,
            TAU,
            "Hessel et al. 2021, Table 2; Sarto et al. 2023, Table 1",
            ["the rated human caption is removed from its image's references (harder setting)"],
        ),
        Benchmark(
            "pascal50s",
            "Pascal-50S",
            "pascal50s",
            _load_pascal,
            _pair_settings,
            _eval_pairs(["HC", "HI", "HM", "MM"]),
            [("HC", "HC"), ("HI", "HI"), ("HM", "HM"), ("MM", "MM"), ("mean", "Mean")],
            "Hessel et al. 2021, Table 3; Sarto et al. 2023, Table 2",
            [
                "accuracy (%) against the 48-judgment consensus label; 5 references drawn at random, mean of 5 draws",
                "a metric tie counts as half a correct answer",
            ],
            kind="pairwise",
        ),
        Benchmark(
            "abstract50s",
            "Abstract-50S",
            "abstract50s",
            _load_abstract,
            _pair_settings,
            _eval_pairs(["abstract"]),
            [("abstract", "accuracy")],
            "Vedantam et al. 2015",
            ["needs the human votes, which the public files lack (--abstract-votes)"],
            kind="pairwise",
        ),
        Benchmark(
            "foil",
            "FOIL-COCO",
            "foil",
            _load_foil,
            _foil_settings,
            _eval_foil,
            [("acc_1ref", "1 ref"), ("acc_4ref", "4 refs")],
            "Hessel et al. 2021, Table 5; Sarto et al. 2023, Table 3",
            ["accuracy (%) of the correct caption over its foil"],
            kind="pairwise",
        ),
        Benchmark(
            "vatex_eval",
            "VATEX-EVAL",
            "vatex_eval",
            _load_vatex,
            _vatex_settings,
            _eval_vatex,
            [
                ("kendall_0ref", "no ref τb"),
                ("spearman_0ref", "no ref ρ"),
                ("kendall_1ref", "1 ref τb"),
                ("spearman_1ref", "1 ref ρ"),
                ("kendall_9ref", "9 refs τb"),
                ("spearman_9ref", "9 refs ρ"),
            ],
            "Shi et al. 2022, Table 2",
            ["Kendall τb and Spearman ρ per annotator, averaged over the 3 annotators; first n references"],
            kind="vatex",
        ),
        Benchmark(
            "thumb",
            "THumB 1.0",
            "thumb",
            _load_thumb,
            _rating_settings,
            _eval_thumb,
            [
                ("pearson", "Pearson"),
                ("kendall_b", "τb"),
                ("sys_pearson", "system Pearson"),
                ("sys_pearson_machines", "system Pearson (no Human)"),
            ],
            "Kasai et al. 2022",
            ["system level: per-system mean score against per-system mean human score"],
        ),
        Benchmark(
            "polaris",
            "Polaris",
            "polaris",
            _load_polaris,
            _rating_settings,
            _eval_rating,
            TAU,
            "Wada et al. 2024",
            ["test split"],
        ),
        Benchmark(
            "nebula",
            "Nebula",
            "nebula",
            _load_nebula,
            _rating_settings,
            _eval_rating,
            TAU,
            "Matsuda et al. 2024",
            ["test split"],
        ),
    ]
}


def get_benchmark(name: str) -> Benchmark:
    key = name.replace("-", "_").lower()
    if key not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    return BENCHMARKS[key]
