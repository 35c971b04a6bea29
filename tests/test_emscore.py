"""EMScore: per-sample agreement with an independent statement of the authors' formulas, options, bad input.

The reference implementation below is written from the EMScore paper and ShiYaya/emscore (utils.py,
scorer.py) using raw ``CLIPModel`` calls, the CLIP authors' tokenizer and PyAV decoding, with loops in
float64: no capeval scoring code. It differs from the authors' batched code only where that code is
batch-dependent or breaks (padding counted in IDF and in the maxima, NaN F), as capeval does.
"""

from __future__ import annotations

import math
import warnings

import av
import numpy as np
import pytest
import torch
from authors_reference import authors_pixels, authors_tokens

from capeval.clip.video import write_video
from capeval.emscore import BOTH, TEXT, VIDEO, EMScore
from capeval.emscore_matching import (
    IdfTable,
    fine_grained_text,
    fine_grained_video,
    idf_from_token_ids,
)
from capeval.signature import parse_signature

EOS = 49407
CANDIDATES = [
    "a red circle moves to the left",
    "A man rides a horse on the beach .",
    "wow! two dogs play with a ball!",
    "a red circle moves to the left",
    " ".join(["very"] * 90) + " long caption",
]
REFERENCES = [
    ["a red circle on the left", "a circle moving left"],
    ["a person riding a horse", "a horse on a beach", "someone on horseback"],
    ["dogs playing!"],
    ["a red ball", "a red circle on the left"],
    ["a long caption"],
]


# -- the independent reference -------------------------------------------------------------------------
def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@torch.no_grad()
def ref_text(model, texts):
    """Per text: (token embeddings SOT..EOT, global embedding, ids), from 77-padded ids as clip.tokenize."""
    ids = authors_tokens(texts, prefix="")
    hidden = model.text_model(input_ids=ids).last_hidden_state
    proj = _unit(model.text_projection(hidden).double().numpy())
    out = []
    for i in range(len(texts)):
        eot = int(ids[i].argmax())
        out.append((proj[i, : eot + 1], proj[i, eot], ids[i, : eot + 1].tolist()))
    return out


@torch.no_grad()
def ref_frames(model, video_path, num_frames=None):
    """Every frame decoded by PyAV as RGB, OpenAI-preprocessed, embedded; then linspace-sampled."""
    with av.open(str(video_path)) as c:
        images = [f.to_image() for f in c.decode(video=0)]
    n_px = model.config.vision_config.image_size
    pix = torch.stack([authors_pixels(img, n_px) for img in images])
    emb = _unit(model.get_image_features(pixel_values=pix).pooler_output.double().numpy())
    if num_frames is not None:
        emb = emb[[int(i) for i in np.linspace(0, len(emb) - 1, num_frames)]]
    return emb


def ref_idf(docs):
    n = len(docs)
    df = {}
    for ids in docs:
        for t in set(ids):
            df[t] = df.get(t, 0) + 1
    idf = {t: math.log((n + 1) / (c + 1)) for t, c in df.items()}
    idf[EOS] = sum(idf.values()) / len(idf)
    return lambda t: idf.get(t, math.log(n + 1))


def ref_weights(ids, idf):
    w = np.array([idf(t) if idf else 1.0 for t in ids])
    return w / w.sum() if w.sum() > 0 else np.full(len(ids), 1.0 / len(ids))


def ref_emscore(model, cands, refs=None, videos=None, idf=True, num_frames=None):
    """{variant: {key: np.array}} by the formulas of the paper, candidate by candidate."""
    c_stats = ref_text(model, cands)
    r_stats = [ref_text(model, rs) for rs in refs] if refs else None
    if idf is True:
        docs = [s[2] for rs in r_stats for s in rs] if refs else [s[2] for s in c_stats]
        idf = ref_idf(docs)
    out = {}

    def f1(p, r):
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)

    if refs:
        rows = []
        for (xt, xg, xi), rs in zip(c_stats, r_stats, strict=True):
            wx = ref_weights(xi, idf)
            per_ref = []
            for rt, rg, ri in rs:
                sim = xt @ rt.T
                p = float(wx @ sim.max(axis=1))
                r = float(ref_weights(ri, idf) @ sim.max(axis=0))
                per_ref.append((p, r, f1(p, r), float(xg @ rg)))
            rows.append(np.max(np.array(per_ref), axis=0))
        out[TEXT] = np.array(rows)
    if videos:
        rows = []
        for (xt, xg, xi), path in zip(c_stats, videos, strict=True):
            frames = ref_frames(model, path, num_frames)
            sim = xt @ frames.T
            p = float(ref_weights(xi, idf) @ sim.max(axis=1))
            r = float(sim.max(axis=0).mean())
            rows.append((p, r, f1(p, r), float(xg @ _unit(frames.mean(axis=0)))))
        out[VIDEO] = np.array(rows)
    if refs and videos:
        out[BOTH] = (out[TEXT] + out[VIDEO]) / 2
    result = {}
    for name, a in out.items():
        figr_p, figr_r, figr_f, cogr = a.T
        result[name] = {
            "figr_P": figr_p,
            "figr_R": figr_r,
            "figr_F": figr_f,
            "cogr": cogr,
            "full_P": (figr_p + cogr) / 2,
            "full_R": (figr_r + cogr) / 2,
            "full_F": (figr_f + cogr) / 2,
        }
    return result


