"""SigLIP's text side as it was trained, where transformers' defaults differ.

- SigLIP 2 lower-cased every text before its Gemma tokenizer (big_vision's ``lower`` op, ASCII only), and its
  released ``tokenizer_config.json`` says ``do_lower_case: true``, which transformers' ``GemmaTokenizer`` ignores:
  capeval lower-cases, says so in the signature, and leaves SigLIP (whose T5 tokenizer lower-cases by itself) and
  tokenizers without the flag alone.
- SigLIP was trained on texts padded to 64 without an attention mask, pooling the last position: capeval passes no
  mask, so its embedding is the model's ids-only call and not the masked ``model(**processor(...))`` one.

The models are tiny random ones built offline (``capeval_dev.testing.tiny_families``); the SigLIP 2 one carries a Gemma
tokenizer whose files are laid out as the released ones (see ``gemma_tokenizer``).
"""

from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import capeval
from capeval.clip.backbones import load_backbone
from capeval.clip.families import FAMILIES, tokenize_texts
from capeval.clip.text_encoding import encode_texts
from capeval.clip.tokenizer_check import lower_cases
from capeval_dev.testing.tiny_families import build_tiny_family, build_tiny_siglip2

CAPTIONS = ["a photo of a dog running on the beach", "a red square and a blue circle", "a man", "a big cat"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("siglip_text")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "siglip2": build_tiny_siglip2(root / "siglip2"),
            "siglip2_no_flag": build_tiny_siglip2(root / "siglip2_no_flag", do_lower_case=None),
            "siglip2_flag_false": build_tiny_siglip2(root / "siglip2_flag_false", do_lower_case=False),
            "siglip": build_tiny_family("siglip", root / "siglip"),
        }


def _image():
    return np.random.default_rng(5).integers(0, 256, (40, 52, 3), dtype=np.uint8)


def _ids(backbone, texts):
    return tokenize_texts(backbone, list(texts))[0]


# -- SigLIP 2: lower-cased as trained ------------------------------------------------------------------------


def test_siglip2_test_files_carry_what_the_released_ones_decide_lower_casing_by(folders):
    # google/siglip2-base-patch16-224: model_type "siglip" in config.json; tokenizer_config.json names the Gemma
    # tokenizer and sets do_lower_case.
    config = json.loads((folders["siglip2"] / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "GemmaTokenizer" and config["do_lower_case"] is True
    assert json.loads((folders["siglip2"] / "config.json").read_text())["model_type"] == "siglip"


def test_siglip2_captions_in_any_case_get_the_same_ids_and_the_same_score(folders):
    scorer = capeval.CLIPScore(model=str(folders["siglip2"]), device="cpu")
    assert scorer.backbone.lowercase
    first, second = _ids(scorer.backbone, ["A Red Bus", "a red bus"])
    assert first == second
    result = scorer(["A Red Bus", "a red bus", "A RED BUS"], images=[_image()] * 3)
    assert result["scores"][0] == result["scores"][1] == result["scores"][2]


def test_transformers_gemma_tokenizer_still_ignores_the_released_do_lower_case(folders):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folders["siglip2"]))
    assert type(tok).__name__ == "GemmaTokenizer" and tok.init_kwargs["do_lower_case"] is True
    theirs_mixed, theirs_lower = tok(["A Red Bus", "a red bus"])["input_ids"]
    # Should this fail, transformers honours the flag now: capeval's lower_cases() then returns False by itself
    # (see the next test), and the model-family table (docs/reference/model-families.md) must stop saying that
    # transformers does not lower-case.
    assert theirs_mixed != theirs_lower, (
        "transformers' GemmaTokenizer now lower-cases SigLIP 2 captions itself"
    )
    backbone = load_backbone(str(folders["siglip2"]), device="cpu")
    assert _ids(backbone, ["A Red Bus"]) == [list(theirs_lower)]


