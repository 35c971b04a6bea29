"""The ``capeval score`` command in the CLIPScore authors' layout: per-image scores equal to the API, and
refusals: a bad option or input ends the command with a non-zero exit and one line naming it, before any model
is loaded or any output is written."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import capeval
from capeval.cli import main


@pytest.fixture()
def example(tmp_path):
    img_dir = tmp_path / "images"
    img_dir.mkdir()
    rng = np.random.RandomState(0)
    for i in range(4):
        Image.fromarray(rng.randint(0, 256, (48, 64, 3), dtype=np.uint8)).save(img_dir / f"im{i}.png")
    cands = {f"im{i}": f"a caption number {i}" for i in range(4)}
    refs = {f"im{i}": [f"reference {i}", "another reference"] for i in range(4)}
    (tmp_path / "cands.json").write_text(json.dumps(cands))
    (tmp_path / "refs.json").write_text(json.dumps(refs))
    return tmp_path, cands, refs


def test_score_writes_per_image_scores_equal_to_the_api(example, tiny_clip_dir, capsys):
    root, cands, refs = example
    out = root / "out" / "scores.json"
    rc = main(
        [
            "score", str(root / "cands.json"), str(root / "images"), "--references-json", str(root / "refs.json"),
            "--model", str(tiny_clip_dir), "--save-per-instance", str(out), "--batch-size", "3",
        ]
    )  # fmt: skip
    assert rc == 0
    per = json.loads(out.read_text())
    ids = sorted(cands)
    api = capeval.RefCLIPScore(model=str(tiny_clip_dir))(
        [cands[i] for i in ids],
        references=[refs[i] for i in ids],
        images=[str(root / "images" / f"{i}.png") for i in ids],
    )
    assert [per[i]["RefCLIPScore"] for i in ids] == pytest.approx(api["scores"], abs=1e-6)
    assert [per[i]["CLIPScore"] for i in ids] == pytest.approx(api["clip_s_scores"], abs=1e-6)
    printed = capsys.readouterr().out
    assert f"RefCLIPScore: {api['refclipscore']:.4f}" in printed
    assert "signature: refclipscore|" in printed


def test_score_without_references_gives_clipscore_only(example, tiny_clip_dir, capsys):
    root, _, _ = example
    assert main(["score", str(root / "cands.json"), str(root / "images"), "--model", str(tiny_clip_dir)]) == 0
    printed = capsys.readouterr().out
    assert "CLIPScore: " in printed and "RefCLIPScore" not in printed


def test_a_candidate_without_an_image_is_named(example, tiny_clip_dir):
    root, cands, _ = example
    cands["ghost"] = "a caption with no image"
    (root / "cands.json").write_text(json.dumps(cands))
    with pytest.raises(SystemExit, match=r"1 candidate id\(s\) have no image.*ghost"):
        main(["score", str(root / "cands.json"), str(root / "images"), "--model", str(tiny_clip_dir)])


def test_an_empty_caption_is_a_one_line_error_naming_the_item(example, tiny_clip_dir, capsys):
    root, cands, _ = example
    cands["im2"] = ""
    (root / "cands.json").write_text(json.dumps(cands))
    rc = main(["score", str(root / "cands.json"), str(root / "images"), "--model", str(tiny_clip_dir)])
    assert rc == 2
    assert "capeval: error: prediction 2 is an empty caption" in capsys.readouterr().err


def test_the_console_script_runs(example, tiny_clip_dir):
    root, _, _ = example
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "capeval.cli",
            "score",
            str(root / "cands.json"),
            str(root / "images"),
            "--model",
            str(tiny_clip_dir),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CLIPScore: ")


def test_checkpoint_scores_pac_s_and_ref_pac_s(example, tiny_clip_dir, capsys):
    root, cands, refs = example
    out = root / "pacs.json"
    rc = main(
        [
            "score", str(root / "cands.json"), str(root / "images"), "--references-json", str(root / "refs.json"),
            "--checkpoint", str(tiny_clip_dir), "--save-per-instance", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    ids = sorted(cands)
    api = capeval.PACScore(checkpoint=str(tiny_clip_dir))(
        [cands[i] for i in ids],
        references=[refs[i] for i in ids],
        images=[str(root / "images" / f"{i}.png") for i in ids],
    )
    per = json.loads(out.read_text())
    assert [per[i]["PAC-S"] for i in ids] == pytest.approx(api["scores"], abs=1e-6)
    assert [per[i]["RefPAC-S"] for i in ids] == pytest.approx(api["refpacscore_scores"], abs=1e-6)
    printed = capsys.readouterr().out
    assert f"PAC-S: {api['pacscore']:.4f}" in printed and "RefPAC-S: " in printed
    assert "signature: pacscore|" in printed


# --- Options are checked before any work ---


@pytest.fixture()
def two_image_example(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for i in range(2):
        Image.fromarray(np.full((24, 24, 3), 60 * i, dtype=np.uint8)).save(images / f"im{i}.png")
    (tmp_path / "cands.json").write_text(json.dumps({"im0": "a dark square", "im1": "a grey square"}))
    return tmp_path


def _args_with_a_missing_model(root, *extra: str) -> list[str]:
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
    ],
)
def test_a_bad_numeric_option_exits_2_with_one_line_naming_it(two_image_example, capsys, option, message):
    with pytest.raises(SystemExit) as exited:
        main(_args_with_a_missing_model(two_image_example, *option))
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("capeval score: error: ")
    assert re.search(message, err), err
    assert not (two_image_example / "o").exists()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--device", "meta"], "capeval: error: device 'meta' holds shapes, not numbers"),
        (["--prefix", "A photo | depicts"], "capeval: error: prefix 'A photo | depicts' contains '|'"),
    ],
)
def test_a_bad_model_option_is_one_line_naming_it_and_nothing_is_written(
    two_image_example, capsys, option, message
):
    out = two_image_example / "scores.json"
    rc = main(_args_with_a_missing_model(two_image_example, *option, "--save-per-instance", str(out)))
    assert rc == 2
    captured = capsys.readouterr()
    assert captured.err.strip().startswith(message)
    assert len(captured.err.strip().splitlines()) == 1
    assert "CLIPScore" not in captured.out and not out.exists()


def test_w_nan_exits_2_from_the_console(two_image_example, tiny_clip_dir):
    root = two_image_example
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


# --- A list where a caption belongs, a string where a list belongs ---


def test_a_caption_that_is_a_list_is_one_line_naming_the_item(two_image_example, tiny_clip_dir, capsys):
    (two_image_example / "cands.json").write_text(
        json.dumps({"im0": "a dark square", "im1": ["a", "grey square"]})
    )
    rc = main(
        [
            "score",
            str(two_image_example / "cands.json"),
            str(two_image_example / "images"),
            "--model",
            str(tiny_clip_dir),
        ]
    )
    assert rc == 2
    assert "capeval: error: prediction 1 is list" in capsys.readouterr().err


def test_references_given_as_a_string_are_refused_naming_the_id(two_image_example, tiny_clip_dir):
    (two_image_example / "refs.json").write_text(
        json.dumps({"im0": ["a dark square"], "im1": "a grey square"})
    )
    with pytest.raises(SystemExit, match=r"references of \['im1'\] are not lists of captions"):
        main(
            [
                "score", str(two_image_example / "cands.json"), str(two_image_example / "images"),
                "--references-json", str(two_image_example / "refs.json"), "--model", str(tiny_clip_dir),
            ]
        )  # fmt: skip


# --- A malformed or hostile JSON file ends the command with one line naming it ---


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
def test_a_hostile_candidates_file_ends_the_command_with_one_line_naming_it(
    two_image_example, content, message
):
    (two_image_example / "cands.json").write_bytes(content)
    with pytest.raises(SystemExit) as exited:
        main(_args_with_a_missing_model(two_image_example))
    text = str(exited.value.code)
    assert text.startswith(f"capeval: candidates file {two_image_example / 'cands.json'}")
    assert re.search(message, text), text
    assert "\n" not in text


def test_a_references_file_nested_100000_deep_is_one_line_from_the_console(two_image_example):
    (two_image_example / "refs.json").write_text('{"im0": ' + "[" * 100_000 + "]" * 100_000 + "}")
    command = [
        *_args_with_a_missing_model(two_image_example),
        "--references-json",
        str(two_image_example / "refs.json"),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "capeval.cli", *command], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"capeval: references file {two_image_example / 'refs.json'} nests arrays and objects more than 100 levels "
        "deep; capeval reads at most MAX_JSON_DEPTH = 100 (its layouts nest 5)"
    ]


# --- The metric option flags ---


def test_a_flag_help_lists_each_metrics_declared_default():
    from capeval.cli import declared_defaults

    assert declared_defaults("w") == "2.5: clipscore, refclipscore; 2.0: pacscore"
    assert declared_defaults("sigma") == "1.0: wmd"
    assert declared_defaults("no_such_option") == ""


# --- One subcommand per task, each with its own options ---


def _options(*commands: str) -> set[str]:
    from capeval.cli import build_parser

    parser = build_parser()
    for command in commands:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[command]
    return {o for action in parser._actions for o in action.option_strings}


def test_each_task_is_a_subcommand_with_the_options_of_its_task_only():
    score, corpus = _options("score"), _options("corpus")
    assert {"--engine", "--output", "--top-fraction", "--chunk-size", "--corpus", "--metric"}.isdisjoint(
        score
    )
    assert {"--references-json", "--baseline", "--vectors", "--format", "--metric"}.isdisjoint(corpus)
    assert {"--metrics", "--model", "--device", "--batch-size", "--w"} <= score & corpus
    assert "--metrics" in _options("compare") and "--metric" not in _options("compare")
    assert "--metrics" in _options("bench", "run") and "--metric" not in _options("bench", "run")


@pytest.mark.parametrize(
    "option, message",
    [
        (["--threshold", "nan"], "argument --threshold: threshold must be a finite"),
        (["--chunk-size", "0"], "argument --chunk-size: chunk_size must be >= 1"),
        (["--num-workers", "-1"], "argument --num-workers: num_workers must be >= 0, got -1"),
        (["--metrics", "wmd"], "argument --metrics: invalid choice: 'wmd'"),
    ],
)
def test_a_bad_corpus_option_exits_2_with_one_line_naming_it(tmp_path, capsys, option, message):
    with pytest.raises(SystemExit) as exited:
        main(["corpus", str(tmp_path), "--output", str(tmp_path / "out"), *option])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("capeval corpus: error: ")
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


def test_a_corpus_needs_its_output_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["corpus", str(tmp_path)])
    assert exited.value.code == 2
    assert "the following arguments are required: --output" in capsys.readouterr().err
