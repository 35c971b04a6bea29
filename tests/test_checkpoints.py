"""PAC-S checkpoints in the authors' layout convert exactly into transformers' CLIPModel, or fail loudly.

The reference is the CLIP authors' own ``clip/model.py`` (PyPI ``openai-clip``, loaded by path) at tiny size
with random weights, saved the way PAC-S files are: ``{"state_dict": model.state_dict()}``.
"""

from __future__ import annotations

import json
import os
import pickle
import warnings
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from capeval.clip.backbones import clear_cache, load_backbone
from capeval.clip.checkpoints.files import read_state_dict
from capeval.clip.checkpoints.layout import (
    CheckpointWarning,
    ClipGeometry,
    base_model_for,
    check_architecture,
    convert_openai_state_dict,
)
from capeval.clip.checkpoints.locate import resolve_checkpoint
from capeval.clip.text_encoding import encode_texts
from capeval.shapes.tiny_clip import build_tiny_clip, tiny_clip_config
from capeval_dev.testing.openai_reference import model_module, openai_tokenize

# Tiny but faithful: widths are multiples of 64 (the authors' head width), so each tower has 2 heads.
WIDTH, LAYERS, IMAGE, PATCH, EMBED = 128, 2, 32, 8, 64
TOLERANCE = 1e-5  # fp32
CAPTIONS = [
    "a red circle on the left",
    "Two dogs play with a frisbee on the beach while a man watches them from far away",
    "a",
]


def build_reference(seed: int = 0, gelu: bool = False, width: int = WIDTH):
    """The authors' CLIP at tiny size; every tensor perturbed so a mis-mapped one cannot go unnoticed."""
    clip_model = model_module()
    torch.manual_seed(seed)
    ref = clip_model.CLIP(EMBED, IMAGE, LAYERS, width, PATCH, 77, 49408, width, width // 64, LAYERS)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    if gelu:  # OpenCLIP's ViT-L-14 (laion2b) is this architecture with nn.GELU instead of QuickGELU
        for block in [*ref.transformer.resblocks, *ref.visual.transformer.resblocks]:
            block.mlp.gelu = torch.nn.GELU()
    return ref.eval()


def target_config(gelu: bool = False, width: int = WIDTH):
    config = tiny_clip_config(
        hidden_size=width,
        layers=LAYERS,
        heads=width // 64,
        image_size=IMAGE,
        patch_size=PATCH,
        projection_dim=EMBED,
    )
    if gelu:
        config.text_config.hidden_act = config.vision_config.hidden_act = "gelu"
    return config


def save_pacs(ref, path: Path, prefix: str = "", **extra) -> Path:
    torch.save({"state_dict": {prefix + k: v for k, v in ref.state_dict().items()}, **extra}, path)
    return path


def reference_text_features(ref, captions, prefix="A photo depicts "):
    ids = openai_tokenize([prefix + c for c in captions])
    tokens = torch.zeros(len(ids), 77, dtype=torch.long)  # clip.tokenize pads with zeros to 77
    for i, row in enumerate(ids):
        tokens[i, : len(row)] = torch.tensor(row)
    with torch.no_grad():
        return ref.encode_text(tokens)


def max_diffs(ref, backbone) -> tuple[float, float, float]:
    """Max |diff| of raw image features, raw text features and capeval's normalised text embeddings."""
    torch.manual_seed(1)
    pixels = torch.randn(6, 3, IMAGE, IMAGE)
    with torch.no_grad():
        img_ref = ref.encode_image(pixels)
        img_hf = backbone.model.get_image_features(pixel_values=pixels).pooler_output
    ids = openai_tokenize(["A photo depicts " + c for c in CAPTIONS])
    longest = max(map(len, ids))
    input_ids = torch.full((len(ids), longest), 49407)
    mask = torch.zeros(len(ids), longest, dtype=torch.long)
    for i, row in enumerate(ids):
        input_ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    txt_ref = reference_text_features(ref, CAPTIONS)
    with torch.no_grad():
        txt_hf = backbone.model.get_text_features(input_ids=input_ids, attention_mask=mask).pooler_output
    normalised = encode_texts(backbone, CAPTIONS, prefix="A photo depicts")
    return (
        float((img_ref - img_hf).abs().max()),
        float((txt_ref - txt_hf).abs().max()),
        float((F.normalize(txt_ref, dim=-1) - normalised).abs().max()),
    )


@pytest.fixture(scope="module")
def reference():
    return build_reference()


@pytest.fixture(scope="module")
def pacs_file(reference, tmp_path_factory) -> Path:
    return save_pacs(reference, tmp_path_factory.mktemp("pacs") / "clip_ViT-tiny.pth", epoch=3)


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory) -> Path:
    """A random transformers CLIP of the reference's architecture (other weights: seed 7)."""
    return build_tiny_clip(tmp_path_factory.mktemp("target"), seed=7, config=target_config())


