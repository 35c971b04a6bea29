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


@pytest.fixture
def toy_documents():
    # Words p (0, 0), q (3, 4), r (6, 8): |pq| = |qr| = 5, |pr| = 10. Documents [p q], [r], [p r] and one empty.
    from capeval.text.documents import Documents

    return Documents(
        ptr=np.array([0, 2, 3, 5, 5]),
        words=np.array([0, 1, 2, 0, 2]),
        weights=np.array([0.5, 0.5, 1.0, 0.5, 0.5]),
        embeddings=np.array([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]]),
        vocabulary=["p", "q", "r"],
        tokens=[["p", "q"], ["r"], ["p", "r"], []],
    )


def test_distinct_pairs_are_sorted_and_each_reference_points_at_its_pair():
    from capeval.text.transport import _distinct_pairs

    pc, pr, pair_of_ref = _distinct_pairs(5, np.array([0, 0, 2, 0]), np.array([1, 1, 0, 2]))
    assert pc.tolist() == [0, 0, 2] and pr.tolist() == [1, 2, 0]
    assert pair_of_ref.tolist() == [0, 0, 2, 1]  # the repeated reference shares its pair


def test_pair_table_holds_bounds_closed_forms_and_leaves_only_real_problems_open(toy_documents):
    from capeval.text.transport import _pair_table

    table = _pair_table(toy_documents, np.array([0, 0, 0, 0]), np.array([1, 2, 3, 0]))
    # [p q] -> [r]: one-word side, closed form 0.5 * 10 + 0.5 * 5; -> [p r]: relaxed bound 2.5, solve pending;
    # -> empty: inf; -> itself: 0.
    np.testing.assert_allclose(table.lower, [7.5, 2.5, np.inf, 0.0])
    np.testing.assert_array_equal(table.exact, [7.5, np.nan, np.inf, 0.0])
    assert table.slot.tolist() == [0, 1, -1, 2] and table.closed == 2
    a, b, cost = table.problems(toy_documents, np.array([1]))[0]
    assert a.tolist() == b.tolist() == [0.5, 0.5]
    np.testing.assert_allclose(cost, [[0.0, 10.0], [5.0, 5.0]])


def test_pair_table_of_empty_documents_only_has_infinite_distances(toy_documents):
    from capeval.text.transport import _pair_table

    table = _pair_table(toy_documents, np.array([3, 0]), np.array([1, 3]))
    assert table.exact.tolist() == table.lower.tolist() == [np.inf, np.inf]
    assert table.cost is None and table.closed == 0 and table.slot.tolist() == [-1, -1]


def test_exact_solver_fills_in_the_pairs_it_is_given_and_counts_them(toy_documents):
    from capeval.text.transport import _ExactSolver, _pair_table

    table = _pair_table(toy_documents, np.array([0, 0]), np.array([1, 2]))
    with _ExactSolver(toy_documents, table, num_workers=1) as solver:
        solver.solve(np.array([], dtype=np.int64))
        solver.solve(np.array([1]))
    # [p q] -> [p r]: p stays, q moves to r (5) with half the mass.
    assert table.exact[1] == pytest.approx(2.5) and solver.solved == 1 and solver.executor is None


@pytest.mark.parametrize("prune", [True, False])
def test_closest_reference_search_prunes_by_lower_bound_and_keeps_the_first_best(toy_documents, prune):
    from capeval.text.transport import _closest_references, _ExactSolver, _pair_table

    # One candidate [p q] with references [r] (7.5, closed form), [p r] (2.5, solved), empty (inf).
    pair_of_ref = np.array([0, 1, 2])
    table = _pair_table(toy_documents, np.array([0, 0, 0]), np.array([1, 2, 3]))
    best = np.array([np.inf])
    with _ExactSolver(toy_documents, table, num_workers=1) as solver:
        best_ref = _closest_references(np.zeros(3, dtype=np.int64), pair_of_ref, table, solver, best, prune)
    assert best_ref.tolist() == [1] and best[0] == pytest.approx(2.5) and solver.solved == 1


def test_closest_reference_search_reports_none_when_an_earlier_best_is_not_beaten(toy_documents):
    from capeval.text.transport import _closest_references, _ExactSolver, _pair_table

    table = _pair_table(toy_documents, np.array([0, 0]), np.array([1, 2]))
    best = np.array([1.0])  # found by an earlier slice
    with _ExactSolver(toy_documents, table, num_workers=1) as solver:
        best_ref = _closest_references(
            np.zeros(2, dtype=np.int64), np.array([0, 1]), table, solver, best, True
        )
    # Both lower bounds (7.5, 2.5) are above 1.0: nothing is solved and the earlier distance stands.
    assert best_ref.tolist() == [-1] and best.tolist() == [1.0] and solver.solved == 0