def test_a_tokenizer_that_lower_cases_by_itself_is_not_lower_cased_again(folders):
    from transformers import AutoModel, AutoProcessor, Siglip2Tokenizer

    # transformers' NaFlex tokenizer reads the same files and adds a lower-casing normaliser: what honouring the
    # flag would look like. capeval then adds nothing, and its signature does not claim a deviation.
    tok = Siglip2Tokenizer.from_pretrained(str(folders["siglip2"]))
    assert tok.init_kwargs["do_lower_case"] is True and not lower_cases(FAMILIES["siglip"], tok)
    model = AutoModel.from_pretrained(str(folders["siglip2"])).eval()
    processor = AutoProcessor.from_pretrained(str(folders["siglip2"]))
    scorer = capeval.CLIPScore(model=(model, tok, processor.image_processor), device="cpu")
    assert not scorer.backbone.lowercase and "lowercase" not in scorer.signature
    result = scorer(["A Red Bus", "a red bus"], images=[_image()] * 2)
    assert result["scores"][0] == result["scores"][1]


def test_siglip2_lower_casing_is_ascii_only_as_big_vision(folders):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folders["siglip2"]))
    backbone = load_backbone(str(folders["siglip2"]), device="cpu")
    # big_vision's tf.strings.lower without an encoding folds A-Z only: "ÉLAN" becomes "Élan", not "élan".
    (ours,) = _ids(backbone, ["ÉLAN"])
    assert ours == tok("Élan")["input_ids"] and ours != tok("élan")["input_ids"]


def test_siglip2_prompt_references_and_idf_texts_are_lower_cased_too(folders):
    folder, image = str(folders["siglip2"]), _image()
    upper = capeval.CLIPScore(model=folder, device="cpu", prefix="A PHOTO DEPICTS")(["A Dog"], images=[image])
    lower = capeval.CLIPScore(model=folder, device="cpu", prefix="a photo depicts")(["a dog"], images=[image])
    assert upper["scores"] == lower["scores"]
    # A reference that differs from the candidate in case only is the same text: best-reference cosine 1.
    ref = capeval.RefCLIPScore(model=folder, device="cpu")(
        ["a red bus"], references=[["A RED BUS"]], images=[image]
    )
    a = ref["clip_s_scores"][0]
    np.testing.assert_allclose(ref["scores"][0], 2 * a / (a + 1), rtol=1e-6)
    em = capeval.EMScore(model=folder, device="cpu")(["A Red Bus"], references=[["a red bus"]])
    np.testing.assert_allclose(em["scores"], 1.0, atol=1e-5)
    by_idf = [
        capeval.EMScore(model=folder, device="cpu", idf=corpus)(
            ["a dog on the beach"], references=[["a cat"]]
        )
        for corpus in (["A Dog", "The Beach"], ["a dog", "the beach"])
    ]
    assert by_idf[0]["scores"] == by_idf[1]["scores"]


def test_a_siglip2_model_object_is_lower_cased_as_its_folder(folders):
    from transformers import AutoModel, AutoProcessor

    model = AutoModel.from_pretrained(str(folders["siglip2"])).eval()
    processor = AutoProcessor.from_pretrained(str(folders["siglip2"]))
    scorer = capeval.CLIPScore(model=(model, processor), device="cpu")
    assert scorer.backbone.lowercase and "|text=max_length:64|lowercase=ascii|" in scorer.signature


def test_siglip2_signatures_name_the_lower_casing(folders):
    scorer = capeval.CLIPScore(model=str(folders["siglip2"]), device="cpu")
    assert (
        "|family=siglip|image_resize=exact:32x32|text=max_length:64|lowercase=ascii|tokenization=2|prefix="
        in scorer.signature
    )


# -- where nothing is added --------------------------------------------------------------------------------------


def test_siglip_t5_tokenizer_lower_cases_by_itself_and_its_signature_is_unchanged(folders):
    scorer = capeval.CLIPScore(model=str(folders["siglip"]), device="cpu")
    assert not scorer.backbone.lowercase
    first, second = _ids(scorer.backbone, ["A Dog", "a dog"])
    assert first == second  # SiglipTokenizer's own do_lower_case
    assert (
        "|text=max_length:48|tokenization=2|prefix=A photo depicts|" in scorer.signature
        and "lowercase" not in scorer.signature
    )


