"""Caption text to CLIP token ids, exactly as the CLIP authors' tokenizer produces them.

The OpenAI tokenizer (``clip/simple_tokenizer.py``) cleans text with ftfy and a double HTML unescape,
collapses whitespace and lower-cases before BPE. transformers' fast CLIP tokenizer skips the ftfy and
HTML steps, which changes the ids of curly quotes, ligatures, full-width characters and escaped
entities; we apply the authors' cleaning first, then the fast BPE. Plain ASCII captions (nearly all)
need no cleaning and are tokenised word by word from a cache filled by the same fast tokenizer.
Over-long captions are cut the way ``clip.tokenize(..., truncate=True)`` cuts them: first
``context_length`` ids, the last set to end-of-text, so the pooled embedding still reads the
end-of-text position.

Special-token text inside a caption follows the tokenizer the weights were released with
(``special_text``). OpenAI's tokenizer, and transformers' CLIP tokenizer after it, read ``<|startoftext|>`` and
``<|endoftext|>`` as the special tokens. open_clip's ``SimpleTokenizer`` (3.3.0, ``src/open_clip/tokenizer.py``)
spells the same two ids ``<start_of_text>`` and ``<end_of_text>`` and reads only those spellings as special
(case-insensitively, where its pre-tokenizing pattern reaches them first); OpenAI's spellings are ordinary
punctuation and letters there (``<|``, ``endoftext``, ``|>``).
"""

from __future__ import annotations

import html
import re
import threading
import weakref

import ftfy
import regex

PREFIX = "A photo depicts"  # Hessel et al. 2021, sec. 3: the prompt prepended to every caption
SPECIAL_TEXT = ("openai", "open_clip")  # whose special-token spellings a caption's text is read with
_WHITESPACE = re.compile(r"\s+")
# Printable ASCII, tab and line breaks, no "&": ftfy and the HTML unescape only turn "\r" into "\n" there,
# which the whitespace collapse erases, so such captions (nearly all) skip the ~40 us ftfy pass.
_PLAIN = re.compile(r"[\x20-\x25\x27-\x7e\t\n\r]*")


