"""A model object's weights digest (``model=(model, processor)``), kept per model object until one of its tensors
changes: every way a training loop changes a weight gives the signature of the new weights, two calls on unchanged
weights hash once, the digest is a content hash that no edit keeping sums or XORs of words escapes, what the kept
digest cannot see is pinned, and NaN weights are refused at the first call that meets them, kept digest or not.

The independent reference is ``hash_model_object``, the model object hashed from scratch at the moment of the
check."""

from __future__ import annotations

import copy
import gc
import hashlib

import numpy as np
import pytest
import torch

import capeval
from capeval.clip import model_identity
from capeval.clip.model_identity import hash_model_object, state_digest, state_key
from capeval.shapes import example_items
from capeval.shapes.tiny_clip import build_tiny_clip


@pytest.fixture(scope="module")
def world():
    items = list(example_items(2).values())
    return [it["candidate"] for it in items], [it["image"] for it in items]


@pytest.fixture
def tiny():
    """A tiny random CLIP as a training loop holds it (train mode), given with its tokenizer: its config names
    OpenAI's ViT-B/32, so the image constants come from the origin table."""
    model, tokenizer = build_tiny_clip(seed=7)
    model.config._name_or_path = "openai/clip-vit-base-patch32"
    return model.train(), tokenizer


@pytest.fixture
def hashes(monkeypatch):
    """Counts the times the weights are hashed from scratch (sha256 and the NaN/inf check)."""
    calls = []
    real = model_identity.state_digest

    def counting(state, where):
        calls.append(where)
        return real(state, where)

    monkeypatch.setattr(model_identity, "state_digest", counting)
    return calls


def revision(result: dict) -> str:
    return result["signature"].split("|")[1].rsplit("@", 1)[1]


# --- Unchanged weights: hashed once ---


def test_two_calls_on_unchanged_weights_hash_once(tiny, world, hashes):
    captions, images = world
    scorer = capeval.CLIPScore(model=tiny)
    first = scorer(captions, images=images)
    again = scorer(captions, images=images)
    assert again == first
    assert len(hashes) == 1
    assert revision(first) == hash_model_object(*tiny, "model")


def test_the_kept_hash_belongs_to_the_model_object_not_to_the_metric(tiny, world, hashes):
    captions, images = world
    a = capeval.CLIPScore(model=tiny)(captions, images=images)
    b = capeval.RefCLIPScore(model=tiny)(captions, [[c] for c in captions], images=images)
    assert len(hashes) == 1
    assert revision(a) == revision(b)


def test_an_equal_copy_is_hashed_on_its_own_and_gets_the_same_signature(tiny, world, hashes):
    captions, images = world
    model, tokenizer = tiny
    twin = copy.deepcopy(model)
    a = capeval.CLIPScore(model=(model, tokenizer))(captions, images=images)
    b = capeval.CLIPScore(model=(twin, tokenizer))(captions, images=images)
    assert len(hashes) == 2
    assert a["signature"] == b["signature"]


# --- Changed weights: hashed again, the signature names the new weights ---


