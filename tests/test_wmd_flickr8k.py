"""WMD agrees with a plain gensim ``wmdistance`` loop on real captions: 2,000 Flickr8k-Expert candidates."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from capeval.text.stopwords import COCO_WMD_STOPWORDS
from capeval.text.tokenize import coco_tokens
from capeval.wmd import WMD

N_CANDIDATES = 2000


def _flickr8k_pairs(benchmarks_dir, n):
    data = json.loads((benchmarks_dir / "flickr8k" / "flickr8k_expert_clipscore_format.json").read_text())
    preds, refs = [], []
    for item in data.values():
        for caption in dict.fromkeys(h["caption"] for h in item["human_judgement"]):
            preds.append(caption)
            refs.append(item["ground_truth"])
    return preds[:n], refs[:n]


@pytest.mark.slow
@pytest.mark.parametrize("normalize", [False, True], ids=["raw-vectors-gensim3", "unit-vectors-gensim4"])
def test_every_candidate_matches_the_gensim_loop_within_1e6(benchmarks_dir, normalize):
    preds, refs = _flickr8k_pairs(benchmarks_dir, N_CANDIDATES)
    assert len(preds) == N_CANDIDATES
    wmd = WMD(normalize_vectors=normalize)
    out = wmd(preds, refs)
    kv = wmd.vectors.keyed_vectors
    token_cache: dict[str, list[str]] = {}

    def toks(text):
        if text not in token_cache:
            token_cache[text] = [w for w in coco_tokens(text) if w not in COCO_WMD_STOPWORDS]
        return token_cache[text]

    worst_distance = worst_score = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (p, rs) in enumerate(zip(preds, refs, strict=True)):
            dists = [kv.wmdistance(toks(p), toks(r), norm=normalize) for r in rs]
            best, score = min(dists), max(math.exp(-d) for d in dists)
            assert math.isfinite(best), (i, p)  # no empty side in these captions
            worst_distance = max(worst_distance, abs(out["distances"][i] - best))
            worst_score = max(worst_score, abs(out["scores"][i] - score))
    assert worst_distance < 1e-6 and worst_score < 1e-6
    assert out["wmd"] == pytest.approx(np.mean(out["scores"]))


def test_benchmark_readers_follow_the_published_protocols(benchmarks_dir):
    from capeval.text import bench

    preds, refs, ratings = bench.flickr8k_expert(benchmarks_dir)
    assert len(preds) == 5664 and sum(map(len, ratings)) == 16992
    assert all(p not in r for p, r in zip(preds, refs, strict=True))
    items = bench.pascal50s(benchmarks_dir, draws=2, seed=0)
    assert len(items) == 4000 and {it["category"] for it in items} == {"HC", "HI", "HM", "MM"}
    for it in items[:50]:
        assert len(it["references"]) == 3 and all(len(r) == 5 for r in it["references"])
        assert not set(it["captions"]) & set(it["references"][1])


def test_kendall_tau_repeats_each_score_for_each_rating_and_accuracy_counts_ties_half():
    from scipy.stats import kendalltau

    from capeval.text import bench

    scores, ratings = [0.1, 0.5, 0.3], [[1, 2], [4, 4], [2, 3]]
    expected = kendalltau([0.1, 0.1, 0.5, 0.5, 0.3, 0.3], [1, 2, 4, 4, 2, 3], variant="c").statistic
    assert bench.kendall_tau(scores, ratings, "c") == pytest.approx(expected)
    items = [
        {"category": c, "captions": ["x", "y"], "label": label, "references": [["r"]]}
        for c, label in (("HC", 0), ("HI", 1), ("HM", 0), ("MM", 1))
    ]
    fixed = {"HC": [0.9, 0.1], "HI": [0.9, 0.1], "HM": [0.5, 0.5], "MM": [0.2, 0.8]}
    order = iter([v for it in items for v in fixed[it["category"]]])
    acc = bench.pascal_accuracy(items, lambda p, r: [next(order) for _ in p])
    assert acc == {"HC": 1.0, "HI": 0.0, "HM": 0.5, "MM": 1.0, "mean": 0.625, "ties": 1}
