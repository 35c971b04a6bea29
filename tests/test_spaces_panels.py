"""What each demo panel computes, checked against the metrics and the maths behind the pictures.

The panels are called directly (no server, no browser) on files placed in Gradio's upload folder, with the
shapes CLIP, whose scores mean something: the right caption of a drawing must win.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import capeval
from capeval.demo import InputError, build_demo, get_panel
from capeval.demo.examples import (
    EXAMPLE_SCENES,
    candidate_captions,
    example_image,
    example_video,
    references_for,
)
from capeval.demo.panels_text import transport_flows
from capeval.demo.panels_video import token_frame_similarity
from capeval.registry import METRICS
from capeval.shapes import caption, draw_frames, shapes_clip_path

SCENE = EXAMPLE_SCENES[0]
CAPTIONS = candidate_captions(SCENE)
TEXT_CANDIDATES = [
    "a man is riding a horse on the beach",
    "a person rides a horse near the sea",
    "a dog sleeps on a sofa",
]
TEXT_REFERENCES = ["a man riding a brown horse along the shore", "someone on horseback at the beach"]


@pytest.fixture
def shapes_env(monkeypatch):
    model = str(shapes_clip_path())
    monkeypatch.setenv("CAPEVAL_DEMO_MODEL", model)
    monkeypatch.setenv("CAPEVAL_DEMO_CHECKPOINT", model)
    return model


def _uploaded(src, folder):
    return str(shutil.copy(src, folder / src.name))


def test_every_metric_has_a_panel_and_a_space(repo_root):
    for metric in METRICS:
        assert get_panel(metric).metric == metric
        assert (repo_root / "spaces" / metric / "app.py").is_file()
        assert "capeval[spaces]" in (repo_root / "spaces" / metric / "requirements.txt").read_text()


def test_clipscore_panel_passes_prefix_and_w_to_the_metric_and_ranks_the_right_caption_first(
    shapes_env, uploads
):
    image = _uploaded(example_image(SCENE), uploads)
    scored = get_panel("clipscore").score(
        image=image, captions="\n".join(CAPTIONS), model="shapes-clip", prefix="", w=1.0
    )
    direct = capeval.CLIPScore(model=shapes_env, prefix="", w=1.0)(CAPTIONS, images=[image] * len(CAPTIONS))
    assert [r.score for r in scored.rows] == pytest.approx(direct["scores"], abs=1e-6)
    assert scored.corpus == pytest.approx(direct["clipscore"], abs=1e-6)
    assert max(scored.rows, key=lambda r: r.score).caption == caption(SCENE)
    assert "prefix=|w=1.0" in scored.result["signature"]


def test_refclipscore_panel_shows_clip_s_beside_refclip_s(shapes_env, uploads):
    image = _uploaded(example_image(SCENE), uploads)
    refs = references_for(SCENE)
    scored = get_panel("refclipscore").score(
        image=image, captions="\n".join(CAPTIONS), references="\n".join(refs), model="shapes-clip"
    )
    direct = capeval.RefCLIPScore(model=shapes_env)(
        CAPTIONS, [refs] * len(CAPTIONS), images=[image] * len(CAPTIONS)
    )
    assert [r.score for r in scored.rows] == pytest.approx(direct["scores"], abs=1e-6)
    assert [r.extra["CLIP-S"] for r in scored.rows] == pytest.approx(direct["clip_s_scores"], abs=1e-6)
    assert scored.corpus_extra == {"CLIP-S": pytest.approx(direct["clip_s"], abs=1e-6)}
    assert max(scored.rows, key=lambda r: r.score).caption == caption(SCENE)


def test_pacscore_without_configured_weights_says_where_to_get_them(monkeypatch, uploads, shapes_env):
    monkeypatch.delenv("CAPEVAL_DEMO_CHECKPOINT")
    panel = get_panel("pacscore")
    assert "PAC-S needs its fine-tuned weights" in panel.notice()
    image = _uploaded(example_image(SCENE), uploads)
    with pytest.raises(InputError, match="PAC-S needs its fine-tuned weights"):
        panel.score(image=image, captions="a red circle", checkpoint=None)
    demo = build_demo("pacscore")
    assert any("CAPEVAL_DEMO_CHECKPOINT" in str(getattr(b, "value", "")) for b in demo.blocks.values())


def test_pacscore_panel_adds_refpac_s_only_with_references(shapes_env, uploads):
    image = _uploaded(example_image(SCENE), uploads)
    panel = get_panel("pacscore")
    alone = panel.score(image=image, captions="\n".join(CAPTIONS), checkpoint="configured")
    assert "refpacscore" not in alone.result and alone.rows[0].extra == {}
    both = panel.score(
        image=image,
        captions="\n".join(CAPTIONS),
        references="\n".join(references_for(SCENE)),
        checkpoint="configured",
    )
    assert [r.score for r in both.rows] == pytest.approx([r.score for r in alone.rows], abs=1e-6)
    assert set(both.corpus_extra) == {"RefPAC-S"}
    assert max(both.rows, key=lambda r: r.score).caption == caption(SCENE)


def test_wmd_flows_move_every_words_weight_at_the_metrics_distance():
    panel = get_panel("wmd")
    scored = panel.score(
        captions="\n".join(TEXT_CANDIDATES), references="\n".join(TEXT_REFERENCES), vectors="glove"
    )
    assert max(scored.rows, key=lambda r: r.score).caption == TEXT_CANDIDATES[0]
    from capeval.wmd import WMD

    scorer = WMD()
    for row in scored.rows:
        distances = [scorer([row.caption], [[ref]])["distances"][0] for ref in TEXT_REFERENCES]
        best_ref = TEXT_REFERENCES[int(np.argmin(distances))]
        flows = transport_flows(scorer, row.caption, best_ref)
        assert flows.distance == pytest.approx(row.extra["WMD"], rel=1e-9)
        # Each candidate word sends its whole nBOW weight; each reference word receives its own.
        words = [w for w in flows.candidate_words]
        counts = {w: row.caption.lower().split().count(w) for w in words}
        assert flows.plan.sum(axis=1) == pytest.approx(
            np.array([counts[w] for w in words]) / sum(counts.values())
        )
        assert flows.plan.sum() == pytest.approx(1.0)
    assert "mass moved" in scored.extras["flows"]


def test_wmd_flows_are_absent_when_a_side_has_no_known_word():
    from capeval.wmd import WMD

    assert transport_flows(WMD(), "the of and", "a horse") is None


def test_wembsim_panel_shows_the_metrics_cosine_per_reference():
    scored = get_panel("wembsim").score(
        captions="\n".join(TEXT_CANDIDATES), references="\n".join(TEXT_REFERENCES), vectors="glove"
    )
    per_ref = scored.result["reference_scores"]
    for row, cosines in zip(scored.rows, per_ref, strict=True):
        assert [row.extra["ref 1"], row.extra["ref 2"]] == pytest.approx(cosines)
        assert row.score == pytest.approx(np.mean(cosines))
    assert min(scored.rows, key=lambda r: r.score).caption == "a dog sleeps on a sofa"


def test_emscore_heatmap_holds_the_similarities_the_metric_matches(shapes_env, uploads):
    from capeval.emscore import EMScore

    video = _uploaded(example_video(SCENE), uploads)
    scored = get_panel("emscore").score(
        video=video, captions="\n".join(CAPTIONS), model="shapes-clip", num_frames=6, idf=False
    )
    assert scored.headline == "EMScore(X,V)"
    best = max(range(len(CAPTIONS)), key=lambda i: scored.rows[i].score)
    assert CAPTIONS[best] == caption(SCENE)
    labels, sim = token_frame_similarity(
        EMScore(model=shapes_env, num_frames=6, idf=False), video, CAPTIONS[best]
    )
    assert sim.shape == (len(labels), 6) and labels[0] == "<start>" and labels[-1] == "<end>"
    details = scored.result["details"]["EMScore(X,V)"]
    # With uniform token weights, EMScore's fine-grained P and R are these means of row and column maxima.
    assert details["figr_P"][best] == pytest.approx(sim.max(axis=1).mean(), abs=1e-5)
    assert details["figr_R"][best] == pytest.approx(sim.max(axis=0).mean(), abs=1e-5)
    assert scored.extras["similarity_plot"] is not None


def test_emscore_takes_frames_instead_of_a_video_but_not_both(shapes_env, uploads):
    frames = []
    for k, frame in enumerate(draw_frames(SCENE, 4, size=(128, 128))):
        path = uploads / f"frame{k}.png"
        frame.save(path)
        frames.append(str(path))
    panel = get_panel("emscore")
    scored = panel.score(frames=frames, captions="\n".join(CAPTIONS), model="shapes-clip", num_frames=4)
    assert max(scored.rows, key=lambda r: r.score).caption == caption(SCENE)
    video = _uploaded(example_video(SCENE), uploads)
    with pytest.raises(InputError, match="not both"):
        panel.score(video=video, frames=frames, captions="x", model="shapes-clip")
    with pytest.raises(InputError, match="Upload a video"):
        panel.score(captions="x", model="shapes-clip")
    with pytest.raises(InputError, match="between 1 and 32"):
        panel.score(frames=frames, captions="x", model="shapes-clip", num_frames=500)
