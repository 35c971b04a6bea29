"""Backbone loading: once per process, device/dtype policy, and errors that say how to fix them."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import capeval
from capeval.clip.backbones import load_backbone, resolve_device, resolve_dtype
from capeval.clip.batching import run_with_backoff
from capeval.clip.image_encoding import encode_images
from capeval.clip.text_encoding import encode_texts
from capeval.diagnostics.categories import ImageConstantsWarning


def test_a_backbone_is_loaded_once_per_process_and_reused(tiny_clip_dir):
    a = load_backbone(str(tiny_clip_dir))
    b = load_backbone(tiny_clip_dir)
    assert a is b
    assert load_backbone(str(tiny_clip_dir), dtype="bfloat16") is not a


def test_revision_of_a_local_folder_is_the_weights_hash(tiny_clip_dir):
    bb = load_backbone(str(tiny_clip_dir))
    assert bb.revision.startswith("sha256:") and len(bb.revision) == len("sha256:") + 12
    assert bb.name == f"{Path(tiny_clip_dir).name}@{bb.revision}"
    assert (bb.image_size, bb.context_length, bb.embed_dim) == (32, 77, 16)


def test_missing_hub_model_offline_says_how_to_fix_it(monkeypatch):
    from capeval.shapes import shapes_clip_path

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError) as err:
        load_backbone("openai/clip-vit-large-patch14-not-cached")
    msg = str(err.value)
    assert "openai/clip-vit-large-patch14-not-cached" in msg
    assert "HF_HUB_OFFLINE=1 is set" in msg and "pass model= a local CLIP folder" in msg
    assert msg.endswith(f"model={str(shapes_clip_path())!r}")


def test_unknown_local_folder_and_bad_ids_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="no such folder"):
        load_backbone(str(tmp_path / "nowhere" / "model"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no config.json"):
        load_backbone(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="neither a local folder nor a valid Hub id"):
        load_backbone("bad id with spaces!")
    with pytest.raises(TypeError, match="model must be a Hub id, a folder path, or model=.model, processor."):
        load_backbone(42)


def test_a_non_clip_folder_is_refused(tmp_path):
    from transformers import BertConfig, BertModel

    BertModel(
        BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    ).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="not a CLIP model|model_type"):
        load_backbone(str(tmp_path))


def test_device_and_dtype_policy():
    assert resolve_device(None).type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            resolve_device("cuda:1")
    with pytest.raises(ValueError, match="unsupported dtype 'float8'"):
        resolve_dtype("float8")


def test_bfloat16_scores_stay_close_to_float32(tiny_clip_dir):
    rng = np.random.RandomState(0)
    images = [Image.fromarray(rng.randint(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(4)]
    caps = ["a red circle", "a blue square", "two dogs", "a man"]
    fp32 = capeval.CLIPScore(model=str(tiny_clip_dir))(caps, images=images)
    bf16 = capeval.CLIPScore(model=str(tiny_clip_dir), dtype="bfloat16")(caps, images=images)
    assert "dtype=bfloat16" in bf16["signature"]
    np.testing.assert_allclose(bf16["scores"], fp32["scores"], atol=0.05)


def test_out_of_memory_halves_the_batch_and_retries():
    calls = []

    def run(chunk):
        calls.append(len(chunk))
        if len(chunk) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return torch.tensor(chunk)

    with pytest.warns(UserWarning, match="batch size lowered to 2"):
        out = list(run_with_backoff(run, list(range(7)), 8, torch.device("cpu"), "images"))
    assert [c for c, _ in out] == [[0, 1], [2, 3], [4, 5], [6]]
    assert calls[:3] == [7, 4, 2]


def test_other_runtime_errors_are_not_mistaken_for_out_of_memory():
    def run(chunk):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        list(run_with_backoff(run, [0, 1], 2, torch.device("cpu"), "images"))


def test_encoding_survives_a_simulated_oom_in_the_model(tiny_clip_dir, monkeypatch):
    bb = load_backbone(str(tiny_clip_dir))
    rng = np.random.RandomState(1)
    images = [Image.fromarray(rng.randint(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(6)]
    expected = encode_images(bb, images, batch_size=6)
    real = bb.model.get_image_features

    def flaky(pixel_values, **kw):
        if len(pixel_values) > 3:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real(pixel_values=pixel_values, **kw)

    monkeypatch.setattr(bb.model, "get_image_features", flaky)
    with pytest.warns(UserWarning, match="out of memory encoding images"):
        got = encode_images(bb, images, batch_size=6)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_texts_are_padded_to_the_longest_in_the_batch_not_77(tiny_clip_dir, monkeypatch):
    bb = load_backbone(str(tiny_clip_dir))
    widths = []
    real = bb.model.get_text_features

    def spy(input_ids, **kw):
        widths.append(input_ids.shape[1])
        return real(input_ids=input_ids, **kw)

    monkeypatch.setattr(bb.model, "get_text_features", spy)
    encode_texts(bb, ["a dog", "a dog runs", "a b c d e f g h"], batch_size=2)
    # length-sorted: the two short captions share a batch padded to the longer of them
    assert widths == [5, 10]


def test_process_readers_give_the_same_embeddings_and_name_bad_images(tiny_clip_dir, monkeypatch, tmp_path):
    import capeval.clip.image_encoding as encoding

    bb = load_backbone(str(tiny_clip_dir))
    rng = np.random.RandomState(2)
    images = [Image.fromarray(rng.randint(0, 256, (30 + i, 40, 3), dtype=np.uint8)) for i in range(9)]
    threads = encode_images(bb, images, batch_size=4)
    monkeypatch.setattr(encoding, "_use_processes", lambda *a: True)
    processes = encode_images(bb, images, batch_size=4, num_workers=2)
    torch.testing.assert_close(processes, threads, atol=0, rtol=0)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(ValueError, match=r"image 5 .*bad\.png"):
        encode_images(bb, images[:5] + [str(bad)] + images[5:], batch_size=4, num_workers=2)


def test_the_reader_can_be_chosen_and_a_wrong_one_is_named(tiny_clip_dir):
    bb = load_backbone(str(tiny_clip_dir))
    rng = np.random.RandomState(3)
    images = [Image.fromarray(rng.randint(0, 256, (28, 36 + i, 3), dtype=np.uint8)) for i in range(7)]
    threads = encode_images(bb, images, batch_size=3, reader="threads")
    processes = encode_images(bb, images, batch_size=3, num_workers=2, reader="processes")
    torch.testing.assert_close(processes, threads, atol=0, rtol=0)
    with pytest.raises(ValueError, match="reader must be 'threads', 'processes' or None, got 'gpu'"):
        encode_images(bb, images, reader="gpu")
    with pytest.raises(ValueError, match="reader must be"):
        encode_images(bb, [], reader="gpu")


# --- A folder's identity covers every file that decides its numbers ---


def test_two_clones_of_one_folder_sign_alike_and_no_path_is_in_a_signature(tiny_clip_dir, tmp_path):
    from capeval.shapes import example_items

    items = list(example_items(2).values())
    captions, images = [it["candidate"] for it in items], [it["image"] for it in items]
    results = []
    for home in ("alice/projects", "bob/work/checkouts"):
        folder = _copy_folder(tiny_clip_dir, tmp_path / home / "clip-tiny")
        results.append(capeval.RefCLIPScore(model=str(folder))(captions, [["a"], ["b"]], images=images))
    assert results[0]["signature"] == results[1]["signature"]
    assert (
        "|model=clip-tiny@sha256:" in results[0]["signature"] and str(tmp_path) not in results[0]["signature"]
    )
    assert results[0]["scores"] == results[1]["scores"]


def test_folders_of_one_name_and_other_contents_sign_apart(tiny_clip_dir, tmp_path):
    a = load_backbone(str(_copy_folder(tiny_clip_dir, tmp_path / "a" / "clip")))
    b_folder = _copy_folder(tiny_clip_dir, tmp_path / "b" / "clip")
    _edit_json(b_folder / "config.json", text_config__hidden_act="gelu")
    b = load_backbone(str(b_folder))
    assert a.model_id == b.model_id == "clip" and a.name != b.name


def _copy_folder(source, target):
    import shutil

    return Path(shutil.copytree(source, target))


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    for key, value in changes.items():
        section, _, name = key.rpartition("__")
        (data[section] if section else data)[name] = value
    path.write_text(json.dumps(data))


def test_editing_a_folders_config_changes_its_scores_and_its_signature(tiny_clip_dir, tmp_path):
    from capeval.shapes import example_items

    items = list(example_items(3).values())
    captions, images = [it["candidate"] for it in items], [it["image"] for it in items]
    folder = _copy_folder(tiny_clip_dir, tmp_path / "clip")
    before = capeval.CLIPScore(model=str(folder))(captions, images=images)
    _edit_json(folder / "config.json", text_config__hidden_act="gelu", vision_config__hidden_act="gelu")
    after = capeval.CLIPScore(model=str(folder))(captions, images=images)
    assert after["signature"] != before["signature"]
    assert load_backbone(str(folder)).model.config.text_config.hidden_act == "gelu"
    fresh = capeval.CLIPScore(model=str(_copy_folder(folder, tmp_path / "fresh")))(captions, images=images)
    assert after["scores"] == pytest.approx(fresh["scores"], abs=1e-6)
    assert max(abs(a - b) for a, b in zip(after["scores"], before["scores"], strict=True)) > 1e-4


@pytest.mark.parametrize(
    ("name", "changes"),
    [
        ("preprocessor_config.json", {"image_mean": [0.5, 0.5, 0.5]}),
        ("tokenizer_config.json", {"model_max_length": 16}),
        ("tokenizer.json", {}),  # the same settings written without indentation: other bytes
        ("pacscore.json", {"origin": "laion/CLIP-ViT-L-14-laion2B-s32B-b82K"}),
    ],
)
def test_editing_a_processor_tokenizer_or_provenance_file_names_another_model(
    tiny_clip_dir, tmp_path, name, changes
):
    folder = _copy_folder(tiny_clip_dir, tmp_path / "clip")
    first = load_backbone(str(folder))
    path = folder / name
    if not path.exists():
        path.write_text("{}")
    _edit_json(path, **changes)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", ImageConstantsWarning
        )  # the origin's constants over the file's: expected
        second = load_backbone(str(folder))
    assert second is not first and second.revision != first.revision


def test_a_folders_files_are_hashed_once_per_process_until_one_changes(tiny_clip_dir, tmp_path, monkeypatch):
    import os

    from capeval.clip.checkpoints import hashes

    folder = _copy_folder(tiny_clip_dir, tmp_path / "clip")
    weights = folder / "model.safetensors"
    read: list[str] = []
    real = hashes._read_sha256
    monkeypatch.setattr(hashes, "_read_sha256", lambda path: read.append(path.name) or real(path))
    first = load_backbone(str(folder))
    assert read.count("model.safetensors") == 1 and "config.json" in read
    read.clear()
    assert load_backbone(str(folder)) is first and capeval.CLIPScore(model=str(folder)).backbone is first
    assert read == []  # stat only: no file read again
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    load_backbone(str(folder))
    assert read == ["model.safetensors"]
    read.clear()
    # The same bytes written to a new file moved over the old one, size and times kept: another inode.
    twin = folder / "twin.tmp"
    twin.write_bytes(weights.read_bytes())
    st = weights.stat()
    os.utime(twin, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(twin, weights)
    assert load_backbone(str(folder)) is not None
    assert read == ["model.safetensors"]
