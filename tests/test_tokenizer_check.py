"""A model without a working CLIP tokenizer is refused by name when its backbone loads
(capeval.clip.tokenizer_check): tokenizer files missing, a vocabulary without merges, a Hub snapshot without
them, another family's tokenizer, or an end-of-text the text tower does not pool at; the OpenAI configs' legacy
eos_token_id still loads. A process reads the tokenizer of one content of tokenizer files once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


def _folder_copy(tiny_clip_dir: Path, tmp_path: Path, name: str, drop: tuple[str, ...] = ()) -> Path:
    """A copy of the tiny CLIP folder without the files in ``drop``, with the backbone cache cleared."""
    from capeval.clip.backbones import clear_cache

    folder = tmp_path / name
    shutil.copytree(tiny_clip_dir, folder)
    for file in drop:
        (folder / file).unlink()
    clear_cache()
    return folder


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_model_folder_without_tokenizer_files_is_refused_naming_the_files(tiny_clip_dir, tmp_path):
    import capeval

    folder = _folder_copy(
        tiny_clip_dir, tmp_path, "no-tokenizer", ("tokenizer.json", "tokenizer_config.json")
    )
    with pytest.raises(ValueError, match=r"no CLIP tokenizer: it lacks tokenizer\.json \(or both vocab\.json "
                       r"and merges\.txt\)") as err:  # fmt: skip
        capeval.CLIPScore(model=str(folder), device="cpu")
    assert str(folder) in str(err.value) and "save_pretrained" in str(err.value)


def test_model_folder_with_vocab_but_no_merges_names_merges_txt(tiny_clip_dir, tmp_path):
    from capeval.clip.backbones import load_backbone
    from capeval.shapes.tiny_clip import clip_vocab_and_merges

    folder = _folder_copy(tiny_clip_dir, tmp_path, "vocab-only", ("tokenizer.json",))
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

    folder = _folder_copy(
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

    folder = _folder_copy(tiny_clip_dir, tmp_path, "other-eos")
    _edit_json(folder / "tokenizer_config.json", lambda cfg: cfg.update(eos_token="<|startoftext|>"))
    with pytest.raises(ValueError, match=r"pools at end-of-text id 49407 .* writes end-of-text as 49406"):
        load_backbone(str(folder), device="cpu")


def test_legacy_eos_token_id_2_of_the_openai_configs_still_loads(tiny_clip_dir, tmp_path):
    from capeval.clip.backbones import load_backbone

    # openai/clip-vit-base-patch32's config says eos_token_id 2: the tower pools at the largest id, end-of-text.
    folder = _folder_copy(tiny_clip_dir, tmp_path, "legacy-eos")
    _edit_json(folder / "config.json", lambda cfg: cfg["text_config"].update(eos_token_id=2))
    backbone = load_backbone(str(folder), device="cpu")
    assert backbone.model.config.text_config.eos_token_id == 2
    assert backbone.tokenizer.eos_token_id == 49407


# ---- A tokenizer is read once per content of its files


def _counting_reads(monkeypatch, tokenizer_class=None) -> list[str]:
    """The paths ``tokenizer_class.from_pretrained`` (``AutoTokenizer``'s by default) reads from, from now on."""
    from transformers import AutoTokenizer

    tokenizer_class = tokenizer_class or AutoTokenizer
    reads = []
    original = tokenizer_class.from_pretrained.__func__

    def counted(cls, path, *args, **kwargs):
        reads.append(str(path))
        return original(cls, path, *args, **kwargs)

    monkeypatch.setattr(tokenizer_class, "from_pretrained", classmethod(counted))
    return reads


def test_models_with_the_same_tokenizer_files_share_one_tokenizer_read_once(
    tiny_clip_dir, tiny_clip_dir_b, monkeypatch
):
    from capeval.clip.backbones import clear_cache, load_backbone

    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tiny_clip_dir / name).read_bytes() == (tiny_clip_dir_b / name).read_bytes()
    clear_cache()
    reads = _counting_reads(monkeypatch)
    a = load_backbone(str(tiny_clip_dir), device="cpu")
    b = load_backbone(str(tiny_clip_dir_b), device="cpu")
    assert a.model is not b.model and a.image_size != b.image_size
    assert b.tokenizer is a.tokenizer
    assert reads == [str(tiny_clip_dir)]


def test_an_edited_tokenizer_file_is_read_afresh(tiny_clip_dir, tmp_path, monkeypatch):
    from capeval.clip.backbones import load_backbone

    folder = _folder_copy(tiny_clip_dir, tmp_path, "edited")
    _edit_json(folder / "tokenizer_config.json", lambda data: data.update(model_max_length=9))
    reads = _counting_reads(monkeypatch)
    original = load_backbone(str(tiny_clip_dir), device="cpu").tokenizer
    edited = load_backbone(str(folder), device="cpu").tokenizer
    assert (original.model_max_length, edited.model_max_length) == (77, 9)
    assert reads == [str(tiny_clip_dir), str(folder)]


def test_clear_cache_forgets_the_tokenizers_unless_asked_to_keep_them(tiny_clip_dir, monkeypatch):
    from capeval.clip.backbones import clear_cache, load_backbone

    clear_cache()
    reads = _counting_reads(monkeypatch)
    first = load_backbone(str(tiny_clip_dir), device="cpu").tokenizer
    clear_cache(tokenizers=False)
    assert load_backbone(str(tiny_clip_dir), device="cpu").tokenizer is first
    clear_cache()
    assert load_backbone(str(tiny_clip_dir), device="cpu").tokenizer is not first
    assert reads == [str(tiny_clip_dir)] * 2


def test_the_bpe_files_beside_two_weights_files_are_read_once(tiny_clip_dir, tmp_path, monkeypatch):
    from transformers import CLIPTokenizer

    from capeval.clip.openai_weights import load_tokenizer
    from capeval.clip.tokenizer_check import forget_read_tokenizers

    folders = []
    for name in ("first-file", "second-file"):
        folder = tmp_path / name
        folder.mkdir()
        for file in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tiny_clip_dir / file, folder / file)
        folders.append(folder)
    forget_read_tokenizers()
    reads = _counting_reads(monkeypatch, CLIPTokenizer)
    first, second = (load_tokenizer(folder, f"weights file in {folder}") for folder in folders)
    assert second is first
    assert reads == [str(folders[0])]