# -- fixtures --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def raw_model(tiny_clip_dir):
    from transformers import CLIPModel

    return CLIPModel.from_pretrained(tiny_clip_dir).eval()


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """Five short clips of a moving square, each its own colour and length."""
    folder = tmp_path_factory.mktemp("emscore-videos")
    paths = []
    for v, (color, n) in enumerate(
        [((220, 40, 40), 6), ((40, 200, 60), 9), ((40, 60, 220), 4), ((230, 200, 30), 7)]
    ):
        frames = []
        for i in range(n):
            a = np.full((40, 56, 3), 245, np.uint8)
            a[8:24, 4 + 4 * i : 20 + 4 * i] = color
            frames.append(a)
        paths.append(write_video(folder / f"clip{v}.mp4", frames))
    return paths + [paths[0]]


def _assert_details_match(got, expected, atol=2e-5):
    assert set(got["details"]) == set(expected)
    for name, parts in expected.items():
        for key, values in parts.items():
            np.testing.assert_allclose(got["details"][name][key], values, atol=atol, err_msg=f"{name} {key}")


# -- agreement with the reference -----------------------------------------------------------------------
def test_reference_only_emscore_equals_the_formulas_per_sample(tiny_clip_dir, raw_model):
    with pytest.warns(UserWarning, match="truncated"):
        got = EMScore(model=str(tiny_clip_dir), device="cpu")(CANDIDATES, references=REFERENCES)
    expected = ref_emscore(raw_model, CANDIDATES, refs=REFERENCES)
    _assert_details_match(got, expected)
    assert got["variant"] == TEXT
    np.testing.assert_allclose(got["scores"], expected[TEXT]["full_F"], atol=2e-5)
    assert got["emscore"] == pytest.approx(float(np.mean(expected[TEXT]["full_F"])), abs=2e-5)


@pytest.mark.parametrize("num_frames", [None, 3])
def test_video_only_emscore_equals_the_formulas_per_sample(tiny_clip_dir, raw_model, videos, num_frames):
    cands = CANDIDATES[:4] + ["a yellow square"]
    got = EMScore(model=str(tiny_clip_dir), device="cpu", num_frames=num_frames)(cands, videos=videos)
    expected = ref_emscore(raw_model, cands, videos=videos, num_frames=num_frames)
    _assert_details_match(got, expected)
    assert got["variant"] == VIDEO


def test_video_and_reference_emscore_averages_both_parts(tiny_clip_dir, raw_model, videos):
    cands, refs = CANDIDATES[:4] + ["a yellow square"], REFERENCES[:4] + [["a yellow box", "yellow"]]
    got = EMScore(model=str(tiny_clip_dir), device="cpu")(cands, references=refs, videos=videos)
    expected = ref_emscore(raw_model, cands, refs=refs, videos=videos)
    _assert_details_match(got, expected)
    assert got["variant"] == BOTH
    np.testing.assert_allclose(got["scores"], expected[BOTH]["full_F"], atol=2e-5)


def test_uniform_weights_without_idf(tiny_clip_dir, raw_model, videos):
    cands = CANDIDATES[:3] + ["a", "b"]
    got = EMScore(model=str(tiny_clip_dir), device="cpu", idf=False)(
        cands, references=REFERENCES, videos=videos
    )
    _assert_details_match(got, ref_emscore(raw_model, cands, refs=REFERENCES, videos=videos, idf=None))
    assert parse_signature(got["signature"])[1]["idf"] == "false"


