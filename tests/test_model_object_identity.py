"""A model object's weights hash (``model=(model, processor)``), kept per model object until one of its tensors
changes: every way a training loop changes a weight gives the signature of the new weights, two calls on unchanged
weights hash once, and NaN weights are refused at the first call that meets them, kept hash or not.

The independent reference is ``hash_weights``, the weights hashed from scratch at the moment of the check."""

from __future__ import annotations

import copy
import gc

import pytest
import torch

import capeval
from capeval.clip import in_memory
from capeval.clip.in_memory import hash_weights, state_key
from capeval.testing.shapes import example_items
from capeval.testing.tiny_clip import build_tiny_clip


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
    real = in_memory.hash_state

    def counting(state, where):
        calls.append(where)
        return real(state, where)

    monkeypatch.setattr(in_memory, "hash_state", counting)
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
    assert revision(first) == hash_weights(tiny[0], "model")


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
    assert revision(after) == hash_weights(model, "model")


def test_the_version_counter_misses_writes_through_data_and_the_fingerprint_sees_them(tiny):
    model, _ = tiny
    weight = model.visual_projection.weight
    state = model.state_dict(keep_vars=True)
    key, version = state_key(state), weight._version
    weight.data.add_(1)
    assert weight._version == version  # why the key holds more than the version counter
    assert state_key(model.state_dict(keep_vars=True)) != key


def test_the_fingerprint_sees_changes_whose_sum_cancels():
    module = torch.nn.Module()
    module.register_buffer("counts", torch.arange(8, dtype=torch.int64))
    key = state_key(module.state_dict(keep_vars=True))
    module.counts.data[1] += 1  # 1 -> 2
    module.counts.data[4] -= 1  # 4 -> 3: the sum of the words is unchanged, their XOR is not
    assert state_key(module.state_dict(keep_vars=True)) != key


def test_the_fingerprint_sees_the_bytes_past_the_last_whole_word():
    module = torch.nn.Module()
    module.register_buffer("odd", torch.zeros(3, dtype=torch.float16))  # 6 bytes: no whole 64-bit word
    key = state_key(module.state_dict(keep_vars=True))
    module.odd.data[2] = 1.0
    assert state_key(module.state_dict(keep_vars=True)) != key


def test_the_accelerator_reductions_give_the_keys_numpy_gives_on_the_host(tiny, monkeypatch):
    # The path a GPU model takes (torch.hash_tensor and a wrapping sum where the tensor is), run on CPU tensors.
    model, _ = tiny
    module = torch.nn.Module()
    module.register_buffer("odd", torch.arange(5, dtype=torch.float16))  # 10 bytes: one word and a tail
    on_host = [state_key(m.state_dict(keep_vars=True)) for m in (model, module)]
    monkeypatch.setattr(in_memory, "_HOST_REDUCED", frozenset())
    assert [state_key(m.state_dict(keep_vars=True)) for m in (model, module)] == on_host
    model.visual_projection.weight.data.add_(1)
    assert state_key(model.state_dict(keep_vars=True)) != on_host[0]


def test_without_a_fingerprint_the_weights_are_hashed_at_every_call(tiny, world, hashes, monkeypatch):
    # An accelerator with a torch older than torch.hash_tensor: nothing is kept rather than something unsure.
    captions, images = world
    monkeypatch.setattr(in_memory, "_HOST_REDUCED", frozenset())
    monkeypatch.delattr(torch, "hash_tensor", raising=False)
    assert state_key(tiny[0].state_dict(keep_vars=True)) is None
    scorer = capeval.CLIPScore(model=tiny)
    first = scorer(captions, images=images)
    again = scorer(captions, images=images)
    assert len(hashes) == 2
    assert again["signature"] == first["signature"]


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
    kept = len(in_memory._REVISIONS)
    del model
    gc.collect()
    assert len(in_memory._REVISIONS) == kept - 1