@pytest.mark.parametrize("variant", ["siglip2_no_flag", "siglip2_flag_false"])
def test_a_gemma_tokenizer_whose_files_do_not_ask_for_lower_casing_keeps_case(folders, variant):
    scorer = capeval.CLIPScore(model=str(folders[variant]), device="cpu")
    assert not scorer.backbone.lowercase and "lowercase" not in scorer.signature
    first, second = _ids(scorer.backbone, ["A Red Bus", "a red bus"])
    assert first != second


def test_a_clip_tokenizer_is_never_judged_for_lower_casing(tiny_clip_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_clip_dir))
    assert not lower_cases(FAMILIES["clip"], tok)
    assert not capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu").backbone.lowercase


# -- no attention mask -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["siglip", "siglip2"])
def test_siglip_text_embedding_is_the_ids_only_call_and_not_the_masked_one(folders, name):
    from transformers import AutoModel, AutoProcessor

    folder = folders[name]
    processor = AutoProcessor.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).eval()
    inputs = processor(text=CAPTIONS, padding="max_length", truncation=True, return_tensors="pt")
    assert "attention_mask" in inputs  # what model(**inputs) would pass
    with torch.no_grad():
        ids_only = F.normalize(model.get_text_features(input_ids=inputs["input_ids"]).pooler_output, dim=-1)
        masked = F.normalize(model.get_text_features(**inputs).pooler_output, dim=-1)
    ours = encode_texts(load_backbone(str(folder), device="cpu"), CAPTIONS, prefix=None)
    torch.testing.assert_close(ours, ids_only, atol=1e-5, rtol=0)
    # The mask lets the pooled (pad) position read the caption's tokens only, unlike training: a different vector.
    assert (1 - (ours * masked).sum(-1)).min() > 0.05


# -- special-token spellings: text, as SentencePiece reads them --------------------------------------------------

# Where a caption can spell a special token: alone, glued to words and punctuation, in capitals (SigLIP 2 lower-cases
# ASCII first, so "<EOS>" becomes "<eos>"), and the user-defined piece SentencePiece does match in text.
_SPECIAL_FRAGMENTS = [
    "<eos>", "<EOS>", "<pad>", "<bos>", "<unk>", "<mask>", "</s>", "<s>", "<start_of_turn>", "<", ">", "eos", "a",
    "dog", "Dog", "on", "the", "beach", "RED", ".", ",", "é", "Ünï",
]  # fmt: skip


def _special_captions(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    named = ["a dog <eos>", "<EOS> a dog", "<pad>", "a<bos>b", "<unk> cat", "<mask>", "x<start_of_turn>y"]
    joins = ["", " ", " ", "."]
    generated = [
        "".join(rng.choice(_SPECIAL_FRAGMENTS) + rng.choice(joins) for _ in range(rng.randint(1, 10)))
        for _ in range(n)
    ]
    return named + generated + [" ".join(["<eos> dog"] * 30)]  # the last over 64 ids: cut, end-of-text kept


@pytest.fixture(scope="module")
def gemma_sentencepiece(tmp_path_factory):
    """A Gemma-style SentencePiece model (BPE, byte fallback, Gemma's special ids) and the transformers
    ``GemmaTokenizer`` converted from it, as SigLIP 2's released tokenizer files were converted from Gemma's."""
    import sentencepiece as spm
    from transformers import GemmaTokenizer

    from capeval_dev.testing.tiny_families import _CORPUS

    folder = tmp_path_factory.mktemp("gemma_sp")
    corpus = folder / "corpus.txt"
    corpus.write_text(
        "\n".join(_CORPUS * 20 + ["eos pad bos unk mask < > start of turn"] * 5), encoding="utf-8"
    )
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "tokenizer"), vocab_size=300, model_type="bpe",
        byte_fallback=True, pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>",
        bos_piece="<bos>", unk_piece="<unk>", control_symbols=["<mask>"], user_defined_symbols=["<start_of_turn>"],
        add_dummy_prefix=False, remove_extra_whitespaces=False, normalization_rule_name="identity",
        allow_whitespace_only_pieces=True, split_digits=True, minloglevel=2, hard_vocab_limit=False,
    )  # fmt: skip
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "GemmaTokenizer",
                "add_bos_token": False,
                "add_eos_token": True,
                "do_lower_case": True,
                "model_max_length": 64,
                "padding_side": "right",
            }
        )
    )
    sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    return sp, GemmaTokenizer.from_pretrained(str(folder))


