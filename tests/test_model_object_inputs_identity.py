"""What besides its weights names a model object (``model=(model, tokenizer[, image_processor])``): its tokenizer,
its config and what it takes from its image processor. Two of any of them that give different numbers give two
signatures (and so two entries of every cache keyed by them, ``capeval bench``'s included); equal ones built apart
give one; a tokenizer changed in place is named, and tokenises, as it is now.

The independent references are tokenizers and metrics built afresh with the same change, and ``hash_tokenizer``
(the tokenizer hashed from scratch)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

import capeval
from capeval.clip import model_identity
from capeval.clip.model_identity import config_digest, hash_tokenizer, hash_weights, tokenizer_digest
from capeval.shapes import example_items
from capeval.shapes.tiny_clip import (
    BOS_ID,
    EOS_ID,
    build_clip_tokenizer,
    build_tiny_clip,
    clip_vocab_and_merges,
)

BENCH_FIXTURES = Path(__file__).parent / "fixtures" / "bench"


@pytest.fixture(scope="module")
def world():
    items = list(example_items(4).values())
    return [it["candidate"] for it in items], [it["image"] for it in items]


@pytest.fixture
def model():
    """A tiny random CLIP whose config names OpenAI's ViT-B/32, so a tokenizer alone is a complete model object."""
    module, _ = build_tiny_clip(seed=7)
    module.config._name_or_path = "openai/clip-vit-base-patch32"
    return module


def permuted_tokenizer():
    """CLIP's tokenizer with the ids of every ordinary token reversed: as valid for the text tower (same size, same
    start/end-of-text ids), different ids for every word."""
    from transformers import CLIPTokenizer

    vocab, merges = clip_vocab_and_merges()
    ordinary = sorted((i, s) for s, i in vocab.items() if 512 <= i < BOS_ID)
    ids = [i for i, _ in ordinary]
    permuted = dict(vocab) | {s: i for (_, s), i in zip(ordinary, reversed(ids), strict=True)}
    tokenizer = CLIPTokenizer(vocab=permuted, merges=list(merges))
    tokenizer.model_max_length = 77
    return tokenizer


def without_lowercase(tokenizer):
    from tokenizers import Regex, normalizers

    tokenizer.backend_tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " ")]
    )
    return tokenizer


def model_field(result: dict) -> str:
    return result["signature"].split("|")[1]


# --- Tokenizers ---


def test_two_tokenizers_with_the_same_weights_give_two_signatures_and_two_scores(model, world):
    captions, images = world
    a = capeval.CLIPScore(model=(model, build_clip_tokenizer()))(captions, images=images)
    b = capeval.CLIPScore(model=(model, permuted_tokenizer()))(captions, images=images)
    assert model_field(a) != model_field(b)
    assert a["signature"].split("|")[2:] == b["signature"].split("|")[2:]
    assert max(abs(x - y) for x, y in zip(a["scores"], b["scores"], strict=True)) > 1e-3


def test_equal_tokenizers_read_from_two_folders_give_one_signature(model, world, tmp_path):
    from transformers import AutoTokenizer

    captions, images = world
    built = build_clip_tokenizer()
    built.save_pretrained(tmp_path / "one")
    built.save_pretrained(tmp_path / "two")
    one, two = (AutoTokenizer.from_pretrained(str(tmp_path / name)) for name in ("one", "two"))
    assert one.name_or_path != two.name_or_path
    a = capeval.CLIPScore(model=(model, one))(captions, images=images)
    b = capeval.CLIPScore(model=(model, two))(captions, images=images)
    c = capeval.CLIPScore(model=(model, built))(captions, images=images)
    assert a["signature"] == b["signature"] == c["signature"]
    assert a["scores"] == b["scores"] == c["scores"]


def test_a_tokenizer_changed_in_place_is_named_and_tokenises_as_it_is_now(model, world):
    # The word cache filled by the first call is dropped with the digest: the second call's ids are those of a
    # tokenizer built with the change from the start.
    captions, images = world
    tokenizer = build_clip_tokenizer()
    scorer = capeval.CLIPScore(model=(model, tokenizer))
    before = scorer(captions, images=images)
    without_lowercase(tokenizer)
    after = scorer(captions, images=images)
    fresh = capeval.CLIPScore(model=(model, without_lowercase(build_clip_tokenizer())))(
        captions, images=images
    )
    assert model_field(after) != model_field(before)
    assert after["signature"] == fresh["signature"]
    assert after["scores"] == pytest.approx(fresh["scores"], abs=1e-6)
    assert max(abs(x - y) for x, y in zip(after["scores"], before["scores"], strict=True)) > 1e-4


