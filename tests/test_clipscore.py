"""CLIPScore and RefCLIPScore: per-sample agreement with the authors' formulas, invariances, bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from authors_reference import authors_clip_s, authors_refclip_s
from PIL import Image

import capeval
from capeval.clip.backbones import load_backbone
from capeval.scores import harmonic_mean, ref_clip_s
from capeval.validation import MAX_W

CAPTIONS = [
    "a red circle on the left",
    "A man rides a horse on the beach .",
    "two dogs play with a ball",
    "café “quoted” ﬁne 😀",
    " ".join(["very"] * 120) + " long caption",
    "a red circle on the left",
]


def _images(n, seed=0):
    rng = np.random.RandomState(seed)
    sizes = [(60, 40), (33, 77), (32, 32), (128, 96), (45, 45), (70, 50), (64, 48), (40, 90)]
    return [Image.fromarray(rng.randint(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes[:n]]


def _refs():
    return [
        ["a red circle", "a circle on the left side"],
        ["a person riding a horse", "a horse on a beach", "someone on horseback"],
        ["dogs playing"],
        ["an emoji", "quoted text"],
        ["a long caption"],
        ["a red circle on the left"],
    ]


@pytest.fixture(scope="module", params=["random", "shapes"])
def model_pair(request, tiny_clip_dir):
    """(folder, raw CLIPModel) for the random tiny CLIP and the shapes-trained CLIP."""
    from transformers import CLIPModel

    from capeval.shapes import shapes_clip_path

    folder = str(tiny_clip_dir) if request.param == "random" else str(shapes_clip_path())
    # transformers 5 loads weights in their stored dtype (fp16 for the shapes CLIP); the reference runs fp32
    return folder, CLIPModel.from_pretrained(folder, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def raw_model(tiny_clip_dir):
    from transformers import CLIPModel

    return CLIPModel.from_pretrained(tiny_clip_dir).eval()


def _shapes_and_noise(n):
    from capeval.shapes import Scene, draw

    drawn = [
        draw(Scene("red", "circle", "left"), size=(160, 120)),
        draw(Scene("blue", "square", "top"), rng=3),
    ]
    return (drawn + _images(n))[:n]


def test_clipscore_equals_the_authors_formula_per_sample(model_pair):
    folder, raw = model_pair
    images = _shapes_and_noise(6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = capeval.CLIPScore(model=folder)(CAPTIONS, images=images)
    theirs = authors_clip_s(raw, images, CAPTIONS)
    assert np.abs(np.array(out["scores"]) - theirs).max() <= 1e-5
    assert out["clipscore"] == pytest.approx(float(np.mean(out["scores"])), abs=1e-7)
    assert np.ptp(theirs) > 0  # a comparison of distinct values, not of clipped zeros


def test_refclipscore_equals_the_authors_formula_per_sample(model_pair):
    folder, raw_model = model_pair
    images = _shapes_and_noise(6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = capeval.RefCLIPScore(model=folder)(CAPTIONS, references=_refs(), images=images)
    theirs = authors_refclip_s(raw_model, images, CAPTIONS, _refs())
    assert np.abs(np.array(out["scores"]) - theirs).max() <= 1e-5
    assert np.abs(np.array(out["clip_s_scores"]) - authors_clip_s(raw_model, images, CAPTIONS)).max() <= 1e-5
    assert out["refclipscore"] == pytest.approx(float(np.mean(out["scores"])), abs=1e-7)
    assert out["clip_s"] == pytest.approx(float(np.mean(out["clip_s_scores"])), abs=1e-7)


def test_prefix_and_w_options_follow_the_formula(tiny_clip_dir, raw_model):
    images = _images(3)
    out = capeval.CLIPScore(model=str(tiny_clip_dir), prefix="", w=1.0)(CAPTIONS[:3], images=images)
    theirs = authors_clip_s(raw_model, images, CAPTIONS[:3], w=1.0, prefix="")
    assert np.abs(np.array(out["scores"]) - theirs).max() <= 1e-5
    assert "prefix=|w=1.0|" in out["signature"]


def test_scores_do_not_depend_on_batch_size_order_or_duplicates(tiny_clip_dir):
    images = _images(6)
    preds = CAPTIONS[:4]
    refs = _refs()[:4]
    base = capeval.RefCLIPScore(model=str(tiny_clip_dir), batch_size=64)(
        preds, references=refs, images=images[:4]
    )
    for bs in (1, 3):
        other = capeval.RefCLIPScore(model=str(tiny_clip_dir), batch_size=bs)(
            preds, references=refs, images=images[:4]
        )
        np.testing.assert_allclose(other["scores"], base["scores"], atol=1e-6)
    perm = [2, 0, 3, 1]
    shuffled = capeval.RefCLIPScore(model=str(tiny_clip_dir))(
        [preds[i] for i in perm], references=[refs[i] for i in perm], images=[images[i] for i in perm]
    )
    np.testing.assert_allclose(shuffled["scores"], [base["scores"][i] for i in perm], atol=1e-6)
    doubled = capeval.RefCLIPScore(model=str(tiny_clip_dir))(
        preds * 2, references=refs * 2, images=images[:4] * 2
    )
    np.testing.assert_allclose(doubled["scores"], base["scores"] * 2, atol=1e-6)


def test_pil_path_numpy_tensor_and_datasets_inputs_give_the_same_scores(tiny_clip_dir, tmp_path):
    import datasets

    images = _images(3)
    paths = []
    for i, img in enumerate(images):
        paths.append(str(tmp_path / f"{i}.png"))
        img.save(paths[-1])
    preds = CAPTIONS[:3]
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    base = scorer(preds, images=images)["scores"]
    ds = datasets.Dataset.from_dict({"image": paths}).cast_column("image", datasets.Image(decode=False))
    decoded = datasets.Dataset.from_dict({"image": paths}).cast_column("image", datasets.Image())
    for form in (
        paths,
        [np.asarray(im) for im in images],
        [torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1) for im in images],
        list(ds["image"]),
        list(decoded["image"]),
    ):
        np.testing.assert_allclose(scorer(preds, images=form)["scores"], base, atol=1e-6)


def test_each_distinct_image_and_text_is_encoded_once(tiny_clip_dir, monkeypatch):
    backbone = load_backbone(str(tiny_clip_dir))
    seen = {"images": 0, "texts": 0}
    image_fn, text_fn = backbone.model.get_image_features, backbone.model.get_text_features

    def count_images(pixel_values, **kw):
        seen["images"] += len(pixel_values)
        return image_fn(pixel_values=pixel_values, **kw)

    def count_texts(input_ids, **kw):
        seen["texts"] += len(input_ids)
        return text_fn(input_ids=input_ids, **kw)

    monkeypatch.setattr(backbone.model, "get_image_features", count_images)
    monkeypatch.setattr(backbone.model, "get_text_features", count_texts)
    img = _images(2)
    preds = ["a dog", "a cat", "a dog", "a  dog"]
    refs = [["a cat", "a dog"], ["a dog"], ["a bird"], ["a cat"]]
    capeval.RefCLIPScore(model=str(tiny_clip_dir))(
        preds, references=refs, images=[img[0], img[1], img[0].copy(), img[0]]
    )
    assert seen == {"images": 2, "texts": 3}


def test_precomputed_image_embeddings_give_the_same_scores(tiny_clip_dir):
    images = _images(3)
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    emb = capeval.encode_images(scorer.backbone, images)
    a = scorer(CAPTIONS[:3], images=images)["scores"]
    b = scorer(CAPTIONS[:3], image_embeds=(emb * 3.0).numpy())["scores"]
    np.testing.assert_allclose(a, b, atol=1e-6)
    with pytest.raises(ValueError, match=r"image_embeds has shape \(3, 7\); expected \(3, 16\)"):
        scorer(CAPTIONS[:3], image_embeds=np.ones((3, 7)))
    with pytest.raises(ValueError, match="exactly one of images"):
        scorer(CAPTIONS[:3], images=images, image_embeds=emb)


def test_refclipscore_is_zero_not_nan_when_both_terms_are_zero():
    out = harmonic_mean(torch.tensor([0.0, 0.5, 0.0]), torch.tensor([0.0, 0.5, 0.3]))
    assert out.tolist() == [0.0, 0.5, 0.0]
    assert not torch.isnan(out).any()


def test_reference_cosine_is_unclipped_by_default_and_clipped_on_request():
    clip_scores = torch.tensor([0.6, 0.6])
    best = torch.tensor([-0.2, 0.4])
    default = ref_clip_s(clip_scores, best)
    paper = ref_clip_s(clip_scores, best, clip_reference_cosine=True)
    assert default[0].item() == pytest.approx(2 * 0.6 * -0.2 / 0.4)
    assert paper[0].item() == 0.0
    assert default[1].item() == paper[1].item() == pytest.approx(2 * 0.6 * 0.4 / 1.0)


def test_long_captions_are_truncated_with_a_counting_warning(tiny_clip_dir):
    long = " ".join(["word"] * 300)
    with pytest.warns(UserWarning, match="2 caption\\(s\\) longer than 77 tokens were truncated"):
        out = capeval.CLIPScore(model=str(tiny_clip_dir))([long, long + " more", "short"], images=_images(3))
    assert all(math.isfinite(s) for s in out["scores"])


def test_unicode_and_emoji_captions_score(tiny_clip_dir):
    out = capeval.CLIPScore(model=str(tiny_clip_dir))(
        ["😀😀 日本語のキャプション", "Ünïcödé ß"], images=_images(2)
    )
    assert all(math.isfinite(s) and s >= 0 for s in out["scores"])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"predictions": ["a", "b"], "images": "IMAGES"},
            TypeError,
            "images must be a list with one entry per prediction",
        ),
        ({"predictions": ["a", "b", "c"], "images": [0, 1]}, ValueError, "got 2 images for 3 predictions"),
        ({"predictions": ["a", ""], "images": [0, 1]}, ValueError, "prediction 1 is an empty caption"),
        ({"predictions": ["a", "  "], "images": [0, 1]}, ValueError, "prediction 1 is an empty caption"),
        ({"predictions": ["a", 3], "images": [0, 1]}, TypeError, "prediction 1 is int"),
        ({"predictions": "a caption", "images": [0]}, TypeError, "predictions must be a list of strings"),
        ({"predictions": [], "images": []}, ValueError, "no predictions"),
        ({"predictions": ["a"]}, ValueError, "exactly one of images"),
    ],
)
def test_bad_clipscore_input_is_a_clear_error(tiny_clip_dir, kwargs, error, match):
    with pytest.raises(error, match=match):
        capeval.CLIPScore(model=str(tiny_clip_dir))(**kwargs)


@pytest.mark.parametrize(
    ("references", "error", "match"),
    [
        ([["a"]], ValueError, "got 1 reference lists for 2 predictions"),
        ([["a"], []], ValueError, "references 1 is an empty list"),
        ([["a"], "a ref"], TypeError, "references 1 is a string"),
        ([["a"], ["ok", ""]], ValueError, "reference 1 of item 1 is an empty string"),
        ([["a"], ["ok", None]], TypeError, "reference 1 of item 1 is NoneType"),
        (None, ValueError, "refclipscore needs references"),
    ],
)
def test_bad_references_are_a_clear_error(tiny_clip_dir, references, error, match):
    with pytest.raises(error, match=match):
        capeval.RefCLIPScore(model=str(tiny_clip_dir))(
            ["a dog", "a cat"], references=references, images=_images(2)
        )


def test_bad_images_name_the_index_and_nothing_is_dropped(tiny_clip_dir, tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image at all")
    images = _images(3)
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    with pytest.raises(ValueError, match=r"image 1 .*bad\.jpg"):
        scorer(["a", "b", "c"], images=[images[0], str(bad), images[2]])
    with pytest.raises(ValueError, match=r"image 2 .*missing\.png.*file not found"):
        scorer(["a", "b", "c"], images=[images[0], images[1], str(tmp_path / "missing.png")])


def test_odd_images_score_or_fail_clearly(tiny_clip_dir):
    rng = np.random.RandomState(0)
    rgb = Image.fromarray(rng.randint(0, 256, (30, 40, 3), dtype=np.uint8))
    cmyk = rgb.convert("CMYK")
    sixteen = Image.fromarray((rng.rand(30, 40) * 255).astype(np.uint16))  # 16-bit storage, 8-bit levels
    odd = [
        rgb.convert("L"),
        rgb.convert("RGBA"),
        rgb.quantize(8),
        sixteen,
        cmyk,
        Image.new("RGB", (1, 1), "red"),
    ]
    out = capeval.CLIPScore(model=str(tiny_clip_dir))(["a caption"] * len(odd), images=odd)
    assert len(out["scores"]) == len(odd)
    assert all(math.isfinite(s) for s in out["scores"])
    full_range = Image.fromarray((rng.rand(30, 40) * 65535).astype(np.uint16))
    with pytest.raises(ValueError, match=r"image 0 is a 16-bit image \(mode I;16\) with samples from"):
        capeval.CLIPScore(model=str(tiny_clip_dir))(["a caption"], images=[full_range])


def test_signature_names_model_revision_options_and_versions(tiny_clip_dir):
    out = capeval.CLIPScore(model=str(tiny_clip_dir))(["a dog"], images=_images(1))
    name, fields = capeval.signature.parse_signature(out["signature"])
    assert name == "clipscore"
    assert fields["model"].startswith(tiny_clip_dir.name + "@sha256:")  # the folder by name, not by path
    assert fields["prefix"] == "A photo depicts" and fields["w"] == "2.5" and fields["dtype"] == "float32"
    assert {"capeval", "transformers", "torch"} <= set(fields)


# --- Options: the bound on the rescaling weight ---


@pytest.mark.parametrize(
    "make",
    [
        lambda w: capeval.CLIPScore(model="no/such-model", w=w),
        lambda w: capeval.RefCLIPScore(model="no/such-model", w=w),
        lambda w: capeval.PACScore(checkpoint="no-such-weights.pth", w=w),
    ],
    ids=["clipscore", "refclipscore", "pacscore"],
)
def test_w_above_max_w_is_refused_before_any_model_is_read(make):
    with pytest.raises(
        ValueError, match=r"w must be at most 1e\+06 \(capeval.validation.MAX_W\), got 1e\+308"
    ):
        make(1e308)


def test_w_at_max_w_gives_finite_scores_scaled_from_the_default(tiny_clip_dir):
    images = _images(3)
    default = capeval.CLIPScore(model=str(tiny_clip_dir))(CAPTIONS[:3], images=images)
    largest = capeval.RefCLIPScore(model=str(tiny_clip_dir), w=MAX_W)(
        CAPTIONS[:3], references=_refs()[:3], images=images
    )
    assert np.isfinite(largest["scores"]).all() and math.isfinite(largest["refclipscore"])
    expected = np.array(default["scores"]) * (MAX_W / 2.5)
    assert np.array(largest["clip_s_scores"]) == pytest.approx(expected, rel=1e-5)
