"""What a benchmark is to the runner: the units a metric scores, the settings that group them, the benchmark.

A :class:`Benchmark` loads its dataset from a data folder (``<data_dir>/<folder>``, the layout of
``../shared/benchmarks``), turns it into scoring :class:`Setting` s (a setting is one set of inputs a metric
scores: e.g. one random draw of Pascal references, or VATEX-EVAL with 1 reference) and maps per-unit scores to
the columns of the paper's table. The registry of benchmarks is ``capeval.bench.benchmarks``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np


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
    # The loader option that points at the images or videos; None: the data files carry them.
    visuals: str | None = "image_root"
    # A Hub dataset the loader reads when the data folder is absent (online only).
    hub_repo: str | None = None

    def data_path(self, data_dir: str | os.PathLike) -> Path:
        return Path(data_dir).expanduser() / self.folder
