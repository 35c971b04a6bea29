"""Token ids equal the CLIP authors' tokenizer, truncation included."""

from __future__ import annotations

import random

import pytest

from capeval.clip.tokenization import clean_caption, tokenize_captions, with_prefix
from capeval_dev.testing.openai_reference import openai_tokenize

UNICODE_AND_ODD = [
    "café naïve ﬁne “quoted” ｆｕｌｌ-width 😀 日本語",
    "&amp;lt;b&gt; html &quot;entities&quot;",
    "tab\tnew\nline   spaces",
    "Ünïcödé ÀÉÎ ß ǅ",
    "e\u0301 combining accent",
    "mojibake: Ã© should be fixed",
    "emoji 👩‍👩‍👧 flags 🇫🇷 ❤️",
    "A DOG'S ball, isn't it? They're here; we'll see.",
    "numbers 1234567 and 3.14 and 1,000",
    "   leading and trailing   ",
]


def _captions(benchmarks_root) -> list[str]:
    rng = random.Random(0)
    caps = list(UNICODE_AND_ODD)
    token_file = benchmarks_root / "flickr8k" / "Flickr8k.token.txt" if benchmarks_root else None
    if token_file is not None and token_file.is_file():
        lines = token_file.read_text(encoding="utf-8").splitlines()
        caps += [line.split("\t", 1)[1] for line in rng.sample(lines, 300)]
    else:
        words = "a man woman dog runs jumps over red blue ball grass beach city street".split()
        caps += [" ".join(rng.choice(words) for _ in range(rng.randint(1, 20))) for _ in range(300)]
    caps += [" ".join(["word"] * 300), "x" * 500, "a " * 80, "long " * 76, "long " * 75]
    return caps


@pytest.fixture(scope="module")
def clip_tokenizer():
    from capeval.shapes.tiny_clip import build_clip_tokenizer

    return build_clip_tokenizer()


def test_token_ids_equal_the_authors_tokenizer_on_hundreds_of_captions(clip_tokenizer):
    from conftest import BENCHMARKS

    captions = _captions(BENCHMARKS if BENCHMARKS.is_dir() else None)
    assert len(captions) >= 300
    ours, n_cut = tokenize_captions(clip_tokenizer, captions, context_length=77)
    theirs = openai_tokenize(captions)
    mismatches = [(c, a[:10], b[:10]) for c, a, b in zip(captions, ours, theirs, strict=True) if a != b]
    assert mismatches == []
    from capeval_dev.testing.openai_reference import simple_tokenizer

    too_long = sum(len(simple_tokenizer().encode(c)) + 2 > 77 for c in captions)
    assert too_long >= 4
    assert n_cut == too_long


def test_truncated_captions_keep_end_of_text_and_are_counted(clip_tokenizer):
    captions = ["short caption", " ".join(["word"] * 300), "tiny " * 76]
    ids, n_cut = tokenize_captions(clip_tokenizer, captions, context_length=77)
    assert n_cut == 2
    assert [len(x) for x in ids] == [4, 77, 77]
    assert all(x[0] == 49406 and x[-1] == 49407 for x in ids)
    assert ids[1] == openai_tokenize([captions[1]])[0]


def test_special_ids_and_vocabulary_are_the_released_ones(clip_tokenizer):
    assert len(clip_tokenizer) == 49408
    assert clip_tokenizer.bos_token_id == 49406
    assert clip_tokenizer.eos_token_id == 49407


def test_cleaning_matches_the_authors_basic_and_whitespace_clean():
    assert clean_caption("  a\t&amp;amp;  b\n") == "a & b"
    assert clean_caption("“curly”") == '"curly"'
    # ftfy leaves entities alone in text holding "<" (it takes it for HTML), so only the authors' second
    # html.unescape (clip/simple_tokenizer.py, basic_clean) turns "&amp;amp;" into "&" there: by hand,
    # "&amp;amp;" -> "&amp;" -> "&".
    assert clean_caption("x < y &amp;amp; z") == "x < y & z"


def test_prefix_is_joined_with_one_space_as_the_authors_do():
    assert with_prefix("a dog", "A photo depicts") == "A photo depicts a dog"
    assert with_prefix("a dog", "A photo depicts ") == "A photo depicts a dog"
    assert with_prefix("a dog", "") == "a dog"


