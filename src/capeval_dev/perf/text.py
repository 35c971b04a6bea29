"""Speed and agreement of WMD against a plain gensim ``wmdistance`` loop (used by ``scripts/bench_text.py``).

The gensim loop is what the COCO caption toolkit ran: one ``wmdistance`` per (candidate, reference) and the best
exp(-d) per candidate. The data (which candidates, which references) comes from the caller, read through the
loaders of :mod:`capeval.bench`.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Sequence

import numpy as np

from capeval.text.stopwords import COCO_WMD_STOPWORDS
from capeval.text.tokenize import coco_tokens


def gensim_wmd_loop(
    kv, predictions: Sequence[str], references: Sequence[Sequence[str]], normalize: bool = False
) -> tuple[list[float], list[float], float]:
    """The toolkit's loop on gensim: ``wmdistance`` per reference, best exp(-d).

    Tokens are prepared beforehand (each distinct caption once), so only gensim's work is timed.

    Args:
        kv: a gensim ``KeyedVectors``.
        predictions: one candidate caption per item.
        references: the reference captions of each item.
        normalize: passed as ``norm=`` to ``wmdistance`` (True: gensim 4's unit vectors).

    Returns:
        ``(distances, scores, seconds)``: the smallest distance and the best exp(-d) per candidate, and the
        wall time of the loop.
    """
    tokens = {t: [w for w in coco_tokens(t) if w not in COCO_WMD_STOPWORDS] for t in {*predictions}}
    for refs in references:
        for r in refs:
            if r not in tokens:
                tokens[r] = [w for w in coco_tokens(r) if w not in COCO_WMD_STOPWORDS]
    distances, scores = [], []
    # gensim warns on every empty document; the distance (inf) is what is compared, not the warning.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        for p, refs in zip(predictions, references, strict=True):
            ds = [kv.wmdistance(tokens[p], tokens[r], norm=normalize) for r in refs]
            distances.append(min(ds))
            scores.append(max(math.exp(-d) for d in ds))
        elapsed = time.perf_counter() - start
    return distances, scores, elapsed


def wmd_speed(
    wmd, predictions: Sequence[str], references: Sequence[Sequence[str]], repeats: int = 3
) -> dict[str, object]:
    """Candidates/s of ``wmd`` and of the gensim loop on the same items, with their largest difference.

    Args:
        wmd: a :class:`capeval.wmd.WMD`; its vectors' ``KeyedVectors`` run the gensim loop.
        predictions: one candidate caption per item.
        references: the reference captions of each item.
        repeats: runs of ``wmd`` (after a warm-up); its time is their median, tokenisation included. The gensim
            loop runs once, tokenisation excluded.

    Returns:
        Times, rates, the speed-up, the largest per-candidate score and (finite) distance differences, whether
        both give infinite distances for the same candidates, and ``wmd``'s solver counts.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    wmd(predictions[:10], references[:10])  # imports, first solver call: not part of the measurement
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ours = wmd(predictions, references)
        times.append(time.perf_counter() - start)
    kv = wmd.vectors.keyed_vectors
    kv.wmdistance(["dog"], ["cat"], norm=wmd.normalize_vectors)  # gensim's own first-call costs, likewise
    g_dist, g_scores, g_time = gensim_wmd_loop(kv, predictions, references, wmd.normalize_vectors)
    ours_time = statistics.median(times)
    d_ours, d_gensim = np.asarray(ours["distances"]), np.asarray(g_dist)
    finite = np.isfinite(d_gensim)
    stats = wmd.last_stats
    return {
        "candidates": len(predictions),
        "references": sum(len(r) for r in references),
        "capeval_seconds": ours_time,
        "capeval_runs": times,
        "gensim_seconds": g_time,
        "capeval_candidates_per_s": len(predictions) / ours_time,
        "gensim_candidates_per_s": len(predictions) / g_time,
        "speedup": g_time / ours_time,
        "max_score_difference": float(np.max(np.abs(np.asarray(ours["scores"]) - np.asarray(g_scores)))),
        "max_distance_difference": float(np.max(np.abs(d_ours[finite] - d_gensim[finite]), initial=0.0)),
        "same_infinite_distances": bool(np.array_equal(np.isinf(d_ours), ~finite)),
        "distinct_pairs": stats.pairs,
        "solved": stats.solved,
        "closed_form": stats.closed_form,
        "pruned": stats.pruned,
    }
