"""WMD agrees with a plain gensim ``wmdistance`` loop on real captions: 2,000 Flickr8k-Expert candidates.

The candidates and references are read by :mod:`capeval.bench` (the official files, less the pairs whose
candidate is one of its own references), as ``scripts/bench_text.py`` reads them. The facts about those readers
and the protocol statistics the script uses are asserted in ``test_bench_real_data.py`` and
``test_bench_protocols.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from capeval.bench import exclude_candidates_in_references, load_flickr8k_expert
from capeval.wmd import WMD
from capeval_dev.perf.text import gensim_wmd_loop, wmd_speed

N_CANDIDATES = 2000


def _flickr8k_pairs(benchmarks_dir, n):
    ds = exclude_candidates_in_references(load_flickr8k_expert(benchmarks_dir / "flickr8k"))
    return ds["candidate"][:n], ds["references"][:n]


@pytest.mark.slow
@pytest.mark.parametrize("normalize", [False, True], ids=["raw-vectors-gensim3", "unit-vectors-gensim4"])
def test_every_candidate_matches_the_gensim_loop_within_1e6(benchmarks_dir, normalize):
    preds, refs = _flickr8k_pairs(benchmarks_dir, N_CANDIDATES)
    assert len(preds) == N_CANDIDATES
    wmd = WMD(normalize_vectors=normalize)
    out = wmd(preds, refs)
    distances, scores, _ = gensim_wmd_loop(wmd.vectors.keyed_vectors, preds, refs, normalize)
    finite = np.isfinite(distances)
    assert finite.all(), [preds[i] for i in np.flatnonzero(~finite)]  # no empty side in these captions
    worst_distance = np.max(np.abs(np.asarray(out["distances"]) - distances))
    worst_score = np.max(np.abs(np.asarray(out["scores"]) - scores))
    assert worst_distance < 1e-6 and worst_score < 1e-6, (worst_distance, worst_score)
    assert out["wmd"] == pytest.approx(np.mean(out["scores"]))


def test_wmd_speed_reports_both_timings_and_their_agreement(benchmarks_dir):
    preds, refs = _flickr8k_pairs(benchmarks_dir, 40)
    wmd = WMD()
    out = wmd_speed(wmd, preds, refs, repeats=1)
    assert out["candidates"] == 40 and out["references"] == 200
    assert out["capeval_seconds"] > 0 and out["gensim_seconds"] > 0 and len(out["capeval_runs"]) == 1
    assert out["max_score_difference"] < 1e-6 and out["max_distance_difference"] < 1e-6
    assert out["same_infinite_distances"]
    assert 0 < out["solved"] + out["closed_form"] + out["pruned"] <= out["distinct_pairs"] <= 200
    with pytest.raises(ValueError, match="repeats must be >= 1, got 0"):
        wmd_speed(wmd, preds, refs, repeats=0)
