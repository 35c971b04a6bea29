"""The n-gram baselines the papers print beside learned metrics, through ``pycocoevalcap`` (needs Java).

BLEU-1..4, METEOR, ROUGE-L and CIDEr run offline (the jars and METEOR's paraphrase table ship with the
package). SPICE needs Stanford CoreNLP 3.6.0, which ``pycocoevalcap`` downloads on first use
(``spice/get_stanford_models.py``): offline it is reported as unavailable. Captions go through the PTB
tokenizer of the COCO toolkit first, as in the CLIPScore and PAC-S scripts.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from collections.abc import Sequence
from pathlib import Path

from capeval.signature import build_signature
from capeval.significance.score_names import BASELINE_NAMES, CORPUS_NOT_MEAN

_TOKENS: dict[str, str] = {}  # PTB tokenisation memo, shared by every baseline of the process


def java_available() -> bool:
    return shutil.which("java") is not None


def ptb_tokenize(texts: Sequence[str]) -> list[str]:
    """The COCO toolkit's PTB tokenisation (lower case, punctuation removed), memoised per string."""
    todo = sorted({t for t in texts if t not in _TOKENS})
    if todo:
        from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

        out = PTBTokenizer().tokenize({i: [{"caption": t}] for i, t in enumerate(todo)})
        for i, t in enumerate(todo):
            _TOKENS[t] = out[i][0]
    return [_TOKENS[t] for t in texts]


def _spice_missing() -> str | None:
    try:
        import pycocoevalcap.spice.spice as spice_mod
    except ImportError:
        return "pycocoevalcap is not installed"
    lib = Path(spice_mod.__file__).parent / "lib"
    if not (lib / "stanford-corenlp-3.6.0.jar").is_file():
        return (
            "SPICE needs Stanford CoreNLP 3.6.0 (pycocoevalcap downloads it on first use with "
            "spice/get_stanford_models.py); it is not present and cannot be fetched offline"
        )
    return None


# Each baseline's table name and whether its scores depend on the whole call (CIDEr's IDF comes from the
# references of the whole call).
KINDS = {key: (name, key == "cider") for key, name in BASELINE_NAMES.items()}


class CocoBaseline:
    """One ``pycocoevalcap`` metric as a benchmark metric: per-caption scores against its references.

    Args:
        kind: ``bleu1``..``bleu4``, ``meteor``, ``rougeL``, ``cider`` or ``spice``.
    """

    uses_references = True
    uses_images = False

    def __init__(self, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown baseline {kind!r}; choose from {', '.join(KINDS)}")
        self.key = kind
        self.name, self.corpus_level = KINDS[kind]  # CIDEr's IDF comes from the references of the whole call
        self._meteor = None

    @property
    def signature(self) -> str:
        return build_signature(
            self.key, {"impl": "pycocoevalcap", "tokenizer": "ptb"}, libraries=("pycocoevalcap",)
        )

    @property
    def corpus_is_mean(self) -> bool:
        """Whether the toolkit's corpus score is the mean of the per-caption scores (BLEU's and METEOR's are not)."""
        return self.key not in CORPUS_NOT_MEAN

    def unavailable(self) -> str | None:
        """Why this baseline cannot run here, or None."""
        try:
            import pycocoevalcap  # noqa: F401
        except ImportError:
            return "pycocoevalcap is not installed (pip install 'capeval[bench]')"
        if not java_available():
            return "pycocoevalcap needs Java on PATH (e.g. apt-get install openjdk-17-jre-headless)"
        if self.key == "spice":
            return _spice_missing()
        return None

    def start(self) -> None:
        """Start METEOR's Java process now: it spends seconds loading its paraphrase table, which it then does
        beside the work of the metrics scored before it (a no-op for the other baselines)."""
        if self.key == "meteor" and self._meteor is None:
            from pycocoevalcap.meteor.meteor import Meteor

            self._meteor = Meteor()

    def __call__(self, predictions: Sequence[str], references: Sequence[Sequence[str]]) -> list[float]:
        return self.corpus_score(predictions, references)[1]

    def corpus_score(
        self, predictions: Sequence[str], references: Sequence[Sequence[str]]
    ) -> tuple[float, list[float]]:
        """The toolkit's corpus score and the per-caption scores of one call.

        The corpus score is what ``COCOEvalCap`` prints: BLEU from the n-gram counts of the whole corpus and
        METEOR from its aggregated statistics are not the mean of the per-caption values (ROUGE-L, CIDEr and
        SPICE are).
        """
        if len(predictions) != len(references):
            raise ValueError(f"got {len(references)} reference lists for {len(predictions)} predictions")
        for i, refs in enumerate(references):
            if not refs:
                raise ValueError(f"{self.name}: item {i} has no references")
        flat = list(predictions) + [r for refs in references for r in refs]
        tok = dict(zip(flat, ptb_tokenize(flat), strict=True))
        res = {i: [tok[p]] for i, p in enumerate(predictions)}
        gts = {i: [tok[r] for r in refs] for i, refs in enumerate(references)}
        with contextlib.redirect_stdout(io.StringIO()):
            corpus, scores = self._compute(gts, res)
        return float(corpus), [float(s) for s in scores]

    def _compute(self, gts, res):
        if self.key.startswith("bleu"):
            from pycocoevalcap.bleu.bleu import Bleu

            corpus, per = Bleu(4).compute_score(gts, res, verbose=0)
            n = int(self.key[-1]) - 1
            return corpus[n], per[n]
        if self.key == "rougeL":
            from pycocoevalcap.rouge.rouge import Rouge

            return Rouge().compute_score(gts, res)
        if self.key == "cider":
            from pycocoevalcap.cider.cider import Cider

            return Cider().compute_score(gts, res)
        if self.key == "meteor":
            self.start()
            return self._meteor.compute_score(gts, res)
        if self.key == "spice":
            from pycocoevalcap.spice.spice import Spice

            corpus, per = Spice().compute_score(gts, res)
            return corpus, [float(p["All"]["f"]) for p in per]
        raise AssertionError(self.key)

    def close(self) -> None:
        """Stop METEOR's Java process."""
        if self._meteor is not None:
            with contextlib.suppress(Exception):
                self._meteor.__del__()
            self._meteor = None


class LengthBaseline:
    """Caption length in words: the "length" row of the Pascal-50S tables (the longer caption wins)."""

    key = "length"
    name = "length"
    uses_references = False
    uses_images = False
    corpus_level = False

    @property
    def signature(self) -> str:
        return build_signature("length", {"unit": "words"}, libraries=())

    def unavailable(self) -> str | None:
        return None

    def __call__(self, predictions: Sequence[str]) -> list[float]:
        return [float(len(p.split())) for p in predictions]
