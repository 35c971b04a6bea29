"""Measurements for the word-embedding metrics: Flickr8k-Expert Kendall tau-c, Pascal-50S pairwise accuracy.
Used by ``scripts/bench_text.py``; self-contained (reads the benchmark files directly) so it does not depend on
the benchmark loaders of ``capeval.bench``. The speed measurements are in :mod:`capeval.perf.text`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

PASCAL_CATEGORIES = ("HC", "HI", "HM", "MM")


def flickr8k_expert(benchmarks_dir: Path) -> tuple[list[str], list[list[str]], list[list[float]]]:
    """Flickr8k-Expert in the CLIPScore authors' JSON: one entry per (image, candidate) pair.

    Returns:
        predictions, their 5 references, and the expert ratings of each pair (3 each). Pairs whose
        candidate is one of the image's own references are removed (none are left in this file: 5,664 pairs).
    """
    data = json.loads(
        (Path(benchmarks_dir) / "flickr8k" / "flickr8k_expert_clipscore_format.json").read_text()
    )
    preds, refs, ratings = [], [], []
    for item in data.values():
        by_caption: dict[str, list[float]] = {}
        for judgement in item["human_judgement"]:
            by_caption.setdefault(judgement["caption"], []).append(float(judgement["rating"]))
        for caption, rs in by_caption.items():
            if caption in item["ground_truth"]:
                continue
            preds.append(caption)
            refs.append(list(item["ground_truth"]))
            ratings.append(rs)
    return preds, refs, ratings


def kendall_tau(scores: Sequence[float], ratings: Sequence[Sequence[float]], variant: str = "c") -> float:
    """Kendall tau (``variant`` "b" or "c") with every rating as its own row (the "method A" protocol)."""
    from scipy.stats import kendalltau

    x = np.repeat(np.asarray(scores, dtype=np.float64), [len(r) for r in ratings])
    y = np.concatenate([np.asarray(r, dtype=np.float64) for r in ratings])
    return float(kendalltau(x, y, variant=variant).statistic)


def pascal50s(benchmarks_dir: Path, draws: int = 0, seed: int = 0) -> list[dict]:
    """Pascal-50S pairs with their consensus labels (index of the preferred caption).

    Args:
        draws: 0 keeps the file's fixed 5 references; ``k`` > 0 adds ``k`` random draws of 5 references per
            pair from the image's 50 sentences in ``pascal50S.mat`` other than the two candidates.
    """
    root = Path(benchmarks_dir) / "pascal50s"
    data = json.loads((root / "pascal_50s_consensus_labels.json").read_text())
    sentences = {}
    if draws:
        import scipy.io

        for entry in scipy.io.loadmat(root / "pascal50S.mat")["refs"][0]:
            name = str(entry["image"].reshape(-1)[0])
            sentences[name] = [str(s[0]) for s in entry["sent"].reshape(-1) if len(s)]
    rng = random.Random(seed)
    items = []
    for category in PASCAL_CATEGORIES:
        for item in data[category]:
            record = {"category": category, "captions": item["captions"], "label": int(item["label"])}
            record["references"] = [item["references"]]
            if draws:
                pool = [s for s in sentences[Path(item["image"]).name] if s not in item["captions"]]
                record["references"] += [rng.sample(pool, 5) for _ in range(draws)]
            items.append(record)
    return items


def pascal_accuracy(
    items: list[dict], score: Callable[[list[str], list[list[str]]], list[float]], draw: int = 0
):
    """Per category: share of pairs where the metric prefers the labelled caption; a tie counts 1/2 (the
    expectation of a random tie break). Returns ``{category: accuracy}`` plus ``"mean"`` and ``"ties"``."""
    preds = [c for it in items for c in it["captions"]]
    refs = [it["references"][draw] for it in items for _ in it["captions"]]
    s = np.asarray(score(preds, refs)).reshape(-1, 2)
    labels = np.array([it["label"] for it in items])
    right = np.where(s[:, 0] == s[:, 1], 0.5, (np.argmax(s, axis=1) == labels).astype(float))
    cats = np.array([it["category"] for it in items])
    out = {c: float(right[cats == c].mean()) for c in PASCAL_CATEGORIES}
    out["mean"] = float(np.mean([out[c] for c in PASCAL_CATEGORIES]))
    out["ties"] = int((s[:, 0] == s[:, 1]).sum())
    return out