# Each test's loads are its own (a cached backbone would make a conversion test pass on an earlier load); the
# converted reference that most tests read, ``pacs_backbone``, is loaded once for the module and held by its fixture.
pytestmark = pytest.mark.usefixtures("fresh_backbones")


def load(target, checkpoint, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointWarning)  # random encoders differ from the target's
        return load_backbone(str(target), device="cpu", checkpoint=str(checkpoint), **kw)


@pytest.fixture(scope="module")
def pacs_backbone(pacs_file, target_dir):
    """The target with the reference's PAC-S file loaded over it: read, never changed, by the tests."""
    clear_cache()
    backbone = load(target_dir, pacs_file)
    clear_cache()
    return backbone


def target_with(target_dir: Path, folder: Path, towers=("text_config",), **changes) -> Path:
    """``target_dir``'s weights under another architecture (``config.json``'s ``towers`` changed), the weight files
    linked, not copied."""
    folder.mkdir()
    for item in target_dir.iterdir():
        if item.name != "config.json":
            (folder / item.name).symlink_to(item)
    config = json.loads((target_dir / "config.json").read_text())
    for tower in towers:
        config[tower].update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_openai_layout_converts_exactly_to_the_authors_embeddings(reference, pacs_backbone):
    image, text, normalised = max_diffs(reference, pacs_backbone)
    print(
        f"\nOpenAI layout, fp32: max|diff| image {image:.2e}, text {text:.2e}, normalised text {normalised:.2e}"
    )
    assert image <= TOLERANCE and text <= TOLERANCE and normalised <= TOLERANCE


def test_openclip_gelu_variant_converts_exactly(tmp_path):
    reference = build_reference(seed=3, gelu=True)
    target = build_tiny_clip(tmp_path / "target", seed=7, config=target_config(gelu=True))
    backbone = load(target, save_pacs(reference, tmp_path / "openClip_tiny.pth"))
    image, text, normalised = max_diffs(reference, backbone)
    print(f"\nOpenCLIP (GELU) layout, fp32: max|diff| image {image:.2e}, text {text:.2e}")
    assert image <= TOLERANCE and text <= TOLERANCE and normalised <= TOLERANCE


def test_dataparallel_prefix_and_bare_state_dict_load_the_same_weights(
    reference, pacs_backbone, target_dir, tmp_path
):
    bare = tmp_path / "bare.pt"
    torch.save(reference.state_dict(), bare)
    prefixed = save_pacs(reference, tmp_path / "ddp.pth", prefix="module.")
    want = pacs_backbone.model.state_dict()
    for path in (bare, prefixed):
        clear_cache()
        got = load(target_dir, path).model.state_dict()
        assert all(torch.equal(want[k], got[k]) for k in want)


def test_every_target_tensor_is_replaced_and_position_ids_are_set(pacs_backbone, pacs_file, target_dir):
    before = load_backbone(str(target_dir), device="cpu").model.state_dict()
    model = pacs_backbone.model
    converted = convert_openai_state_dict(read_state_dict(pacs_file))
    after = model.state_dict()
    assert set(after) == set(converted)
    for key, value in after.items():
        assert torch.equal(value, converted[key]), key
        assert not torch.equal(value, before[key]), f"{key} kept the target's own value"
    for name, buf in model.named_buffers():
        assert name.endswith("position_ids")
        assert torch.equal(buf.flatten(), torch.arange(buf.numel()))


def test_fused_attention_is_split_in_q_k_v_order_and_projections_transposed(reference):
    sd = reference.state_dict()
    out = convert_openai_state_dict(sd)
    fused = sd["transformer.resblocks.1.attn.in_proj_weight"]
    for i, name in enumerate("qkv"):
        part = out[f"text_model.encoder.layers.1.self_attn.{name}_proj.weight"]
        assert torch.equal(part, fused[i * WIDTH : (i + 1) * WIDTH])
    assert torch.equal(out["visual_projection.weight"], sd["visual.proj"].t())
    assert torch.equal(out["text_projection.weight"], sd["text_projection"].t())


def test_signature_tag_names_the_files_sha256_prefix(pacs_file, pacs_backbone):
    import hashlib

    digest = hashlib.sha256(pacs_file.read_bytes()).hexdigest()[:12]
    assert pacs_backbone.weights == f"clip_ViT-tiny@sha256:{digest}"


