"""Caption text to CLIP token ids, exactly as the CLIP authors' tokenizer produces them.

The OpenAI tokenizer (``clip/simple_tokenizer.py``) cleans text with ftfy and a double HTML unescape,
collapses whitespace and lower-cases before BPE. transformers' fast CLIP tokenizer skips the ftfy and
HTML steps, which changes the ids of curly quotes, ligatures, full-width characters and escaped
entities; we apply the authors' cleaning first, then the fast BPE. Over-long captions are cut the way
``clip.tokenize(..., truncate=True)`` cuts them: first ``context_length`` ids, the last set to
end-of-text, so the pooled embedding still reads the end-of-text position.
"""

from __future__ import annotations

import html
import re

import ftfy

PREFIX = "A photo depicts"  # Hessel et al. 2021, sec. 3: the prompt prepended to every caption
_WHITESPACE = re.compile(r"\s+")
# Printable ASCII, tab and line breaks, no "&": ftfy and the HTML unescape only turn "\r" into "\n" there,
# which the whitespace collapse erases, so such captions (nearly all) skip the ~40 us ftfy pass.
_PLAIN = re.compile(r"[\x20-\x25\x27-\x7e\t\n\r]*")


def clean_caption(text: str) -> str:
    """The authors' ``basic_clean`` then ``whitespace_clean`` (lower-casing is done by the tokenizer)."""
    if _PLAIN.fullmatch(text):
        return _WHITESPACE.sub(" ", text).strip()
    text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return _WHITESPACE.sub(" ", text).strip()


def with_prefix(text: str, prefix: str | None) -> str:
    """``prefix + " " + text`` as the CLIPScore code joins them (one space added when missing)."""
    if not prefix:
        return text
    return prefix + text if prefix.endswith(" ") else f"{prefix} {text}"


def tokenize_captions(tokenizer, texts: list[str], context_length: int) -> tuple[list[list[int]], int]:
    """Token ids with start- and end-of-text, truncated as the authors truncate.

    Args:
        tokenizer: a transformers CLIP tokenizer (adds start/end-of-text itself).
        texts: raw captions (the prefix already joined).
        context_length: the text encoder's positions (77 for released CLIPs).

    Returns:
        (ids, n_truncated): one id list per text, none longer than ``context_length``; how many were cut.
    """
    cleaned = [clean_caption(t) for t in texts]
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is not None and backend.truncation is None and backend.padding is None:
        # The Rust tokenizer directly: the same ids (special tokens come from its post-processor), without
        # the per-caption Python objects transformers builds around them.
        encoded = [e.ids for e in backend.encode_batch(cleaned, add_special_tokens=True)]
    else:
        encoded = tokenizer(cleaned, add_special_tokens=True, truncation=False, padding=False, verbose=False)
        encoded = [list(ids) for ids in encoded["input_ids"]]
    eos = tokenizer.eos_token_id
    n_truncated = 0
    for row, ids in enumerate(encoded):
        if len(ids) > context_length:
            ids = ids[:context_length]
            ids[-1] = eos
            encoded[row] = ids
            n_truncated += 1
    return encoded, n_truncated
