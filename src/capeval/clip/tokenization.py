"""Caption text to CLIP token ids, exactly as the CLIP authors' tokenizer produces them.

The OpenAI tokenizer (``clip/simple_tokenizer.py``) cleans text with ftfy and a double HTML unescape, collapses
whitespace, lower-cases with Python's ``str.lower``, cuts the text into pieces with its pattern and runs BPE on each
piece alone. transformers' fast CLIP tokenizer differs on text the authors' tokenizer reads otherwise: it skips the
ftfy and HTML steps (curly quotes, ligatures, full-width characters, escaped entities), lower-cases character by
character with Rust's Unicode tables (a word-final capital sigma becomes "σ" where ``str.lower`` gives "ς"; letters
newer than Python's Unicode tables are folded too), and finds its special tokens anywhere in the text
(``x..<|endoftext|>y``, where OpenAI's pattern takes ``..<|`` as punctuation first). So every caption goes through
the authors' steps here, and only the BPE of each piece is the tokenizer's (its own BPE model, fed the piece's
bytes as the authors' byte encoder writes them). Plain ASCII captions (nearly all) are tokenised word by word from a
cache filled by the same fast tokenizer, which reads them exactly as the authors do. Over-long captions are cut the
way ``clip.tokenize(..., truncate=True)`` cuts them: first ``context_length`` ids, the last set to end-of-text, so
the pooled embedding still reads the end-of-text position.

Special-token text inside a caption follows the tokenizer the weights were released with (``special_text``).
OpenAI's tokenizer reads ``<|startoftext|>`` and ``<|endoftext|>`` as the special tokens where its pattern reaches
them: after lower-casing (so ``<|ENDOFTEXT|>`` too), and not where a run of punctuation takes their ``<|`` first.
open_clip's ``SimpleTokenizer`` (3.3.0, ``src/open_clip/tokenizer.py``) runs the same steps with the spellings
``<start_of_text>`` and ``<end_of_text>`` for the same two ids; OpenAI's spellings are ordinary punctuation and
letters there (``<|``, ``endoftext``, ``|>``).
"""

from __future__ import annotations

import html
import re
import threading
import weakref

import ftfy
import regex