def _optimizer_step(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model.visual_projection.weight.square().sum() + model.text_projection.weight.sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def _load_state_dict(model):
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["text_projection.weight"] += 0.5
    model.load_state_dict(state)


def _copy_through_data(model):
    weight = model.visual_projection.weight
    weight.data.copy_(torch.randn_like(weight))


def _add_under_no_grad(model):
    with torch.no_grad():
        model.visual_projection.weight.add_(1)


def _replace_the_parameter(model):
    old = model.visual_projection.weight
    model.visual_projection.weight = torch.nn.Parameter(old.detach().clone() * 2)


def _ema_update_through_data(model):
    for p in model.parameters():
        p.data.mul_(0.99).add_(torch.ones_like(p), alpha=0.01)


def _fill_ones_through_data(model):
    # A LayerNorm weight of ones turned into twos: the same change at an even number of places.
    norm = model.vision_model.post_layernorm.weight
    assert bool((norm == 1).all()) and norm.numel() % 2 == 0
    norm.data.fill_(2.0)


def _write_through_numpy(model):
    model.text_projection.weight.detach().numpy()[0, 0] += 1.0


def _fused_optimizer_step(model):
    # torch's fused kernels write the parameters without bumping their version counters: the probe sees the step.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, fused=True)
    before = model.visual_projection.weight._version
    loss = model.visual_projection.weight.square().sum() + model.text_projection.weight.sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    assert model.visual_projection.weight._version == before


def _vector_to_parameters(model):
    # ``param.data = ...`` for every parameter: new storages, version counters as they were.
    vector = torch.nn.utils.parameters_to_vector(model.parameters())
    torch.nn.utils.vector_to_parameters(vector + 0.01, model.parameters())


def _sum_and_xor_kept_through_an_int32_view(model):
    # (a, b) -> (a | b, a & b) on two words of the raw bytes: a + b and a ^ b are unchanged, the weights are not.
    with torch.no_grad():
        words = model.visual_projection.weight.view(torch.int32).reshape(-1)
        a, b = words[0].clone(), words[1].clone()
        assert a != b
        words[0], words[1] = a | b, a & b


def _sum_and_xor_kept_through_data(model):
    # The same edit on the first and last words, through .data: no version counter sees it, the probe does.
    words = model.text_projection.weight.data.view(torch.int32).reshape(-1)
    a, b = words[0].clone(), words[-1].clone()
    assert a != b
    words[0], words[-1] = a | b, a & b


def _permute_in_place(model):
    # Values moved, none changed: sum and XOR are the same; the version counter is not.
    with torch.no_grad():
        weight = model.visual_projection.weight
        weight.copy_(weight.flip(0))


CHANGES = [
    _optimizer_step,
    _load_state_dict,
    _copy_through_data,
    _add_under_no_grad,
    _replace_the_parameter,
    _ema_update_through_data,
    _fill_ones_through_data,
    _write_through_numpy,
    _permute_in_place,
    _fused_optimizer_step,
    _vector_to_parameters,
    _sum_and_xor_kept_through_an_int32_view,
    _sum_and_xor_kept_through_data,
]


@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__.lstrip("_") for c in CHANGES])
def test_every_way_of_changing_a_weight_gives_the_new_weights_signature(tiny, world, hashes, change):
    captions, images = world
    model, _ = tiny
    scorer = capeval.CLIPScore(model=tiny)
    before = scorer(captions, images=images)
    change(model)
    after = scorer(captions, images=images)
    assert len(hashes) == 2
    assert revision(after) != revision(before)
    assert revision(after) == hash_model_object(*tiny, "model")


def test_the_version_counter_misses_writes_through_data_and_the_probe_sees_them(tiny, world, hashes):
    model, _ = tiny
    weight = model.visual_projection.weight
    scorer = capeval.CLIPScore(model=tiny)
    before = scorer(*world[:1], images=world[1])
    key, version = state_key(model.state_dict(keep_vars=True)), weight._version
    weight.data.mul_(0.99).add_(0.01)  # an EMA update written through .data
    assert weight._version == version and state_key(model.state_dict(keep_vars=True)) == key
    after = scorer(*world[:1], images=world[1])
    assert len(hashes) == 2
    assert revision(after) == hash_model_object(*tiny, "model") != revision(before)


def test_the_weights_digest_is_a_content_hash_that_an_edit_keeping_sums_and_xors_changes():
    module = torch.nn.Module()
    module.register_buffer("words", torch.tensor([0b1100, 0b1010, 7, 9], dtype=torch.int32))
    before = state_digest(module.state_dict(), "m")
    a, b = module.words[0].item(), module.words[1].item()
    module.words.data[:2] = torch.tensor([a | b, a & b], dtype=torch.int32)  # 14, 8: sum 22, xor 6 as before
    assert int(module.words.sum()) == 0b1100 + 0b1010 + 16
    assert int(module.words[0] ^ module.words[1]) == a ^ b
    after = state_digest(module.state_dict(), "m")
    assert after != before
    assert (
        after
        == hashlib.sha256(
            b"words|torch.int32|(4,)\n" + np.array([14, 8, 7, 9], dtype="<i4").tobytes()
        ).hexdigest()
    )


def test_a_tensor_replaced_by_another_object_on_the_same_storage_is_hashed_again(tiny, world, hashes):
    # The new parameter has the old one's address, storage and version: only the object differs, which is what a
    # tensor allocated where a freed one was looks like; its dead weak reference says the digest is not its own.
    captions, images = world
    model, _ = tiny
    scorer = capeval.CLIPScore(model=tiny)
    first = scorer(captions, images=images)
    old = model.visual_projection.weight
    model.visual_projection.weight = torch.nn.Parameter(old.detach())
    del old
    gc.collect()
    again = scorer(captions, images=images)
    assert len(hashes) == 2
    assert again["signature"] == first["signature"]  # the same bytes: the same digest, read again