def test_precomputed_frame_embeddings_give_the_same_scores(tiny_clip_dir, raw_model, videos):
    scorer = EMScore(model=str(tiny_clip_dir), device="cpu", num_frames=2)
    cands = ["a red square", "a green square", "a blue square", "a yellow square", "a red square"]
    from_files = scorer(cands, videos=videos)
    embeds = [torch.from_numpy(ref_frames(raw_model, p)).float() for p in videos]
    from_embeds = scorer(cands, video_embeds=embeds)
    np.testing.assert_allclose(from_files["scores"], from_embeds["scores"], atol=2e-5)


# -- invariances and the authors' failures avoided ------------------------------------------------------
def test_scores_do_not_depend_on_batch_size_order_or_a_final_batch_of_one(tiny_clip_dir, videos):
    cands = ["a red square", "a green square", "a blue square", "a yellow square", "a red square"]
    refs = [["red"], ["green square", "a green box"], ["blue"], ["yellow"], ["a red square"]]
    base = EMScore(model=str(tiny_clip_dir), device="cpu", batch_size=64)(cands, refs, videos)
    for bs in (2, 4):  # 5 captions: a last batch of one with either
        again = EMScore(model=str(tiny_clip_dir), device="cpu", batch_size=bs)(cands, refs, videos)
        np.testing.assert_allclose(again["scores"], base["scores"], atol=1e-5)
    order = [4, 2, 0, 3, 1]
    shuffled = EMScore(model=str(tiny_clip_dir), device="cpu")(
        [cands[i] for i in order], [refs[i] for i in order], [videos[i] for i in order]
    )
    np.testing.assert_allclose(shuffled["scores"], [base["scores"][i] for i in order], atol=1e-5)


def test_a_single_caption_and_a_single_video_score(tiny_clip_dir, videos):
    # One caption: every idf is 0, the authors' normalisation divides by zero; uniform weights here.
    out = EMScore(model=str(tiny_clip_dir), device="cpu")(["a red square"], videos=videos[:1])
    assert len(out["scores"]) == 1 and math.isfinite(out["emscore"])


def test_captions_over_the_context_length_are_truncated_not_fatal(tiny_clip_dir):
    long = " ".join(["word"] * 200)
    with pytest.warns(UserWarning, match="longer than 77 tokens were truncated"):
        out = EMScore(model=str(tiny_clip_dir), device="cpu")([long], references=[[long, "short"]])
    assert math.isfinite(out["emscore"])


def test_idf_counts_real_tokens_only_and_weights_end_of_text_by_the_mean():
    docs = [[49406, 320, 0, 49407], [49406, 320, 1929, 49407], [49406, 562, 49407]]
    idf = idf_from_token_ids(docs, EOS)
    n = 3
    expected = {
        49406: math.log(4 / 4),
        320: math.log(4 / 3),
        0: math.log(4 / 2),  # "!" is a word here, not padding
        1929: math.log(4 / 2),
        562: math.log(4 / 2),
    }
    for t, v in expected.items():
        assert idf[t] == pytest.approx(v)
    assert idf[EOS] == pytest.approx((sum(expected.values()) + 0.0) / 6)  # its own 0 counted, as the authors
    assert idf[12345] == pytest.approx(math.log(n + 1))


def test_idf_from_a_corpus_or_a_table(tiny_clip_dir):
    cands, refs = ["a red circle", "a blue square"], [["a red ball"], ["a blue box"]]
    corpus = ["a red circle", "a green circle", "a blue square", "a blue sky"]
    by_corpus = EMScore(model=str(tiny_clip_dir), device="cpu", idf=corpus)(cands, refs)
    scorer = EMScore(model=str(tiny_clip_dir), device="cpu")
    ids = scorer.backbone.tokenizer(corpus)["input_ids"]
    table = idf_from_token_ids(ids, EOS)
    by_table = EMScore(model=str(tiny_clip_dir), device="cpu", idf=table)(cands, refs)
    np.testing.assert_allclose(by_corpus["scores"], by_table["scores"], atol=1e-6)
    assert parse_signature(by_corpus["signature"])[1]["idf"].startswith("corpus:4:")
    assert parse_signature(by_table["signature"])[1]["idf"].startswith("table:")
    default = scorer(cands, refs)
    assert parse_signature(default["signature"])[1]["idf"] == "references"
    assert not np.allclose(default["scores"], by_corpus["scores"])


def test_an_idf_dict_without_a_token_is_a_clear_error(tiny_clip_dir):
    with pytest.raises(ValueError, match="idf has no weight for token id .* of prediction 1"):
        EMScore(model=str(tiny_clip_dir), device="cpu", idf={49406: 0.0, 49407: 1.0, 320: 1.0})(
            ["a", "a zebra"], references=[["a"], ["a"]]
        )
    table = IdfTable({49407: 1.0}, default=2.0)
    out = EMScore(model=str(tiny_clip_dir), device="cpu", idf=table)(["a zebra"], references=[["a"]])
    assert math.isfinite(out["emscore"])


