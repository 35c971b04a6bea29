"""The weights files a model folder or a PAC-S checkpoint is read from: a pickle that would run code is refused
by name and runs nothing, NaN or inf (or a value float16 turns into inf) is refused naming the tensors, and a
damaged weights file, or one that is a device, is a ValueError naming the file."""

from __future__ import annotations

import re
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import capeval
from tests.pickle_payloads import (
    assert_nothing_ran,
    dumps,
    marker_payloads,
    plant_marker,
    touch_marker_pickle,
)


@pytest.fixture
def hostile(tmp_path):
    """The marker a payload would create and a plain pickle that would create it."""
    return plant_marker(tmp_path)


# --- Pickled weights run nothing ---


def _torch_zip_with(tmp_path: Path, name: str, payload: bytes) -> Path:
    """A real ``torch.save`` zip whose ``data.pkl`` is replaced by ``payload``."""
    src = tmp_path / "real.pt"
    torch.save({"x": 1}, src)
    out = tmp_path / name
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = payload if info.filename.endswith("/data.pkl") else zin.read(info)
            zout.writestr(info, data)
    return out


@pytest.mark.parametrize(
    "case",
    ["dotted name through gensim.utils", "builtins.open", "getattr of __import__", "subprocess directly"],
)
def test_checkpoint_payloads_are_refused_and_nothing_runs(tmp_path, hostile, case):
    from capeval.clip.checkpoints.files import read_state_dict

    marker, evil_pickle = hostile
    # torch's weights-only unpickler knows only GLOBAL (protocol 2), the layout torch.save writes.
    payload = dumps({"state_dict": {"w": marker_payloads(marker, evil_pickle)[case]}}, protocol=2)
    for path in (_torch_zip_with(tmp_path, "evil.pth", payload), tmp_path / "legacy.pth"):
        if path.name == "legacy.pth":
            path.write_bytes(payload)
        with pytest.raises(
            ValueError, match=rf"refused to load .*{path.name}: unpickling it needs .*nothing"
        ):
            read_state_dict(path)
    assert_nothing_ran(marker)


def test_model_folder_with_a_pickled_weights_file_runs_nothing(tmp_path, tiny_clip_dir, hostile):
    from capeval.clip.backbones import clear_cache as clear_backbones
    from capeval.clip.backbones import load_backbone

    marker, _ = hostile
    folder = tmp_path / "model"
    shutil.copytree(tiny_clip_dir, folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(
        _torch_zip_with(tmp_path, "w.bin", touch_marker_pickle(marker, protocol=2)).read_bytes()
    )
    clear_backbones()
    with pytest.raises(
        ValueError, match=r"pytorch_model\.bin.*(os|posix)\.system.*nothing in the file was executed"
    ):
        load_backbone(str(folder), device="cpu")
    assert_nothing_ran(marker)


# --- NaN and inf in weights are refused naming the tensors ---


def _copy_with_edited_weights(tiny_clip_dir: Path, tmp_path: Path, name: str, edit) -> Path:
    """The tiny CLIP folder with its safetensors weights changed by ``edit(state_dict)``."""
    from safetensors.torch import load_file, save_file

    from capeval.clip.backbones import clear_cache as clear_backbones

    folder = tmp_path / name
    shutil.copytree(tiny_clip_dir, folder)
    sd = load_file(folder / "model.safetensors")
    edit(sd)
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})
    clear_backbones()
    return folder


def _poison(sd: dict) -> None:
    sd["text_projection.weight"][0, 0] = float("nan")
    sd["vision_model.post_layernorm.bias"][:] = float("inf")


def test_model_folder_with_nan_and_inf_weights_is_refused_naming_the_tensors(tiny_clip_dir, tmp_path):
    import capeval

    folder = _copy_with_edited_weights(tiny_clip_dir, tmp_path, "nan-model", _poison)
    with pytest.raises(ValueError, match=r"nan-model holds NaN or inf in 2 tensor\(s\): ") as err:
        capeval.CLIPScore(model=str(folder), device="cpu")
    assert "vision_model.post_layernorm.bias (32 of 32 values)" in str(err.value)
    assert "text_projection.weight (1 of 512 values)" in str(err.value)


