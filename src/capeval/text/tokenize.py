"""Caption tokenisation as the COCO caption toolkit does it, in pure Python.

The toolkit (tylin/coco-caption, ``pycocoevalcap/tokenizer/ptbtokenizer.py``) pipes every caption through
Stanford CoreNLP 3.4.1's ``PTBTokenizer -preserveLines -lowerCase`` and drops the tokens of its
``PUNCTUATIONS`` list; its WMD then splits the result on single spaces. ``ptb_tokenize`` follows that
lexer on caption text without Java: clitics split (``dog's`` -> ``dog 's``, ``don't`` -> ``do n't``),
hyphenated words, numbers, acronyms (``u.s.``) and ``word/word`` kept whole, brackets written as
``-lrb-``/``-rrb-`` (lower-cased, so the toolkit's upper-case ``-LRB-`` entry never removes them), double
quotes as ``\\`\\``` or ``''`` and every other punctuation mark split off. The tests compare it token for
token with the Stanford jar shipped by ``pycocoevalcap`` when Java is installed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

# pycocoevalcap/tokenizer/ptbtokenizer.py, PUNCTUATIONS. The bracket entries are upper case while the
# lexer's -lowerCase output is lower case, so brackets survive in the toolkit; we keep that behaviour.
COCO_PUNCTUATIONS = frozenset(
    ["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".", "?", "!", ",", ":", "-", "--", "...", ";"]
)

_BRACKETS = {"(": "-lrb-", ")": "-rrb-", "[": "-lsb-", "]": "-rsb-", "{": "-lcb-", "}": "-rcb-"}
# The lexer writes en and em dashes as "--", the ellipsis character as "...", and pound and euro signs as
# "#" and "$" (the PTB's conventions).
_NORMALISE = str.maketrans(
    {
        "\u201c": '"',
        "\u201d": '"',
        "\u2018": "'",
        "\u2019": "'",
        "\u00a0": " ",
        "\ufffd": " ",
        "\u2013": "--",
        "\u2014": "--",
        "\u2026": "...",
        "\u00a3": "#",
        "\u20ac": "$",
    }
)
# Abbreviations whose period the lexer keeps when more text follows (its list is longer; these are the ones
# captions use).
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st jr sr bros co corp inc ltd mt ft vs etc prof gen gov sen rep capt col lt sgt ave blvd".split()
)
_CLITIC = re.compile(r"(?i)^(.+?)(n't|'s|'m|'d|'re|'ve|'ll)$")
_SPACE = re.compile(r"\s+")
_PLAIN = re.compile(r"[A-Za-z0-9]+")
_ACRONYM = re.compile(r"(?:[^\W\d_]\.){2,}")
_ESCAPED = re.compile(r"-(?:LRB|RRB|LSB|RSB|LCB|RCB)-", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+(?:(?:[-./]|'(?=[^\W_]))[^\W_]+)*")
_UPPER_AMPERSAND = re.compile(r"[A-Z]+&[A-Z]+(?![^\W_])")
_LEADING_APOSTROPHE = re.compile(r"(?i)'(?:n|cause|em|til)(?![^\W_])")
_EXCLAIM = re.compile(r"[?!]+")
# Words the lexer splits in two (PTB convention).
_SPLIT_WORDS = {"cannot": 3, "gonna": 3, "gotta": 3, "wanna": 3, "lemme": 3, "gimme": 3}
_ENTITIES = (("&apos;", "'"), ("&quot;", '"'), ("&amp;", "&"))
_ROCK_N_ROLL = re.compile(r"'n'", re.IGNORECASE)
# A clitic already split off by an earlier tokeniser ("dog 's"), and times/ratios such as 12:30.
_LONE_CLITIC = re.compile(r"(?i)(?:n't|'s|'m|'d|'re|'ve|'ll)(?![^\W_])")
_TIME = re.compile(r"\d+(?::\d+)+")
# Numbers with inner separators stay whole ("1,000", "1.000,50", ".5"), and a sign that opens a chunk
# belongs to its number ("-5.5", "+1").
_NUMBER = re.compile(r"\d*(?:[.,:]\d+)+|\d+")
_SIGNED_NUMBER = re.compile(r"[-+](?:\d*(?:[.,:]\d+)+|\d+)")
# Decades ("'90s") and "'tis"/"'twas" ("'t is"), as the lexer's apostrophe words.
_DECADE = re.compile(r"'\d0s(?![^\W_])")
_APOSTROPHE_T = re.compile(r"(?i)'t(?=(?:is|was)(?![^\W_]))")
# Emoticons are one token, their brackets escaped: ":)" -> ":-rrb-".
# Words the lexer keeps whole around an apostrophe (its APOWORD rule, in part): a capital or "n" before it
# ("O'Neil"), vowels on both sides ("ma'am", "ne'er"), and a few listed words.
_INNER_APOSTROPHE = re.compile(r"([^\W\d_]+)'([^\W\d_]+)")
_APOSTROPHE_WORD = re.compile(
    r"[A-HJ-XZn]'[^\W\d_]{2,}|[lLdDjJ]'[^\W\d_]+|[^\W\d_]+[aeiouyAEIOUY]'[aeiouA-Z][^\W\d_]*"
    r"|(?i:o'clock|c'mon|e'er|cap'n|s'mores|li'l|ev'ry|nat'l|nor'easter)"
)
# ". . ." (spaced dots) is one ellipsis token for the lexer.
_SPACED_DOTS = re.compile(r"\.(?: \.){2}")
_DOUBLED_QUOTE = re.compile(r"''|``")
_SMILEY = re.compile(r"[:;]-?(?:[()]|[DPdp](?![^\W_]))")


def _is_opening(text: str, start: int, end: int) -> bool:
    prev, nxt = text[start - 1 : start], text[end : end + 1]
    return (not prev or prev.isspace() or prev in "([{") and bool(nxt) and not nxt.isspace()


def ptb_tokenize(text: str) -> list[str]:
    """Lower-cased PTB tokens of one caption, as Stanford's PTBTokenizer (CoreNLP 3.4.1) writes them.

    Punctuation tokens are kept; ``coco_tokens`` removes them as the toolkit does.

    >>> ptb_tokenize("A dog's toy (red) isn't \\"new\\".")
    ['a', 'dog', "'s", 'toy', '-lrb-', 'red', '-rrb-', 'is', "n't", '``', 'new', "''", '.']
    """
    text = _SPACED_DOTS.sub("...", text.translate(_NORMALISE))
    if "&" in text:
        for entity, char in _ENTITIES:
            text = text.replace(entity, char)
    tokens: list[str] = []
    # Tokens never span whitespace, so each chunk is lexed alone; plain words need no lexing at all.
    for chunk in text.split():
        if _PLAIN.fullmatch(chunk) and chunk.lower() not in _SPLIT_WORDS:
            tokens.append(chunk)
        else:
            _lex(chunk, tokens)
    if tokens and len(tokens[-1]) > 1 and tokens[-1].endswith(".") and tokens[-1] != "...":
        tokens.append(".")  # "in Washington D.C." ends the sentence too: the lexer adds its full stop
    return [t.lower() for t in tokens]


def _lex(text: str, tokens: list[str]) -> None:
    """Append the PTB tokens of ``text`` (one whitespace-free chunk, as a rule) to ``tokens``, left to right.

    One pass: at each position the whole-token patterns are tried first (acronyms, escaped brackets, clitics,
    times, ...), then emoticons, numbers against words (the longer wins), then single marks.
    """
    pos, n = 0, len(text)
    while pos < n:
        m = _SPACE.match(text, pos)
        if m:
            pos = m.end()
            continue
        if m := (
            _ACRONYM.match(text, pos)
            or _ESCAPED.match(text, pos)
            or _LONE_CLITIC.match(text, pos)
            or _TIME.match(text, pos)
            or _DECADE.match(text, pos)
            or _DOUBLED_QUOTE.match(text, pos)
            or _APOSTROPHE_T.match(text, pos)
            or (pos == 0 and _SIGNED_NUMBER.match(text, pos))
            or _UPPER_AMPERSAND.match(text, pos)
            or _ROCK_N_ROLL.match(text, pos)
            or _LEADING_APOSTROPHE.match(text, pos)
            or _EXCLAIM.match(text, pos)
        ):
            tokens.append(m.group())
            pos = m.end()
            continue
        if m := _SMILEY.match(text, pos):
            tokens.append("".join(_BRACKETS.get(ch, ch) for ch in m.group()))
            pos = m.end()
            continue
        number = _NUMBER.match(text, pos)
        m = _WORD.match(text, pos)
        if number and (m is None or number.end() > m.end()):
            tokens.append(number.group())
            pos = number.end()
        elif m:
            pos = _lex_word(text, pos, m, tokens)
        else:
            pos = _lex_mark(text, pos, tokens)


def _lex_word(text: str, pos: int, match: re.Match, tokens: list[str]) -> int:
    """Append the tokens of the word ``match`` found at ``pos``; return where lexing goes on.

    A word can stop short of its match: before an inner ``'n'`` ("fish'n'chips"), or after an apostrophe that
    splits an unknown word ("se'keo" -> "se", "`", then "keo" next round). An abbreviation or a capital
    initial takes its following period ("Mr.", "J."); "cannot" and friends split in two; clitics split off.
    """
    word, end = match.group(), match.end()
    if (inner := _ROCK_N_ROLL.search(word)) and inner.start() > 0:
        # "fish'n'chips" -> "fish 'n' chips": the next round lexes "'n'" on its own.
        word, end = word[: inner.start()], pos + inner.start()
    if text[end : end + 1] == "." and (word.lower() in _ABBREVIATIONS or (len(word) == 1 and word.isupper())):
        tokens.append(word + ".")
        return end + 1
    if (cut := _SPLIT_WORDS.get(word.lower())) is not None:
        tokens.extend((word[:cut], word[cut:]))
    elif c := _CLITIC.match(word):
        tokens.extend(c.groups())
    elif (inner := _INNER_APOSTROPHE.match(word)) and not _APOSTROPHE_WORD.fullmatch(word):
        # An apostrophe inside an unknown word splits it: "se'keo" -> "se ` keo", "int'l" -> "int ' l".
        left, right = inner.groups()
        tokens.extend((left, "`" if len(right) > 1 else "'"))
        return pos + len(left) + 1
    else:
        tokens.append(word)
    return end


def _lex_mark(text: str, pos: int, tokens: list[str]) -> int:
    """Append the token of the punctuation mark (or other symbol) at ``pos``; return the position after it.

    "..." and a run of two or more hyphens are one token each (the run as "--"); a double quote is an opening
    "``" or a closing "''" by its neighbours, a single quote an opening "`" only before a letter (else "'");
    brackets are escaped ("(" -> "-lrb-"); anything else is a token of one character.
    """
    ch = text[pos]
    if text.startswith("...", pos):
        tokens.append("...")
        return pos + 3
    if text.startswith("--", pos):
        end = pos
        while end < len(text) and text[end] == "-":
            end += 1
        tokens.append("--")  # "---" too
        return end
    if ch == '"':
        tokens.append("``" if _is_opening(text, pos, pos + 1) else "''")
    elif ch == "'":
        # An opening quote only before a letter: "'4'" -> "' 4 '".
        opening = _is_opening(text, pos, pos + 1) and text[pos + 1].isalpha()
        tokens.append("`" if opening else "'")
    else:
        tokens.append(_BRACKETS.get(ch, ch))
    return pos + 1


def coco_tokens(text: str, tokenizer: Callable[[str], list[str]] = ptb_tokenize) -> list[str]:
    """The toolkit's token list for one caption: PTB tokens without its punctuation marks."""
    return [t for t in tokenizer(text) if t not in COCO_PUNCTUATIONS]


def remove_stopwords(tokens: Iterable[str], stopwords: frozenset[str]) -> list[str]:
    """Tokens not in ``stopwords`` (exact, case-sensitive match, as the toolkit's set lookup)."""
    return [t for t in tokens if t not in stopwords]


def resolve_tokenizer(tokenizer) -> tuple[str, Callable[[str], list[str]]]:
    """The tokenizer option of WMD and WEmbSim: its signature label and the function (``"ptb"``: ``coco_tokens``)."""
    if tokenizer in (None, "ptb"):
        return "ptb", coco_tokens
    if callable(tokenizer):
        return f"custom:{getattr(tokenizer, '__name__', type(tokenizer).__name__)}", tokenizer
    raise ValueError(f"tokenizer must be 'ptb' or a callable (caption -> tokens), got {tokenizer!r}")