def test_checkpoint_equal_to_the_model_warns_that_scores_equal_clip_s(target_dir, tmp_path):
    from transformers import CLIPModel

    same = tmp_path / "same.pth"
    torch.save({"state_dict": CLIPModel.from_pretrained(target_dir).state_dict()}, same)
    with pytest.warns(CheckpointWarning, match="equal plain CLIP-S"):
        load_backbone(str(target_dir), device="cpu", checkpoint=str(same))


def test_checkpoint_from_another_base_model_warns_about_the_activation(pacs_file, target_dir):
    with pytest.warns(CheckpointWarning, match="activation 'quick_gelu'"):
        load_backbone(str(target_dir), device="cpu", checkpoint=str(pacs_file))


# ------------------------------------------------------------------------------------------ bad inputs


def test_wrong_architecture_names_both_architectures(tmp_path, target_dir):
    wider = save_pacs(build_reference(width=192), tmp_path / "wide.pth")
    with pytest.raises(ValueError, match=r"vision_width 192 vs 128.*text_width 192 vs 128"):
        load(target_dir, wider)


def test_vit_l14_weights_on_a_vit_b32_model_suggest_the_right_base():
    def meta(*shape):
        return torch.empty(shape, device="meta")

    sd = {
        "visual.conv1.weight": meta(1024, 3, 14, 14),
        "visual.positional_embedding": meta(257, 1024),
        "token_embedding.weight": meta(49408, 768),
        "positional_embedding": meta(77, 768),
        "ln_final.weight": meta(768),
        "text_projection": meta(768, 768),
        **{f"visual.transformer.resblocks.{i}.attn.in_proj_weight": meta(1) for i in range(24)},
        **{f"transformer.resblocks.{i}.attn.in_proj_weight": meta(1) for i in range(12)},
    }
    from transformers import CLIPConfig

    vit_b32 = CLIPConfig(
        text_config=dict(hidden_size=512, num_attention_heads=8, intermediate_size=2048),
        vision_config=dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072, patch_size=32),
        projection_dim=512,
    )
    assert ClipGeometry.from_state_dict(sd).name == "ViT-L/14"
    with pytest.raises(ValueError, match=r"is a ViT-L/14 .* model is a ViT-B/32 .*laion/CLIP-ViT-L-14"):
        check_architecture(sd, vit_b32)
    assert base_model_for(ClipGeometry.from_state_dict(sd)) == "laion/CLIP-ViT-L-14-laion2B-s32B-b82K"


def test_missing_and_unknown_tensors_are_named(reference, tmp_path, target_dir):
    sd = dict(reference.state_dict())
    del sd["visual.transformer.resblocks.1.ln_2.bias"]
    with pytest.raises(ValueError, match=r"lacks 1 tensor.*visual.transformer.resblocks.1.ln_2.bias"):
        convert_openai_state_dict(sd)
    sd = {**reference.state_dict(), "visual.transformer.resblocks.0.ls_1.gamma": torch.ones(WIDTH)}
    torch.save({"state_dict": sd}, tmp_path / "extra.pth")
    with pytest.raises(ValueError, match=r"map to nothing.*ls_1.gamma"):
        load(target_dir, tmp_path / "extra.pth")


def test_resnet_clip_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="ResNet CLIP"):
        convert_openai_state_dict({"visual.layer1.0.conv1.weight": torch.zeros(1)})


def test_head_count_other_than_the_authors_is_refused(pacs_file, target_dir, tmp_path):
    target = target_with(target_dir, tmp_path / "four-heads", num_attention_heads=4)
    with pytest.raises(ValueError, match="4 attention heads for width 128"):
        load(target, pacs_file)


