"""Human-agreement benchmarks for caption metrics: loaders, protocols, statistics, runner and reports.

>>> from capeval.bench import load_vatex_eval, vatex_eval_correlation
>>> ds = load_vatex_eval("../shared/benchmarks/vatex_eval")          # doctest: +SKIP
>>> vatex_eval_correlation(my_scores, ds["human_scores"])            # doctest: +SKIP
{'kendall': ..., 'spearman': ..., ...}

Names are imported on first use so ``import capeval.bench`` stays light; they need ``capeval[bench]``.
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_LAZY = {
    # loaders
    "load_flickr8k_expert": "capeval.bench.flickr8k",
    "load_flickr8k_cf": "capeval.bench.flickr8k",
    "load_clipscore_json": "capeval.bench.flickr8k",
    "load_composite": "capeval.bench.composite",
    "load_pascal50s": "capeval.bench.pascal",
    "load_pascal50s_json": "capeval.bench.pascal",
    "load_abstract50s": "capeval.bench.pascal",
    "load_foil": "capeval.bench.foil",
    "load_vatex_eval": "capeval.bench.vatex",
    "load_thumb": "capeval.bench.thumb",
    "load_system_captions": "capeval.bench.thumb",
    "load_system_human_scores": "capeval.bench.thumb",
    "load_polaris": "capeval.bench.polaris_nebula",
    "load_nebula": "capeval.bench.polaris_nebula",
    "read_references": "capeval.bench.references",
    # protocols
    "exclude_candidates_in_references": "capeval.bench.protocols",
    "remove_judged_from_references": "capeval.bench.protocols",
    "composite_references": "capeval.bench.protocols",
    "rating_rows": "capeval.bench.protocols",
    "rating_correlations": "capeval.bench.protocols",
    "draw_references": "capeval.bench.protocols",
    "accuracy_by_category": "capeval.bench.protocols",
    "vatex_references": "capeval.bench.protocols",
    "vatex_eval_correlation": "capeval.bench.protocols",
    "system_level_correlation": "capeval.bench.protocols",
    # statistics
    "kendall_tau": "capeval.bench.statistics",
    "spearman": "capeval.bench.statistics",
    "pearson": "capeval.bench.statistics",
    "williams_test": "capeval.bench.statistics",
    "williams_test_scores": "capeval.bench.statistics",
    "bootstrap_ci": "capeval.bench.statistics",
    "pairwise_accuracy": "capeval.bench.statistics",
    "forward_selection": "capeval.bench.infogain",
    "compare": "capeval.significance.paired_tests",
    "compare_many": "capeval.significance.paired_tests",
    "Comparison": "capeval.significance.paired_tests",
    "holm": "capeval.significance.paired_tests",
    # running and reporting
    "BenchMetric": "capeval.scoring.metric_names",
    "metric_from_callable": "capeval.scoring.metric_names",
    "resolve_metric": "capeval.scoring.metric_names",
    "ScoreCache": "capeval.bench.cache",
    "BENCHMARKS": "capeval.bench.benchmarks",
    "get_benchmark": "capeval.bench.benchmarks",
    "run_benchmark": "capeval.bench.runner",
    "run_benchmarks": "capeval.bench.runner",
    "write_report": "capeval.bench.report",
    "published_values": "capeval.bench.published",
    "published_value": "capeval.bench.published",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), requires=("bench", "capeval.bench"))
