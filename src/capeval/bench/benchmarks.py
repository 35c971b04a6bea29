"""The benchmark registry: where each benchmark's files live, what a metric scores, and the table it fills.

Each entry names its data folder, its loader, scoring settings and evaluation (from
``capeval.bench.rating_benchmarks`` and ``capeval.bench.pairwise_benchmarks``), the columns of the paper's
table and the notes the report prints. What a benchmark, a setting and a unit are is in
``capeval.bench.benchmark_types``.
"""

from __future__ import annotations

from capeval.bench.benchmark_types import Benchmark
from capeval.bench.pairwise_benchmarks import (
    _eval_foil,
    _eval_pairs,
    _foil_settings,
    _load_abstract,
    _load_foil,
    _load_pascal,
    _pair_settings,
)
from capeval.bench.polaris_nebula import NEBULA_REPO, POLARIS_REPO
from capeval.bench.rating_benchmarks import (
    _eval_expert,
    _eval_rating,
    _eval_thumb,
    _eval_vatex,
    _load_cf,
    _load_composite,
    _load_expert,
    _load_nebula,
    _load_polaris,
    _load_thumb,
    _load_vatex,
    _rating_settings,
    _vatex_settings,
)

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
            "Hessel et al. 2021, Table 2; Sarto et al. 2023, Table 1",
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
            "Hessel et al. 2021, Table 3; Sarto et al. 2023, Table 2",
            ["the rated human caption is removed from its image's references (harder setting)"],
            visuals="image_roots",
        ),
        Benchmark(
            "pascal50s",
            "Pascal-50S",
            "pascal50s",
            _load_pascal,
            _pair_settings,
            _eval_pairs(["HC", "HI", "HM", "MM"]),
            [("HC", "HC"), ("HI", "HI"), ("HM", "HM"), ("MM", "MM"), ("mean", "Mean")],
            "Hessel et al. 2021, Table 4; Sarto et al. 2023, Table 4",
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
            "Vedantam et al. 2015; Sarto et al. 2023, Table 5",
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
            "Hessel et al. 2021, Table 5; Sarto et al. 2023, Table 6",
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
            "Shi et al. 2022, Table 2; Sarto et al. 2023, Table 3",
            ["Kendall τb and Spearman ρ per annotator, averaged over the 3 annotators; first n references"],
            kind="vatex",
            visuals="video_root",
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
            visuals=None,
            hub_repo=POLARIS_REPO,
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
            visuals=None,
            hub_repo=NEBULA_REPO,
        ),
    ]
}


def get_benchmark(name: str) -> Benchmark:
    key = name.replace("-", "_").lower()
    if key not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    return BENCHMARKS[key]