def test_a_write_that_neither_the_counter_nor_the_probe_sees_keeps_the_old_revision(tiny, world, hashes):
    # The documented limit: a few values written through .data between probed elements. Written through the
    # parameter under torch.no_grad(), the same change is seen.
    captions, images = world
    model, _ = tiny
    weight = model.visual_projection.weight
    scorer = capeval.CLIPScore(model=tiny)
    first = scorer(captions, images=images)
    assert weight.numel() > 64 and weight.reshape(-1)[1] != 0  # element 1 is not probed (module docstring)
    weight.data.view(-1)[1] = 0.0
    stale = scorer(captions, images=images)
    assert len(hashes) == 1
    assert stale["signature"] == first["signature"]
    with torch.no_grad():
        weight.view(-1)[1] = 0.0
    seen = scorer(captions, images=images)
    assert len(hashes) == 2
    assert revision(seen) == hash_model_object(*tiny, "model") != revision(stale)


def test_the_probe_reads_the_first_and_last_element_of_every_tensor():
    module = torch.nn.Module()
    module.register_buffer("odd", torch.zeros(1001, dtype=torch.float16))
    module.register_buffer("small", torch.zeros(3, dtype=torch.bfloat16))
    tensors = lambda: list(module.state_dict(keep_vars=True).values())  # noqa: E731
    start = model_identity._probe(tensors())
    for name, index in (("odd", 0), ("odd", 1000), ("small", 2)):
        getattr(module, name).data[index] = 1.0
        changed = model_identity._probe(tensors())
        assert changed != start, (name, index)
        start = changed


def test_tensors_without_a_version_counter_are_hashed_at_every_call(world, hashes):
    # Made under torch.inference_mode(): no version counter, so nothing is kept rather than something unsure.
    captions, images = world
    with torch.inference_mode():
        model, tokenizer = build_tiny_clip(seed=7)
    model.config._name_or_path = "openai/clip-vit-base-patch32"
    assert state_key(model.state_dict(keep_vars=True)) is None
    scorer = capeval.CLIPScore(model=(model, tokenizer))
    first = scorer(captions, images=images)
    again = scorer(captions, images=images)
    assert len(hashes) == 2
    assert again["signature"] == first["signature"]
    revision_now = hash_model_object(model, tokenizer, "m")
    assert (
        first["signature"].split("|")[1]
        == f"model=memory:CLIPModel(openai/clip-vit-base-patch32)@{revision_now}"
    )


# --- NaN weights: refused whenever they appear ---


def _nan_through_data(model):
    model.text_projection.weight.data[0, 0] = float("nan")


def _nan_under_no_grad(model):
    with torch.no_grad():
        model.text_projection.weight[0, 0] = float("nan")


@pytest.mark.parametrize("poison", [_nan_through_data, _nan_under_no_grad], ids=["data", "no_grad"])
def test_a_weight_turned_nan_after_a_kept_hash_is_refused(tiny, world, poison):
    captions, images = world
    model, _ = tiny
    scorer = capeval.CLIPScore(model=tiny)
    scorer(captions, images=images)
    poison(model)
    with pytest.raises(ValueError, match=r"text_projection\.weight \(1 of"):
        scorer(captions, images=images)


def test_a_refused_state_is_not_kept_and_a_repaired_one_scores(tiny, world, hashes):
    captions, images = world
    model, _ = tiny
    scorer = capeval.CLIPScore(model=tiny)
    good = scorer(captions, images=images)
    saved = model.text_projection.weight[0, 0].item()
    _nan_under_no_grad(model)
    for _ in range(2):  # refused at each call, never from a kept answer
        with pytest.raises(
            ValueError, match=r"holds NaN or inf in 1 tensor\(s\): text_projection\.weight \(1 of"
        ):
            scorer(captions, images=images)
    with torch.no_grad():
        model.text_projection.weight[0, 0] = saved
    repaired = scorer(captions, images=images)
    assert len(hashes) == 4
    assert repaired["signature"] == good["signature"]


def test_kept_hashes_go_with_their_model_object(world):
    captions, images = world
    model, tokenizer = build_tiny_clip(seed=8)
    model.config._name_or_path = "openai/clip-vit-base-patch32"
    capeval.CLIPScore(model=(model, tokenizer))(captions, images=images)
    kept = len(model_identity._KEPT_WEIGHTS)
    del model
    gc.collect()
    assert len(model_identity._KEPT_WEIGHTS) == kept - 1