def test_pacs_checkpoint_file_with_inf_is_refused_naming_file_and_tensor(tiny_clip_dir, tmp_path):
    from safetensors.torch import load_file

    from capeval.clip.backbones import clear_cache as clear_backbones
    from capeval.clip.backbones import load_backbone

    sd = load_file(tiny_clip_dir / "model.safetensors")
    sd["visual_projection.weight"][3] = float("-inf")
    torch.save({"state_dict": sd}, tmp_path / "pacs.pth")
    clear_backbones()
    with pytest.raises(ValueError, match=r"pacs\.pth' holds NaN or inf in 1 tensor\(s\): visual_projection\.weight "
                       r"\(32 of 512 values\)"):  # fmt: skip
        load_backbone(str(tiny_clip_dir), device="cpu", checkpoint=str(tmp_path / "pacs.pth"))


def test_converted_pacs_folder_with_nan_is_refused(tiny_clip_dir, tmp_path):
    import capeval

    folder = _copy_with_edited_weights(tiny_clip_dir, tmp_path, "converted", _poison)
    with pytest.raises(ValueError, match=r"converted holds NaN or inf .*text_projection\.weight"):
        capeval.PACScore(checkpoint=str(folder), device="cpu")


def test_weights_that_overflow_float16_are_refused_and_bfloat16_still_loads(tiny_clip_dir, tmp_path):
    import capeval

    def big(sd: dict) -> None:
        sd["text_projection.weight"][0, 0] = 1e6  # float16's largest finite value is 65504

    folder = _copy_with_edited_weights(tiny_clip_dir, tmp_path, "big-weight", big)
    with pytest.raises(ValueError, match=r"1 tensor\(s\) hold values too large for float16, which become inf: "
                       r"text_projection\.weight \(1 of 512 values\)"):  # fmt: skip
        capeval.CLIPScore(model=str(folder), device="cpu", dtype="float16")
    scores = capeval.CLIPScore(model=str(folder), device="cpu", dtype="bfloat16")(
        ["a dog"], image_embeds=np.ones((1, 16))
    )["scores"]
    assert np.isfinite(scores).all()


# --- Damaged weights files, and weights that are a device, are named ---