def test_truncated_files_are_reported_as_truncated(pacs_file, reference, tmp_path, target_dir):
    legacy = tmp_path / "legacy.pth"
    torch.save({"state_dict": reference.state_dict()}, legacy, _use_new_zipfile_serialization=False)
    for source in (pacs_file, legacy):
        data = source.read_bytes()
        cut = tmp_path / f"cut-{source.name}"
        cut.write_bytes(data[: len(data) // 2])
        with pytest.raises(ValueError, match="truncated or corrupt"):
            load(target_dir, cut)
    (tmp_path / "empty.pth").write_bytes(b"")
    with pytest.raises(ValueError, match="truncated or corrupt"):
        read_state_dict(tmp_path / "empty.pth")


class _RunsCode:
    """Unpickling this calls os.system: the classic malicious checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path, target_dir):
    marker = tmp_path / "code-was-run"
    evil = tmp_path / "evil.pth"
    torch.save({"state_dict": {"x": _RunsCode(marker)}}, evil)
    raw = tmp_path / "raw-pickle.pth"
    raw.write_bytes(pickle.dumps({"state_dict": _RunsCode(marker)}, protocol=2))
    for path in (evil, raw):
        with pytest.raises(
            ValueError, match=r"refused to load .*(posix|os)\.system.*nothing in the file was executed"
        ):
            load(target_dir, path)
    assert not marker.exists()


def test_training_extras_of_plain_data_are_accepted(reference, tmp_path, target_dir):
    path = save_pacs(
        reference, tmp_path / "extras.pth", args=Namespace(lr=1e-4), best=np.float64(0.5), epoch=2
    )
    assert load(target_dir, path).weights.startswith("extras@sha256:")


def test_file_without_state_dict_says_what_it_found(tmp_path):
    torch.save({"weights": [1, 2], "epoch": 3}, tmp_path / "odd.pth")
    with pytest.raises(ValueError, match=r"entry 'weights' is list, not a tensor.*top-level keys"):
        read_state_dict(tmp_path / "odd.pth")


def test_missing_checkpoint_names_where_it_looked(tmp_path, target_dir):
    missing = tmp_path / "nowhere" / "clip_ViT-B-32.pth"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        load(target_dir, missing)
    with pytest.raises(FileNotFoundError, match=r"checkpoints/clip_ViT-B-32.pth.*'org/name/file.pth'"):
        resolve_checkpoint("checkpoints/clip_ViT-B-32.pth")


# ------------------------------------------------------------------------------------------------- Hub


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    """``huggingface_hub.hf_hub_download`` answered from local folders: {repo_id: folder}."""
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    repos: dict[str, Path] = {}
    calls: list[tuple[str, str]] = []

    def hf_hub_download(repo_id, filename, **kwargs):
        calls.append((repo_id, filename))
        if repo_id == "offline/repo":
            raise LocalEntryNotFoundError("not in cache")
        if repo_id not in repos or not (repos[repo_id] / filename).is_file():
            raise EntryNotFoundError(f"{filename} not in {repo_id}")
        return str(repos[repo_id] / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    return repos, calls


def test_hub_file_is_downloaded_and_loaded(fake_hub, pacs_file, target_dir):
    repos, calls = fake_hub
    repos["someone/pacs"] = pacs_file.parent
    backbone = load(target_dir, f"someone/pacs/{pacs_file.name}")
    assert ("someone/pacs", pacs_file.name) in calls
    assert backbone.weights.startswith(f"someone/pacs/{pacs_file.name}@sha256:")


def test_hub_repo_of_a_converted_folder_is_loaded(fake_hub, pacs_backbone, target_dir, tmp_path):
    repos, calls = fake_hub
    converted = tmp_path / "converted"
    pacs_backbone.model.save_pretrained(converted)
    repos["someone/pacs-converted"] = converted
    got = load(target_dir, "someone/pacs-converted").model.state_dict()
    want = pacs_backbone.model.state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert ("someone/pacs-converted", "model.safetensors") in calls


def test_hub_errors_name_repo_file_and_cache(fake_hub, target_dir):
    with pytest.raises(
        FileNotFoundError, match=r"Hub repo 'someone/empty' has no 'clip.pth'.*nor is there a local"
    ):
        load(target_dir, "someone/empty/clip.pth")
    with pytest.raises(
        FileNotFoundError, match=r"'config.json' of Hub repo 'offline/repo' in the local cache"
    ):
        load(target_dir, "offline/repo")


def test_converted_folder_with_other_activation_or_heads_is_refused(target_dir, tmp_path):
    for name, change in (("gelu", {"hidden_act": "gelu"}), ("heads", {"num_attention_heads": 4})):
        # the target's own tensors (same shapes) under another architecture
        converted = target_with(target_dir, tmp_path / name, **change)
        with pytest.raises(ValueError, match=rf"another architecture.*text_config.{next(iter(change))}"):
            load(target_dir, converted)


def test_converted_folder_of_any_head_width_loads_into_its_own_architecture(target_dir, tmp_path):
    config = target_config()
    config.text_config.num_attention_heads = config.vision_config.num_attention_heads = 4  # 32-wide heads
    source = build_tiny_clip(tmp_path / "source", seed=1, config=config)
    both = ("text_config", "vision_config")
    # the same architecture, other weights (the target's, seed 7)
    target = target_with(target_dir, tmp_path / "target", both, num_attention_heads=4)
    from transformers import CLIPModel

    want = CLIPModel.from_pretrained(source).state_dict()
    got = load(target, source).model.state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want)
