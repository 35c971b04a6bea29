"""Long-CLIP's own checkpoint files as a base model=: ``longclip:/path/longclip-B.pt``.

Independent reference: the CLIP authors' clip/model.py ``build_model`` (openai-clip 1.0.1) on the same state dict,
its text positions summed as Long-CLIP's ``model/model_longclip.py`` ``CLIP.encode_text`` sums them (commit
3966af9 of github.com/beichenzbc/Long-CLIP: ``positional_embedding * mask1 + positional_embedding_res * mask2``,
mask1 the first 20 positions, mask2 the other 228), with transformers' CLIP image processor for the pixels and the
authors' tokenizer at 248 positions for the token ids. The file is written as Long-CLIP saves its releases:
``torch.save`` of the state dict, OpenAI's names plus ``positional_embedding_res``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import capeval
from capeval.clip.backbones import load_backbone
from capeval.clip.image_constants import OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD
from capeval.shapes import example_items
from capeval.shapes.tiny_clip import build_clip_tokenizer, save_clip_folder, tiny_clip_config
from capeval_dev.perf.models import mix_shared_component
from capeval_dev.testing.open_clip_layout import open_clip_state_dict

PREFIX = "A photo depicts"
POSITIONS = 248  # Long-CLIP's text context (model_longclip.py: self.context_length = 248)
LONG = "a red circle on the left of a blue square " * 16  # about 160 tokens: past CLIP's 77


@pytest.fixture(scope="module")
def world():
    items = list(example_items(4).values())
    return [it["image"] for it in items], [it["candidate"] for it in items[:3]] + [LONG]


def _fp16_exact(t: torch.Tensor) -> torch.Tensor:
    # The authors' build_model casts weights to fp16 (convert_weights): values fp16 holds keep both on one number.
    return t.half().float()


@pytest.fixture(scope="module")
def longclip_file(tmp_path_factory):
    """A random tiny Long-CLIP saved in the authors' format, OpenAI's tokenizer files beside it."""
    from transformers import CLIPModel

    config = tiny_clip_config(
        hidden_size=128, heads=2, layers=2, image_size=32, patch_size=8, projection_dim=32
    )
    config.text_config.max_position_embeddings = POSITIONS
    torch.manual_seed(0)
    model = CLIPModel(config).eval()
    mix_shared_component(model)  # positive cosines that vary by pair: CLIP-S is not clipped to 0 everywhere
    model = model.half().float()
    sd = open_clip_state_dict(model)
    gen = torch.Generator().manual_seed(1)
    sd["positional_embedding"] = _fp16_exact(torch.randn(POSITIONS, 128, generator=gen) * 0.5)
    sd["positional_embedding_res"] = _fp16_exact(torch.randn(POSITIONS, 128, generator=gen) * 0.5)
    folder = tmp_path_factory.mktemp("longclip")
    torch.save(sd, folder / "longclip-B.pt")
    build_clip_tokenizer().save_pretrained(folder)
    return folder / "longclip-B.pt", sd


def reference_clip_s(
    sd: dict, captions: list[str], images: list, positions: str = "long-clip"
) -> list[float]:
    """CLIP-S from the authors' model with Long-CLIP's position rule (or, ``"first-table"``, a conversion that
    kept ``positional_embedding`` alone)."""
    from transformers import CLIPImageProcessorPil

    from capeval_dev.testing.openai_reference import model_module, openai_tokenize

    mask1 = torch.zeros(POSITIONS, 1)
    mask1[:20] = 1
    mask2 = 1 - mask1
    state = {k: v.clone() for k, v in sd.items() if k != "positional_embedding_res"}
    if positions == "long-clip":
        state["positional_embedding"] = (
            sd["positional_embedding"] * mask1 + sd["positional_embedding_res"] * mask2
        )
    ref = model_module().build_model(state).float().eval()
    size = ref.visual.input_resolution
    processor = CLIPImageProcessorPil(
        size={"shortest_edge": size}, crop_size={"height": size, "width": size},
        image_mean=list(OPENAI_IMAGE_MEAN), image_std=list(OPENAI_IMAGE_STD),
    )  # fmt: skip
    pixels = processor(images=images, return_tensors="pt")["pixel_values"]
    ids = openai_tokenize([f"{PREFIX} {c}" for c in captions], context_length=POSITIONS)
    tokens = torch.zeros(len(ids), POSITIONS, dtype=torch.long)
    for row, x in enumerate(ids):
        tokens[row, : len(x)] = torch.tensor(x)
    with torch.no_grad():
        image, text = ref.encode_image(pixels), ref.encode_text(tokens)
    return (2.5 * F.cosine_similarity(image, text).clamp(min=0)).tolist()


# --- Scores equal the authors' model, on all 248 positions ---------------------------------------------


def test_scores_equal_the_authors_model_with_long_clips_position_rule(longclip_file, world):
    path, sd = longclip_file
    images, captions = world
    out = capeval.CLIPScore(model=f"longclip:{path}", progress=False)(captions, images=images)
    assert out["scores"] == pytest.approx(reference_clip_s(sd, captions, images), abs=1e-5)
    assert min(out["scores"]) > 0.1  # scores that mean something, not cosines clipped to 0
    assert out["signature"].split("|")[1].startswith("model=longclip:longclip-B.pt@sha256:")


def test_a_caption_past_77_tokens_is_read_on_all_its_positions(longclip_file, world):
    path, _ = longclip_file
    backbone = load_backbone(f"longclip:{path}")
    assert backbone.context_length == POSITIONS
    ids = backbone.tokenizer(f"{PREFIX} {LONG}")["input_ids"]
    assert 77 < len(ids) < POSITIONS


def test_keeping_the_first_table_alone_scores_differently(longclip_file, world):
    """Why the authors' file is the reference for a converted folder: the wrong rule moves every score."""
    path, sd = longclip_file
    images, captions = world
    ours = capeval.CLIPScore(model=f"longclip:{path}", progress=False)(captions, images=images)["scores"]
    wrong = reference_clip_s(sd, captions, images, positions="first-table")
    assert max(abs(a - b) for a, b in zip(ours, wrong, strict=True)) > 1e-3


