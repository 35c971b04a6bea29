"""The COCO toolkit's caption tokenisation (Stanford PTBTokenizer 3.4.1) and stopword list, without Java."""

from __future__ import annotations

import pytest

from capeval.text.stopwords import COCO_WMD_STOPWORDS, COCO_WMD_STOPWORDS_ORDERED, resolve_stopwords
from capeval.text.tokenize import _WORD, COCO_PUNCTUATIONS, _lex_mark, _lex_word, coco_tokens, ptb_tokenize

# Written by `java -cp stanford-corenlp-3.4.1.jar edu.stanford.nlp.process.PTBTokenizer -preserveLines
# -lowerCase` (the jar pycocoevalcap ships) on each input line.
STANFORD_OUTPUT = [
    ("A dog's toy (red) isn't \"new\".", "a dog 's toy -lrb- red -rrb- is n't `` new '' ."),
    ("A baby doesn't know what to do.", "a baby does n't know what to do ."),
    ("The old car cannot be started", "the old car can not be started"),
    (
        "A man wearing a white shirt is wearing an AT&T headphone at a game .",
        "a man wearing a white shirt is wearing an at&t headphone at a game .",
    ),
    ("a black and white photo of a riding a horse &apos;s", "a black and white photo of a riding a horse 's"),
    ("A U.S. Navy jet flying in the blue skies.", "a u.s. navy jet flying in the blue skies ."),
    (
        "A crowd of people views newspaper covers in Washington D.C.",
        "a crowd of people views newspaper covers in washington d.c. .",
    ),
    (
        "A basketball player for Miami U. pushes forward .",
        "a basketball player for miami u. pushes forward .",
    ),
    (
        "A bicyclist taking a break to have coffee at Longbottom Coffee and Tea Inc.",
        "a bicyclist taking a break to have coffee at longbottom coffee and tea inc. .",
    ),
    ("A dining room clock shows that it is 12:30.", "a dining room clock shows that it is 12:30 ."),
    (
        'A banner that says, "Borkop Rocker" hangs over the sidewalk.',
        "a banner that says , `` borkop rocker '' hangs over the sidewalk .",
    ),
    (
        'A baby wearing a " my best buddy " shirt on a bed .',
        "a baby wearing a '' my best buddy '' shirt on a bed .",
    ),
    ("'There is a flag hanging on a fire house", "` there is a flag hanging on a fire house"),
    ("A small child is sliding down a slip 'n' slide .", "a small child is sliding down a slip 'n' slide ."),
    (
        "A child holding large bags stands next to a tall bicycle beside the road..",
        "a child holding large bags stands next to a tall bicycle beside the road . .",
    ),
    (
        "People taking a picture with Elvis impersonators.(Cheese!)",
        "people taking a picture with elvis impersonators . -lrb- cheese ! -rrb-",
    ),
    ("The bike os [arked between two cars", "the bike os -lsb- arked between two cars"),
    (
        "A cat rests on top of a bag of cat food/kitty litter.",
        "a cat rests on top of a bag of cat food/kitty litter .",
    ),
    (
        "A German Shepard/ mixed puppy relaxing on a deck, chewing on a twig.",
        "a german shepard / mixed puppy relaxing on a deck , chewing on a twig .",
    ),
    ("What is this??", "what is this ??"),
    (
        "A man in a black-and-white T-shirt rides a merry-go-round at 3.5 mph -- fast ...",
        "a man in a black-and-white t-shirt rides a merry-go-round at 3.5 mph -- fast ...",
    ),
    ("I'm gonna go, gotta see. Lemme wanna gimme!!", "i 'm gon na go , got ta see . lem me wan na gim me !!"),
    (
        "Mr. Smith and Dr. Who at St. Louis in the U.S. Army",
        "mr. smith and dr. who at st. louis in the u.s. army",
    ),
    ("It's 'cause the dogs' owners' toys", "it 's 'cause the dogs ' owners ' toys"),
    ("the $5 bill is 50% off #1 * + = < >", "the $ 5 bill is 50 % off # 1 * + = < >"),
    (
        "A couple of people are riding ATV 's on a dirt track .",
        "a couple of people are riding atv 's on a dirt track .",
    ),
    (
        "Two dogs , one black and one white , play in the snow ; they're happy : yes !",
        "two dogs , one black and one white , play in the snow ; they 're happy : yes !",
    ),
    # Forms that once lexed differently from the jar (same jar, same flags, run here).
    (
        "In the '90s 1,000 people ate fish'n'chips :) here",
        "in the '90s 1,000 people ate fish 'n' chips :-rrb- here",
    ),
    ("The se'keo plane at .5 mph -- 'tis -5.5 degrees", "the se ` keo plane at .5 mph -- 't is -5.5 degrees"),
    ("woman says 'bye , bye . . . ' to a '4' sign", "woman says ` bye , bye ... ' to a ' 4 ' sign"),
]


