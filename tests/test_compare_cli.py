"""The capeval compare command: per-image score files of two systems, paired by image id."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from PIL import Image

import capeval
from capeval.cli import main


def _write(path, data):
    path.write_text(json.dumps(data))
    return str(path)


@pytest.fixture()
def two_systems(tmp_path):
    """Per-image files in `capeval score --save-per-instance`'s layout; B lists its images in another order.

    CLIPScore differences A - B = (0.1, 0.2, 0.3, -0.2): the hand-worked 16 sign flips of test_significance give
    the exact two-sided p = 8/16 = 0.5.
    """
    a = {"im0": 0.9, "im1": 0.8, "im2": 0.7, "im3": 0.6}
    b = {"im0": 0.8, "im1": 0.6, "im2": 0.4, "im3": 0.8}
    rows_a = {i: {"CLIPScore": a[i], "RefCLIPScore": a[i] / 2} for i in a}
    rows_b = {i: {"CLIPScore": b[i], "RefCLIPScore": b[i] / 2} for i in reversed(list(b))}
    return _write(tmp_path / "mine.json", rows_a), _write(tmp_path / "theirs.json", rows_b), tmp_path


def test_compare_pairs_images_by_id_and_prints_one_line_per_metric(two_systems, capsys):
    path_a, path_b, _ = two_systems
    assert main(["compare", path_a, path_b]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "CLIPScore: mine 0.7500 vs theirs 0.6500, delta +0.1000 [95% CI -0.1000, +0.2500], "
        "p = 0.5000 (exact paired permutation over all 16 assignments, n = 4)",
        "RefCLIPScore: mine 0.3750 vs theirs 0.3250, delta +0.0500 [95% CI -0.0500, +0.1250], "
        "p = 0.5000 (exact paired permutation over all 16 assignments, n = 4)",
    ]


def test_compare_json_equals_the_api_on_the_aligned_scores(two_systems, capsys):
    path_a, path_b, _ = two_systems
    args = [
        "compare",
        path_a,
        path_b,
        "--metrics",
        "clipscore",
        "--method",
        "bootstrap",
        "--n-resamples",
        "500",
    ]
    assert main([*args, "--seed", "3", "--confidence", "0.9", "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    expected = capeval.compare(
        [0.9, 0.8, 0.7, 0.6],
        [0.8, 0.6, 0.4, 0.8],
        method="bootstrap",
        n_resamples=500,
        seed=3,
        confidence=0.9,
        names=("mine", "theirs"),
        metric="CLIPScore",
    )
    assert payload["comparisons"] == [expected.as_dict()]
    assert (payload["a"], payload["b"]) == (path_a, path_b)


def test_compare_reads_what_capeval_score_writes(tmp_path, tiny_clip_dir, capsys):
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.RandomState(0)
    for i in range(5):
        Image.fromarray(rng.randint(0, 256, (48, 64, 3), dtype=np.uint8)).save(images / f"im{i}.png")
    captions = {
        "good": {f"im{i}": f"a photo of thing {i}" for i in range(5)},
        "bad": {f"im{i}": f"noise words {i * 7}" for i in range(5)},
    }
    scores = {}
    for name, caps in captions.items():
        out = tmp_path / f"{name}.json"
        cands = _write(tmp_path / f"{name}-captions.json", caps)
        args = ["score", cands, str(images), "--model", str(tiny_clip_dir), "--save-per-instance", str(out)]
        assert main([*args, "--no-progress"]) == 0
        ids = sorted(caps)
        paths = [str(images / f"{i}.png") for i in ids]
        scores[name] = capeval.CLIPScore(model=str(tiny_clip_dir))([caps[i] for i in ids], images=paths)[
            "scores"
        ]
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "good.json"), str(tmp_path / "bad.json"), "--format", "json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)["comparisons"]
    expected = capeval.compare(scores["good"], scores["bad"], names=("good", "bad"), metric="CLIPScore")
    assert got["p_value"] == pytest.approx(expected.p_value)
    assert (got["delta"], got["ci_low"], got["ci_high"]) == pytest.approx(
        (expected.delta, expected.ci_low, expected.ci_high), abs=1e-6
    )


@pytest.mark.parametrize("column", ["sentence BLEU-4", "BLEU-4"])
def test_the_mean_of_per_image_bleu_is_labelled_sentence_bleu_never_the_corpus_bleu(tmp_path, capsys, column):
    # capeval score writes "sentence BLEU-4"; older files and other tools wrote "BLEU-4" over the same numbers.
    a = _write(tmp_path / "a.json", {f"im{i}": {column: 0.1 * i} for i in range(4)})
    b = _write(tmp_path / "b.json", {f"im{i}": {column: 0.05 * i} for i in range(4)})
    assert main(["compare", a, b, "--metrics", "bleu4"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("sentence BLEU-4: a 0.1500 vs b 0.0750, delta +0.0750")
    assert err.strip() == (
        "note: sentence BLEU-4: means of per-image sentence scores, not the corpus scores (pycocoevalcap's, "
        "from the whole corpus's statistics) that `capeval score` prints as BLEU-4"
    )
    assert main(["compare", a, b, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["comparisons"][0]["metric"] == "sentence BLEU-4"


def test_ids_in_one_file_only_are_refused_and_named(two_systems, capsys):
    path_a, _, root = two_systems
    other = _write(root / "other.json", {"im0": 0.1, "im1": 0.2, "im9": 0.3, "im3": 0.4})
    assert main(["compare", path_a, other]) == 2
    err = capsys.readouterr().err
    assert "1 only in mine, e.g. ['im2']; 1 only in other, e.g. ['im9']" in err


def test_an_unknown_metric_is_refused_listing_what_the_files_hold(two_systems, capsys):
    path_a, path_b, _ = two_systems
    assert main(["compare", path_a, path_b, "--metrics", "wmd"]) == 2
    assert "no 'wmd' scores in both files (A has CLIPScore, RefCLIPScore" in capsys.readouterr().err


def test_a_non_number_is_refused_naming_the_image(two_systems, capsys):
    path_a, _, root = two_systems
    bad = _write(root / "bad.json", {"im0": {"CLIPScore": 0.1}, "im1": {"CLIPScore": None}})
    assert main(["compare", path_a, bad]) == 2
    assert "image 'im1' has CLIPScore = None, not a finite number" in capsys.readouterr().err


def test_files_of_bare_numbers_compare_as_one_unnamed_metric(tmp_path, capsys):
    a = _write(tmp_path / "a.json", {"x": 0.5, "y": 0.6, "z": 0.7})
    b = _write(tmp_path / "b.json", {"x": 0.4, "y": 0.6, "z": 0.5})
    assert main(["compare", a, b]) == 0
    # d = (0.1, 0, 0.2): |sum| >= 0.3 for the 2 assignments of equal signs on 0.1 and 0.2, times 2 for the 0.
    assert capsys.readouterr().out.startswith("a 0.6000 vs b 0.5000, delta +0.1000")
    assert capeval.compare([0.5, 0.6, 0.7], [0.4, 0.6, 0.5]).p_value == pytest.approx(4 / 8)


def test_bad_resample_counts_are_refused_before_any_work(two_systems, capsys):
    path_a, path_b, _ = two_systems
    with pytest.raises(SystemExit):
        main(["compare", path_a, path_b, "--n-resamples", "0"])
    assert "n_resamples must be >= 1" in capsys.readouterr().err


# --- JSON files: duplicate keys, nesting, encodings ---


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b'{\n "im0": {"CLIPScore": 0.1},\n "im1": {"CLIPScore": 0.2},\n "im0": {"CLIPScore": 0.9}\n}',
            r'key "im0" appears twice in one object \(lines 2 and 4\)',
        ),
        (b'{"im0": {"CLIPScore": 0.1, "CLIPScore": 0.9}}', r'key "CLIPScore" appears twice in one object'),
        (
            b'{"im0": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            r"nests arrays and objects more than 100 levels",
        ),
        ('{"im0": 0.1, "im1": 0.2}'.encode("utf-16"), r"is UTF-16 \(little-endian\) text"),
        (
            b'{"im0": ' + b"7" * 5000 + b"}",
            r"bad.json has a number of 5000 digits, more than Python converts",
        ),
    ],
    ids=["repeated image", "repeated metric", "nested 100,000 deep", "UTF-16", "5,000-digit score"],
)
def test_a_hostile_score_file_is_one_line_naming_it(two_systems, capsys, content, message):
    path_a, _, root = two_systems
    (root / "bad.json").write_bytes(content)
    assert main(["compare", path_a, str(root / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"capeval: error: score file {root / 'bad.json'}")
    assert re.search(message, err), err
    assert len(err.strip().splitlines()) == 1


# --- Scores too large to sum ---


def test_finite_scores_of_1e308_are_refused_naming_the_file_metric_and_image(tmp_path, capsys):
    a = _write(tmp_path / "a.json", {"im0": {"CLIPScore": 0.5}, "im1": {"CLIPScore": 1e308}})
    b = _write(tmp_path / "b.json", {"im0": {"CLIPScore": 0.4}, "im1": {"CLIPScore": -1e308}})
    assert main(["compare", a, b]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        f"capeval: error: CLIPScore: {a!r} score at item 'im1' is 1e+308, beyond +-1e+100 "
        "(capeval.significance.paired_tests.MAX_ABS_SCORE): its sums and squares could overflow float64; "
        "rescale the scores to compare them"
    )
    assert "p = " not in captured.out


def test_several_metrics_follow_one_flag(two_systems, capsys):
    path_a, path_b, _ = two_systems
    assert (
        main(["compare", path_a, path_b, "--metrics", "clipscore", "refclipscore", "--format", "json"]) == 0
    )
    assert [c["metric"] for c in json.loads(capsys.readouterr().out)["comparisons"]] == [
        "CLIPScore",
        "RefCLIPScore",
    ]
