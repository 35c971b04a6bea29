"""The checks every metric callable shares (capeval.validation): bad input is refused by name and index before
any work (a caption without visible text, a string where a list belongs, text where numbers belong), and a bad
option before any model or file is loaded."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from PIL import Image

import capeval
from tests.tiny_scorers import PREDICTIONS, every_scorer, two_images

# --- A caption without visible text is an empty caption ---


INVISIBLE = [
    "\x00",
    "\x00 \x00\t",
    "\u200b",
    "\u200b\u200c\u200d\u2060\ufeff",
    "\u00ad",
    "\u202e\u2066\u2069",
    "\u3164",
    "\ufe0f",
    "\U000e0041\U000e007f",
    "\u2028\u3000",
]


@pytest.mark.parametrize("text", INVISIBLE)
def test_a_caption_without_visible_text_is_an_empty_caption_naming_its_index(text):
    from capeval.validation import check_predictions, check_references

    with pytest.raises(ValueError, match=r"prediction 1 is an empty caption"):
        check_predictions(["a dog", text])
    with pytest.raises(ValueError, match=r"reference 1 of item 0 is an empty string"):
        check_references([["a dog", text]], 1)


def test_the_message_lists_the_invisible_code_points():
    from capeval.validation import check_predictions

    with pytest.raises(
        ValueError,
        match=r"prediction 0 is an empty caption: it holds only invisible characters "
        r"\(U\+0000, U\+200B\)",
    ):
        check_predictions(["\x00\u200b\x00"])


@pytest.mark.parametrize("text", ["é", "日本", "🙂", "\u0301", "a\u200b", "\x00a", "\ue000"])
def test_captions_with_any_visible_character_are_kept(text):
    from capeval.validation import check_predictions, has_visible_text

    assert has_visible_text(text)
    assert check_predictions([text]) == [text]


def test_every_metric_refuses_an_invisible_prediction_or_reference(tiny_clip_dir):
    from gensim.models import KeyedVectors

    from capeval.emscore import EMScore

    kv = KeyedVectors(vector_size=2, count=0)
    kv.add_vectors(["dog", "cat"], np.array([[0, 1], [1, 0]], dtype=np.float32))
    image = Image.new("RGB", (40, 40), "gray")
    model = str(tiny_clip_dir)
    calls = {
        "clipscore": lambda p: capeval.CLIPScore(model=model)(p, images=[image, image]),
        "refclipscore": lambda p: capeval.RefCLIPScore(model=model)(
            p, [["a dog"]] * 2, images=[image, image]
        ),
        "wmd": lambda p: capeval.WMD(vectors=kv)(p, [["a dog"]] * 2),
        "wembsim": lambda p: capeval.WEmbSim(vectors=kv)(p, [["a dog"]] * 2),
        "emscore": lambda p: EMScore(model=model)(p, [["a dog"]] * 2),
    }
    for call in calls.values():
        with pytest.raises(ValueError, match="prediction 1 is an empty caption: it holds only invisible"):
            call(["a dog", "\u200b\x00"])
    refs = [["a dog"], ["a cat", "\ufeff"]]
    for call in {
        "refclipscore": lambda: capeval.RefCLIPScore(model=model)(["a", "b"], refs, images=[image, image]),
        "wmd": lambda: capeval.WMD(vectors=kv)(["a dog", "a cat"], refs),
        "wembsim": lambda: capeval.WEmbSim(vectors=kv)(["a dog", "a cat"], refs),
        "emscore": lambda: EMScore(model=model)(["a dog", "a cat"], refs),
    }.values():
        with pytest.raises(
            ValueError, match="reference 1 of item 1 is an empty string: it holds only invisible"
        ):
            call()


# --- A string where a list belongs, text where numbers belong ---


@pytest.fixture(scope="module")
def scorers(tiny_clip_dir):
    """Each callable, with a call that scores ``predictions`` (and ``references`` where it takes them)."""
    return every_scorer(tiny_clip_dir)


@pytest.mark.parametrize("name", ["clipscore", "refclipscore", "pacscore", "emscore", "wmd", "wembsim"])
def test_every_callable_refuses_a_bare_string_or_bytes_as_predictions(scorers, name):
    for bare in ("dog", b"dog"):
        with pytest.raises(TypeError, match="predictions must be a list of strings, got (str|bytes)"):
            scorers[name](bare, [["a dog"]] * 3)


@pytest.mark.parametrize("name", ["refclipscore", "pacscore", "emscore", "wmd", "wembsim"])
def test_every_callable_refuses_a_string_in_place_of_a_reference_list_naming_its_index(scorers, name):
    with pytest.raises(TypeError, match="references 1 is a string; expected a list of reference strings"):
        scorers[name](PREDICTIONS, [["a black picture"], "a white picture"])
    with pytest.raises(TypeError, match="references must be a list of lists of strings, got str"):
        scorers[name](PREDICTIONS, "a white picture")


def test_images_given_as_a_string_bytes_or_an_unordered_set_are_refused(tiny_clip_dir):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    with pytest.raises(TypeError, match="images must be a list with one entry per prediction, got str"):
        scorer(["a"], images="photo.png")
    with pytest.raises(TypeError, match="images must be a list with one entry per prediction, got bytes"):
        scorer(["a", "b"], images=b"ab")
    # A set has no order to pair with the predictions: scoring it would pair images at random.
    with pytest.raises(TypeError, match="images must be a list with one entry per prediction, got set"):
        scorer(PREDICTIONS, images={"a.png", "b.png"})


def test_image_embeds_rows_holding_text_are_refused_not_read_as_numbers(tiny_clip_dir):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    dim = scorer.backbone.embed_dim
    with pytest.raises(TypeError, match="image_embeds row 1 is str"):
        scorer(PREDICTIONS, image_embeds=[[0.5] * dim, "0.5"])
    # numpy would read the text "0.5" as the number 0.5 and score it.
    with pytest.raises(TypeError, match="image_embeds must be a .N, D. array of real numbers, got dtype <U"):
        scorer(PREDICTIONS, image_embeds=[["0.5"] * dim, ["0.5"] * dim])


def test_video_embeds_holding_a_string_are_refused_naming_the_video(tiny_clip_dir):
    scorer = capeval.EMScore(model=str(tiny_clip_dir), device="cpu")
    dim = scorer.backbone.embed_dim
    with pytest.raises(TypeError, match="video_embeds 1 is a str"):
        scorer(PREDICTIONS, video_embeds=[np.ones((2, dim)), "frames.npy"])
    with pytest.raises(TypeError, match="video_embeds 0 must hold real numbers, got dtype <U"):
        scorer(PREDICTIONS, video_embeds=[[["1"] * dim], np.ones((2, dim))])


def test_a_custom_tokenizer_returning_one_string_is_refused_not_split_into_characters():
    scorer = capeval.WMD(tokenizer=lambda caption: caption.lower())
    with pytest.raises(TypeError, match="the tokenizer returned str for the caption 'a dog'"):
        scorer(["a dog"], [["a dog"]])
    scorer = capeval.WEmbSim(tokenizer=lambda caption: [1, 2])
    with pytest.raises(TypeError, match="the tokenizer returned the token 1 .int."):
        scorer(["a dog"], [["a dog"]])


def test_an_idf_table_with_string_keys_is_refused_naming_the_key(tiny_clip_dir):
    # A table read back from JSON has string keys: they never match a token id.
    with pytest.raises(TypeError, match="idf key '320' is str: keys are CLIP token ids .ints."):
        capeval.EMScore(model=str(tiny_clip_dir), device="cpu", idf={"320": 1.0})


def test_bytes_as_a_stopword_list_are_refused():
    with pytest.raises(TypeError, match="stopwords must be a list name or an iterable of strings, got bytes"):
        capeval.WMD(stopwords=b"the")


# --- w, sigma and every other float option must be finite and positive ---


@pytest.mark.parametrize("w", [math.nan, math.inf, -math.inf, 0.0, -2.5])
@pytest.mark.parametrize("cls", ["CLIPScore", "RefCLIPScore"])
def test_a_non_finite_or_non_positive_w_is_refused_before_the_model_loads(cls, w, tmp_path):
    # The model does not exist: refusing w first proves the check runs before any loading.
    with pytest.raises(ValueError, match=r"w must be a positive number \(finite, > 0\), got"):
        getattr(capeval, cls)(model=str(tmp_path / "no-such-model"), w=w)


@pytest.mark.parametrize("w", [math.nan, math.inf, 0.0, -2.0])
def test_pacscore_refuses_a_bad_w_before_reading_its_checkpoint(tmp_path, w):
    checkpoint = tmp_path / "clip_ViT-B-32.pth"
    checkpoint.write_bytes(b"never read")
    with pytest.raises(ValueError, match="w must be a positive number"):
        capeval.PACScore(checkpoint=str(checkpoint), w=w)


def test_w_of_the_wrong_type_is_a_type_error_naming_w(tmp_path):
    for bad in ("2.5", True, None):
        with pytest.raises(TypeError, match="w must be a number, got"):
            capeval.CLIPScore(model=str(tmp_path / "no-such-model"), w=bad)


@pytest.mark.parametrize("sigma", [math.nan, math.inf, 0, -1.0, True, "1"])
def test_wmd_refuses_a_bad_sigma_before_the_vectors_load(tmp_path, sigma):
    with pytest.raises((ValueError, TypeError), match="sigma must be a (positive )?number"):
        capeval.WMD(vectors=str(tmp_path / "no-such-vectors.txt"), sigma=sigma)


def test_a_valid_w_still_rescales_the_score(tiny_clip_dir):
    images = two_images()
    base = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")(PREDICTIONS, images=images)
    half = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu", w=1.25)(PREDICTIONS, images=images)
    assert half["scores"] == pytest.approx([s / 2 for s in base["scores"]])
    assert "w=1.25" in half["signature"]


# --- Options are refused by name before the model loads ---


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"batch_size": "64"}, TypeError, "batch_size must be an int >= 1, got str"),
        ({"batch_size": 2.5}, TypeError, "batch_size must be an int >= 1, got float"),
        ({"batch_size": 0}, ValueError, "batch_size must be >= 1, got 0"),
        ({"device": "meta"}, ValueError, "device 'meta' holds shapes, not numbers"),
        ({"device": "cuda:banana"}, ValueError, "unknown device 'cuda:banana'"),
        ({"dtype": ["float16"]}, TypeError, "dtype must be one of"),
        ({"dtype": "int8"}, ValueError, "unsupported dtype 'int8'"),
        ({"prefix": "A photo | depicts"}, ValueError, r"prefix 'A photo \| depicts' contains '\|'"),
        ({"prefix": 3}, TypeError, "prefix must be a string"),
        ({"num_workers": 0}, ValueError, "num_workers must be >= 1, got 0"),
        ({"num_workers": "4"}, TypeError, "num_workers must be an int >= 1 or None"),
        ({"progress": "no"}, TypeError, "progress must be True, False or None"),
        ({"clip_reference_cosine": "no"}, TypeError, "clip_reference_cosine must be True or False"),
    ],
)
def test_a_bad_option_is_refused_by_name_before_the_model_loads(options, error, message, tmp_path):
    with pytest.raises(error, match=message):
        capeval.RefCLIPScore(model=str(tmp_path / "no-such-model"), **options)


def test_numpy_scalars_are_accepted_as_options(tiny_clip_dir):
    scorer = capeval.RefCLIPScore(
        model=str(tiny_clip_dir), device="cpu", batch_size=np.int64(2), w=np.float32(2.5), progress=np.False_,
        clip_reference_cosine=np.True_,
    )  # fmt: skip
    assert (scorer.batch_size, scorer.w, scorer.progress, scorer.clip_reference_cosine) == (
        2,
        2.5,
        False,
        True,
    )
    assert type(scorer.batch_size) is int and type(scorer.w) is float


def test_a_model_path_holding_the_signature_separator_is_refused_before_loading(tmp_path):
    with pytest.raises(ValueError, match=r"model '.*a\|b' contains '\|', the separator of result signatures"):
        capeval.CLIPScore(model=str(tmp_path / "a|b"))
    with pytest.raises(ValueError, match="model is an empty string"):
        capeval.CLIPScore(model="")


def test_a_device_torch_cannot_make_tensors_on_is_refused_at_construction():
    from capeval.clip.backbones import resolve_device

    with pytest.raises(ValueError, match="device 'xla': this torch cannot make tensors there"):
        resolve_device("xla")


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"batch_size": "64"}, TypeError, "batch_size must be an int >= 1, got str"),
        ({"num_frames": "10"}, TypeError, "num_frames must be a positive int or None"),
        ({"idf": {320: math.nan}}, ValueError, "idf weight of token id 320 is nan"),
        ({"idf": {320: -1.0}}, ValueError, "idf weight of token id 320 is -1.0"),
        ({"idf": {320: "1"}}, TypeError, "idf weight of token id 320 is str"),
        ({"idf": {True: 1.0}}, TypeError, "idf key True is bool"),
        (
            {"idf": defaultdict(lambda: math.inf)},
            ValueError,
            r"idf weight of unseen token ids \(the default\)",
        ),
    ],
)
def test_emscore_refuses_bad_options_and_idf_tables_before_the_model_loads(options, error, message, tmp_path):
    with pytest.raises(error, match=message):
        capeval.EMScore(model=str(tmp_path / "no-such-model"), **options)


@pytest.mark.parametrize("flag", ["normalize_vectors", "prune"])
def test_wmd_flags_must_be_bools(flag, tmp_path):
    with pytest.raises(TypeError, match=f"{flag} must be True or False, got str"):
        capeval.WMD(vectors=str(tmp_path / "none.txt"), **{flag: "no"})
