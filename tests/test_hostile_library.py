"""Hostile input against the Python API: what ``capeval.CLIPScore(...)``, ``capeval.WMD(...)`` and the other
callables refuse by name, and what they warn about, instead of returning a silently wrong number."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

# --- Item 3: model folders without a working CLIP tokenizer ---


def _item3_copy(tiny_clip_dir: Path, tmp_path: Path, name: str, drop: tuple[str, ...] = ()) -> Path:
    """A copy of the tiny CLIP folder without the files in ``drop``, with the backbone cache cleared."""
    from capeval.clip.backbones import clear_cache

    folder = tmp_path / name
    shutil.copytree(tiny_clip_dir, folder)
    for file in drop:
        (folder / file).unlink()
    clear_cache()
    return folder


def _item3_edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_model_folder_without_tokenizer_files_is_refused_naming_the_files(tiny_clip_dir, tmp_path):
    import capeval

    folder = _item3_copy(tiny_clip_dir, tmp_path, "no-tokenizer", ("tokenizer.json", "tokenizer_config.json"))
    with pytest.raises(ValueError, match=r"no CLIP tokenizer: it lacks tokenizer\.json \(or both vocab\.json "
                       r"and merges\.txt\)") as err:  # fmt: skip
        capeval.CLIPScore(model=str(folder), device="cpu")
    assert str(folder) in str(err.value) and "save_pretrained" in str(err.value)


def test_model_folder_with_vocab_but_no_merges_names_merges_txt(tiny_clip_dir, tmp_path):
    from capeval.clip.backbones import load_backbone
    from capeval.testing.tiny_clip import clip_vocab_and_merges

    folder = _item3_copy(tiny_clip_dir, tmp_path, "vocab-only", ("tokenizer.json",))
    (folder / "vocab.json").write_text(json.dumps(clip_vocab_and_merges()[0]))
    with pytest.raises(
        ValueError, match=r"lacks tokenizer\.json and merges\.txt \(it has only vocab\.json\)"
    ):
        load_backbone(str(folder), device="cpu")


def test_hub_snapshot_without_tokenizer_files_is_refused_naming_the_snapshot(
    tiny_clip_dir, tmp_path, monkeypatch
):
    from huggingface_hub import constants

    from capeval.clip.backbones import clear_cache, load_backbone

    commit = "0123456789" * 4
    repo = tmp_path / "hub" / "models--someorg--tiny-clip"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_clip_dir / name, snapshot / name)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    clear_cache()
    with pytest.raises(ValueError, match=r"model 'someorg/tiny-clip' has no CLIP tokenizer: its cached snapshot "
                       r".*0123456789.* lacks tokenizer\.json.*network access"):  # fmt: skip
        load_backbone("someorg/tiny-clip", device="cpu")


def test_tokenizer_of_another_model_family_is_refused(tiny_clip_dir, tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    from capeval.clip.backbones import load_backbone

    folder = _item3_copy(
        tiny_clip_dir, tmp_path, "bert-tokenizer", ("tokenizer.json", "tokenizer_config.json")
    )
    vocab = {w: i for i, w in enumerate(["[UNK]", "[CLS]", "[SEP]", "a", "photo", "dog"])}
    backend = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", cls_token="[CLS]").save_pretrained(
        folder
    )
    with pytest.raises(
        ValueError, match=r"no working CLIP tokenizer .*it has no end-of-text token.*unknown tokens"
    ):
        load_backbone(str(folder), device="cpu")


def test_tokenizer_whose_end_of_text_the_text_tower_does_not_pool_at_is_refused(tiny_clip_dir, tmp_path):
    from capeval.clip.backbones import load_backbone

    folder = _item3_copy(tiny_clip_dir, tmp_path, "other-eos")
    _item3_edit_json(folder / "tokenizer_config.json", lambda cfg: cfg.update(eos_token="<|startoftext|>"))
    with pytest.raises(ValueError, match=r"pools at end-of-text id 49407 .* writes end-of-text as 49406"):
        load_backbone(str(folder), device="cpu")


def test_legacy_eos_token_id_2_of_the_openai_configs_still_loads(tiny_clip_dir, tmp_path):
    from capeval.clip.backbones import load_backbone

    # openai/clip-vit-base-patch32's config says eos_token_id 2: the tower pools at the largest id, end-of-text.
    folder = _item3_copy(tiny_clip_dir, tmp_path, "legacy-eos")
    _item3_edit_json(folder / "config.json", lambda cfg: cfg["text_config"].update(eos_token_id=2))
    backbone = load_backbone(str(folder), device="cpu")
    assert backbone.model.config.text_config.eos_token_id == 2
    assert backbone.tokenizer.eos_token_id == 49407


# --- Item 5: all-zero word vectors, and RefCLIP-S / RefPAC-S near a zero denominator ---


@pytest.fixture
def item5_zero_row_vectors(tmp_path):
    """word2vec text vectors in which ``pad`` has an all-zero vector."""
    from capeval.text.vectors import clear_cache

    rows = {"dog": [3, 4, 0], "cat": [4, 3, 0], "runs": [0, 4, 3], "beach": [1, 1, 1], "pad": [0, 0, 0]}
    path = tmp_path / "zero-row.txt"
    path.write_text("5 3\n" + "".join(f"{w} {' '.join(map(str, v))}\n" for w, v in rows.items()))
    clear_cache()
    yield path
    clear_cache()


def test_wmd_normalized_treats_zero_vector_words_as_unknown_with_a_warning(item5_zero_row_vectors):
    import capeval

    with pytest.warns(
        UserWarning, match=r"wmd: 1 word\(s\) of vectors zero-row\.txt.* all-zero vector.*'pad'"
    ):
        wmd = capeval.WMD(vectors=str(item5_zero_row_vectors), normalize_vectors=True)
    out = wmd(["dog pad runs", "dog cat"], [["cat beach"], ["pad cat dog"]])
    # gensim 4 divides 0 by 0 here; with 'pad' unknown both distances are finite, the second exactly 0.
    assert np.isfinite(out["distances"]).all() and out["distances"][1] == 0.0
    assert "vectors=zero-row.txt@" in out["signature"] and ",zero_rows_oov=1|" in out["signature"]


def test_wmd_on_raw_vectors_keeps_zero_vector_words_as_gensim_does(item5_zero_row_vectors):
    import warnings

    from gensim.models import KeyedVectors

    import capeval

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # raw vectors: nothing is dropped, nothing to warn about
        wmd = capeval.WMD(vectors=str(item5_zero_row_vectors))
    out = wmd(["dog pad runs"], [["cat beach"]])
    kv = KeyedVectors.load_word2vec_format(str(item5_zero_row_vectors))
    assert out["distances"][0] == pytest.approx(
        kv.wmdistance(["dog", "pad", "runs"], ["cat", "beach"], norm=False)
    )
    assert "zero_rows_oov" not in out["signature"]


def test_wembsim_warns_and_a_caption_of_zero_vector_words_is_reported_not_silently_zero(
    item5_zero_row_vectors,
):
    import capeval

    with pytest.warns(UserWarning, match=r"wembsim: 1 word\(s\) .*'pad'"):
        wembsim = capeval.WEmbSim(vectors=str(item5_zero_row_vectors), normalize_vectors=True)
    with pytest.warns(UserWarning, match=r"1 predictions have no in-vocabulary word .*index 1"):
        out = wembsim(["dog pad", "pad"], [["dog"], ["cat"]])
    assert out["scores"] == [pytest.approx(1.0), 0.0]
    assert ",zero_rows_oov=1|" in out["signature"]


def _item5_cancelling_terms(scorer, monkeypatch, w: float):
    """Two items: item 1's w*cos(image, caption) nearly cancels its best-reference cosine of -0.4.

    The tiny CLIP's captions are all alike (cosines near 0.8), so text embeddings are set by hand.
    """
    import torch

    basis = torch.eye(16)
    cosine = -0.4
    table = {
        "fine caption": basis[0],
        "fine reference": basis[0],
        "odd caption": basis[3],
        "odd reference": cosine * basis[3] + (1 - cosine**2) ** 0.5 * basis[4],
    }
    monkeypatch.setattr(scorer, "text_embeddings", lambda texts: torch.stack([table[t] for t in texts]))
    t = (-cosine + 1e-4) / w  # w * t + cosine = 1e-4
    image_embeds = torch.stack([basis[0], t * basis[3] + (1 - t**2) ** 0.5 * basis[5]])
    return ["fine caption", "odd caption"], [["fine reference"], ["odd reference"]], image_embeds


def test_refclipscore_warns_naming_items_whose_harmonic_mean_denominator_is_near_zero(
    tiny_clip_dir, monkeypatch
):
    import capeval

    scorer = capeval.RefCLIPScore(model=str(tiny_clip_dir), device="cpu")
    predictions, references, image_embeds = _item5_cancelling_terms(scorer, monkeypatch, 2.5)
    with pytest.warns(UserWarning, match=r"RefCLIP-S: CLIP-S \+ best-reference cosine is near zero for 1 item\(s\)"
                      r".*item 1: CLIP-S 0\.4001, best-reference cosine -0\.4, RefCLIP-S -3\d\d\d") as record:  # fmt: skip
        out = scorer(predictions, references, image_embeds=image_embeds)
    assert record[0].filename == __file__  # points at the caller, not at capeval
    assert "item 0" not in str(record[0].message)
    assert out["scores"][0] == pytest.approx(2.5 * 1.0 * 1.0 * 2 / (2.5 + 1.0))
    assert out["scores"][1] < -3000  # the authors' formula is kept: the warning is the guard


def test_refclipscore_with_the_papers_clipped_cosine_has_nothing_to_warn_about(tiny_clip_dir, monkeypatch):
    import warnings

    import capeval

    scorer = capeval.RefCLIPScore(model=str(tiny_clip_dir), device="cpu", clip_reference_cosine=True)
    predictions, references, image_embeds = _item5_cancelling_terms(scorer, monkeypatch, 2.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = scorer(predictions, references, image_embeds=image_embeds)
    assert out["scores"][1] == 0.0  # H(0.4001, max(-0.4, 0)) = 0


def test_refpacscore_warns_with_its_own_names_and_points_at_the_caller(tiny_clip_dir, monkeypatch):
    import capeval

    scorer = capeval.PACScore(checkpoint=str(tiny_clip_dir), device="cpu")
    predictions, references, image_embeds = _item5_cancelling_terms(scorer, monkeypatch, 2.0)
    with pytest.warns(UserWarning, match=r"RefPAC-S: PAC-S \+ best-reference cosine is near zero .*item 1: "
                      r"PAC-S 0\.4001") as record:  # fmt: skip
        out = scorer(predictions, references, image_embeds=image_embeds)
    assert record[0].filename == __file__
    assert out["refpacscore_scores"][1] < -3000


# --- Item 9: caption size in WMD (and WEmbSim) ---


@pytest.fixture(scope="module")
def item9_words() -> list[str]:
    """Alphabetic GloVe words, none a COCO stopword: each is its own in-vocabulary token."""
    from capeval.text.stopwords import COCO_WMD_STOPWORDS
    from capeval.text.tokenize import coco_tokens
    from capeval.text.vectors import load_vectors

    words = load_vectors().keyed_vectors.index_to_key[500:120_000]
    words = [w for w in words if w.isalpha() and w.isascii() and w not in COCO_WMD_STOPWORDS]
    return [w for w in words if coco_tokens(w) == [w]][:40_000]


def _item9_text(words: list[str], start: int, n: int) -> str:
    return " ".join(words[start : start + n])


def _item9_peak(run) -> tuple[object, int]:
    import tracemalloc

    tracemalloc.start()
    try:
        try:
            result = run()
        except ValueError as e:
            result = e
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_wmd_refuses_a_prediction_over_the_word_cap_before_building_its_cost_matrix(item9_words):
    import capeval
    from capeval.text.transport import MAX_DOCUMENT_WORDS

    wmd = capeval.WMD()
    long_text = _item9_text(item9_words, 0, MAX_DOCUMENT_WORDS + 200)
    error, peak = _item9_peak(lambda: wmd(["a dog runs", long_text], [["a dog"], [long_text[::-1]]]))
    assert isinstance(error, ValueError)
    assert str(error).startswith(
        "prediction 1 has 1,200 distinct in-vocabulary words (1 prediction(s) over the "
    )
    assert "at most 1,000 distinct in-vocabulary words" in str(error)
    assert peak < 32 * 2**20  # its 1,200 x 1,200 pair alone would take ~200 MB


def test_wmd_refuses_a_reference_over_the_word_cap_naming_item_and_reference(item9_words):
    import capeval

    wmd = capeval.WMD()
    long_text = _item9_text(item9_words, 0, 1_500)
    with pytest.raises(
        ValueError, match=r"^reference 1 of item 1 has 1,500 distinct in-vocabulary words; WMD"
    ):
        wmd(["a dog", "a cat"], [["a dog"], ["a cat", long_text]])


def test_wmd_at_the_word_cap_is_scored(item9_words):
    import capeval
    from capeval.text.transport import MAX_DOCUMENT_WORDS

    text = _item9_text(item9_words, 0, MAX_DOCUMENT_WORDS)
    out = capeval.WMD()([text], [[text, "a dog"]])
    assert out["distances"] == [0.0]  # the same bag of words: no transport problem to solve


def test_wmd_in_slices_gives_the_same_distances_and_references(item9_words, monkeypatch):
    import capeval
    from capeval.text import transport

    rng = np.random.default_rng(0)
    words = item9_words[:300]
    predictions = [" ".join(rng.choice(words, rng.integers(1, 12))) for _ in range(40)]
    references = [[" ".join(rng.choice(words, rng.integers(1, 12))) for _ in range(4)] for _ in range(40)]
    whole = capeval.WMD()(predictions, references)
    monkeypatch.setattr(transport, "SLICE_ENTRIES", 150)  # a few references per slice
    wmd = capeval.WMD()
    sliced = wmd(predictions, references)
    np.testing.assert_allclose(sliced["distances"], whole["distances"], rtol=1e-12)
    assert sliced["scores"] == pytest.approx(whole["scores"], rel=1e-12)
    assert len(set(sliced["distances"])) > 10  # real transport problems, not all ties


def test_wmd_memory_stays_bounded_by_the_slice_not_the_batch(item9_words, monkeypatch):
    import capeval
    from capeval.text import transport

    # 40 captions of 400 words, each its own reference: 6.4M cost entries in all, about 1 GB built at once.
    texts = [_item9_text(item9_words, 400 * i, 400) for i in range(40)]
    wmd = capeval.WMD()
    monkeypatch.setattr(transport, "SLICE_ENTRIES", 400 * 400, raising=False)  # also measured without slices
    out, peak = _item9_peak(lambda: wmd(texts, [[t] for t in texts]))
    assert out["distances"] == [0.0] * 40
    assert peak < 64 * 2**20  # one 160,000-entry slice (~28 MB) and the batch's tokens and embeddings


def test_wembsim_needs_no_word_cap_its_memory_is_linear_in_the_words(item9_words):
    import capeval

    text = _item9_text(item9_words, 0, 20_000)
    wembsim = capeval.WEmbSim()
    out, peak = _item9_peak(lambda: wembsim([text], [[text[::-1] + " dog", text]]))
    assert out["scores"][0] == pytest.approx(0.5 * (1 + out["reference_scores"][0][0]))
    assert peak < 48 * 2**20  # 20,000 words x 50 dims in float64 is 8 MB; a pairwise matrix would be 3.2 GB
