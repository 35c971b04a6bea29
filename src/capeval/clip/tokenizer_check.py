"""A model's tokenizer, refused when it cannot tokenise captions for its text tower, and what it decides for captions.

transformers builds a tokenizer from whatever a folder holds: a CLIP folder without its tokenizer files gets a
2-token ``CLIPTokenizer`` (start- and end-of-text only) that turns every word into end-of-text, so every caption
embeds the same and scores the same. A tokenizer from another model (BERT, GPT-2) gives ids the text tower reads
as other words, or no end-of-text at the position the tower pools. Each of these is refused here, by name, when
the backbone is loaded. What a working tokenizer decides, the text length a caption may use and whether capeval
lower-cases captions first, is read with it: every way a model is named asks ``checked_tokenizer`` once.

A CLIP folder's tokenizer is read once per process for each distinct content of its tokenizer files: checkpoints
fine-tuned from one base ship the same files, and building transformers' CLIP tokenizer costs far more than hashing
them. An edited file is other content, so it is read afresh.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from capeval.clip.families import Family

# transformers' CLIP tokenizers read tokenizer.json (fast), or vocab.json + merges.txt (the BPE files).
FAST_FILE = "tokenizer.json"
BPE_FILES = ("vocab.json", "merges.txt")
# Ordinary English words that every CLIP BPE vocabulary holds: each must come out as its own word tokens.
PROBE = "a photo depicts a dog running on the beach"
# transformers' CLIPTextTransformer: a text_config.eos_token_id of 2 (configs written before transformers PR
# #24773, e.g. openai/clip-vit-base-patch32) pools at argmax(input_ids), which is end-of-text only when
# end-of-text is the largest id; any other value pools at the first position holding that id.
LEGACY_EOS_ID = 2
_UNBOUNDED = 10**6  # tokenizers without a stated length report ~1e30 as model_max_length
# Every file AutoTokenizer reads from a CLIP folder; the model type (from config.json) picks the class when
# tokenizer_config.json names none.
TOKENIZER_INPUTS = (
    FAST_FILE,
    *BPE_FILES,
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)

_READ: dict[str, object] = {}
_READ_LOCK = threading.Lock()


@dataclass(frozen=True)
class TextSettings:
    """A model's tokenizer, checked, and what it decides for captions.

    Attributes:
        tokenizer: the tokenizer.
        context_length: text positions a caption may use (``context_length``).
        lowercase: captions and the prompt are lower-cased (ASCII) before the tokenizer (``lower_cases``).
    """

    tokenizer: object
    context_length: int
    lowercase: bool


def checked_tokenizer(
    read: Callable[[], object],
    family: Family,
    config,
    where: str,
    folder: Path | None = None,
    hub: bool = False,
) -> TextSettings:
    """The tokenizer ``read()`` gives, refused unless it can feed the family's text tower, with what it decides.

    Args:
        read: gives the tokenizer (transformers reading a folder or Hub snapshot, an OpenCLIP file's BPE, or a model
            object's own tokenizer).
        family: the model's family.
        config: the model's config; the tokenizer is checked against its ``text_config``.
        where: the model, as messages name it.
        folder: the folder (or Hub snapshot) a CLIP model's tokenizer files are read from, ``None`` when there is
            none. A local folder lacking them is refused before ``read`` (transformers' errors on half a tokenizer do
            not name the missing file); a snapshot after it (reading downloads them).
        hub: ``folder`` is a Hub snapshot.

    Raises:
        ValueError: missing tokenizer files (named), or a tokenizer that does not fit the text tower (every way
            named).
    """
    if family.is_clip and folder is not None and not hub:
        _refuse_missing_files(folder, where, hub)
    if family.is_clip and folder is not None and not missing_tokenizer_files(folder):
        tokenizer = read_once(read, folder, f"model_type={config.model_type}")
    else:  # a snapshot whose files reading downloads, another family's files, or a tokenizer given as an object
        tokenizer = read()
    if family.is_clip:
        if folder is not None:
            _refuse_missing_files(folder, where, hub)
        check_clip_tokenizer(tokenizer, config.text_config, where)
    else:
        check_tokenizer(family, tokenizer, config.text_config, where)
    return TextSettings(tokenizer, context_length(family, tokenizer, config), lower_cases(family, tokenizer))


def read_once(read: Callable[[], object], folder: Path, how: str) -> object:
    """``read()``'s tokenizer, or the one an earlier call read the same way (``how``: the class or the model type
    that picks it) from tokenizer files of the same content in ``folder``."""
    digest = hashlib.sha256(how.encode())
    for name in TOKENIZER_INPUTS:
        path = folder / name
        if path.is_file():
            data = path.read_bytes()
            digest.update(f"\0{name}\0{len(data)}\0".encode())
            digest.update(data)
    key = digest.hexdigest()
    with _READ_LOCK:
        if key in _READ:
            return _READ[key]
    tokenizer = read()
    with _READ_LOCK:
        return _READ.setdefault(key, tokenizer)


def forget_read_tokenizers() -> None:
    """Forget the tokenizers read from folders (with the loaded backbones, to free memory)."""
    with _READ_LOCK:
        _READ.clear()


def _refuse_missing_files(folder: Path, where: str, hub: bool) -> None:
    missing = missing_tokenizer_files(folder)
    if missing:
        raise tokenizer_files_refusal(where, folder, missing, hub)


def missing_tokenizer_files(folder: Path) -> list[str]:
    """The tokenizer files a CLIP folder lacks: none when it has tokenizer.json, else the missing BPE files."""
    if (folder / FAST_FILE).is_file():
        return []
    return [name for name in BPE_FILES if not (folder / name).is_file()]


def tokenizer_files_refusal(where: str, folder: Path, missing: list[str], hub: bool) -> ValueError:
    """The error for a model folder (or Hub snapshot) without the files of a CLIP tokenizer."""
    if len(missing) == len(BPE_FILES):
        lacks = f"{FAST_FILE} (or both {BPE_FILES[0]} and {BPE_FILES[1]})"
    else:
        have = [name for name in BPE_FILES if name not in missing]
        lacks = f"{FAST_FILE} and {', '.join(missing)} (it has only {', '.join(have)})"
    fix = (
        "run once with network access so they are downloaded into the cache, or pass a local folder that has them"
        if hub
        else "copy the tokenizer of the CLIP it comes from into the folder, e.g. "
        f"AutoTokenizer.from_pretrained('openai/clip-vit-base-patch32').save_pretrained({str(folder)!r})"
    )
    holder = f"its cached snapshot {folder}" if hub else "it"
    return ValueError(
        f"{where} has no CLIP tokenizer: {holder} lacks {lacks}. Without them transformers builds a tokenizer "
        f"that turns every word into end-of-text, so every caption would score the same. To fix: {fix}"
    )


def check_clip_tokenizer(tokenizer, text_config, where: str) -> None:
    """Raise a ValueError naming every way ``tokenizer`` does not fit the CLIP text tower of ``text_config``.

    Checks: an end-of-text token exists; no id reaches past the token embeddings; ``PROBE`` tokenises into word
    tokens (not only start/end-of-text or unknown); the tower pools at the end-of-text position this tokenizer
    writes.

    Args:
        tokenizer: the loaded transformers tokenizer.
        text_config: the model's ``CLIPTextConfig``.
        where: the model, as the message should name it.
    """
    vocab_size = int(text_config.vocab_size)
    size = len(tokenizer)
    bos, eos, unk = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id
    problems = []
    if eos is None:
        problems.append("it has no end-of-text token")
    if size > vocab_size:
        problems.append(f"its {size} tokens exceed the model's {vocab_size} token embeddings")
    ids = list(tokenizer(PROBE, add_special_tokens=True)["input_ids"])
    inner = ids[1 if ids[:1] == [bos] else 0 : -1 if eos is not None and ids[-1:] == [eos] else None]
    special = {bos, eos, unk} - {None}
    if not inner or any(i in special for i in inner):
        problems.append(
            f"it tokenises {PROBE!r} to {ids[:16]} (start/end-of-text or unknown tokens instead of words; its "
            f"vocabulary holds {size} tokens, the model's {vocab_size})"
        )
    elif max(ids) >= vocab_size:
        problems.append(
            f"it gives id {max(ids)} for {PROBE!r}, past the model's {vocab_size} token embeddings"
        )
    tower_eos = getattr(text_config, "eos_token_id", None)
    if eos is not None and tower_eos is not None:
        if tower_eos == LEGACY_EOS_ID:
            largest = max(tokenizer.get_vocab().values())
            if eos != largest:
                problems.append(
                    f"the text tower (text_config.eos_token_id = {LEGACY_EOS_ID}) pools at the largest id, but "
                    f"the tokenizer's end-of-text id is {eos}, not its largest id {largest}"
                )
        elif eos != tower_eos:
            problems.append(
                f"the text tower pools at end-of-text id {tower_eos} (text_config.eos_token_id) but the "
                f"tokenizer writes end-of-text as {eos}: every caption would be read at its first position"
            )
    if problems:
        raise ValueError(
            f"{where} has no working CLIP tokenizer ({type(tokenizer).__name__}): " + "; ".join(problems)
        )


def text_length(family: Family, tokenizer, text_config) -> int:
    """Text positions a caption may use: the processor's or tokenizer's length, within the tower's positions.

    RoBERTa-style towers (AltCLIP) number positions from ``pad_token_id + 1``, so they hold that many fewer.
    """
    positions = int(text_config.max_position_embeddings)
    if family.positions_after_pad:
        positions -= int(getattr(text_config, "pad_token_id", 0) or 0) + 1
    stated = family.max_length
    if stated is None:
        stated = int(tokenizer.model_max_length) if tokenizer.model_max_length < _UNBOUNDED else positions
    return min(stated, positions)


def check_tokenizer(family: Family, tokenizer, text_config, where: str) -> None:
    """Refuse a tokenizer that cannot feed the family's text tower (ids past its embeddings, no pad token where
    texts are padded to a fixed length, nothing but special tokens for a plain sentence)."""
    problems = []
    vocab = int(text_config.vocab_size)
    if len(tokenizer) > vocab:
        problems.append(f"its {len(tokenizer)} tokens exceed the model's {vocab} token embeddings")
    if family.text_padding == "max_length" and tokenizer.pad_token_id is None:
        problems.append("it has no pad token, and this family's texts are padded to a fixed length")
    ids = list(tokenizer("a photo of a dog", add_special_tokens=True)["input_ids"])
    if not ids or max(ids) >= vocab:
        problems.append(
            f"it tokenises 'a photo of a dog' to {ids[:16]}, outside the model's {vocab} embeddings"
        )
    if problems:
        raise ValueError(
            f"{where} has no working tokenizer for its {family.model_class} ({type(tokenizer).__name__}): "
            + "; ".join(problems)
        )


# One sentence in two cases: a tokenizer that lower-cases by itself gives both the same ids.
_CASE_PROBE = "A Photo Of A Dog"


def lower_cases(family: Family, tokenizer) -> bool:
    """Whether capeval lower-cases captions (and the prompt) before ``tokenizer``: the family was trained with what
    its tokenizer files' ``do_lower_case`` says, they say true, and the tokenizer as transformers built it does not
    lower-case by itself.

    The flag is read where transformers keeps ``tokenizer_config.json``'s entries (``init_kwargs``), so a folder, a
    Hub snapshot and a tokenizer object held in memory decide alike. SigLIP 2's Gemma tokenizer files set it and
    ``GemmaTokenizer`` ignores it: capeval lower-cases. SigLIP's T5 tokenizer (``SiglipTokenizer``) lower-cases
    itself when its flag is set: nothing to add, and its signatures stay as they were. Should transformers one day
    honour the flag, the probe finds the tokenizer lower-casing and capeval stops (lower-casing twice would change
    nothing either: ``ascii_lower`` is idempotent).
    """
    if not family.follows_do_lower_case:
        return False
    if (getattr(tokenizer, "init_kwargs", None) or {}).get("do_lower_case") is not True:
        return False
    mixed, lower = tokenizer([_CASE_PROBE, _CASE_PROBE.lower()], add_special_tokens=True)["input_ids"]
    return list(mixed) != list(lower)


def context_length(family: Family, tokenizer, config) -> int:
    """Text positions: CLIP's from its text config, other families' from their tokenizer (``text_length``)."""
    if family.is_clip:
        return int(config.text_config.max_position_embeddings)
    return text_length(family, tokenizer, config.text_config)