def test_siglip2_captions_spelling_special_tokens_get_the_ids_sentencepiece_gives(gemma_sentencepiece):
    from types import SimpleNamespace

    from capeval.clip.tokenization import ascii_lower

    sp, tok = gemma_sentencepiece
    # The reference's special pieces, as SentencePiece types them: control pieces never match text, the
    # user-defined one does.
    assert [sp.is_control(i) for i in (0, 1, 2, sp.piece_to_id("<mask>"))] == [True] * 4 and sp.is_unknown(3)
    backbone = SimpleNamespace(family=FAMILIES["siglip"], tokenizer=tok, context_length=64, lowercase=True)
    captions = _special_captions(1500, seed=7)
    ours, n_cut = tokenize_texts(backbone, captions)
    # big_vision: lower (ASCII), SentencePiece, end-of-text appended ("sticky": kept when the text is cut).
    theirs = [sp.encode(ascii_lower(c))[:63] + [1] for c in captions]
    assert [c for c, a, b in zip(captions, ours, theirs, strict=True) if a != b] == []
    assert n_cut == 1 and len(ours[-1]) == 64
    turn = sp.piece_to_id("<start_of_turn>")
    assert ours[6] == [*sp.encode("x"), turn, *sp.encode("y"), 1]  # the user-defined piece matched in text
    # transformers' own reading puts the special ids there.
    assert tok("a dog <eos>")["input_ids"][-2:] == [1, 1] and tok("<pad>")["input_ids"] == [0, 1]
    assert [ids[:-1].count(1) for ids in ours[:2]] == [0, 0]


def test_siglip2_folder_reads_special_token_spellings_as_text_in_any_case(folders):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folders["siglip2"]))
    backbone = load_backbone(str(folders["siglip2"]), device="cpu")
    ours = _ids(backbone, ["a dog <EOS>", "a dog <eos>", "<PAD> a cat", "a dog"])
    assert ours[0] == ours[1] == tok("a dog <eos>", split_special_tokens=True)["input_ids"]
    assert ours[2] == tok("<pad> a cat", split_special_tokens=True)["input_ids"]
    special = {tok.pad_token_id, tok.eos_token_id, tok.bos_token_id, tok.unk_token_id}
    assert all(not special & set(ids[:-1]) and ids[-1] == tok.eos_token_id for ids in ours)
    assert len(ours[0]) > len(ours[3]) + 1  # "<eos>" is several text pieces


def _canonical(text: str) -> str:
    """big_vision's prompt-engineering canonicalisation, which SigLIP's tokenizer applies: lower-case, no ASCII
    punctuation, whitespace collapsed."""
    import re
    import string

    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    return re.sub(r"\s+", " ", text).strip()


def test_siglip_captions_spelling_special_tokens_get_the_ids_its_sentencepiece_gives(folders):
    import sentencepiece as spm
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folders["siglip"]))
    sp = spm.SentencePieceProcessor(model_file=str(folders["siglip"] / "spiece.model"))
    backbone = load_backbone(str(folders["siglip"]), device="cpu")
    captions = ["a dog </s> on the beach", "<unk> dog", "a </s>cat", "</S> <pad> a man"] + _special_captions(
        300, seed=8
    )
    ours, _ = tokenize_texts(backbone, captions)
    eos = tok.eos_token_id
    theirs = [sp.encode(_canonical(c))[: backbone.context_length - 1] + [eos] for c in captions]
    assert [c for c, a, b in zip(captions, ours, theirs, strict=True) if a != b] == []
    # transformers' own reading puts end-of-text after "a dog".
    assert (
        sp.encode("a dog") == [3, 15] and tok("a dog </s> on the beach")["input_ids"][2] == eos != ours[0][2]
    )
