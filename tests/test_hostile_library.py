"""Hostile input against the Python API (``capeval.CLIPScore(...)`` and the other callables): every bad argument
is refused by name (and index), before any work, and nothing is silently changed into a number."""

from __future__ import annotations

import math
import os
import shutil
import threading
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import capeval
from capeval.clip.images import load_image

# --- Item 4: a string where a list belongs, text where numbers belong ---

ITEM4_PREDICTIONS = ["a dark image", "a bright image"]
ITEM4_REFERENCES = [["a black picture"], ["a white picture"]]


def _item4_images():
    return [Image.fromarray(np.full((24, 24, 3), c, dtype=np.uint8)) for c in (20, 230)]


@pytest.fixture(scope="module")
def item4_scorers(tiny_clip_dir):
    """Each callable, with a call that scores ``predictions`` (and ``references`` where it takes them)."""
    model = str(tiny_clip_dir)
    images = _item4_images()
    clip = capeval.CLIPScore(model=model, device="cpu")
    ref = capeval.RefCLIPScore(model=model, device="cpu")
    pac = capeval.PACScore(checkpoint=model, device="cpu")
    em = capeval.EMScore(model=model, device="cpu")
    wmd, wembsim = capeval.WMD(), capeval.WEmbSim()
    return {
        "clipscore": lambda p, r: clip(p, images=images),
        "refclipscore": lambda p, r: ref(p, references=r, images=images),
        "pacscore": lambda p, r: pac(p, references=r, images=images),
        "emscore": lambda p, r: em(p, references=r),
        "wmd": lambda p, r: wmd(p, r),
        "wembsim": lambda p, r: wembsim(p, r),
    }


@pytest.mark.parametrize("name", ["clipscore", "refclipscore", "pacscore", "emscore", "wmd", "wembsim"])
def test_every_callable_refuses_a_bare_string_or_bytes_as_predictions(item4_scorers, name):
    for bare in ("dog", b"dog"):
        with pytest.raises(TypeError, match="predictions must be a list of strings, got (str|bytes)"):
            item4_scorers[name](bare, [["a dog"]] * 3)


@pytest.mark.parametrize("name", ["refclipscore", "pacscore", "emscore", "wmd", "wembsim"])
def test_every_callable_refuses_a_string_in_place_of_a_reference_list_naming_its_index(item4_scorers, name):
    with pytest.raises(TypeError, match="references 1 is a string; expected a list of reference strings"):
        item4_scorers[name](ITEM4_PREDICTIONS, [["a black picture"], "a white picture"])
    with pytest.raises(TypeError, match="references must be a list of lists of strings, got str"):
        item4_scorers[name](ITEM4_PREDICTIONS, "a white picture")


def test_images_given_as_a_string_bytes_or_an_unordered_set_are_refused(tiny_clip_dir):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    with pytest.raises(TypeError, match="images must be a list with one entry per prediction, got str"):
        scorer(["a"], images="photo.png")
    with pytest.raises(TypeError, match="images must be a list with one entry per prediction, got bytes"):
        scorer(["a", "b"], images=b"ab")
    # A set has no order to pair with the predictions: scoring it would pair images at random.
    with pytest.raises(TypeError, match="images must be a list with one entry per prediction, got set"):
        scorer(ITEM4_PREDICTIONS, images={"a.png", "b.png"})


def test_image_embeds_rows_holding_text_are_refused_not_read_as_numbers(tiny_clip_dir):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    dim = scorer.backbone.embed_dim
    with pytest.raises(TypeError, match="image_embeds row 1 is str"):
        scorer(ITEM4_PREDICTIONS, image_embeds=[[0.5] * dim, "0.5"])
    # numpy would read the text "0.5" as the number 0.5 and score it.
    with pytest.raises(TypeError, match="image_embeds must be a .N, D. array of real numbers, got dtype <U"):
        scorer(ITEM4_PREDICTIONS, image_embeds=[["0.5"] * dim, ["0.5"] * dim])


def test_video_embeds_holding_a_string_are_refused_naming_the_video(tiny_clip_dir):
    scorer = capeval.EMScore(model=str(tiny_clip_dir), device="cpu")
    dim = scorer.backbone.embed_dim
    with pytest.raises(TypeError, match="video_embeds 1 is a str"):
        scorer(ITEM4_PREDICTIONS, video_embeds=[np.ones((2, dim)), "frames.npy"])
    with pytest.raises(TypeError, match="video_embeds 0 must hold real numbers, got dtype <U"):
        scorer(ITEM4_PREDICTIONS, video_embeds=[[["1"] * dim], np.ones((2, dim))])


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


