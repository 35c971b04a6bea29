"""WEmbSim: agreement with gensim's n_similarity, reductions over references, empty sides, bad input."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from capeval.signature import parse_signature
from capeval.text.stopwords import COCO_WMD_STOPWORDS
from capeval.text.tokenize import coco_tokens
from capeval.wembsim import WEmbSim


@pytest.fixture(scope="module")
def wembsim() -> WEmbSim:
    return WEmbSim()


def _toks(text):
    return [w for w in coco_tokens(text) if w not in COCO_WMD_STOPWORDS]


def test_wembsim_is_the_cosine_of_mean_word_vectors_as_gensim_n_similarity(wembsim):
    rng = random.Random(0)
    pool = "dog cat man woman runs jumps grass street beach red blue ball bike rides plays water snow".split()
    preds = [" ".join(rng.choice(pool) for _ in range(rng.randint(1, 9))) for _ in range(80)]
    refs = [[" ".join(rng.choice(pool) for _ in range(rng.randint(1, 9))) for _ in range(5)] for _ in preds]
    out = wembsim(preds, refs)
    kv = wembsim.vectors.keyed_vectors
    for i, (p, rs) in enumerate(zip(preds, refs, strict=True)):
        cos = [float(kv.n_similarity(_toks(p), _toks(r))) for r in rs]
        np.testing.assert_allclose(out["reference_scores"][i], cos, rtol=0, atol=1e-6)
        assert out["scores"][i] == pytest.approx(np.mean(cos), abs=1e-6)
    assert out["wembsim"] == pytest.approx(np.mean(out["scores"]))


def test_reductions_mean_max_min_over_references():
    preds = ["a dog runs on the grass", "a man rides a bike"]
    refs = [["a dog is running", "a cat sleeps", "grass"], ["a woman rides a bicycle"]]
    per = {r: WEmbSim(reduction=r)(preds, refs) for r in ("mean", "max", "min")}
    cos = per["mean"]["reference_scores"]
    assert per["mean"]["scores"] == pytest.approx([np.mean(c) for c in cos])
    assert per["max"]["scores"] == pytest.approx([max(c) for c in cos])
    assert per["min"]["scores"] == pytest.approx([min(c) for c in cos])
    assert parse_signature(per["max"]["signature"])[1]["reduction"] == "max"
    with pytest.raises(ValueError, match="reduction must be one of"):
        WEmbSim(reduction="median")


def test_duplicate_words_weigh_in_the_mean_and_normalize_vectors_averages_unit_vectors(wembsim):
    kv = wembsim.vectors.keyed_vectors
    out = wembsim(["dog dog cat"], [["grass"]])
    mean = (2 * kv["dog"] + kv["cat"]) / 3
    expected = mean @ kv["grass"] / np.linalg.norm(mean) / np.linalg.norm(kv["grass"])
    assert out["scores"][0] == pytest.approx(float(expected), abs=1e-6)
    unit = WEmbSim(normalize_vectors=True)(["dog dog cat"], [["grass"]])
    n = [kv.get_vector(w, norm=True) for w in ("dog", "dog", "cat")]
    m = np.mean(n, axis=0)
    g = kv.get_vector("grass", norm=True)
    assert unit["scores"][0] == pytest.approx(float(m @ g / np.linalg.norm(m)), abs=1e-6)


def test_empty_sides_score_zero_and_empty_references_are_left_out(wembsim):
    preds = ["the of a", "a dog runs", "a dog runs"]
    refs = [["a dog"], ["and the", "a dog runs fast"], ["zzqxv"]]
    with pytest.warns(UserWarning, match="have no in-vocabulary word"):
        out = wembsim(preds, refs)
    assert out["scores"][0] == 0.0 and out["reference_scores"][0] == [None]
    assert out["reference_scores"][1][0] is None
    assert out["scores"][1] == pytest.approx(out["reference_scores"][1][1])
    assert out["scores"][2] == 0.0
    assert np.isfinite(out["wembsim"])


def test_bad_input_is_refused_naming_the_item(wembsim):
    with pytest.raises(ValueError, match="prediction 0 is an empty caption"):
        wembsim([""], [["a dog"]])
    with pytest.raises(ValueError, match="references 1 is an empty list"):
        wembsim(["a", "b"], [["a dog"], []])
    with pytest.raises(TypeError, match="references 0 is a string"):
        wembsim(["a dog"], ["a dog"])


def test_signature_names_vectors_and_options(wembsim):
    name, fields = parse_signature(wembsim.signature)
    assert name == "wembsim"
    assert fields["vectors"].startswith("glove-6b-50d@") and fields["reduction"] == "mean"
    assert fields["stopwords"] == "coco" and {"capeval", "gensim"} <= set(fields)


def test_other_vector_files_work_through_the_same_loader(tmp_path, wembsim):
    kv = wembsim.vectors.keyed_vectors
    words = ["dog", "runs", "grass", "cat", "sleeps"]
    from gensim.models import KeyedVectors

    small = KeyedVectors(vector_size=50, count=0)
    small.add_vectors(words, np.asarray(kv[words]))
    path = tmp_path / "small.vec"
    small.save_word2vec_format(str(path), binary=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = WEmbSim(vectors=str(path))(["a dog runs on grass"], [["a cat sleeps"]])
    b = wembsim(["a dog runs on grass"], [["a cat sleeps"]])
    assert a["scores"][0] == pytest.approx(b["scores"][0], abs=1e-6)
    assert parse_signature(a["signature"])[1]["vectors"].startswith("small.vec@")


def test_cosine_is_absolute_as_in_eq_2_by_default_and_signed_on_request(wembsim):
    # Sharif et al. 2020, eq. 2: cossim(a, b) = |a . b| / (|a| |b|). In GloVe-6B-50d "frisbee" points away from
    # "street" and "house" (gensim's n_similarity, the signed cosine, is below 0 for both).
    kv = wembsim.vectors.keyed_vectors
    signed = [float(kv.n_similarity(["frisbee"], [w])) for w in ("street", "house")]
    assert max(signed) < -0.1
    preds, refs = ["a frisbee"], [["the street", "a house"]]
    paper = wembsim(preds, refs)
    assert paper["reference_scores"][0] == pytest.approx([abs(c) for c in signed], abs=1e-6)
    assert paper["scores"][0] == pytest.approx((abs(signed[0]) + abs(signed[1])) / 2, abs=1e-6)
    kept = WEmbSim(absolute_cosine=False)(preds, refs)
    assert kept["reference_scores"][0] == pytest.approx(signed, abs=1e-6)
    assert kept["scores"][0] == pytest.approx(np.mean(signed), abs=1e-6)
    # Named in every signature: those from before the option (no field) meant the signed cosine.
    assert parse_signature(paper["signature"])[1]["absolute_cosine"] == "True"
    assert parse_signature(kept["signature"])[1]["absolute_cosine"] == "False"
    with pytest.raises(TypeError, match="absolute_cosine"):
        WEmbSim(absolute_cosine="yes")