# CLIP's pre-tokenizer (``clip/simple_tokenizer.py``'s pattern, also in transformers' ``tokenizer.json``) cuts text
# into pieces that never contain or cross whitespace, and BPE runs on each piece alone: a whitespace-separated
# word has the same ids wherever it occurs. Plain captions are therefore tokenised by looking their words up,
# each new word encoded once by the tokenizer itself (the authors' tokenizer caches words the same way).
_WORD_CACHE_LIMIT = 1_000_000  # words kept per tokenizer before the cache starts over
# Strings the word lookup must tokenise exactly as the tokenizer does before it is used with that tokenizer.
_PROBES = [
    "",
    "a dog's ball, isn't it? they're here; we'll see... I'M YOU'VE THEY'D",
    "numbers 1234567 and 3.14 and 1,000 x--y ''s 's' (a) [b] {c} ~`@#$%^*_+=|\\/<> \"q\"",
    "supercalifragilisticexpialidocious " + "x" * 90,
]
_word_ids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_word_ids_lock = threading.Lock()  # threads meeting a new tokenizer at once build and probe its cache once
# open_clip's SimpleTokenizer pre-tokenizes the cleaned, lower-cased text with CLIP's pattern preceded by its own two
# special spellings (matched case-insensitively); each piece is then BPE-encoded alone, a special one to its id.
_OPEN_CLIP_SPECIALS = ("<start_of_text>", "<end_of_text>")  # ids: start- and end-of-text
_OPEN_CLIP_PIECES = regex.compile(
    "|".join(regex.escape(t) for t in _OPEN_CLIP_SPECIALS)
    + r"""|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
    regex.IGNORECASE,
)


def clean_caption(text: str) -> str:
    """The authors' ``basic_clean`` then ``whitespace_clean`` (lower-casing is done by the tokenizer)."""
    if _PLAIN.fullmatch(text):
        return _WHITESPACE.sub(" ", text).strip()
    text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return _WHITESPACE.sub(" ", text).strip()


# A-Z to a-z and nothing else: big_vision's ``lower`` op, which SigLIP 2's text pipeline runs before the Gemma
# tokenizer, is ``tf.strings.lower`` without an encoding, i.e. ``absl::AsciiStrToLower`` (TensorFlow's
# string_lower_op.cc); Python's ``str.lower`` would also fold "É", "Σ" or "Д", which big_vision leaves as they are.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """``text`` with ASCII capitals lower-cased and every other character kept (idempotent)."""
    return text.translate(_ASCII_LOWER)


def with_prefix(text: str, prefix: str | None) -> str:
    """``prefix + " " + text`` as the CLIPScore code joins them (one space added when missing)."""
    if not prefix:
        return text
    return prefix + text if prefix.endswith(" ") else f"{prefix} {text}"


def _backend(tokenizer):
    """The Rust tokenizer behind a transformers fast tokenizer, when it adds special tokens and nothing else."""
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is not None and backend.truncation is None and backend.padding is None:
        return backend
    return None


def _encode_with_tokenizer(tokenizer, cleaned: list[str]) -> list[list[int]]:
    backend = _backend(tokenizer)
    if backend is not None:
        # The Rust tokenizer directly: the same ids (special tokens come from its post-processor), without
        # the per-caption Python objects transformers builds around them.
        return [e.ids for e in backend.encode_batch(cleaned, add_special_tokens=True)]
    encoded = tokenizer(cleaned, add_special_tokens=True, truncation=False, padding=False, verbose=False)
    return [list(ids) for ids in encoded["input_ids"]]


class _WordIds:
    """Token ids of plain captions from a per-tokenizer cache of their words' ids."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: dict[str, list[int]] = {}
        self.bos, self.eos = tokenizer.bos_token_id, tokenizer.eos_token_id
        self.lock = threading.Lock()  # callers on several threads share one cache

    def encode(self, plain: list[str]) -> list[list[int]]:
        """Ids with start- and end-of-text of printable-ASCII captions without ``&`` or special-token text (no
        cleaning needed: ftfy and the HTML unescape leave them as they are, and splitting drops the whitespace)."""
        words = [t.lower().split() for t in plain]
        with self.lock:
            return self._lookup(words)

    def _lookup(self, words: list[list[str]]) -> list[list[int]]:
        ids = self.ids
        missing = list({w: None for ws in words for w in ws if w not in ids})
        if missing and len(ids) + len(missing) > _WORD_CACHE_LIMIT:
            ids.clear()
            missing = list({w: None for ws in words for w in ws})
        if missing:
            backend = _backend(self.tokenizer)
            if backend is not None:
                found = [e.ids for e in backend.encode_batch(missing, add_special_tokens=False)]
            else:
                found = self.tokenizer(missing, add_special_tokens=False, verbose=False)["input_ids"]
            ids.update(zip(missing, found, strict=True))
        bos, eos = [self.bos], [self.eos]
        out = []
        for ws in words:
            row = bos.copy()
            for w in ws:
                row += ids[w]
            row += eos
            out.append(row)
        return out


def _word_ids_for(tokenizer) -> _WordIds | None:
    """The tokenizer's word cache, or None when word lookup would not reproduce it (checked once)."""
    try:
        cached = _word_ids.get(tokenizer, False)
    except TypeError:  # not weak-referenceable: no cache
        return None
    if cached is not False:
        return cached
    with _word_ids_lock:
        cached = _word_ids.get(tokenizer, False)
        if cached is not False:
            return cached
        fast = _WordIds(tokenizer) if tokenizer.bos_token_id is not None else None
        if fast is not None:
            probes = [clean_caption(p) for p in _PROBES]
            if fast.encode(probes) != _encode_with_tokenizer(tokenizer, probes):
                fast = None
        _word_ids[tokenizer] = fast
        return fast


def forget_tokenizer(tokenizer) -> None:
    """Drop ``tokenizer``'s word cache and the check that it may be used: both are made again, from the tokenizer as
    it is then, at its next use (a model object's tokenizer changed in place: ``model_identity.tokenizer_digest``)."""
    with _word_ids_lock:
        try:
            _word_ids.pop(tokenizer, None)
        except TypeError:  # not weak-referenceable: never cached
            pass


def clear_word_cache(tokenizer) -> None:
    """Forget the words cached for ``tokenizer`` (benchmarks measure the first, uncached pass)."""
    fast = _word_ids.get(tokenizer) if tokenizer is not None else None
    if fast is not None:
        with fast.lock:
            fast.ids.clear()


def _encode_pieces(tokenizer, pieces: list[str]) -> list[list[int]]:
    """BPE ids of pre-tokenized pieces, each encoded alone without special tokens."""
    backend = _backend(tokenizer)
    if backend is not None:
        return [e.ids for e in backend.encode_batch(pieces, add_special_tokens=False)]
    return [list(x) for x in tokenizer(pieces, add_special_tokens=False, verbose=False)["input_ids"]]


def _open_clip_encode(tokenizer, cleaned: list[str]) -> list[list[int]]:
    """Ids of cleaned captions as open_clip's ``SimpleTokenizer`` gives them: lower-cased, cut into pieces by its
    pattern, ``<start_of_text>``/``<end_of_text>`` pieces to the start/end-of-text ids and every other piece through
    the BPE alone. A piece never holds ``<|endoftext|>`` whole (its letters are a piece of their own), so the
    tokenizer's special-token matching never sees OpenAI's spellings."""
    specials = dict(zip(_OPEN_CLIP_SPECIALS, (tokenizer.bos_token_id, tokenizer.eos_token_id), strict=True))
    split = [_OPEN_CLIP_PIECES.findall(text.lower()) for text in cleaned]
    plain = list({p: None for pieces in split for p in pieces if p not in specials})
    bpe = dict(zip(plain, _encode_pieces(tokenizer, plain), strict=True)) if plain else {}
    out = []
    for pieces in split:
        row = [tokenizer.bos_token_id]
        for p in pieces:
            special = specials.get(p)
            row += [special] if special is not None else bpe[p]
        row.append(tokenizer.eos_token_id)
        out.append(row)
    return out


def tokenize_captions(
    tokenizer, texts: list[str], context_length: int, special_text: str = "openai"
) -> tuple[list[list[int]], int]:
    """Token ids with start- and end-of-text, truncated as the authors truncate.

    Args:
        tokenizer: a transformers CLIP tokenizer (adds start/end-of-text itself).
        texts: raw captions (the prefix already joined).
        context_length: the text encoder's positions (77 for released CLIPs).
        special_text: ``"openai"``: ``<|startoftext|>``/``<|endoftext|>`` in a caption are the special tokens
            (OpenAI's tokenizer, transformers' CLIP tokenizer); ``"open_clip"``: ``<start_of_text>`` and
            ``<end_of_text>`` are, OpenAI's spellings plain text (open_clip's ``SimpleTokenizer``: OpenCLIP files).

    Returns:
        (ids, n_truncated): one id list per text, none longer than ``context_length``; how many were cut.

    Raises:
        ValueError: an unknown ``special_text``.
    """
    if special_text not in SPECIAL_TEXT:
        raise ValueError(f"special_text must be one of {', '.join(SPECIAL_TEXT)}, got {special_text!r}")
    open_clip = special_text == "open_clip"
    special_start = "<" if open_clip else "<|"  # where special-token text can begin
    fast = _word_ids_for(tokenizer)
    plain_rows, plain, other_rows, other, piece_rows, pieces = [], [], [], [], [], []
    for row, text in enumerate(texts):
        if fast is not None and _PLAIN.fullmatch(text) and special_start not in text:
            plain_rows.append(row)
            plain.append(text)
            continue
        cleaned = clean_caption(text)
        if open_clip and "<" in cleaned:  # only there can open_clip's reading of special text differ
            piece_rows.append(row)
            pieces.append(cleaned)
        else:
            other_rows.append(row)
            other.append(cleaned)
    encoded: list = [None] * len(texts)
    if plain:
        for row, ids in zip(plain_rows, fast.encode(plain), strict=True):
            encoded[row] = ids
    if other:
        for row, ids in zip(other_rows, _encode_with_tokenizer(tokenizer, other), strict=True):
            encoded[row] = ids
    if pieces:
        for row, ids in zip(piece_rows, _open_clip_encode(tokenizer, pieces), strict=True):
            encoded[row] = ids
    eos = tokenizer.eos_token_id
    n_truncated = 0
    for row, ids in enumerate(encoded):
        if len(ids) > context_length:
            ids = ids[:context_length]
            ids[-1] = eos
            encoded[row] = ids
            n_truncated += 1
    return encoded, n_truncated
