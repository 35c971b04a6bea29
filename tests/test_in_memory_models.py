"""model= given a model object with its processor (the model being trained): scored as it is at each call, with
its modes left as found, no backbone cached, its weights named in the signature as they are at each call (the
hash kept per model object until a tensor changes: test_model_object_identity).

The independent reference is the model itself: its own processor and raw ``get_image_features`` /
``get_text_features`` calls in eval mode, and the same weights loaded from a folder by name."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F

import capeval
from capeval.clip.backbones import _CACHE, load_backbone
from capeval.shapes import example_items, shapes_clip_path
from capeval.shapes.tiny_clip import build_clip_tokenizer, build_tiny_clip
from tests.threads import run_together

PREFIX = "A photo depicts"


@pytest.fixture(scope="module")
def world():
    items = list(example_items(6).values())
    return {
        "images": [it["image"] for it in items],
        "captions": [it["candidate"] for it in items],
        "references": [it["references"] for it in items],
    }


@pytest.fixture
def shapes_model():
    """The shapes CLIP as a training loop holds it: float32, in train mode, with its processor."""
    from transformers import CLIPModel, CLIPProcessor

    path = str(shapes_clip_path())
    model = CLIPModel.from_pretrained(path, dtype=torch.float32).train()
    return model, CLIPProcessor.from_pretrained(path)


def raw_clip_s(model, processor, captions, images, w=2.5):
    """CLIP-S from the model's own processor and raw feature calls (eval mode), as a user would compute it."""
    model.eval()
    with torch.no_grad():
        inputs = processor(
            text=[f"{PREFIX} {c}" for c in captions], images=images, return_tensors="pt", padding=True
        )
        image = model.get_image_features(pixel_values=inputs["pixel_values"])
        text = model.get_text_features(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    image = getattr(image, "pooler_output", image)
    text = getattr(text, "pooler_output", text)
    return (w * F.cosine_similarity(image, text).clamp(min=0)).tolist()


def modes(model):
    return [m.training for m in model.modules()]


def test_model_object_scores_equal_its_own_processor_and_raw_calls(shapes_model, world):
    model, processor = shapes_model
    model.vision_model.encoder.train(False)  # a mixed state, to see every submodule's mode given back
    before = modes(model)
    out = capeval.CLIPScore(model=(model, processor))(world["captions"], images=world["images"])
    assert modes(model) == before
    assert all(p.grad is None for p in model.parameters())
    assert all(p.requires_grad for p in model.parameters())
    reference = raw_clip_s(model, processor, world["captions"], world["images"])
    assert out["scores"] == pytest.approx(reference, abs=1e-5)


def test_model_object_equals_the_same_weights_loaded_from_their_folder(shapes_model, world):
    model, processor = shapes_model
    by_name = capeval.CLIPScore(model=str(shapes_clip_path()))(world["captions"], images=world["images"])
    by_object = capeval.CLIPScore(model=(model, processor))(world["captions"], images=world["images"])
    assert by_object["scores"] == pytest.approx(by_name["scores"], abs=1e-6)
    name_field = by_object["signature"].split("|")[1]
    assert name_field.startswith(
        "model=memory:CLIPModel(shapes-clip)@state-sha256:"
    )  # the folder by name only
    # Everything after the model field is the same: prompt, w, dtype.
    assert by_object["signature"].split("|")[2:] == by_name["signature"].split("|")[2:]


def test_three_item_form_equals_processor_form(shapes_model, world):
    model, processor = shapes_model
    a = capeval.CLIPScore(model=(model, processor))(world["captions"], images=world["images"])
    b = capeval.CLIPScore(model=(model, processor.tokenizer, processor.image_processor))(
        world["captions"], images=world["images"]
    )
    assert a == b


def test_changed_weights_change_the_signature_and_no_backbone_is_cached(shapes_model, world):
    model, processor = shapes_model
    cached = len(_CACHE)
    scorer = capeval.CLIPScore(model=(model, processor))
    first = scorer(world["captions"], images=world["images"])
    again = scorer(world["captions"], images=world["images"])
    assert again == first  # same weights: same numbers, same hash
    with torch.no_grad():  # one optimiser-like step on the image projection
        model.visual_projection.weight.add_(0.05 * torch.randn_like(model.visual_projection.weight))
    after = scorer(world["captions"], images=world["images"])
    assert after["signature"] != first["signature"]
    assert after["scores"] == pytest.approx(
        raw_clip_s(model, processor, world["captions"], world["images"]), abs=1e-5
    )
    assert max(abs(a - b) for a, b in zip(after["scores"], first["scores"], strict=True)) > 1e-3
    assert len(_CACHE) == cached
    assert load_backbone((model, processor)) is not load_backbone((model, processor))


# --- One model object scored from several threads at once ---


def test_concurrent_calls_run_in_eval_mode_and_give_the_modes_back_once(shapes_model, world):
    model, processor = shapes_model
    model.vision_model.encoder.train(False)  # a mixed state: every submodule must get its own mode back
    before = modes(model)
    seen: list[bool] = []
    hooks = [
        m.register_forward_pre_hook(lambda module, args: seen.append(module.training))
        for m in model.modules()
    ]
    scorer = capeval.CLIPScore(model=(model, processor))
    expected = scorer(world["captions"][:2], images=world["images"][:2])["scores"]
    try:
        for _ in range(30):
            results = run_together(lambda: scorer(world["captions"][:2], images=world["images"][:2]), n=4)
            assert modes(model) == before
            for result in results:
                assert not isinstance(result, Exception), result
                assert result["scores"] == pytest.approx(expected, abs=1e-6)
    finally:
        for hook in hooks:
            hook.remove()
    assert seen and not any(seen)  # no forward, in any thread, ran a submodule in train mode


def test_same_weights_in_two_objects_give_one_hash(shapes_model, world):
    model, processor = shapes_model
    twin = copy.deepcopy(model).eval()
    a = capeval.CLIPScore(model=(model, processor))(world["captions"][:2], images=world["images"][:2])
    b = capeval.CLIPScore(model=(twin, processor))(world["captions"][:2], images=world["images"][:2])
    assert a["signature"] == b["signature"]


def test_refclipscore_and_emscore_take_model_objects(shapes_model, world):
    model, processor = shapes_model
    path = str(shapes_clip_path())
    ref_obj = capeval.RefCLIPScore(model=(model, processor))(
        world["captions"], world["references"], images=world["images"]
    )
    ref_path = capeval.RefCLIPScore(model=path)(
        world["captions"], world["references"], images=world["images"]
    )
    assert ref_obj["scores"] == pytest.approx(ref_path["scores"], abs=1e-6)
    em_obj = capeval.EMScore(model=(model, processor))(world["captions"], world["references"])
    em_path = capeval.EMScore(model=path)(world["captions"], world["references"])
    assert em_obj["variant"] == "EMScore(X,X*)"
    assert em_obj["scores"] == pytest.approx(em_path["scores"], abs=1e-6)


def test_other_families_as_model_objects(tmp_path, world):
    import transformers as tf

    from capeval_dev.testing.tiny_families import build_tiny_family

    folder = build_tiny_family("siglip", tmp_path / "siglip")
    model = tf.SiglipModel.from_pretrained(str(folder), dtype=torch.float32).train()
    processor = tf.AutoProcessor.from_pretrained(str(folder))
    by_object = capeval.CLIPScore(model=(model, processor))(world["captions"], images=world["images"])
    by_name = capeval.CLIPScore(model=str(folder))(world["captions"], images=world["images"])
    assert by_object["scores"] == pytest.approx(by_name["scores"], abs=1e-6)
    assert "family=siglip" in by_object["signature"]
    assert model.training


def test_tokenizer_alone_for_a_clip_of_known_origin(world):
    # A CLIPModel whose config says it started from OpenAI's ViT-B/32: its constants are in the origin table.
    model, tokenizer = build_tiny_clip(seed=3)
    model.config._name_or_path = "openai/clip-vit-base-patch32"
    backbone = load_backbone((model, tokenizer))
    assert backbone.origin == "openai/clip-vit-base-patch32"
    assert backbone.image_mean == pytest.approx((0.48145466, 0.4578275, 0.40821073))
    assert backbone.image_size == model.config.vision_config.image_size
    model.config._name_or_path = "my-run/step-1000"
    with pytest.raises(ValueError, match="without an image processor"):
        load_backbone((model, tokenizer))


def test_known_origin_wins_over_a_processor_that_disagrees_with_a_warning():
    from transformers import CLIPImageProcessorPil

    from capeval.diagnostics.categories import ImageConstantsWarning

    model, tokenizer = build_tiny_clip(seed=4)
    size = model.config.vision_config.image_size
    model.config._name_or_path = "laion/CLIP-ViT-L-14-laion2B-s32B-b82K"  # trained with 0.5/0.5 (open_clip)
    images = CLIPImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    with pytest.warns(ImageConstantsWarning, match="using the latter"):
        backbone = load_backbone((model, tokenizer, images))
    assert backbone.image_mean == (0.5, 0.5, 0.5)


def test_bad_forms_are_refused_by_name(shapes_model):
    model, processor = shapes_model
    with pytest.raises(TypeError, match="without what prepares its inputs"):
        capeval.CLIPScore(model=model)
    with pytest.raises(TypeError, match="of 4 items"):
        capeval.CLIPScore(model=(model, processor, processor, processor))
    with pytest.raises(TypeError, match="first item must be the loaded model"):
        capeval.CLIPScore(model=(processor, model))
    with pytest.raises(TypeError, match="neither a tokenizer nor a processor"):
        capeval.CLIPScore(model=(model, "openai/clip-vit-base-patch32"))
    with pytest.raises(TypeError, match="third item must be a transformers image processor"):
        capeval.CLIPScore(model=(model, processor.tokenizer, processor.tokenizer))
    with pytest.raises(ValueError, match="'clip_text_model': not a dual encoder capeval knows"):
        capeval.CLIPScore(model=(model.text_model, processor))

    class Wrapper(torch.nn.Module):  # a training module that keeps the CLIP and its config
        def __init__(self):
            super().__init__()
            self.clip, self.config = model, model.config

    with pytest.raises(
        ValueError, match="the object is a Wrapper, not a CLIPModel; pass the whole dual encoder"
    ):
        capeval.CLIPScore(model=(Wrapper(), processor))


def test_the_model_is_not_moved_or_cast(shapes_model):
    model, processor = shapes_model
    with pytest.raises(ValueError, match="holds float32 weights but dtype='float16'"):
        capeval.CLIPScore(model=(model, processor), dtype="float16")
    half = copy.deepcopy(model).half()
    with pytest.raises(ValueError, match="pass dtype='float16'"):
        capeval.CLIPScore(model=(half, processor))
    assert capeval.CLIPScore(model=(half, processor), dtype="float16").backbone.dtype == torch.float16
    assert capeval.CLIPScore(model=(model, processor), device="cpu").backbone.device == torch.device("cpu")
    assert next(half.parameters()).dtype == torch.float16


def test_a_processor_that_does_not_resize_as_clip_is_refused():
    from transformers import CLIPImageProcessorPil

    model, tokenizer = build_tiny_clip(seed=5)
    size = model.config.vision_config.image_size
    squash = CLIPImageProcessorPil(size={"height": size, "width": size}, do_center_crop=False)
    with pytest.raises(ValueError, match="not as CLIP does"):
        load_backbone((model, tokenizer, squash))


def test_nan_weights_are_refused_at_the_call_that_meets_them(shapes_model, world):
    model, processor = shapes_model
    scorer = capeval.CLIPScore(model=(model, processor))
    with torch.no_grad():
        model.text_projection.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"text_projection\.weight \(1 of"):
        scorer(world["captions"][:1], images=world["images"][:1])