def test_plain_ascii_fast_path_equals_the_full_ftfy_cleaning():
    import html
    import re
    import string

    import ftfy

    def full(text):
        text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
        return re.sub(r"\s+", " ", text).strip()

    rng = random.Random(1)
    alphabet = string.printable
    pieces = ["\r\n", "\r", "\t", "&amp;", "&lt;b&gt;", "<b>", "\x0b", "\x0c", "\x00", "\x7f", "é", "“"]
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25)))
        if rng.random() < 0.5:
            text += rng.choice(pieces) + text
        assert clean_caption(text) == full(text), repr(text)


def _tokenizer_only(tokenizer, captions):
    from capeval.clip.tokenization import _encode_with_tokenizer

    return _encode_with_tokenizer(tokenizer, [clean_caption(c) for c in captions])


def test_word_lookup_gives_the_tokenizers_ids_on_random_ascii_and_real_captions(clip_tokenizer):
    import string

    from conftest import BENCHMARKS

    rng = random.Random(1)
    alphabet = string.ascii_letters + string.digits + " ''''.,;:!?-()[]{}\"/\\|@#$%^*_+=~`<>\t\n\r"
    captions = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(5000)]
    captions += ["I'M HERE", "it's", "''s", "'s'", "x's's", "don't-stop", "a<|b", "&amp; too"]
    token_file = BENCHMARKS / "flickr8k" / "Flickr8k.token.txt"
    if token_file.is_file():
        captions += [line.split("\t", 1)[1] for line in token_file.read_text(encoding="utf-8").splitlines()]
    ours, _ = tokenize_captions(clip_tokenizer, captions, context_length=10**6)
    assert ours == _tokenizer_only(clip_tokenizer, captions)
    ours_again, _ = tokenize_captions(clip_tokenizer, captions[::-1], context_length=10**6)  # cached words
    assert ours_again == ours[::-1]


def test_a_full_word_cache_starts_over_and_stays_exact(clip_tokenizer, monkeypatch):
    import capeval.clip.tokenization as tokenization

    monkeypatch.setattr(tokenization, "_WORD_CACHE_LIMIT", 5)
    captions = ["a red circle left of a blue square", "two green triangles", "one yellow star ."]
    for _ in range(2):
        assert tokenize_captions(clip_tokenizer, captions, 77)[0] == _tokenizer_only(clip_tokenizer, captions)
    # The pieces of other captions, likewise.
    others = ["ΟΔΟΣ café “naïve” x..<|endoftext|>y", "ÉLAN <|ENDOFTEXT|> ﬁne", "日本語 😀 a<b"]
    for _ in range(2):
        assert tokenize_captions(clip_tokenizer, others, 77)[0] == openai_tokenize(others)


class _PositionalTokenizer:
    """A tokenizer whose ids depend on a word's position: word lookup cannot reproduce it."""

    bos_token_id, eos_token_id, _tokenizer = 1, 2, None

    def __call__(self, texts, add_special_tokens=True, **_):
        rows = [[10 * (k + 1) + len(w) for k, w in enumerate(t.lower().split())] for t in texts]
        return {"input_ids": [[1, *r, 2] if add_special_tokens else r for r in rows]}


def test_word_lookup_is_not_used_when_the_probes_disagree():
    from capeval.clip.tokenization import _cached_ids_for

    tokenizer = _PositionalTokenizer()
    assert _cached_ids_for(tokenizer) is None
    captions = ["a dog runs", "dog a runs fast"]
    assert tokenize_captions(tokenizer, captions, 77)[0] == [[1, 11, 23, 34, 2], [1, 13, 21, 34, 44, 2]]


# --- Special-token text: OpenAI's spellings, or open_clip's for OpenCLIP files ---

SPECIAL_TEXT_CAPTIONS = [
    "a cat <|endoftext|> on a mat",
    "a cat <end_of_text> on a mat",
    "A <START_OF_TEXT> dog and an <End_Of_Text> cat",
    "a<end_of_text>b <start_of_text>c",
    "x..<end_of_text>y",  # the punctuation run takes the "<": no special token, in open_clip too
    "x..<|endoftext|>y",
    "it's<end_of_text>'s",
    "<|startoftext|><|endoftext|>",
    "&lt;end_of_text&gt; escaped twice &amp;lt;end_of_text&amp;gt;",
    "café <end_of_text> “quoted” <|endoftext|> ﬁne",
    "x < y and y > z, <b>bold</b>, <end_of_text",
    "<end_of_text>",
    "a photo " + "<end_of_text> word " * 40,  # over 77 ids: cut, last id end-of-text
]


