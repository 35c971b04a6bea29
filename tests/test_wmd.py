"""WMD: hand-computed transport costs, agreement with gensim's wmdistance, pruning, empty sides, bad input."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest

from capeval.signature import parse_signature
from capeval.text.stopwords import COCO_WMD_STOPWORDS
from capeval.text.tokenize import coco_tokens
from capeval.wmd import WMD


@pytest.fixture(scope="module")
def toy_vectors():
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=2, count=0)
    kv.add_vectors(["p", "q", "r", "s"], np.array([[0, 0], [3, 4], [6, 8], [0, 1]], dtype=np.float32))
    return kv


@pytest.fixture(scope="module")
def glove_wmd() -> WMD:
    return WMD()


def _split(text: str) -> list[str]:
    return text.split()


def test_wmd_matches_hand_computed_transport_costs(toy_vectors):
    wmd = WMD(vectors=toy_vectors, stopwords="none", tokenizer=_split)
    out = wmd(["p q", "p q", "p p q", "s"], [["r"], ["p r"], ["p r"], ["s s"]])
    # [p q] -> [r]: half the mass travels 10, half 5.  [p q] -> [p r]: p stays, q -> r costs 5, half the mass.
    # [p p q] -> [p r]: 1/2 of p stays, 1/6 of p goes to r (10), 1/3 of q goes to r (5).
    expected = [7.5, 2.5, 0.5 * 0 + 10 / 6 + 5 / 3, 0.0]
    np.testing.assert_allclose(out["distances"], expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["scores"], np.exp(-np.array(expected)), rtol=0, atol=1e-12)
    assert out["wmd"] == pytest.approx(np.mean(np.exp(-np.array(expected))))


def test_best_reference_is_kept_and_sigma_scales_the_distance(toy_vectors):
    one = WMD(vectors=toy_vectors, stopwords="none", tokenizer=_split)
    two = WMD(vectors=toy_vectors, stopwords="none", tokenizer=_split, sigma=2.0)
    refs = [["r", "p r", "q"]]
    # By hand (toy vectors, |pq| = |qr| = 5, |pr| = 10): [p q] -> [p r] and -> [q] both move half the mass a
    # distance 5 (2.5); -> [r] costs 0.5 * 10 + 0.5 * 5 = 7.5.
    assert one(["p q"], refs)["distances"] == [2.5]
    assert two(["p q"], refs)["scores"] == [pytest.approx(math.exp(-2.5 / 2))]
    # The toolkit's sigma is 1 (tylin/coco-caption pycocoevalcap/wmd/wmd.py: self.sigma = 1.0).
    assert one.sigma == 1.0 and one(["p q"], refs)["scores"] == [pytest.approx(math.exp(-2.5))]


def _random_captions(rng: random.Random, n: int) -> list[str]:
    words = (
        "a dog cat man woman child runs jumps sits on the grass street beach red blue ball frisbee bike "
        "rides plays water snow two people and with in of is are"
    ).split()
    out = []
    for _ in range(n):
        k = rng.choice([1, 1, 2, 3, 5, 8, 12])
        out.append(" ".join(rng.choice(words) for _ in range(k)) + rng.choice(["", " .", "!"]))
    return out


def _gensim_best(kv, prediction: str, references: list[str], norm: bool):
    def toks(t):
        return [w for w in coco_tokens(t) if w not in COCO_WMD_STOPWORDS]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dists = [kv.wmdistance(toks(prediction), toks(r), norm=norm) for r in references]
    return min(dists), max(math.exp(-d) for d in dists)


@pytest.mark.parametrize("normalize", [False, True])
def test_wmd_equals_a_gensim_wmdistance_loop(glove_wmd, normalize):
    rng = random.Random(0)
    preds = _random_captions(rng, 150)
    refs = [_random_captions(rng, rng.choice([1, 3, 5])) for _ in preds]
    refs[3] = [preds[3], preds[3]]  # identical and duplicated reference
    wmd = WMD(normalize_vectors=normalize)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some random captions are all stopwords
        out = wmd(preds, refs)
    kv = wmd.vectors.keyed_vectors
    for i, (p, r) in enumerate(zip(preds, refs, strict=True)):
        dist, score = _gensim_best(kv, p, r, norm=normalize)
        if math.isinf(dist):
            assert math.isinf(out["distances"][i]) and out["scores"][i] == 0.0
        else:
            assert out["distances"][i] == pytest.approx(dist, abs=1e-6, rel=0), (i, p, r)
            assert out["scores"][i] == pytest.approx(score, abs=1e-6, rel=0)
    assert out["distances"][3] == 0.0 and out["scores"][3] == 1.0


def test_pruning_and_worker_processes_never_change_a_score(glove_wmd):
    rng = random.Random(1)
    preds = _random_captions(rng, 120)
    refs = [_random_captions(rng, 5) for _ in preds]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pruned = WMD(prune=True)(preds, refs)
        full_wmd = WMD(prune=False)
        full = full_wmd(preds, refs)
        forked = WMD(num_workers=2)(preds, refs)
        glove_wmd(preds, refs)
    assert pruned["distances"] == full["distances"] == forked["distances"]
    assert pruned["scores"] == full["scores"]
    assert full_wmd.last_stats.pruned == 0
    assert glove_wmd.last_stats.pruned > 0


def test_empty_and_all_oov_sides_score_zero_with_infinite_distance(glove_wmd):
    preds = ["the of a", "zzqxv blorfk", "a dog runs", "a dog runs"]
    refs = [["a dog runs"], ["a dog runs"], ["and the", "a puppy runs"], ["of the"]]
    with pytest.warns(UserWarning) as record:
        out = glove_wmd(preds, refs)
    messages = " ".join(str(w.message) for w in record)
    assert "2 predictions have no in-vocabulary word" in messages and "index 0, 1" in messages
    assert (
        "2 references have no in-vocabulary word" in messages
        and "(prediction, reference) (2, 0), (3, 0)" in messages
    )
    assert out["scores"][:2] == [0.0, 0.0] and math.isinf(out["distances"][0])
    assert out["scores"][2] > 0 and math.isfinite(out["distances"][2])  # the empty reference is skipped
    assert out["scores"][3] == 0.0 and math.isinf(out["distances"][3])
    assert math.isfinite(out["wmd"]) and out["wmd"] == pytest.approx(np.mean(out["scores"]))


def test_bad_input_is_refused_naming_the_item(glove_wmd):
    with pytest.raises(ValueError, match="prediction 1 is an empty caption"):
        glove_wmd(["a dog", " "], [["a dog"], ["a cat"]])
    with pytest.raises(ValueError, match="references 0 is an empty list"):
        glove_wmd(["a dog"], [[]])
    with pytest.raises(TypeError, match="prediction 0 is int"):
        glove_wmd([3], [["a dog"]])
    with pytest.raises(TypeError, match="reference 1 of item 0 is NoneType"):
        glove_wmd(["a dog"], [["a dog", None]])
    with pytest.raises(ValueError, match="got 2 reference lists for 1 predictions"):
        glove_wmd(["a dog"], [["a"], ["b"]])
    with pytest.raises(ValueError, match="sigma must be a positive number"):
        WMD(sigma=0)
    with pytest.raises(ValueError, match="tokenizer must be 'ptb' or a callable"):
        WMD(tokenizer="spacy")


def test_signature_names_vectors_options_and_library_versions(glove_wmd):
    name, fields = parse_signature(glove_wmd.signature)
    assert name == "wmd"
    assert fields["vectors"].startswith("glove-6b-50d@") and fields["vectors"].endswith(":400000x50")
    assert fields["normalize_vectors"] == "False" and fields["sigma"] == "1.0"
    assert fields["stopwords"] == "coco" and fields["tokenizer"] == "ptb"
    assert {"capeval", "gensim", "POT"} <= set(fields)
    assert parse_signature(WMD(normalize_vectors=True, stopwords="none").signature)[1]["stopwords"] == "none"