@pytest.mark.parametrize("text,expected", STANFORD_OUTPUT)
def test_ptb_tokenize_matches_the_stanford_tokenizer_of_the_coco_toolkit(text, expected):
    assert ptb_tokenize(text) == expected.split(" ")


def test_coco_tokens_drop_the_toolkit_punctuation_but_keep_lowercased_brackets():
    # The toolkit's list holds "-LRB-" in upper case while the lexer writes "-lrb-": brackets survive.
    assert coco_tokens('A dog\'s toy (red), "new"!') == [
        "a",
        "dog",
        "'s",
        "toy",
        "-lrb-",
        "red",
        "-rrb-",
        "new",
    ]
    assert {".", ",", "``", "''", "-LRB-"} <= COCO_PUNCTUATIONS


def test_coco_tokens_drop_every_mark_of_the_toolkit_list():
    # pycocoevalcap/tokenizer/ptbtokenizer.py, PUNCTUATIONS, written out by hand (17 entries): each mark
    # below is a lexer token of its own in these captions and the toolkit drops it.
    caption = "a dog ; a cat : a bird - a fish -- a cow ... yes ? no ! ok , `quoted' ``twice'' (x) {y} ."
    assert (
        coco_tokens(caption)
        == "a dog a cat a bird a fish a cow yes no ok quoted twice -lrb- x -rrb- -lcb- y -rcb-".split()
    )
    assert len(COCO_PUNCTUATIONS) == 17


def test_stopwords_equal_the_coco_toolkit_file(repo_root):
    path = repo_root.parent / "shared" / "reference" / "coco_caption_wmd_stopwords.txt"
    if not path.is_file():
        pytest.skip("../shared/reference is not present on this machine")
    # The toolkit reads it as set(f.read().strip().split(' ')).
    words = path.read_text(encoding="utf-8").strip().split(" ")
    assert list(COCO_WMD_STOPWORDS_ORDERED) == words
    assert COCO_WMD_STOPWORDS == set(words) and len(COCO_WMD_STOPWORDS) == 153


def test_stopword_option_names_sets_and_errors():
    assert resolve_stopwords("coco") == ("coco", COCO_WMD_STOPWORDS)
    assert resolve_stopwords(None) == ("none", frozenset())
    assert resolve_stopwords(list(COCO_WMD_STOPWORDS))[0] == "coco"
    label, words = resolve_stopwords(["a", "the"])
    assert words == {"a", "the"} and label.startswith("custom-2-")
    with pytest.raises(ValueError, match="unknown stopword list 'nltk'"):
        resolve_stopwords("nltk")
    with pytest.raises(TypeError, match="stopwords must be strings"):
        resolve_stopwords(["a", 3])


def _word_at(text: str, pos: int = 0) -> tuple[list[str], int]:
    tokens: list[str] = []
    end = _lex_word(text, pos, _WORD.match(text, pos), tokens)
    return tokens, end


def test_word_scanner_keeps_an_abbreviations_period_and_resumes_after_it():
    assert _word_at("Mr.") == (["Mr."], 3)
    assert _word_at("by J.", 3) == (["J."], 5)
    assert _word_at("dog.") == (["dog"], 3)  # not an abbreviation: the period is lexed next round


def test_word_scanner_splits_clitics_and_ptb_split_words_within_its_match():
    assert _word_at("don't!") == (["do", "n't"], 5)
    assert _word_at("Cannot") == (["Can", "not"], 6)


def test_word_scanner_stops_before_an_inner_n_and_after_a_splitting_apostrophe():
    # The returned position is where the next round starts: "'n'chips" and "keo" are lexed again.
    assert _word_at("fish'n'chips") == (["fish"], 4)
    assert _word_at("se'keo") == (["se", "`"], 3)
    assert _word_at("int'l") == (["int", "'"], 4)
    assert _word_at("O'Neil") == (["O'Neil"], 6)  # a known apostrophe word stays whole


@pytest.mark.parametrize(
    ("text", "pos", "token", "end"),
    [
        ("...x", 0, "...", 3),
        ("a---b", 1, "--", 4),
        ('"a"', 0, "``", 1),
        ('a"', 1, "''", 2),
        ("'a", 0, "`", 1),
        ("'4", 0, "'", 1),
        ("(", 0, "-lrb-", 1),
        ("}", 0, "-rcb-", 1),
        ("%", 0, "%", 1),
    ],
)
def test_mark_scanner_gives_one_token_and_the_position_after_it(text, pos, token, end):
    tokens: list[str] = []
    assert _lex_mark(text, pos, tokens) == end
    assert tokens == [token]