def test_a_transformers_folder_converted_with_the_rule_equals_the_file(longclip_file, world, tmp_path):
    path, _ = longclip_file
    images, captions = world
    from capeval.clip.backbones import load_backbone

    converted = load_backbone(
        f"longclip:{path}", device="cpu"
    ).model  # the file's tensors, in transformers' names
    folder = save_clip_folder(converted, build_clip_tokenizer(), tmp_path)
    from_file = capeval.CLIPScore(model=f"longclip:{path}", progress=False)(captions, images=images)
    from_folder = capeval.CLIPScore(model=str(folder), progress=False)(captions, images=images)
    assert from_folder["scores"] == pytest.approx(from_file["scores"], abs=1e-6)


# --- Refusals name the file and what to do ---------------------------------------------------------------


def test_a_bare_long_clip_file_is_refused_with_the_spelling_to_use(longclip_file):
    path, _ = longclip_file
    with pytest.raises(ValueError, match="is a Long-CLIP checkpoint .*model='longclip:"):
        load_backbone(str(path))


def test_a_file_without_the_second_table_is_not_a_long_clip_file(longclip_file, tmp_path):
    _, sd = longclip_file
    plain = {k: v for k, v in sd.items() if k != "positional_embedding_res"}
    torch.save(plain, tmp_path / "plain.pt")
    with pytest.raises(ValueError, match="no positional_embedding_res: not a Long-CLIP checkpoint"):
        load_backbone(f"longclip:{tmp_path / 'plain.pt'}")


def test_tables_of_different_shapes_are_refused_naming_both(longclip_file, tmp_path):
    _, sd = longclip_file
    torch.save({**sd, "positional_embedding_res": sd["positional_embedding_res"][:100]}, tmp_path / "bad.pt")
    with pytest.raises(
        ValueError, match=r"positional_embedding \(248, 128\) and positional_embedding_res \(100, 128\)"
    ):
        load_backbone(f"longclip:{tmp_path / 'bad.pt'}")


@pytest.mark.parametrize(
    ("model", "error", "message"),
    [
        ("longclip:", ValueError, "named 'longclip:/path/to/longclip-B.pt'"),
        ("longclip:/no/such/longclip-B.pt", FileNotFoundError, "no Long-CLIP file at"),
    ],
)
def test_a_spec_without_a_file_is_refused(model, error, message):
    with pytest.raises(error, match=message):
        load_backbone(model)


def test_pac_s_weights_cannot_replace_a_long_clip_model(longclip_file):
    path, _ = longclip_file
    with pytest.raises(ValueError, match="whole Long-CLIP model"):
        load_backbone(f"longclip:{path}", checkpoint="x.pth")


def test_pickled_objects_beyond_tensors_are_refused_unrun(tmp_path):
    import collections

    torch.save({"positional_embedding": torch.zeros(2), "extra": collections.Counter()}, tmp_path / "evil.pt")
    with pytest.raises(ValueError, match="longclip|Long-CLIP|state dict"):
        load_backbone(f"longclip:{tmp_path / 'evil.pt'}")


def test_a_command_checks_a_long_clip_spec_before_any_work(longclip_file, tmp_path):
    from capeval.clip.model_sources import model_unavailable

    path, _ = longclip_file
    assert model_unavailable(f"longclip:{path}") is None
    assert "no Long-CLIP file at" in model_unavailable(f"longclip:{tmp_path / 'none.pt'}")
