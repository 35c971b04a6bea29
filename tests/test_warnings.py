"""capeval's warnings point at the caller's line, come in one category per kind, and a run (a benchmark, a corpus,
a command) shows each kind once, summarised at its end, through the standard ``warnings`` machinery."""

from __future__ import annotations

import inspect
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import capeval
from capeval.diagnostics import CapevalWarning, EmptyCaptionWarning, summarised_warnings
from capeval.validation import warn_empty

FIX = Path(__file__).parent / "fixtures" / "bench"
REPO = Path(__file__).resolve().parents[1]
# "zzqqxxjj" is in no vocabulary; "the of" is all stopwords: neither keeps an in-vocabulary word.
PREDICTIONS = ["zzqqxxjj", "a cat sits on a mat"]
REFERENCES = [["a dog runs", "the of"], ["a cat on a mat"]]


def line_of(marker: str) -> int:
    """The line of this file holding ``marker`` (a comment on the call a warning must point at)."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line and "line_of" not in line)


def record(call) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if issubclass(w.category, CapevalWarning)]


def text_metric_result(metric_class):
    scorer = metric_class()
    return record(lambda: scorer(PREDICTIONS, REFERENCES))  # <- text metric call


@pytest.mark.parametrize("metric_class", [capeval.WMD, capeval.WEmbSim])
def test_a_direct_call_warns_at_the_callers_line_one_warning_per_kind(metric_class):
    caught = text_metric_result(metric_class)
    assert [w.category for w in caught] == [EmptyCaptionWarning, EmptyCaptionWarning]
    for w in caught:
        assert w.filename == __file__
        assert w.lineno == line_of("# <- text metric call")
    predictions, references = (str(w.message) for w in caught)
    assert predictions.startswith(
        "1 predictions have no in-vocabulary word after stopword removal (index 0; first: 'zzqqxxjj'):"
    )
    assert references.startswith(
        "1 references have no in-vocabulary word after stopword removal ((prediction, reference) (0, 1); "
        "first: 'the of'):"
    )
    assert caught[1].message.items == ("the of",) and caught[1].message.first == "prediction 0, reference 1"


def test_the_category_filters_like_any_warning():
    scorer = capeval.WMD()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=EmptyCaptionWarning)
        scorer(PREDICTIONS, REFERENCES)
    assert not [w for w in caught if issubclass(w.category, CapevalWarning)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CapevalWarning)
        with pytest.raises(EmptyCaptionWarning, match="no in-vocabulary word"):
            scorer(PREDICTIONS, REFERENCES)


def test_every_warning_in_the_package_names_a_capeval_category_and_the_callers_line():
    # Each warnings.warn in src/capeval either passes a CapevalWarning instance or names a category, and takes its
    # stacklevel from user_stacklevel() (a fixed number points inside capeval as soon as the call path changes).
    sources = sorted((REPO / "src" / "capeval").rglob("*.py"))
    calls = []
    for path in sources:
        text = path.read_text()
        start = 0
        while (i := text.find("warnings.warn(", start)) >= 0:
            depth, j = 0, i + len("warnings.warn")
            while True:
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                j += 1
                if depth == 0:
                    break
            calls.append((path.relative_to(REPO), text[i:j]))
            start = j
    assert len(calls) >= 12
    for where, call in calls:
        if "DeprecationWarning" in call:  # old module paths: the import statement's line, by stacklevel=2
            continue
        assert "stacklevel=user_stacklevel()" in call, where
        assert "Warning(" in call or "Warning," in call, where


def summarise_four_calls(scorer):
    with summarised_warnings() as tally:
        for _ in range(4):
            scorer(PREDICTIONS, REFERENCES)  # <- four calls
    return tally


def test_a_run_shows_each_kind_once_at_its_end_counting_each_caption_once():
    scorer = capeval.WMD()
    caught = record(lambda: summarise_four_calls(scorer))
    assert [str(w.message) for w in caught] == [
        "1 predictions have no in-vocabulary word after stopword removal (first: index 0, 'zzqqxxjj'): "
        "their WMD score is 0 (distance inf) [4 warnings of this kind in this run, shown once]",
        "1 references have no in-vocabulary word after stopword removal (first: prediction 0, reference 1, "
        "'the of'): WMD cannot pick them as the best reference [4 warnings of this kind in this run, shown once]",
    ]
    assert {(w.filename, w.lineno) for w in caught} == {(__file__, line_of("# <- four calls"))}
    assert [w.message.occurrences for w in caught] == [4, 4]


def test_distinct_captions_are_counted_once_across_the_calls_of_a_run():
    def calls():
        with summarised_warnings():
            warn_empty("references", [(0, 1), (3, 0)], "they cannot be the best reference", ["the of", "xq"])
            warn_empty("references", [(2, 0)], "they cannot be the best reference", ["the of"])
            warn_empty("references", [(5, 2)], "they cannot be the best reference", ["zz"])

    (summary,) = record(calls)
    # 3 distinct texts ("the of", "xq", "zz") over 3 warnings; the first is the first warning's first item.
    assert str(summary.message) == (
        "3 references have no in-vocabulary word after stopword removal (first: prediction 0, reference 1, "
        "'the of'): they cannot be the best reference [3 warnings of this kind in this run, shown once]"
    )


def test_a_run_lets_other_warnings_through_when_they_happen_and_summarises_even_when_it_fails():
    seen_inside = []

    def calls():
        with pytest.raises(RuntimeError, match="stop"), summarised_warnings():
            warnings.warn("not ours", RuntimeWarning, stacklevel=1)
            seen_inside.append(len(outer))
            warn_empty("predictions", [0], "score 0", ["zzqqxxjj"])
            raise RuntimeError("stop")

    with warnings.catch_warnings(record=True) as outer:
        warnings.simplefilter("always")
        calls()
    assert seen_inside == [1]  # the RuntimeWarning was shown at once, not held back
    assert [w.category for w in outer] == [RuntimeWarning, EmptyCaptionWarning]


def test_filters_in_force_apply_to_the_summary():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=EmptyCaptionWarning)
        with summarised_warnings() as tally:
            warn_empty("predictions", [0], "score 0", ["zzqqxxjj"])
    assert tally.occurrences == 1 and caught == []
    with warnings.catch_warnings(), pytest.raises(EmptyCaptionWarning):
        warnings.simplefilter("error", EmptyCaptionWarning)
        with summarised_warnings():
            warn_empty("predictions", [0], "score 0", ["zzqqxxjj"])


def warning_metric(predictions, references=None):
    """A benchmark metric whose every call warns about the same empty reference (as WMD would)."""
    warn_empty("references", [(0, 0)], "they cannot be the best reference", ["the of"])
    return [float(len(p)) for p in predictions]


def test_a_benchmark_run_shows_a_warning_of_every_setting_once(tmp_path):
    from capeval.bench import ScoreCache, run_benchmark

    caught = record(
        lambda: run_benchmark(
            "vatex_eval",
            ["tests.test_warnings:warning_metric"],
            data_dir=FIX,
            cache=ScoreCache(tmp_path),
            progress=False,
        )
    )
    # Three calls: the one-item probe that finds the callable's signature, then VATEX-EVAL's two settings with
    # references (1 and 9). One warning.
    assert len(caught) == 1
    assert "[3 warnings of this kind in this run, shown once]" in str(caught[0].message)
    assert "1 references have no in-vocabulary word" in str(caught[0].message)


def test_the_command_prints_one_line_per_kind_at_the_end(tmp_path):
    argv = ["bench", "run", "vatex_eval", "-m", "tests.test_warnings:warning_metric", "--data-dir", str(FIX)]
    argv += ["--out", str(tmp_path / "report"), "--no-cache", "--no-progress", "--no-plots"]
    done = subprocess.run(
        [sys.executable, "-m", "capeval.cli", *argv], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "warning" in line]
    assert lines == [
        "capeval: warning: 1 references have no in-vocabulary word after stopword removal (first: prediction 0, "
        "reference 0, 'the of'): they cannot be the best reference [3 warnings of this kind in this run, shown "
        "once] (EmptyCaptionWarning)"
    ]
    assert done.stderr.rstrip().endswith("(EmptyCaptionWarning)")  # after the report line: at the end


def test_evaluate_modules_warn_once_per_compute_not_per_batch():
    from capeval.integrations.evaluate_modules import load

    module = load("wmd")

    def batches():
        for _ in range(3):
            module.add_batch(predictions=PREDICTIONS, references=REFERENCES)
        module.compute()  # <- compute

    caught = record(batches)
    assert [w.category for w in caught] == [EmptyCaptionWarning, EmptyCaptionWarning]
    # 3 batches of the same 2 items: each kind once, counting the 3 rows of its caption.
    assert str(caught[0].message).startswith("3 predictions have no in-vocabulary word")
    assert {(w.filename, w.lineno) for w in caught} == {(__file__, line_of("# <- compute"))}


def test_the_stacklevel_helper_is_the_one_the_metrics_use():
    from capeval.diagnostics import user_stacklevel

    source = inspect.getsource(capeval.validation.warn_empty)
    assert "stacklevel=user_stacklevel()" in source
    assert user_stacklevel() == 1  # called from outside capeval: this very frame


def test_the_trainer_hook_warns_once_per_evaluation_not_per_batch():
    import datasets
    import numpy as np
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import EvalPrediction, PreTrainedTokenizerFast

    from capeval.integrations.trainer import make_compute_metrics

    words = ["[PAD]", "[UNK]", "zzqqxxjj", "a", "cat", "sits", "on", "mat"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")
    rows = datasets.Dataset.from_dict({"references": REFERENCES * 3})
    hook = make_compute_metrics(tokenizer, rows, ["wmd"], references_column="references")
    ids = np.array(
        [tokenizer(p)["input_ids"] + [0] * (6 - len(tokenizer(p)["input_ids"])) for p in PREDICTIONS]
    )

    def evaluation():
        # batch_eval_metrics: Trainer calls the hook once per batch (3 batches), scoring at the last.
        for last in (False, False, True):
            hook(EvalPrediction(ids, None), compute_result=last)

    caught = record(evaluation)
    assert [w.category for w in caught] == [EmptyCaptionWarning, EmptyCaptionWarning]
    assert str(caught[0].message).startswith(
        "3 predictions have no in-vocabulary word after stopword removal (index 0, 2, 4; first: 'zzqqxxjj')"
    )