def _model_copy(tiny_clip_dir: Path, tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(tiny_clip_dir, folder)
    return folder


def test_a_model_folder_whose_weights_are_a_device_is_refused_unread(tiny_clip_dir, tmp_path):
    folder = _model_copy(tiny_clip_dir, tmp_path, "device-weights")
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to("/dev/null")
    with pytest.raises(ValueError, match="model.safetensors is not a regular file .a device, pipe or socket"):
        capeval.CLIPScore(model=str(folder), device="cpu")


def test_a_damaged_safetensors_weights_file_is_a_value_error_naming_the_file(tiny_clip_dir, tmp_path):
    from capeval.clip.backbones import clear_cache

    cut = _model_copy(tiny_clip_dir, tmp_path, "cut")
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) // 2])
    garbled = _model_copy(tiny_clip_dir, tmp_path, "garbled")
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

    folder = _model_copy(tiny_clip_dir, tmp_path, "cut-bin")
    state = CLIPModel.from_pretrained(str(folder)).state_dict()
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    data = (folder / "pytorch_model.bin").read_bytes()
    (folder / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    clear_cache()
    with pytest.raises(ValueError, match="pytorch_model.bin is truncated or corrupt"):
        capeval.CLIPScore(model=str(folder), device="cpu")


# --- Tensors declaring more elements than their file holds ---

HUGE = (40000, 32000)  # 1.28e9 float32 values: 5.1 GB declared


def _zero_strides() -> torch.Tensor:
    """A (40000, 32000) float32 tensor over one stored value: a view that costs 4 bytes until something copies it."""
    return torch.empty(1).as_strided(HUGE, (0, 0))


def _declaring(shape_and_strides: str) -> str:
    return (
        rf"tensor '{shape_and_strides}' declares shape \(40000, 32000\), 1,280,000,000 elements \(5\.1 GB as "
        r"float32\), over a storage of 1 element\(s\) \(4 bytes\): its strides \(0, 0\) make elements share a "
        r"place, so the first copy of it would allocate the whole declared size; refused before any copy"
    )


@pytest.fixture(scope="module")
def declared_size_outcomes(tiny_clip_dir, tmp_path_factory):
    """Each loader given a small file holding a 5 GB declared tensor, in one child process whose address space is
    capped 3 GB above its imports: a loader that copied the tensor would fail there with an allocation error."""
    import json
    import struct

    from safetensors.torch import load_file

    from tests.memory_capped import run_capped

    tmp = tmp_path_factory.mktemp("declared")
    sd = load_file(tiny_clip_dir / "model.safetensors")
    torch.save(
        {"positional_embedding": torch.zeros(2, 2), "logit_scale": _zero_strides()}, tmp / "longclip-B.pt"
    )
    torch.save({"logit_scale": torch.zeros(1, 32000).expand(HUGE)}, tmp / "open_clip_model.pt")
    torch.save({"state_dict": {**sd, "logit_scale": _zero_strides()}}, tmp / "clip_ViT-B-32.pth")
    folder = tmp / "bin-model"
    shutil.copytree(tiny_clip_dir, folder)
    (folder / "model.safetensors").unlink()
    torch.save({**sd, "logit_scale": _zero_strides()}, folder / "pytorch_model.bin")
    # Rows 32 elements apart, each 32000 long: 5.1 GB declared over 5.2 MB stored.
    torch.save({"w": torch.empty(1_312_000).as_strided(HUGE, (32, 1))}, tmp / "overlapping.pt")
    torch.save(
        {
            "w": torch.sparse_coo_tensor(
                torch.zeros(2, 1, dtype=torch.long), torch.ones(1), HUGE, check_invariants=True
            )
        },
        tmp / "sparse.pt",
    )
    header = json.dumps(
        {"logit_scale": {"dtype": "F32", "shape": list(HUGE), "data_offsets": [0, 4]}}
    ).encode()
    header += b" " * (-len(header) % 8)
    (tmp / "huge.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    load, read = "capeval.clip.backbones:load_backbone", "capeval.clip.checkpoints.files:read_state_dict"
    cpu = {"device": "cpu"}
    files = {
        name: tmp / name
        for name in (
            "longclip-B.pt",
            "open_clip_model.pt",
            "clip_ViT-B-32.pth",
            "overlapping.pt",
            "sparse.pt",
        )
    }
    outcomes = run_capped(
        {
            "longclip": (load, [f"longclip:{files['longclip-B.pt']}"], cpu),
            "open_clip": (load, [f"open_clip:ViT-B-32-quickgelu/openai:{files['open_clip_model.pt']}"], cpu),
            "pacs": (load, [str(tiny_clip_dir)], {**cpu, "checkpoint": str(files["clip_ViT-B-32.pth"])}),
            "folder": (load, [str(folder)], cpu),
            "overlapping": (read, [str(files["overlapping.pt"])], {}),
            "sparse": (read, [str(files["sparse.pt"])], {}),
            "safetensors": (read, [str(tmp / "huge.safetensors")], {}),
        }
    )
    return outcomes, tmp


def _refusal(outcomes: dict, case: str) -> str:
    kind, message = outcomes[case]
    assert kind == "ValueError", f"{case}: {kind}: {message}"
    return message


@pytest.mark.skipif(sys.platform != "linux", reason="the address-space cap reads /proc")
def test_a_long_clip_file_declaring_gigabytes_over_one_value_is_refused_naming_file_and_tensor(
    declared_size_outcomes,
):
    outcomes, tmp = declared_size_outcomes
    assert re.search(
        re.escape(str(tmp / "longclip-B.pt")) + ": " + _declaring("logit_scale"),
        _refusal(outcomes, "longclip"),
    )


@pytest.mark.skipif(sys.platform != "linux", reason="the address-space cap reads /proc")
def test_an_open_clip_file_with_an_expanded_tensor_is_refused_before_any_copy(declared_size_outcomes):
    outcomes, tmp = declared_size_outcomes
    message = _refusal(outcomes, "open_clip")
    assert re.search(r"open_clip_model\.pt: tensor 'logit_scale' declares shape \(40000, 32000\), 1,280,000,000 "
                     r"elements \(5\.1 GB as float32\), over a storage of 32,000 element\(s\) \(128\.0 KB\): its "
                     r"strides \(0, 1\) make elements share a place", message)  # fmt: skip


@pytest.mark.skipif(sys.platform != "linux", reason="the address-space cap reads /proc")
def test_a_pacs_checkpoint_declaring_gigabytes_is_refused_naming_the_tensor_under_its_state_dict(
    declared_size_outcomes,
):
    outcomes, _ = declared_size_outcomes
    assert re.search(
        r"clip_ViT-B-32\.pth: " + _declaring("state_dict/logit_scale"), _refusal(outcomes, "pacs")
    )


@pytest.mark.skipif(sys.platform != "linux", reason="the address-space cap reads /proc")
def test_a_model_folders_pytorch_weights_declaring_gigabytes_are_refused_before_transformers_reads_them(
    declared_size_outcomes,
):
    outcomes, _ = declared_size_outcomes
    assert re.search(
        r"bin-model/pytorch_model\.bin: " + _declaring("logit_scale"), _refusal(outcomes, "folder")
    )


@pytest.mark.skipif(sys.platform != "linux", reason="the address-space cap reads /proc")
def test_overlapping_strides_and_sparse_tensors_are_refused_and_safetensors_cannot_declare_more(
    declared_size_outcomes,
):
    outcomes, _ = declared_size_outcomes
    assert re.search(r"overlapping\.pt: tensor 'w' declares shape \(40000, 32000\), 1,280,000,000 elements "
                     r"\(5\.1 GB as float32\), over a storage of 1,312,000 element\(s\) \(5\.2 MB\): its strides "
                     r"\(32, 1\) make elements share a place", _refusal(outcomes, "overlapping"))  # fmt: skip
    assert re.search(
        r"sparse\.pt: tensor 'w' is a sparse_coo tensor of shape \(40000, 32000\); weights are dense tensors",
        _refusal(outcomes, "sparse"),
    )
    # The safetensors reader checks each shape against its byte range before anything is allocated.
    assert re.search(r"huge\.safetensors is truncated or corrupt: not a readable safetensors file .*invalid shape",
                     _refusal(outcomes, "safetensors"))  # fmt: skip


def test_a_tensor_named_under_many_names_is_refused_past_twice_the_file_size(tmp_path):
    from capeval.clip.checkpoints.files import read_state_dict

    shared = torch.zeros(250_000)  # 1 MB, stored once, named eight times
    torch.save({f"w{i}": shared for i in range(8)}, tmp_path / "aliases.pt")
    with pytest.raises(ValueError, match=r"aliases\.pt: its tensors declare 8\.0 MB in all, more than 2 times the "
                       r"file's 1\.0 MB \(largest: 'w0', 1\.0 MB\).*refused before any copy"):  # fmt: skip
        read_state_dict(tmp_path / "aliases.pt")


def test_tied_weights_and_views_over_one_storage_without_repeats_are_read(tmp_path):
    from capeval.clip.checkpoints.files import read_state_dict

    qkv = torch.arange(12.0).reshape(3, 4)
    tied = torch.ones(5, 4)
    torch.save(
        {"q": qkv[0], "k": qkv[1], "v": qkv[2], "t": qkv.t(), "emb": tied, "head": tied}, tmp_path / "ok.pt"
    )
    sd = read_state_dict(tmp_path / "ok.pt")
    assert torch.equal(sd["v"], torch.tensor([8.0, 9.0, 10.0, 11.0])) and torch.equal(sd["t"], qkv.t())
    assert sd["emb"].untyped_storage().data_ptr() == sd["head"].untyped_storage().data_ptr()
