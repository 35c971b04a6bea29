"""Caption size in WMD: a caption over the word cap is refused naming it before its cost matrix is built, a
caption at the cap is scored, and slices bound the memory without changing a distance; WEmbSim, whose memory is
linear in the words, needs no cap."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def glove_words() -> list[str]:
    """Alphabetic GloVe words, none a COCO stopword: each is its own in-vocabulary token."""
    from capeval.text.stopwords import COCO_WMD_STOPWORDS
    from capeval.text.tokenize import coco_tokens
    from capeval.text.vectors import load_vectors

    words = load_vectors().keyed_vectors.index_to_key[500:120_000]
    words = [w for w in words if w.isalpha() and w.isascii() and w not in COCO_WMD_STOPWORDS]
    return [w for w in words if coco_tokens(w) == [w]][:40_000]


def _text_of(words: list[str], start: int, n: int) -> str:
    return " ".join(words[start : start + n])


def _result_and_peak(run) -> tuple[object, int]:
    import tracemalloc

    tracemalloc.start()
    try:
        try:
            result = run()
        except ValueError as e:
            result = e
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --- A caption over the word cap is refused before its cost matrix is built ---


def test_wmd_refuses_a_prediction_over_the_word_cap_before_building_its_cost_matrix(glove_words):
    import capeval
    from capeval.text.transport import MAX_DOCUMENT_WORDS

    wmd = capeval.WMD()
    long_text = _text_of(glove_words, 0, MAX_DOCUMENT_WORDS + 200)
    error, peak = _result_and_peak(lambda: wmd(["a dog runs", long_text], [["a dog"], [long_text[::-1]]]))
    assert isinstance(error, ValueError)
    assert str(error).startswith(
        "prediction 1 has 1,200 distinct in-vocabulary words (1 prediction(s) over the "
    )
    assert "at most 1,000 distinct in-vocabulary words" in str(error)
    assert peak < 32 * 2**20  # its 1,200 x 1,200 pair alone would take ~200 MB


def test_wmd_refuses_a_reference_over_the_word_cap_naming_item_and_reference(glove_words):
    import capeval

    wmd = capeval.WMD()
    long_text = _text_of(glove_words, 0, 1_500)
    with pytest.raises(
        ValueError, match=r"^reference 1 of item 1 has 1,500 distinct in-vocabulary words; WMD"
    ):
        wmd(["a dog", "a cat"], [["a dog"], ["a cat", long_text]])


def test_wmd_at_the_word_cap_is_scored(glove_words):
    import capeval
    from capeval.text.transport import MAX_DOCUMENT_WORDS

    text = _text_of(glove_words, 0, MAX_DOCUMENT_WORDS)
    out = capeval.WMD()([text], [[text, "a dog"]])
    assert out["distances"] == [0.0]  # the same bag of words: no transport problem to solve


# --- Slices bound the memory and change no distance ---


def test_wmd_in_slices_gives_the_same_distances_and_references(glove_words, monkeypatch):
    import capeval
    from capeval.text import transport

    rng = np.random.default_rng(0)
    words = glove_words[:300]
    predictions = [" ".join(rng.choice(words, rng.integers(1, 12))) for _ in range(40)]
    references = [[" ".join(rng.choice(words, rng.integers(1, 12))) for _ in range(4)] for _ in range(40)]
    whole = capeval.WMD()(predictions, references)
    monkeypatch.setattr(transport, "SLICE_ENTRIES", 150)  # a few references per slice
    wmd = capeval.WMD()
    sliced = wmd(predictions, references)
    np.testing.assert_allclose(sliced["distances"], whole["distances"], rtol=1e-12)
    assert sliced["scores"] == pytest.approx(whole["scores"], rel=1e-12)
    assert len(set(sliced["distances"])) > 10  # real transport problems, not all ties


def test_wmd_memory_stays_bounded_by_the_slice_not_the_batch(glove_words, monkeypatch):
    import capeval
    from capeval.text import transport

    # 40 captions of 400 words, each its own reference: 6.4M cost entries in all, about 1 GB built at once.
    texts = [_text_of(glove_words, 400 * i, 400) for i in range(40)]
    wmd = capeval.WMD()
    monkeypatch.setattr(transport, "SLICE_ENTRIES", 400 * 400, raising=False)  # also measured without slices
    out, peak = _result_and_peak(lambda: wmd(texts, [[t] for t in texts]))
    assert out["distances"] == [0.0] * 40
    assert peak < 64 * 2**20  # one 160,000-entry slice (~28 MB) and the batch's tokens and embeddings


# --- WEmbSim's memory is linear in the words: no cap ---


def test_wembsim_needs_no_word_cap_its_memory_is_linear_in_the_words(glove_words):
    import capeval

    text = _text_of(glove_words, 0, 20_000)
    wembsim = capeval.WEmbSim()
    out, peak = _result_and_peak(lambda: wembsim([text], [[text[::-1] + " dog", text]]))
    assert out["scores"][0] == pytest.approx(0.5 * (1 + out["reference_scores"][0][0]))
    assert peak < 48 * 2**20  # 20,000 words x 50 dims in float64 is 8 MB; a pairwise matrix would be 3.2 GB
