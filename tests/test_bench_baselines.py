"""The pycocoevalcap baselines through the harness (Java), against direct pycocoevalcap calls."""

from __future__ import annotations

import pytest

from capeval.scoring.baselines import CocoBaseline, LengthBaseline, java_available, ptb_tokenize

pytestmark = pytest.mark.skipif(not java_available(), reason="pycocoevalcap's tokenizer and METEOR need Java")

CANDS = ["A dog runs on the grass.", "Two kids play at the beach!", "A man rides a red bike."]
REFS = [
    ["A dog running on grass.", "A brown dog plays outside."],
    ["Children playing on the beach.", "Two kids build a sandcastle."],
    ["A cyclist on a city street.", "A man riding a bicycle."],
]


def _direct(scorer):
    """The CLIPScore authors' recipe: PTB-tokenise references and candidates, then score."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    tok = PTBTokenizer()
    gts = tok.tokenize({i: [{"caption": r} for r in refs] for i, refs in enumerate(REFS)})
    res = tok.tokenize({i: [{"caption": c}] for i, c in enumerate(CANDS)})
    return scorer.compute_score(gts, res)[1]


def test_ptb_tokenisation_lowercases_and_drops_punctuation():
    assert ptb_tokenize(["Two kids play at the beach!", "A dog, running."]) == [
        "two kids play at the beach",
        "a dog running",
    ]


@pytest.mark.parametrize("kind", ["bleu1", "bleu4", "rougeL", "cider"])
def test_baselines_equal_direct_pycocoevalcap_scores(kind, capsys):
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    ours = CocoBaseline(kind)(CANDS, REFS)
    if kind.startswith("bleu"):
        expected = _direct(Bleu(4))[int(kind[-1]) - 1]
    elif kind == "rougeL":
        expected = _direct(Rouge())
    else:
        expected = _direct(Cider())
    assert ours == pytest.approx(list(expected))
    capsys.readouterr()


@pytest.mark.slow
def test_meteor_runs_offline_with_its_packaged_paraphrase_table():
    # One Java start (tens of seconds on a busy machine); the direct comparison is the same call.
    b = CocoBaseline("meteor")
    try:
        ours = b([*CANDS, "A man riding a bicycle."], [*REFS, REFS[2]])
    finally:
        b.close()
    assert all(0 < s <= 1 for s in ours)
    assert ours[3] == max(ours)  # the candidate that is one of its references scores highest


def test_spice_reports_why_it_cannot_run_offline():
    reason = CocoBaseline("spice").unavailable()
    if reason is None:
        pytest.skip("Stanford CoreNLP for SPICE is installed on this machine")
    assert "CoreNLP" in reason and "offline" in reason


def test_baselines_refuse_items_without_references_naming_the_item():
    with pytest.raises(ValueError, match="item 1 has no references"):
        CocoBaseline("bleu4")(["a", "b"], [["a"], []])
    with pytest.raises(ValueError, match="unknown baseline"):
        CocoBaseline("bleu5")


def test_cider_is_marked_corpus_level_and_signatures_name_the_implementation():
    assert CocoBaseline("cider").corpus_level and not CocoBaseline("bleu4").corpus_level
    assert CocoBaseline("bleu4").signature.startswith("bleu4|impl=pycocoevalcap|tokenizer=ptb|")
    assert LengthBaseline()(["a b c", "a"]) == [3.0, 1.0]