def _bpe_dropout(tokenizer):
    tokenizer.backend_tokenizer.model.dropout = 0.5


def _post_processor_without_start_of_text(tokenizer):
    from tokenizers import processors

    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", EOS_ID)]
    )


def _vocabulary_replaced(tokenizer):
    tokenizer.backend_tokenizer.model = permuted_tokenizer().backend_tokenizer.model


def _added_token(tokenizer):
    tokenizer.add_tokens(["zzqqzz"])


def _truncation_enabled(tokenizer):
    tokenizer.backend_tokenizer.enable_truncation(8)


def _end_of_text_renamed(tokenizer):
    tokenizer.eos_token = "<|startoftext|>"


def _padding_side(tokenizer):
    tokenizer.padding_side = "left"


TOKENIZER_CHANGES = [
    without_lowercase,
    _bpe_dropout,
    _post_processor_without_start_of_text,
    _vocabulary_replaced,
    _added_token,
    _truncation_enabled,
    _end_of_text_renamed,
    _padding_side,
]


@pytest.mark.parametrize("change", TOKENIZER_CHANGES, ids=[c.__name__.lstrip("_") for c in TOKENIZER_CHANGES])
def test_every_part_of_a_tokenizer_changes_its_kept_digest(change):
    tokenizer = build_clip_tokenizer()
    before = tokenizer_digest(tokenizer)
    assert tokenizer_digest(tokenizer) == before == hash_tokenizer(tokenizer)
    change(tokenizer)
    after = tokenizer_digest(tokenizer)
    assert after != before
    assert after == hash_tokenizer(tokenizer)


