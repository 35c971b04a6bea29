"""Hostile input against the ``capeval score`` command: a bad option or input ends the command with a non-zero
exit and one line naming it, before any model is loaded or any output is written."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from capeval.cli import main

# --- Item 5 (part) and item 12: options checked before any work ---


@pytest.fixture()
def item12_example(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for i in range(2):
        Image.fromarray(np.full((24, 24, 3), 60 * i, dtype=np.uint8)).save(images / f"im{i}.png")
    (tmp_path / "cands.json").write_text(json.dumps({"im0": "a dark square", "im1": "a grey square"}))
    return tmp_path


def _item12_args(root, *extra: str) -> list[str]:
    # The model does not exist: a refusal that names the option proves nothing was loaded first.
    return [
        "score",
        str(root / "cands.json"),
        str(root / "images"),
        "--model",
        str(root / "no-model"),
        *extra,
    ]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--w", "nan"], r"argument --w: w must be a positive number \(finite, > 0\), got nan"),
        (["--w", "inf"], r"argument --w: w must be a positive number \(finite, > 0\), got inf"),
        (["--w", "-1"], r"argument --w: w must be a positive number \(finite, > 0\), got -1.0"),
        (["--w", "0"], r"argument --w: w must be a positive number \(finite, > 0\), got 0.0"),
        (
            ["--w", "1e308"],
            r"argument --w: w must be at most 1e\+06 \(capeval.validation.MAX_W\), got 1e\+308",
        ),
        (["--batch-size", "0"], "argument --batch-size: batch_size must be >= 1, got 0"),
        (["--batch-size", "64.5"], "argument --batch-size: invalid literal for int"),
        (
            ["--corpus", "x", "--output", "o", "--threshold", "nan"],
            "argument --threshold: threshold must be a finite",
        ),
        (
            ["--corpus", "x", "--output", "o", "--chunk-size", "0"],
            "argument --chunk-size: chunk_size must be >= 1",
        ),
        (
            ["--corpus", "x", "--output", "o", "--num-workers", "0"],
            "argument --num-workers: num_workers must be >= 1",
        ),
    ],
)
def test_a_bad_numeric_option_exits_2_with_one_line_naming_it(item12_example, capsys, option, message):
    with pytest.raises(SystemExit) as exited:
        main(_item12_args(item12_example, *option))
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("capeval score: error: ")
    assert re.search(message, err), err
    assert not (item12_example / "o").exists()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--device", "meta"], "capeval: error: device 'meta' holds shapes, not numbers"),
        (["--prefix", "A photo | depicts"], "capeval: error: prefix 'A photo | depicts' contains '|'"),
    ],
)
def test_a_bad_model_option_is_one_line_naming_it_and_nothing_is_written(
    item12_example, capsys, option, message
):
    out = item12_example / "scores.json"
    rc = main(_item12_args(item12_example, *option, "--save-per-instance", str(out)))
    assert rc == 2
    captured = capsys.readouterr()
    assert captured.err.strip().startswith(message)
    assert len(captured.err.strip().splitlines()) == 1
    assert "CLIPScore" not in captured.out and not out.exists()


def test_w_nan_no_longer_exits_0_from_the_console(item12_example, tiny_clip_dir):
    root = item12_example
    command = [
        "score",
        str(root / "cands.json"),
        str(root / "images"),
        "--model",
        str(tiny_clip_dir),
        "--w",
        "nan",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "capeval.cli", *command],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "argument --w: w must be a positive number (finite, > 0), got nan" in proc.stderr
    assert "CLIPScore" not in proc.stdout


# --- Item 4: a list where a caption belongs, a string where a list belongs ---


def test_a_caption_that_is_a_list_is_one_line_naming_the_item(item12_example, tiny_clip_dir, capsys):
    (item12_example / "cands.json").write_text(
        json.dumps({"im0": "a dark square", "im1": ["a", "grey square"]})
    )
    rc = main(
        [
            "score",
            str(item12_example / "cands.json"),
            str(item12_example / "images"),
            "--model",
            str(tiny_clip_dir),
        ]
    )
    assert rc == 2
    assert "capeval: error: prediction 1 is list" in capsys.readouterr().err


def test_references_given_as_a_string_are_refused_naming_the_id(item12_example, tiny_clip_dir):
    (item12_example / "refs.json").write_text(json.dumps({"im0": ["a dark square"], "im1": "a grey square"}))
    with pytest.raises(SystemExit, match=r"references of \['im1'\] are not lists of captions"):
        main(
            [
                "score", str(item12_example / "cands.json"), str(item12_example / "images"),
                "--references-json", str(item12_example / "refs.json"), "--model", str(tiny_clip_dir),
            ]
        )  # fmt: skip


# --- JSON files: duplicate keys, nesting, encodings ---


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b'{"im0": "a dark square",\n "im1": "a grey square",\n "im1": "a white square"}',
            r'cands.json: key "im1" appears twice in one object \(lines 2 and 3\)',
        ),
        (
            b'{"im0": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            r"cands.json nests arrays and objects more than 100 levels deep; capeval reads at most MAX_JSON_DEPTH = 100",
        ),
        (
            '{"im0": "a dark square", "im1": "a grey square"}'.encode("utf-16"),
            r"cands.json is UTF-16 \(little-endian\) text \(it starts with that byte-order mark\), not UTF-8",
        ),
        (
            b'[{"image_id": ' + b"1" * 5000 + b', "caption": "a dark square"}]',
            r"cands.json has a number of 5000 digits, more than Python converts",
        ),
    ],
    ids=["repeated key", "nested 100,000 deep", "UTF-16", "5,000-digit id"],
)
def test_a_hostile_candidates_file_ends_the_command_with_one_line_naming_it(item12_example, content, message):
    (item12_example / "cands.json").write_bytes(content)
    with pytest.raises(SystemExit) as exited:
        main(_item12_args(item12_example))
    text = str(exited.value.code)
    assert text.startswith(f"capeval: candidates file {item12_example / 'cands.json'}")
    assert re.search(message, text), text
    assert "\n" not in text


def test_a_references_file_nested_100000_deep_is_one_line_from_the_console(item12_example):
    (item12_example / "refs.json").write_text('{"im0": ' + "[" * 100_000 + "]" * 100_000 + "}")
    command = [*_item12_args(item12_example), "--references-json", str(item12_example / "refs.json")]
    proc = subprocess.run(
        [sys.executable, "-m", "capeval.cli", *command], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"capeval: references file {item12_example / 'refs.json'} nests arrays and objects more than 100 levels "
        "deep; capeval reads at most MAX_JSON_DEPTH = 100 (its layouts nest 5)"
    ]