PREFIX = "A photo depicts"  # Hessel et al. 2021, sec. 3: the prompt prepended to every caption
# Revision of how capeval turns captions into token ids, named in the signatures of the families that declare it
# (``capeval.clip.families.Family.tokenization``) so that scores and embeddings of an earlier reading are not mixed
# with this one. 2: CLIP's BPE reads special-token spellings and Unicode case as the authors' tokenizers do, SigLIP
# reads special-token spellings as text. A signature without the field was made by revision 1.
TOKENIZATION_REVISION = 2
# The start- and end-of-text spellings each reference tokenizer matches in a caption's text, in that order.
_SPECIAL_SPELLINGS = {
    "openai": ("<|startoftext|>", "<|endoftext|>"),  # clip/simple_tokenizer.py
    "open_clip": ("<start_of_text>", "<end_of_text>"),  # open_clip 3.3.0 src/open_clip/tokenizer.py
}
SPECIAL_TEXT = tuple(_SPECIAL_SPELLINGS)  # whose special-token spellings a caption's text is read with
# Both tokenizers' pattern: their special spellings first, then CLIP's pieces, matched case-insensitively (with the
# ``regex`` module, as theirs) on the lower-cased text.
_PIECES = {
    name: regex.compile(
        "|".join(regex.escape(s) for s in spellings)
        + r"""|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
        regex.IGNORECASE,
    )
    for name, spellings in _SPECIAL_SPELLINGS.items()
}
_WHITESPACE = re.compile(r"\s+")
# Printable ASCII, tab and line breaks, no "&": ftfy and the HTML unescape only turn "\r" into "\n" there,
# which the whitespace collapse erases, so such captions (nearly all) skip the ~40 us ftfy pass.
_PLAIN = re.compile(r"[\x20-\x25\x27-\x7e\t\n\r]*")


def _byte_encoder() -> dict[int, str]:
    """The authors' ``bytes_to_unicode`` (GPT-2's, also tokenizers' ``ByteLevel``): each byte as the character the
    BPE vocabulary spells it with; printable Latin-1 bytes stand for themselves, the others from U+0100 on."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return {b: chr(b) if b in kept else chr(next(extra)) for b in range(256)}


# Through Latin-1 each byte is one character, which this table turns into the byte encoder's.
_BYTE_LEVEL = str.maketrans({chr(b): c for b, c in _byte_encoder().items()})


def _byte_level(piece: str) -> str:
    return piece.encode("utf-8").decode("latin-1").translate(_BYTE_LEVEL)


# CLIP's pattern cuts text into pieces that never contain or cross whitespace, and BPE runs on each piece alone: a
# whitespace-separated word has the same ids wherever it occurs. Plain captions are therefore tokenised by looking
# their words up, each new word encoded once by the tokenizer itself; other captions by looking their pieces up, each
# new piece encoded once by the tokenizer's BPE model (the authors' tokenizer caches pieces the same way).
_WORD_CACHE_LIMIT = 1_000_000  # words (and pieces) kept per tokenizer before a cache starts over
# Strings the word and piece lookups must tokenise exactly as the tokenizer does before they are used with it: ASCII
# (both lookups), then text whose cleaning and lower-casing the authors' steps and the tokenizer's agree on (pieces).
_PROBES = [
    "",
    "a dog's ball, isn't it? they're here; we'll see... I'M YOU'VE THEY'D",
    "numbers 1234567 and 3.14 and 1,000 x--y ''s 's' (a) [b] {c} ~`@#$%^*_+=|\\/<> \"q\"",
    "supercalifragilisticexpialidocious " + "x" * 90,
]
_UNICODE_PROBES = ["Café naïve ß Ünïcödé 日本語 😀 é́ — ½ Дом"]
_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()  # threads meeting a new tokenizer at once build and probe its caches once


def clean_caption(text: str) -> str:
    """The authors' ``basic_clean`` then ``whitespace_clean`` (their ``str.lower`` comes after, with the pieces)."""
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


def _fill(cache: dict, split: list[list[str]], encode, skip: dict) -> None:
    """Add the ids of the keys of ``split`` (one list per caption) missing from ``cache`` and ``skip``
    (``encode``: list of keys -> list of id lists); a cache that would pass ``_WORD_CACHE_LIMIT`` starts over with
    this call's keys."""
    missing = list({k: None for keys in split for k in keys if k not in cache and k not in skip})
    if missing and len(cache) + len(missing) > _WORD_CACHE_LIMIT:
        cache.clear()
        missing = list({k: None for keys in split for k in keys if k not in skip})
    if missing:
        cache.update(zip(missing, encode(missing), strict=True))


class _CachedIds:
    """Token ids from per-tokenizer caches: the whitespace words of plain captions (through the tokenizer) and the
    authors' pieces of every other caption (through the tokenizer's BPE model)."""

    def __init__(self, tokenizer, bpe) -> None:
        self.tokenizer, self.bpe = tokenizer, bpe
        self.words: dict[str, list[int]] = {}
        self.pieces: dict[str, list[int]] = {}
        self.bos, self.eos = tokenizer.bos_token_id, tokenizer.eos_token_id
        self.lock = threading.Lock()  # callers on several threads share the caches

    def encode_plain(self, plain: list[str]) -> list[list[int]]:
        """Ids with start- and end-of-text of printable-ASCII captions without ``&``, and without ``<``, where
        special-token text starts. No cleaning is needed: ftfy and the HTML unescape leave them as they are, and
        splitting drops the whitespace."""
        words = [t.lower().split() for t in plain]
        with self.lock:
            _fill(self.words, words, self._encode_words, {})
            return self._rows(words, self.words, {})

    def encode_cleaned(self, cleaned: list[str], special_text: str) -> list[list[int]]:
        """Ids with start- and end-of-text of cleaned captions, pieces and special spellings as the authors'."""
        specials = dict(zip(_SPECIAL_SPELLINGS[special_text], (self.bos, self.eos), strict=True))
        split = [_PIECES[special_text].findall(t.lower()) for t in cleaned]
        with self.lock:
            _fill(self.pieces, split, self._encode_pieces, specials)
            return self._rows(split, self.pieces, specials)

    def _encode_words(self, words: list[str]) -> list[list[int]]:
        backend = _backend(self.tokenizer)
        if backend is not None:
            return [e.ids for e in backend.encode_batch(words, add_special_tokens=False)]
        return self.tokenizer(words, add_special_tokens=False, verbose=False)["input_ids"]

    def _encode_pieces(self, pieces: list[str]) -> list[list[int]]:
        # The BPE model alone, on the piece's bytes as the authors' byte encoder spells them: none of the
        # tokenizer's normalising (its own lower-casing, NFC), pre-tokenizing or special-token matching runs again.
        return [[t.id for t in self.bpe.tokenize(_byte_level(p))] for p in pieces]

    def _rows(self, split: list[list[str]], ids: dict, specials: dict) -> list[list[int]]:
        bos, eos = [self.bos], [self.eos]
        out = []
        for keys in split:
            row = bos.copy()
            if specials:
                for k in keys:
                    special = specials.get(k)
                    row += ids[k] if special is None else [special]
            else:
                for k in keys:
                    row += ids[k]
            row += eos
            out.append(row)
        return out


def _cached_ids_for(tokenizer) -> _CachedIds | None:
    """The tokenizer's caches, or None when they would not reproduce it (checked once): a tokenizer without a
    start-of-text token or a Rust BPE model, or one whose ids on ``_PROBES`` the lookups do not give."""
    try:
        cached = _caches.get(tokenizer, False)
    except TypeError:  # not weak-referenceable: no cache
        return None
    if cached is not False:
        return cached
    with _caches_lock:
        cached = _caches.get(tokenizer, False)
        if cached is not False:
            return cached
        bpe = getattr(getattr(tokenizer, "_tokenizer", None), "model", None)
        fast = None
        if tokenizer.bos_token_id is not None and callable(getattr(bpe, "tokenize", None)):
            fast = _CachedIds(tokenizer, bpe)
            ascii_probes = [clean_caption(p) for p in _PROBES]
            probes = ascii_probes + [clean_caption(p) for p in _UNICODE_PROBES]
            expected = _encode_with_tokenizer(tokenizer, probes)
            if (
                fast.encode_plain(ascii_probes) != expected[: len(ascii_probes)]
                or fast.encode_cleaned(probes, "openai") != expected
            ):
                fast = None
        _caches[tokenizer] = fast
        return fast


def forget_tokenizer(tokenizer) -> None:
    """Drop ``tokenizer``'s word cache and the check that it may be used: both are made again, from the tokenizer as
    it is then, at its next use (a model object's tokenizer changed in place: ``model_identity.tokenizer_digest``)."""
    with _caches_lock:
        try:
            _caches.pop(tokenizer, None)
        except TypeError:  # not weak-referenceable: never cached
            pass


def clear_word_cache(tokenizer) -> None:
    """Forget the words and pieces cached for ``tokenizer`` (benchmarks measure the first, uncached pass)."""
    fast = _caches.get(tokenizer) if tokenizer is not None else None
    if fast is not None:
        with fast.lock:
            fast.words.clear()
            fast.pieces.clear()


def tokenize_captions(
    tokenizer, texts: list[str], context_length: int, special_text: str = "openai"
) -> tuple[list[list[int]], int]:
    """``tokenize_captions_cut``'s ids and how many of the texts were cut to the context length."""
    encoded, cut_rows = tokenize_captions_cut(tokenizer, texts, context_length, special_text)
    return encoded, len(cut_rows)


def tokenize_captions_cut(
    tokenizer, texts: list[str], context_length: int, special_text: str = "openai"
) -> tuple[list[list[int]], list[int]]:
    """Token ids with start- and end-of-text, truncated as the authors truncate.

    Args:
        tokenizer: a transformers CLIP tokenizer (adds start/end-of-text itself).
        texts: raw captions (the prefix already joined).
        context_length: the text encoder's positions (77 for released CLIPs).
        special_text: ``"openai"``: ``<|startoftext|>``/``<|endoftext|>`` in a caption are the special tokens
            where OpenAI's pattern reaches them (OpenAI's tokenizer); ``"open_clip"``: ``<start_of_text>`` and
            ``<end_of_text>`` are, OpenAI's spellings plain text (open_clip's ``SimpleTokenizer``: OpenCLIP files).

    Returns:
        (ids, cut_rows): one id list per text, none longer than ``context_length``; the rows that were cut.

    Raises:
        ValueError: an unknown ``special_text``.
    """
    if special_text not in SPECIAL_TEXT:
        raise ValueError(f"special_text must be one of {', '.join(SPECIAL_TEXT)}, got {special_text!r}")
    fast = _cached_ids_for(tokenizer)
    if fast is None:  # a tokenizer the lookups cannot reproduce: the tokenizer as it is
        encoded = _encode_with_tokenizer(tokenizer, [clean_caption(t) for t in texts]) if texts else []
    else:
        plain_rows, plain, other_rows, other = [], [], [], []
        for row, text in enumerate(texts):
            # Special-token text starts with "<": words holding one are cut by the authors' pattern, as theirs.
            if _PLAIN.fullmatch(text) and "<" not in text:
                plain_rows.append(row)
                plain.append(text)
            else:
                other_rows.append(row)
                other.append(clean_caption(text))
        encoded = [None] * len(texts)
        for row, ids in zip(plain_rows, fast.encode_plain(plain), strict=True):
            encoded[row] = ids
        for row, ids in zip(other_rows, fast.encode_cleaned(other, special_text), strict=True):
            encoded[row] = ids
    eos = tokenizer.eos_token_id
    cut_rows = []
    for row, ids in enumerate(encoded):
        if len(ids) > context_length:
            ids = ids[:context_length]
            ids[-1] = eos
            encoded[row] = ids
            cut_rows.append(row)
    return encoded, cut_rows