def test_a_vocabulary_swap_the_key_does_not_read_keeps_the_kept_digest():
    # The documented limit: two tokens exchanged in place, neither among the 64 tokens the key reads nor in its
    # probe sentences. hash_tokenizer, which reads the whole vocabulary, sees it.
    from tokenizers.models import BPE

    tokenizer = build_clip_tokenizer()
    before = tokenizer_digest(tokenizer)
    vocab, merges = clip_vocab_and_merges()
    zebra, giraffe = vocab["zebra</w>"], vocab["giraffe</w>"]
    assert zebra % (len(vocab) // 64) and giraffe % (len(vocab) // 64)
    swapped = dict(vocab) | {"zebra</w>": giraffe, "giraffe</w>": zebra}
    old = tokenizer.backend_tokenizer.model
    tokenizer.backend_tokenizer.model = BPE(
        swapped,
        list(merges),
        unk_token=old.unk_token,
        end_of_word_suffix=old.end_of_word_suffix,
        continuing_subword_prefix=old.continuing_subword_prefix,
        fuse_unk=old.fuse_unk,
    )
    assert tokenizer("a zebra")["input_ids"][2] == giraffe
    assert tokenizer_digest(tokenizer) == before != hash_tokenizer(tokenizer)


def test_a_sentencepiece_tokenizer_is_named_by_its_model_not_its_folder(tmp_path):
    from transformers import SiglipTokenizer

    from capeval_dev.testing.tiny_families import siglip_tokenizer

    built = siglip_tokenizer(tmp_path / "spm")
    built.save_pretrained(tmp_path / "one")
    built.save_pretrained(tmp_path / "two")
    one, two = (SiglipTokenizer.from_pretrained(str(tmp_path / name)) for name in ("one", "two"))
    assert one.vocab_file != two.vocab_file
    assert tokenizer_digest(one) == tokenizer_digest(two) == tokenizer_digest(built)
    two.do_lower_case = not two.do_lower_case
    assert tokenizer_digest(two) != tokenizer_digest(one)
    assert tokenizer_digest(two) == hash_tokenizer(two)


def test_kept_tokenizer_digests_go_with_their_tokenizer():
    import gc

    tokenizer = build_clip_tokenizer()
    tokenizer_digest(tokenizer)
    kept = len(model_identity._KEPT_TOKENIZERS)
    del tokenizer
    gc.collect()
    assert len(model_identity._KEPT_TOKENIZERS) == kept - 1


# --- Configs ---


def test_two_configs_with_the_same_weights_give_two_signatures(model, world):
    from transformers import CLIPModel

    captions, images = world
    config = copy.deepcopy(model.config)
    config.text_config.hidden_act = config.vision_config.hidden_act = "gelu"  # the tiny CLIP's is quick_gelu
    other = CLIPModel(config)
    other.load_state_dict(model.state_dict())
    assert hash_weights(other, "m") == hash_weights(model, "m")
    tokenizer = build_clip_tokenizer()
    a = capeval.CLIPScore(model=(model, tokenizer))(captions, images=images)
    b = capeval.CLIPScore(model=(other, tokenizer))(captions, images=images)
    assert model_field(a) != model_field(b)
    assert max(abs(x - y) for x, y in zip(a["scores"], b["scores"], strict=True)) > 1e-4


def test_config_fields_that_name_a_place_or_a_run_leave_the_config_digest_as_it_was(model):
    config = copy.deepcopy(model.config)
    before = config_digest(config)
    config._name_or_path = "/home/someone/runs/step-1000"
    config.architectures = ["CLIPModel"]
    config.text_config._name_or_path = "/elsewhere"
    assert config_digest(config) == before
    config.text_config.layer_norm_eps = 1e-6
    assert config_digest(config) != before


# --- Image processors ---


def test_two_image_processors_that_normalise_differently_give_two_signatures(world):
    from transformers import CLIPImageProcessorPil

    from capeval.clip.image_constants import OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD

    captions, images = world
    module, tokenizer = build_tiny_clip(seed=7)
    module.config._name_or_path = "my-run/step-1000"  # no known origin: the processor decides mean/std
    size = module.config.vision_config.image_size
    geometry = dict(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    openai = CLIPImageProcessorPil(
        **geometry, image_mean=list(OPENAI_IMAGE_MEAN), image_std=list(OPENAI_IMAGE_STD)
    )
    halves = CLIPImageProcessorPil(**geometry, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    a = capeval.CLIPScore(model=(module, tokenizer, openai))(captions, images=images)
    b = capeval.CLIPScore(model=(module, tokenizer, halves))(captions, images=images)
    assert "image_mean" not in a["signature"]
    assert "|image_mean=0.5,0.5,0.5|image_std=0.5,0.5,0.5|" in b["signature"]
    assert model_field(a) == model_field(b)
    assert max(abs(x - y) for x, y in zip(a["scores"], b["scores"], strict=True)) > 1e-4


# --- capeval bench's score cache ---


def test_the_bench_cache_keeps_the_scores_of_two_tokenizers_apart(model, tmp_path):
    from PIL import Image

    from capeval.bench import ScoreCache, metric_from_callable, run_benchmark
    from capeval_dev.perf.models import mix_shared_component

    mix_shared_component(model)  # cosines of a trained CLIP's range: CLIP-S not clipped to 0, Kendall defined
    root = tmp_path / "images"
    root.mkdir()
    for k, name in enumerate(
        ["1000000001_a1b2c3d4e5.jpg", "2000000002_b2c3d4e5f6.jpg", "3000000003_c3d4e5f6a7.jpg"]
    ):
        Image.new("RGB", (32, 32), (k * 80, 40, 200 - k * 60)).save(root / name)

    def run(tokenizer, cache: Path):
        scorer = capeval.CLIPScore(model=(model, tokenizer))
        metric = metric_from_callable(scorer, key="clipscore", uses_references=False, uses_images=True)
        return run_benchmark(
            "flickr8k_expert",
            [metric],
            data_dir=BENCH_FIXTURES,
            cache=ScoreCache(cache),
            options={"image_root": root},
            progress=False,
        )

    first = run(build_clip_tokenizer(), tmp_path / "shared")
    second = run(permuted_tokenizer(), tmp_path / "shared")
    clean = run(permuted_tokenizer(), tmp_path / "clean")
    a, b, c = (r.outcomes["clipscore"] for r in (first, second, clean))
    assert a.skipped is None and b.skipped is None
    assert b.signature != a.signature
    assert b.signature == c.signature
    assert b.cached == 0 and b.computed == c.computed > 0
    assert second.scores["clipscore"]["default"].tolist() == clean.scores["clipscore"]["default"].tolist()
    assert second.scores["clipscore"]["default"].tolist() != first.scores["clipscore"]["default"].tolist()
    assert b.values == c.values
    assert all(np.isfinite(v) for v in b.values.values())