# --- Item 5 (part): w=nan and every other float option ---


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
    images = _item4_images()
    base = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")(ITEM4_PREDICTIONS, images=images)
    half = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu", w=1.25)(ITEM4_PREDICTIONS, images=images)
    assert half["scores"] == pytest.approx([s / 2 for s in base["scores"]])
    assert "w=1.25" in half["signature"]


# --- Item 11: one scorer object used from several threads ---


def _item11_run_in_threads(call, n: int = 4) -> list:
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def work(i: int) -> None:
        barrier.wait()  # every thread enters the scorer at the same moment
        try:
            results[i] = call()
        except Exception as err:  # noqa: BLE001 - reported in the assertion below
            results[i] = err

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.parametrize("name", ["clipscore", "refclipscore", "emscore", "wmd", "wembsim"])
def test_one_scorer_called_from_four_threads_gives_each_the_sequential_result(item4_scorers, name):
    # Non-ASCII captions take the tokenizer's slow path, ASCII ones the shared word cache.
    preds, refs = ["a dark café image", "a bright image"], [["a black picture"], ["a white café picture"]]
    call = item4_scorers[name]
    sequential = call(preds, refs)
    results = _item11_run_in_threads(lambda: call(preds, refs))
    assert all(isinstance(r, dict) for r in results), results
    assert [r["scores"] for r in results] == [sequential["scores"]] * 4
    assert call(preds, refs)["scores"] == sequential["scores"]


def test_an_idf_defaultdict_is_never_written_to_so_threads_can_share_the_scorer(tiny_clip_dir):
    # Looking up a defaultdict inserts the key: a shared scorer would mutate it while another thread iterates it.
    table = defaultdict(lambda: 1.0, {49406: 0.0, 49407: 0.5})
    before = dict(table)
    scorer = capeval.EMScore(model=str(tiny_clip_dir), device="cpu", idf=table)
    results = _item11_run_in_threads(lambda: scorer(["a zebra runs", "two cats"], [["a horse"], ["cats"]]))
    assert all(isinstance(r, dict) for r in results), results
    assert len({tuple(r["scores"]) for r in results}) == 1
    assert dict(table) == before


def test_overlapping_float32_gpu_encodings_restore_cudnns_tf32_switch(monkeypatch):
    from capeval.clip import image_encoding

    class FakeBackbone:
        device = torch.device("cuda", 0)
        dtype = torch.float32

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    first = image_encoding._ieee_fp32_convolutions(FakeBackbone())
    second = image_encoding._ieee_fp32_convolutions(FakeBackbone())
    first.__enter__()
    second.__enter__()  # another thread starts while the first is still encoding
    assert torch.backends.cudnn.allow_tf32 is False
    first.__exit__(None, None, None)
    assert torch.backends.cudnn.allow_tf32 is False  # the second is still encoding in IEEE float32
    second.__exit__(None, None, None)
    assert torch.backends.cudnn.allow_tf32 is True  # the user's setting, not the first thread's "off"


def test_threads_meeting_a_new_tokenizer_build_its_word_cache_once(tiny_clip_dir, monkeypatch):
    from transformers import AutoTokenizer

    from capeval.clip import tokenization

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_clip_dir))
    probes = []
    original = tokenization._encode_with_tokenizer

    def counting(tok, cleaned):
        if tok is tokenizer:
            probes.append(threading.get_ident())
        return original(tok, cleaned)

    monkeypatch.setattr(tokenization, "_encode_with_tokenizer", counting)
    caches = _item11_run_in_threads(lambda: tokenization._word_ids_for(tokenizer))
    assert len({id(c) for c in caches}) == 1 and caches[0] is not None
    assert len(probes) == 1


# --- Item 12: options validated before any work; loader errors named ---


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
        ({"prefix": None}, TypeError, "prefix must be a string"),
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


