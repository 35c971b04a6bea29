"""Speed benchmarks: workloads, the pipelines compared, timing helpers and WMD against a gensim loop (used by
scripts/bench_*.py)."""
