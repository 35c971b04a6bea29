"""Stopword lists for the word-embedding metrics.

``COCO_WMD_STOPWORDS`` is the set the COCO caption toolkit's WMD removes (tylin/coco-caption,
``pycocoevalcap/wmd/data/stopwords.txt``, whose code notes it was taken from NLTK's
``stopwords.words('english')``: 153 words; current NLTK releases list more, e.g. ``you're``). NLTK ships its
lists only as a separate corpus download, so the toolkit's set is kept here as a constant, in its file's
order; the tests check it word for word against that file.
"""

from __future__ import annotations

from collections.abc import Iterable

_COCO_WMD_STOPWORDS_TEXT = (
    "i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers "
    "herself it its itself they them their theirs themselves what which who whom this that these those am is "
    "are was were be been being have has had having do does did doing a an the and but if or because as until "
    "while of at by for with about against between into through during before after above below to from up "
    "down in out on off over under again further then once here there when where why how all any both each few "
    "more most other some such no nor not only own same so than too very s t can will just don should now d ll "
    "m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren "
    "won wouldn"
)

#: Words removed by the COCO caption toolkit's WMD, in the order of its ``stopwords.txt``.
COCO_WMD_STOPWORDS_ORDERED: tuple[str, ...] = tuple(_COCO_WMD_STOPWORDS_TEXT.split(" "))
COCO_WMD_STOPWORDS: frozenset[str] = frozenset(COCO_WMD_STOPWORDS_ORDERED)

#: Names accepted by the ``stopwords`` option.
STOPWORD_SETS: dict[str, frozenset[str]] = {"coco": COCO_WMD_STOPWORDS, "none": frozenset()}


def resolve_stopwords(stopwords: str | Iterable[str] | None) -> tuple[str, frozenset[str]]:
    """A stopword option as ``(signature label, set)``.

    Args:
        stopwords: ``"coco"`` (the toolkit's list), ``"none"``/``None``/``False`` (keep every word), or an
            iterable of words (labelled ``custom-<count>-<hash>`` in signatures).

    Raises:
        ValueError: an unknown list name.
        TypeError: neither a name nor an iterable of strings.
    """
    if stopwords is None or stopwords is False:
        return "none", frozenset()
    if isinstance(stopwords, str):
        if stopwords not in STOPWORD_SETS:
            raise ValueError(
                f"unknown stopword list {stopwords!r}; use one of {sorted(STOPWORD_SETS)} or a set of words"
            )
        return stopwords, STOPWORD_SETS[stopwords]
    if isinstance(stopwords, (bytes, bytearray)):
        raise TypeError(
            f"stopwords must be a list name or an iterable of strings, got {type(stopwords).__name__}"
        )
    try:
        words = frozenset(stopwords)
    except TypeError:
        raise TypeError(
            f"stopwords must be a list name or an iterable of strings, got {type(stopwords).__name__}"
        ) from None
    bad = [w for w in words if not isinstance(w, str)]
    if bad:
        raise TypeError(f"stopwords must be strings; got {bad[0]!r}")
    if words == COCO_WMD_STOPWORDS:
        return "coco", COCO_WMD_STOPWORDS
    import hashlib

    digest = hashlib.sha256("\n".join(sorted(words)).encode()).hexdigest()[:8]
    return f"custom-{len(words)}-{digest}", words