def test_padding_never_enters_the_maxima_nor_nan_the_f_score():
    # Every cosine negative: a padded zero would win the max in the authors' batched code.
    x = [torch.tensor([[-1.0, 0.0]]), torch.tensor([[-1.0, 0.0], [0.0, -1.0], [-0.6, -0.8]])]
    r = [torch.tensor([[1.0, 0.0], [0.6, 0.8]]), torch.tensor([[0.0, 1.0]])]
    w = [torch.ones(1), torch.ones(3)]
    pairs = torch.tensor([[0, 0], [1, 1], [0, 1]])
    p, rr, f = fine_grained_text(x, w, r, [torch.ones(2), torch.ones(1)], pairs)
    alone = [fine_grained_text(x, w, r, [torch.ones(2), torch.ones(1)], pairs[i : i + 1]) for i in range(3)]
    torch.testing.assert_close(p, torch.cat([a[0] for a in alone]))
    # By hand, pair 0: x (-1, 0) meets r (1, 0) at -1 and (0.6, 0.8) at -0.6, so P = max = -0.6; R = mean of the
    # two references' best matches (-1 and -0.6) = -0.8.
    assert p[0] == pytest.approx(-0.6) and rr[0] == pytest.approx(-0.8)
    vp, vr, vf = fine_grained_video(x, w, r, pairs)
    assert vp[0] == pytest.approx(-0.6) and vr[0] == pytest.approx(-0.8)
    # Orthogonal tokens: P = R = 0 gives F = 0, not NaN.
    p, rr, f = fine_grained_text([torch.tensor([[1.0, 0.0]])], [torch.ones(1)], [torch.tensor([[0.0, 1.0]])],
                                 [torch.ones(1)], torch.tensor([[0, 0]]))  # fmt: skip
    assert float(f[0]) == 0.0


# -- inputs, outputs and errors -------------------------------------------------------------------------
def test_variant_follows_the_inputs_and_details_hold_each_part(tiny_clip_dir, videos):
    scorer = EMScore(model=str(tiny_clip_dir), device="cpu")
    cands = ["a red square"] * 5
    refs = [["a red box"]] * 5
    assert list(scorer(cands, videos=videos)["details"]) == [VIDEO]
    assert list(scorer(cands, references=refs)["details"]) == [TEXT]
    assert scorer(cands, references=[[]] * 5, videos=videos)["variant"] == VIDEO
    both = scorer(cands, references=refs, videos=videos)
    assert set(both["details"]) == {VIDEO, TEXT, BOTH}
    assert set(both["details"][BOTH]) == {"figr_P", "figr_R", "figr_F", "cogr", "full_P", "full_R", "full_F"}
    assert sorted(both) == ["details", "emscore", "scores", "signature", "variant"]