def test_open_clip_special_text_gives_open_clips_own_tokenizer_ids(clip_tokenizer):
    import string

    from capeval_dev.testing.open_clip_reference import open_clip_tokenize

    rng = random.Random(2)
    alphabet = string.ascii_letters + " <>|_'.,!&;" + "éß"
    pieces = ["<end_of_text>", "<START_OF_TEXT>", "<|endoftext|>", "<|startoftext|>", "<", "&lt;"]
    randomised = [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))) + rng.choice(pieces) + "x"
        for _ in range(500)
    ]
    captions = SPECIAL_TEXT_CAPTIONS + UNICODE_AND_ODD + randomised
    ours, n_cut = tokenize_captions(clip_tokenizer, captions, 77, special_text="open_clip")
    theirs = open_clip_tokenize(captions)
    assert [c for c, a, b in zip(captions, ours, theirs, strict=True) if a != b] == []
    assert n_cut == 1 and len(ours[len(SPECIAL_TEXT_CAPTIONS) - 1]) == 77
    assert ours[1].count(49407) == 2 and ours[0].count(49407) == 1  # <end_of_text> special, <|endoftext|> not


def test_openai_special_text_stays_the_default_and_reads_openais_spellings(clip_tokenizer):
    captions = ["a cat <|endoftext|> on a mat", "a cat <end_of_text> on a mat", "plain caption"]
    default, _ = tokenize_captions(clip_tokenizer, captions, 77)
    assert default == tokenize_captions(clip_tokenizer, captions, 77, special_text="openai")[0]
    assert default == openai_tokenize(captions)
    assert default[0].count(49407) == 2 and default[1].count(49407) == 1


def test_an_unknown_special_text_is_refused_naming_the_choices(clip_tokenizer):
    with pytest.raises(ValueError, match="special_text must be one of openai, open_clip, got 'openclip'"):
        tokenize_captions(clip_tokenizer, ["a dog"], 77, special_text="openclip")


# --- The authors' reading where transformers' fast CLIP tokenizer differs: Unicode case, special-token text ---

# Each caption with what OpenAI's tokenizer gives, written out (its ids checked against the tokenizer too).
AUTHORS_READING = {
    # str.lower: a capital sigma ending a word is "ς" (480), not "σ" (481).
    "ΟΔΟΣ": [49406, 138, 123, 138, 112, 138, 123, 139, 480, 49407],
    # "..<|" is a run of punctuation before the special spelling can match: text.
    "x..<|endoftext|>y": [49406, 343, 608, 27, 347, 40786, 4160, 91, 285, 344, 49407],
    "x.<|endoftext|>": [49406, 343, 13, 27, 347, 40786, 4160, 91, 285, 49407],
    # Lower-cased first, then matched: the special token.
    "<|ENDOFTEXT|>": [49406, 49407, 49407],
    # "İ".lower() is "i" and a combining dot, which joins the punctuation run "\u0307<|": text.
    "İ<|endoftext|>": [49406, 328, 136, 229, 27, 347, 40786, 4160, 91, 285, 49407],
    # The pattern matches case-insensitively ("ſ" folds to "s"), but only the exact spelling is the special token:
    # the matched piece is BPE-encoded as one word.
    "<|ſtartoftext|>": [49406, 27, 91, 129, 123, 2002, 6659, 18169, 91, 285, 49407],
    "a <|endoftext|> b": [49406, 320, 49407, 321, 49407],
    "a<|startoftext|>b": [49406, 320, 49406, 321, 49407],
}


@pytest.mark.parametrize("caption", list(AUTHORS_READING))
def test_captions_transformers_reads_otherwise_get_the_ids_of_openais_tokenizer(clip_tokenizer, caption):
    want = AUTHORS_READING[caption]
    assert openai_tokenize([caption]) == [want]
    assert tokenize_captions(clip_tokenizer, [caption], 77)[0] == [want]
    # Mixed with plain captions, in one call (each caption takes its own path).
    assert tokenize_captions(clip_tokenizer, ["a dog", caption, "A DOG"], 77)[0][1] == want


