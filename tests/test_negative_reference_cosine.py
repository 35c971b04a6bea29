"""RefCLIP-S and RefPAC-S where the best reference points away from the candidate (cosine < 0).

The authors' code keeps that cosine (jmhessel/clipscore ``get_refonlyclipscore``, aimagelab/pacscore
``RefPACScore``: ``np.max`` of the raw cosines); the papers clip it at 0 (Hessel et al. eq. 2, Sarto et al.
eq. 5-6): ``clip_reference_cosine=True``. A random tiny CLIP (seed 2) gives the candidate and references below
cosines near -0.27 and -0.30 with the prompt prefix, found by a search over word combinations.

Where that cosine nearly cancels the candidate's own score, the harmonic mean's denominator is near zero: the
authors' formula is kept, and a warning names the items, pointing at the caller's line.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from authors_reference import authors_text_features

import capeval
from capeval.shapes.tiny_clip import build_tiny_clip
from capeval.signature import parse_signature

CANDIDATE = "man house man snow"
REFERENCES = ["rides soup rides dog", "rides dog rides tree"]

pytestmark = pytest.mark.usefixtures("fresh_backbones")  # no backbone loaded by another test is reused


@pytest.fixture(scope="module")
def negative_clip(tmp_path_factory):
    return build_tiny_clip(tmp_path_factory.mktemp("negative-clip"), seed=2)


@pytest.fixture(scope="module")
def embeddings(negative_clip):
    """The candidate's and its references' unit embeddings, from raw CLIPModel calls (no capeval code)."""
    from transformers import CLIPModel

    model = CLIPModel.from_pretrained(negative_clip).eval()
    return authors_text_features(model, [CANDIDATE]), authors_text_features(model, REFERENCES)


@pytest.mark.parametrize(
    ("make", "key", "w"),
    [
        (lambda path, **kw: capeval.RefCLIPScore(model=str(path), device="cpu", **kw), "scores", 2.5),
        # A whole model folder is a converted PAC-S checkpoint: the same recipe with w = 2.0.
        (
            lambda path, **kw: capeval.PACScore(checkpoint=str(path), device="cpu", **kw),
            "refpacscore_scores",
            2.0,
        ),
    ],
    ids=["RefCLIP-S", "RefPAC-S"],
)
def test_a_negative_best_reference_cosine_is_kept_by_default_and_clipped_on_request(
    negative_clip, embeddings, make, key, w
):
    cand, refs = embeddings
    best = float(np.max(refs @ cand[0]))
    assert best < -0.2  # the premise: both references point away from the candidate
    # The image embedding is the candidate's own direction: cos = 1, so CLIP-S (PAC-S) = w * 1 = w.
    image_embeds = cand.astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # w + best is far from 0: no near-zero-denominator warning either
        authors = make(negative_clip)([CANDIDATE], [REFERENCES], image_embeds=image_embeds)
        paper = make(negative_clip, clip_reference_cosine=True)(
            [CANDIDATE], [REFERENCES], image_embeds=image_embeds
        )
    # Authors' code: H-Mean(w, best) = 2 w best / (w + best), e.g. w = 2.5, best = -0.2747: -0.6175.
    assert authors[key][0] == pytest.approx(2 * w * best / (w + best), abs=1e-5)
    assert authors[key][0] < 0
    # Papers: H-Mean(w, max(best, 0)) = 2 w 0 / (w + 0) = 0.
    assert paper[key][0] == 0.0
    fields = parse_signature(paper["signature"])[1]
    assert fields["clip_reference_cosine"] == "True"


def test_refpac_s_signature_names_clip_reference_cosine_only_when_set(negative_clip):
    default = capeval.PACScore(checkpoint=str(negative_clip), device="cpu").signature
    clipped = capeval.PACScore(
        checkpoint=str(negative_clip), device="cpu", clip_reference_cosine=True
    ).signature
    assert "clip_reference_cosine" not in default  # signatures from before the option stay valid
    assert clipped == default.replace("|dtype=float32|", "|dtype=float32|clip_reference_cosine=True|")


def test_refpac_s_near_zero_warning_offers_the_papers_clipping(negative_clip, embeddings):
    cand, refs = embeddings
    best = float(np.max(refs @ cand[0]))
    # An image embedding at cosine c to the candidate with PAC-S = 2c = -best + 0.001: a + b = 0.001, so the
    # authors' 2ab / (a + b) is about -150 (hand: 2 * 0.2757 * -0.2747 / 0.001).
    c = (-best + 0.001) / 2.0
    orth = np.random.default_rng(0).standard_normal(cand.shape[1])
    orth -= (orth @ cand[0]) * cand[0]
    orth /= np.linalg.norm(orth)
    image = (c * cand[0] + np.sqrt(1 - c**2) * orth)[None].astype(np.float32)
    scorer = capeval.PACScore(checkpoint=str(negative_clip), device="cpu")
    with pytest.warns(UserWarning, match=r"RefPAC-S: PAC-S \+ best-reference cosine is near zero for 1 item.*"
                      r"clip_reference_cosine=True gives the paper's formula \(eq. 5-6\)"):  # fmt: skip
        out = scorer([CANDIDATE], [REFERENCES], image_embeds=image)
    a = 2.0 * c
    assert out["refpacscore_scores"][0] == pytest.approx(2 * a * best / (a + best), rel=1e-2)


# --- Near a zero denominator the harmonic mean warns, naming the items ---


def _cancelling_terms(scorer, monkeypatch, w: float):
    """Two captions; in the second, w*cos(image, caption) nearly cancels its best-reference cosine of -0.4.

    The tiny CLIP's captions are all alike (cosines near 0.8), so text embeddings are set by hand.
    """
    import torch

    basis = torch.eye(16)
    cosine = -0.4
    table = {
        "fine caption": basis[0],
        "fine reference": basis[0],
        "odd caption": basis[3],
        "odd reference": cosine * basis[3] + (1 - cosine**2) ** 0.5 * basis[4],
    }
    monkeypatch.setattr(scorer, "text_embeddings", lambda texts: torch.stack([table[t] for t in texts]))
    t = (-cosine + 1e-4) / w  # w * t + cosine = 1e-4
    image_embeds = torch.stack([basis[0], t * basis[3] + (1 - t**2) ** 0.5 * basis[5]])
    return ["fine caption", "odd caption"], [["fine reference"], ["odd reference"]], image_embeds


def test_refclipscore_warns_naming_items_whose_harmonic_mean_denominator_is_near_zero(
    tiny_clip_dir, monkeypatch
):
    import capeval

    scorer = capeval.RefCLIPScore(model=str(tiny_clip_dir), device="cpu")
    predictions, references, image_embeds = _cancelling_terms(scorer, monkeypatch, 2.5)
    with pytest.warns(UserWarning, match=r"RefCLIP-S: CLIP-S \+ best-reference cosine is near zero for 1 item\(s\)"
                      r".*item 1: CLIP-S 0\.4001, best-reference cosine -0\.4, RefCLIP-S -3\d\d\d") as record:  # fmt: skip
        out = scorer(predictions, references, image_embeds=image_embeds)
    assert record[0].filename == __file__  # points at the caller, not at capeval
    assert "item 0" not in str(record[0].message)
    assert out["scores"][0] == pytest.approx(2.5 * 1.0 * 1.0 * 2 / (2.5 + 1.0))
    assert out["scores"][1] < -3000  # the authors' formula is kept: the warning is the guard


def test_refclipscore_with_the_papers_clipped_cosine_has_nothing_to_warn_about(tiny_clip_dir, monkeypatch):
    import warnings

    import capeval

    scorer = capeval.RefCLIPScore(model=str(tiny_clip_dir), device="cpu", clip_reference_cosine=True)
    predictions, references, image_embeds = _cancelling_terms(scorer, monkeypatch, 2.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = scorer(predictions, references, image_embeds=image_embeds)
    assert out["scores"][1] == 0.0  # H(0.4001, max(-0.4, 0)) = 0


def test_refpacscore_warns_with_its_own_names_and_points_at_the_caller(tiny_clip_dir, monkeypatch):
    import capeval

    scorer = capeval.PACScore(checkpoint=str(tiny_clip_dir), device="cpu")
    predictions, references, image_embeds = _cancelling_terms(scorer, monkeypatch, 2.0)
    with pytest.warns(UserWarning, match=r"RefPAC-S: PAC-S \+ best-reference cosine is near zero .*item 1: "
                      r"PAC-S 0\.4001") as record:  # fmt: skip
        out = scorer(predictions, references, image_embeds=image_embeds)
    assert record[0].filename == __file__
    assert out["refpacscore_scores"][1] < -3000