def test_bfloat16_and_float16_images_read_exactly_as_their_float32_copy(tiny_clip_dir):
    rng = np.random.default_rng(0)
    # Every float16 value in [0, 1]: 124 of them round to another 8-bit level when scaled in float16 arithmetic.
    values = np.arange(0, 2**16, dtype=np.uint16).view(np.float16)
    values = values[np.isfinite(values) & (values >= 0) & (values <= 1)]
    half = np.resize(values, (3, 48, 48)).astype(np.float16)
    as_float32 = half.astype(np.float32)
    assert np.array_equal(
        np.asarray(load_image(half.transpose(1, 2, 0), 0)),
        np.asarray(load_image(as_float32.transpose(1, 2, 0), 0)),
    )
    tensor = torch.from_numpy(rng.random((3, 32, 32), dtype=np.float32)).bfloat16()
    assert np.array_equal(np.asarray(load_image(tensor, 0)), np.asarray(load_image(tensor.float(), 0)))
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    got = scorer(ITEM4_PREDICTIONS, images=[tensor, torch.from_numpy(half)])
    want = scorer(ITEM4_PREDICTIONS, images=[tensor.float(), torch.from_numpy(as_float32)])
    assert got["scores"] == want["scores"]


def test_an_image_dict_with_a_str_under_bytes_is_a_type_error_naming_the_index(tiny_clip_dir):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    image = _item4_images()[0]
    with pytest.raises(
        TypeError, match="image 1: the 'bytes' of a datasets Image dict must be bytes .* got str"
    ):
        scorer(ITEM4_PREDICTIONS, images=[image, {"bytes": "iVBORw0KGgo=", "path": None}])


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_special_files_as_images_vectors_and_checkpoints_are_refused_unread(tiny_clip_dir, tmp_path):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    with pytest.raises(
        ValueError, match=r"image 0 \('/dev/zero'\): not a regular file .a device, pipe or socket"
    ):
        scorer(["a caption"], images=["/dev/zero"])
    pipe = tmp_path / "photo.png"
    os.mkfifo(pipe)  # opening it for reading would block forever
    with pytest.raises(ValueError, match="image 1 .*photo.png'.: not a regular file"):
        scorer(ITEM4_PREDICTIONS, images=[_item4_images()[0], str(pipe)])
    with pytest.raises(ValueError, match="vectors /dev/zero: not a regular file"):
        capeval.WMD(vectors="/dev/zero")
    with pytest.raises(ValueError, match="checkpoint '/dev/zero': /dev/zero is not a regular file"):
        capeval.PACScore(checkpoint="/dev/zero")


def _item12_model_copy(tiny_clip_dir: Path, tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(tiny_clip_dir, folder)
    return folder


def test_a_model_folder_whose_weights_are_a_device_is_refused_unread(tiny_clip_dir, tmp_path):
    folder = _item12_model_copy(tiny_clip_dir, tmp_path, "device-weights")
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to("/dev/null")
    with pytest.raises(ValueError, match="model.safetensors is not a regular file .a device, pipe or socket"):
        capeval.CLIPScore(model=str(folder), device="cpu")


def test_a_damaged_safetensors_weights_file_is_a_value_error_naming_the_file(tiny_clip_dir, tmp_path):
    from capeval.clip.backbones import clear_cache

    cut = _item12_model_copy(tiny_clip_dir, tmp_path, "cut")
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) // 2])
    garbled = _item12_model_copy(tiny_clip_dir, tmp_path, "garbled")
    (garbled / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......")
    clear_cache()
    for folder in (cut, garbled):
        with pytest.raises(ValueError, match=f"{folder / 'model.safetensors'} is truncated or corrupt"):
            capeval.CLIPScore(model=str(folder), device="cpu")
        with pytest.raises(ValueError, match=f"{folder / 'model.safetensors'} is truncated or corrupt"):
            capeval.PACScore(checkpoint=str(folder), device="cpu")


def test_a_cut_pytorch_weights_file_is_a_value_error_naming_the_file(tiny_clip_dir, tmp_path):
    from transformers import CLIPModel

    from capeval.clip.backbones import clear_cache

    folder = _item12_model_copy(tiny_clip_dir, tmp_path, "cut-bin")
    state = CLIPModel.from_pretrained(str(folder)).state_dict()
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    data = (folder / "pytorch_model.bin").read_bytes()
    (folder / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    clear_cache()
    with pytest.raises(ValueError, match="pytorch_model.bin is truncated or corrupt"):
        capeval.CLIPScore(model=str(folder), device="cpu")