def test_signature_names_model_variant_frames_idf_and_versions(tiny_clip_dir, videos):
    out = EMScore(model=str(tiny_clip_dir), device="cpu", num_frames=10)(["a red square"] * 5, videos=videos)
    name, fields = parse_signature(out["signature"])
    assert name == "emscore"
    assert fields["model"].startswith(tiny_clip_dir.name + "@sha256:")  # the folder by name, not by path
    assert fields["variant"] == "(X,V)" and fields["num_frames"] == "10" and fields["idf"] == "candidates"
    assert {"dtype", "av", "capeval", "transformers", "torch"} <= set(fields)
    text_only = EMScore(model=str(tiny_clip_dir), device="cpu")(["a"], references=[["b"]])
    assert "num_frames" not in parse_signature(text_only["signature"])[1]
    # Both variants embed captions: both name how they were tokenised.
    assert fields["tokenization"] == parse_signature(text_only["signature"])[1]["tokenization"] == "2"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"predictions": ["a", "b"]}, ValueError, "needs videos= .*references="),
        (
            {"predictions": ["a", "b"], "references": [["x"], []]},
            ValueError,
            "references 1 is an empty list while",
        ),
        (
            {"predictions": ["a", "b"], "references": [["x"]]},
            ValueError,
            "got 1 reference lists for 2 predictions",
        ),
        ({"predictions": ["a", "b"], "references": "x"}, TypeError, "references must be a list"),
        (
            {"predictions": ["a", ""], "references": [["x"], ["y"]]},
            ValueError,
            "prediction 1 is an empty caption",
        ),
        ({"predictions": [], "references": []}, ValueError, "no predictions"),
        ({"predictions": ["a", "b"], "videos": ["x.mp4"]}, ValueError, "got 1 videos for 2 predictions"),
        ({"predictions": ["a"], "videos": "x.mp4"}, TypeError, "one video per prediction"),
        ({"predictions": ["a"], "videos": ["/nonexistent/x.mp4"]}, ValueError, "video 0 .*cannot read"),
        ({"predictions": ["a"], "videos": [[]]}, ValueError, "video 0 is an empty list of frames"),
        (
            {
                "predictions": ["a"],
                "videos": [[np.zeros((8, 8, 3), np.uint8)]],
                "video_embeds": [np.zeros((1, 16))],
            },
            ValueError,
            "not both",
        ),
        (
            {"predictions": ["a"], "video_embeds": [np.zeros((2, 5))]},
            ValueError,
            r"video_embeds 0 has shape \(2, 5\)",
        ),
    ],
)
def test_bad_input_is_a_clear_error(tiny_clip_dir, kwargs, error, match):
    with pytest.raises(error, match=match):
        EMScore(model=str(tiny_clip_dir), device="cpu")(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_frames": 0}, ValueError, "num_frames must be >= 1"),
        ({"idf": "references"}, TypeError, "idf must be True, False"),
        ({"idf": []}, ValueError, "idf corpus is an empty list"),
        ({"idf": ["ok", 3]}, TypeError, "idf corpus item 1"),
        ({"batch_size": 0}, ValueError, "batch_size"),
    ],
)
def test_bad_options_are_clear_errors(tiny_clip_dir, kwargs, error, match):
    with pytest.raises(error, match=match):
        EMScore(model=str(tiny_clip_dir), device="cpu", **kwargs)


def test_a_broken_video_among_good_ones_names_its_index(tiny_clip_dir, videos, tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all" * 50)
    with pytest.raises(ValueError, match=rf"video 2 \('{bad}'\) is not a readable video file"):
        EMScore(model=str(tiny_clip_dir), device="cpu")(["a", "b", "c"], videos=[videos[0], videos[1], bad])


def test_frame_lists_score_like_the_video_file(tiny_clip_dir, videos):
    with av.open(str(videos[1])) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    scorer = EMScore(model=str(tiny_clip_dir), device="cpu", num_frames=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = scorer(["a green square"], videos=[videos[1]])
        b = scorer(["a green square"], videos=[frames])
        c = scorer(["a green square"], videos=[np.stack(frames)])
    assert a["scores"] == pytest.approx(b["scores"], abs=1e-6) == c["scores"]


# -- the shapes CLIP on decoded videos ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def shape_clips(tmp_path_factory):
    """Eight clips of drawn shapes moving, encoded with H.264 by PyAV, and their scenes."""
    from capeval.shapes import COLORS, POSITIONS, SHAPES, Scene, draw_frames

    folder = tmp_path_factory.mktemp("shape-clips")
    scenes = [Scene(c, SHAPES[i % 3], POSITIONS[i % 5]) for i, c in enumerate([*COLORS, *list(COLORS)[:3]])]
    paths = [
        write_video(folder / f"clip{i}.mp4", draw_frames(s, n_frames=6, rng=i)) for i, s in enumerate(scenes)
    ]
    return scenes, paths


@pytest.mark.parametrize("attribute", ["color", "shape", "position"])
def test_a_correct_caption_outscores_a_wrong_one_on_decoded_videos(shape_clips, attribute):
    from capeval.shapes import caption, mismatched, paraphrase, shapes_clip_path

    scenes, paths = shape_clips
    scorer = EMScore(model=str(shapes_clip_path()), device="cpu")
    right = [caption(s) for s in scenes]
    wrong = [caption(mismatched(s, attribute, rng=i)) for i, s in enumerate(scenes)]
    refs = [[paraphrase(s, rng=i), paraphrase(s, rng=i + 100)] for i, s in enumerate(scenes)]
    for kwargs in ({"videos": paths}, {"references": refs}, {"videos": paths, "references": refs}):
        good, bad = scorer(right, **kwargs), scorer(wrong, **kwargs)
        wins = np.mean(np.array(good["scores"]) > np.array(bad["scores"]))
        assert wins == 1.0, f"{good['variant']}, wrong {attribute}: correct caption wins only {wins:.0%}"
        assert good["emscore"] > bad["emscore"]
