"""What capeval's tests and benchmark scripts share, outside the package users install (the wheel holds only
``capeval``): ``capeval_dev.perf`` (the benchmarks' pipelines and timing) and ``capeval_dev.testing`` (reference
implementations and fixtures the tests compare against)."""
