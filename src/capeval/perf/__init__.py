"""Speed benchmarks: workloads, the pipelines compared, and timing helpers (used by scripts/bench_*.py)."""
