"""Refusing a model whose tokenizer cannot tokenise captions for its CLIP text tower.

transformers builds a tokenizer from whatever a folder holds: a CLIP folder without its tokenizer files gets a
2-token ``CLIPTokenizer`` (start- and end-of-text only) that turns every word into end-of-text, so every caption
embeds the same and scores the same. A tokenizer from another model (BERT, GPT-2) gives ids the text tower reads
as other words, or no end-of-text at the position the tower pools. Each of these is refused here, by name, when
the backbone is loaded.
"""

from __future__ import annotations

from pathlib import Path

# transformers' CLIP tokenizers read tokenizer.json (fast), or vocab.json + merges.txt (the BPE files).
FAST_FILE = "tokenizer.json"
BPE_FILES = ("vocab.json", "merges.txt")
# Ordinary English words that every CLIP BPE vocabulary holds: each must come out as its own word tokens.
PROBE = "a photo depicts a dog running on the beach"
# transformers' CLIPTextTransformer: a text_config.eos_token_id of 2 (configs written before transformers PR
# #24773, e.g. openai/clip-vit-base-patch32) pools at argmax(input_ids), which is end-of-text only when
# end-of-text is the largest id; any other value pools at the first position holding that id.
LEGACY_EOS_ID = 2


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