def test_pacs_checkpoints_and_corpus_runs_refuse_model_objects(shapes_model, tmp_path):
    model, processor = shapes_model
    with pytest.raises(ValueError, match="checkpoint= replaces a model's weights"):
        load_backbone((model, processor), checkpoint="clip_ViT-B-32.pth")
    with pytest.raises(TypeError, match="a model object cannot be resumed"):
        capeval.score_corpus(str(tmp_path / "corpus.jsonl"), str(tmp_path / "out"), model=(model, processor))


def test_evaluate_module_with_a_model_object_adds_combines_and_pickles(shapes_model, world, repo_root):
    import evaluate

    model, processor = shapes_model
    expected = capeval.CLIPScore(model=(model, processor))(world["captions"], images=world["images"])
    module = evaluate.load(str(repo_root / "metrics" / "clipscore"))
    module.add_batch(predictions=world["captions"][:3], images=world["images"][:3])
    module.add_batch(predictions=world["captions"][3:], images=world["images"][3:])
    streamed = module.compute(model=(model, processor))
    assert streamed["scores"] == pytest.approx(expected["scores"], abs=1e-6)
    assert streamed["signature"] == expected["signature"]
    loaded = evaluate.load(str(repo_root / "metrics" / "clipscore"), model=(model, processor))
    copied = pickle.loads(pickle.dumps(loaded))  # evaluate keeps modules picklable: the model travels with it
    out = copied.compute(predictions=world["captions"], images=world["images"])
    assert out["scores"] == pytest.approx(expected["scores"], abs=1e-6)
    assert out["signature"] == expected["signature"]  # an equal copy of the weights: the same hash


def test_torchmetrics_metric_with_a_model_object(shapes_model, world):
    pytest.importorskip("torchmetrics")
    from capeval import torchmetrics as tm

    model, processor = shapes_model
    metric = tm.CLIPScore(model=(model, processor))
    metric.update(world["captions"][:4], images=world["images"][:4])
    metric.update(world["captions"][4:], images=world["images"][4:])
    expected = capeval.CLIPScore(model=(model, processor))(world["captions"], images=world["images"])
    assert float(metric.compute()) == pytest.approx(expected["clipscore"], abs=1e-6)
    clone = copy.deepcopy(metric)
    assert float(clone.compute()) == pytest.approx(expected["clipscore"], abs=1e-6)


def test_build_clip_tokenizer_is_the_tiny_clips_tokenizer():
    # The tokenizer-only form is checked as folders' tokenizers are: it must fit the model's vocabulary.
    model, _ = build_tiny_clip(seed=6)
    model.config._name_or_path = "openai/clip-vit-base-patch32"
    assert (
        load_backbone((model, build_clip_tokenizer())).context_length
        == model.config.text_config.max_position_embeddings
    )
