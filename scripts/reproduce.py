#!/usr/bin/env python
"""Reproduce the papers' human-agreement tables (the same arguments as ``capeval bench``).

    python scripts/reproduce.py run flickr8k_expert --data-dir ../shared/benchmarks --metrics baselines text
    python scripts/reproduce.py list --data-dir ../shared/benchmarks
    python scripts/reproduce.py published pascal50s

All logic lives in ``capeval.bench``; docs/guides/benchmarks.md gives one command per table.
"""

from capeval.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