def test_those_captions_are_ones_transformers_fast_tokenizer_reads_otherwise(clip_tokenizer):
    # Without this, the cases above would prove nothing about capeval's own steps.
    theirs = clip_tokenizer(list(AUTHORS_READING))["input_ids"]
    differ = [c for c, ids in zip(AUTHORS_READING, theirs, strict=True) if list(ids) != AUTHORS_READING[c]]
    assert differ == [
        "ΟΔΟΣ", "x..<|endoftext|>y", "x.<|endoftext|>", "<|ENDOFTEXT|>", "İ<|endoftext|>", "<|ſtartoftext|>"
    ]  # fmt: skip


def test_a_letter_pythons_str_lower_keeps_is_kept_though_the_fast_tokenizer_lowers_it(clip_tokenizer):
    # "Ɤ" (U+A7CB, Unicode 16): Rust's tables lower-case it, Python 3.11-3.13's do not. Whichever this Python does,
    # OpenAI's tokenizer does the same, and so does capeval.
    ours = tokenize_captions(clip_tokenizer, ["\ua7cb"], 77)[0]
    assert ours == openai_tokenize(["\ua7cb"])
    if "\ua7cb".lower() == "\ua7cb":
        assert ours == [[49406, 166, 253, 489, 49407]]  # its own bytes, EA 9F 8B
        assert list(clip_tokenizer("\ua7cb")["input_ids"]) != ours[0]


# Fragments where the authors' steps and transformers' fast tokenizer can part: special spellings in any case and
# glued to punctuation, capitals whose lower case depends on context or on the Unicode version ("Ɤ" U+A7CB is
# lower-cased by Rust's tables but not by Python 3.11's), case folds the pattern's IGNORECASE matches ("ſ", the
# Kelvin sign), combining marks, ligatures, entities and text the ftfy step changes.
_FRAGMENTS = [
    "<|endoftext|>", "<|startoftext|>", "<|ENDOFTEXT|>", "<|StartOfText|>", "<|ſtartoftext|>", "<end_of_text>",
    "<START_OF_TEXT>", "<|", "|>", "<", ">", "..", ".", "'s", "'", "Σ", "ΟΔΟΣ", "ΣΑ", "İ", "ẞ", "ǅ", "Ɤ", "\u212a",
    "Ω", "\u0307", "é", "e\u0301", "ﬁ", "&amp;", "&lt;|endoftext|&gt;", "“", "”", "日本", "😀", "a", "dog", "Dog",
    "RUNS", "12", "3.5", "\t", "\n", "Ünïcödé", "Ã©",
]  # fmt: skip


def _generated_captions(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    joins = ["", "", " ", " ", ".", "'", "-"]
    return [
        "".join(rng.choice(_FRAGMENTS) + rng.choice(joins) for _ in range(rng.randint(1, 12)))
        for _ in range(n)
    ]


def test_generated_captions_get_the_ids_of_openais_tokenizer(clip_tokenizer):
    captions = _generated_captions(3000, seed=3) + SPECIAL_TEXT_CAPTIONS + UNICODE_AND_ODD
    ours, _ = tokenize_captions(clip_tokenizer, captions, 77)
    theirs = openai_tokenize(captions)
    assert [c for c, a, b in zip(captions, ours, theirs, strict=True) if a != b] == []
    # Again from the filled caches, in another order.
    again, _ = tokenize_captions(clip_tokenizer, captions[::-1], 77)
    assert again == ours[::-1]


def test_generated_captions_get_the_ids_of_open_clips_tokenizer_for_open_clip_text(clip_tokenizer):
    from capeval_dev.testing.open_clip_reference import open_clip_tokenize

    captions = _generated_captions(3000, seed=4)
    ours, _ = tokenize_captions(clip_tokenizer, captions, 77, special_text="open_clip")
    theirs = open_clip_tokenize(captions)
    assert [c for c, a, b in zip(captions, ours, theirs, strict=True) if a != b] == []


def test_a_word_final_capital_sigma_is_final_sigma_for_open_clip_files_too(clip_tokenizer):
    from capeval_dev.testing.open_clip_reference import open_clip_tokenize

    ours, _ = tokenize_captions(clip_tokenizer, ["ΟΔΟΣ", "ΣΑ"], 77, special_text="open_clip")
    assert ours == open_clip_tokenize(["ΟΔΟΣ", "ΣΑ"])
    # "ς" (480) ends the word; a sigma inside one stays "σ".
    assert ours == open_clip_tokenize(["οδος", "σα"]) and ours[0][-2] == 480
