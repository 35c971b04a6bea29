"""What a corpus run takes: a source without rows is refused saying what it holds, unreadable shards end the
command with one line naming each, bad run settings are refused before anything is written, rows that lack
references are scored per row, and a caption without visible text is a reported row."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from capeval.cli import main
from capeval.corpus.row_sources import EmptySourceError
from capeval.corpus.run import score_corpus
from capeval.shapes import shapes_clip_path
from tests.hostile_shards import jpeg, write_tar

MODEL = str(shapes_clip_path())


# --- A source without rows is refused saying what it holds ---


def _folder_of(root: Path, names: list[str]) -> Path:
    root.mkdir(parents=True)
    for name in names:
        (root / name).write_bytes(b"x")
    return root


@pytest.mark.parametrize(
    "names, message",
    [
        ([], r"holds no file"),
        (["b.txt", "notes"], r"found 2 files \(1 \(no extension\), 1 \*\.txt\), none of them"),
        (["rows.json"], r"a \.json file is read when given itself"),
    ],
    ids=["empty folder", "text files", "json"],
)
def test_a_folder_without_rows_is_refused_saying_what_it_holds(finished_run, tmp_path, names, message):
    corpus, _, options, _ = finished_run
    folder = _folder_of(tmp_path / "source", names)
    out = tmp_path / "out"
    with pytest.raises(EmptySourceError, match=f"no rows to score.*{re.escape(str(folder))}.*{message}"):
        score_corpus(folder, out, **options)
    assert not (out / "run.json").exists()  # the same folder then takes the corrected source
    assert score_corpus(corpus, out, **options).summary["rows"] == 23


def test_empty_jsonl_files_and_datasets_are_refused_by_name(finished_run, tmp_path):
    import datasets

    _, _, options, _ = finished_run
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    with pytest.raises(
        EmptySourceError, match=r"blank\.jsonl \(4 bytes\) is empty or holds only blank lines"
    ):
        score_corpus(tmp_path / "blank.jsonl", tmp_path / "a", **options)
    folder = tmp_path / "jsonl"
    folder.mkdir()
    for name in ("a.jsonl", "b.ndjson"):
        (folder / name).write_text("")
    with pytest.raises(EmptySourceError, match=r"a\.jsonl \(0 bytes\), .*b\.ndjson \(0 bytes\) are empty"):
        score_corpus(folder, tmp_path / "b", **options)
    empty = datasets.Dataset.from_dict({"image": [], "caption": []})
    streamed = datasets.IterableDataset.from_generator(lambda: iter(()), features=empty.features)
    for source in (empty, streamed):
        with pytest.raises(EmptySourceError, match=r"no rows to score: the dataset .* is empty"):
            score_corpus(source, tmp_path / "c", **options)


def test_cli_corpus_on_unreadable_shards_exits_with_one_line_naming_each(finished_run, tmp_path, capsys):
    _, _, options, _ = finished_run
    folder = _folder_of(tmp_path / "shards", ["000.tar", "001.tar"])
    rc = main(["corpus", str(folder), "--output", str(tmp_path / "out"), "--model", options["model"]])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert f"capeval: error: none of the 2 shard(s) of the corpus could be read (000: shard {folder}" in err
    assert "001: shard" in err and "is not a readable tar file" in err


# --- Run settings are checked before anything is written ---


@pytest.mark.parametrize(
    "setting, error, message",
    [
        ({"chunk_size": 0}, ValueError, "chunk_size must be >= 1, got 0"),
        ({"chunk_size": "6"}, TypeError, "chunk_size must be an integer, got str '6'"),
        ({"chunk_size": True}, TypeError, "chunk_size must be an integer, got bool True"),
        ({"threshold": math.nan}, ValueError, "threshold must be a finite number, got nan"),
        ({"threshold": -math.inf}, ValueError, "threshold must be a finite number, got -inf"),
        ({"threshold": "0.3"}, TypeError, "threshold must be a number, got str '0.3'"),
        (
            {"num_workers": 0, "executor": "ray"},
            ValueError,
            "num_workers=0 means no decoding worker on the local",
        ),
    ],
)
def test_bad_run_settings_are_refused_before_anything_is_written(
    finished_run, tmp_path, setting, error, message
):
    corpus, _, options, _ = finished_run
    with pytest.raises(error, match=message):
        score_corpus(corpus, tmp_path / "out", **{**options, **setting})
    assert not (tmp_path / "out").exists()


def test_cli_threshold_nan_is_refused(finished_run, tmp_path, capsys):
    corpus, _, options, _ = finished_run
    args = ["corpus", str(corpus), "--output", str(tmp_path / "out"), "--model", options["model"]]
    # Refused by the argument parser (capeval.validation's rule), before the run starts.
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--threshold", "nan"])
    assert exit_info.value.code == 2
    assert "argument --threshold: threshold must be a finite number, got nan" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --- A caption without visible text is a reported row, not scored ---


def test_a_corpus_row_with_an_invisible_caption_or_reference_is_reported_not_scored(tmp_path):
    from capeval.corpus.reader import open_corpus, read_shard

    path = tmp_path / "rows.jsonl"
    path.write_text(
        json.dumps({"caption": "\u200b\u200b", "image": "x.png"}) + "\n"
        + json.dumps({"caption": "a dog", "image": "x.png", "refs": ["a dog", 7]}) + "\n"
    )  # fmt: skip
    (shard,) = open_corpus(path, 8).shards
    first, second = read_shard(
        shard, {"caption": "caption", "image": "image", "references": "refs", "id": None}
    )
    assert (
        first.error == "rows.jsonl line 1 has an empty caption in field 'caption' (only invisible characters)"
    )
    assert second.error == "rows.jsonl line 2 has references that are not all text: reference 1 is int (7)"


# --- A shell command is never read from data ---


def test_score_corpus_runs_no_pipe_command_from_a_list_or_without_the_opt_in(tmp_path):
    write_tar(tmp_path / "00000.tar", [("a.jpg", jpeg()), ("a.txt", b"a red circle")])
    ran = tmp_path / "ran"
    command = f"pipe:touch {ran}; cat {tmp_path}/00000.tar"
    # A list a caller's code read from a file: its items are data, never commands.
    for source in ([command], [str(tmp_path / "00000.tar"), command], command):
        with pytest.raises(ValueError, match="is a pipe: location, which runs a shell command"):
            score_corpus(source, tmp_path / "out", model=MODEL, progress=False)
    assert not ran.exists() and not (tmp_path / "out").exists()
    result = score_corpus(command, tmp_path / "out", model=MODEL, progress=False, allow_pipe=True)
    assert ran.exists() and result.summary["scored"] == 1


# --- A cut that cannot be made says so ---


def test_a_top_fraction_of_no_scored_row_writes_a_null_threshold_with_the_reason_and_fails_the_command(
    tmp_path, capsys
):
    (tmp_path / "in").mkdir()
    write_tar(tmp_path / "in" / "00000.tar", [("a.jpg", b"no picture"), ("a.txt", b"a red circle")])
    args = ["corpus", str(tmp_path / "in"), "--model", MODEL, "--no-progress", "--top-fraction", "0.5"]
    assert main([*args, "--output", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert (
        "no row has a clipscore score (of 1 row(s), 1 are error rows), so the top 0.5 has no threshold" in err
    )
    text = (tmp_path / "out" / "summary.json").read_text()
    assert "NaN" not in text
    summary = json.loads(text)
    assert (
        summary["threshold"] is None
        and summary["kept"] == 0
        and "no threshold" in summary["threshold_missing"]
    )
    assert (tmp_path / "out" / "kept.jsonl").read_text() == ""


# --- Only regular files are read, and no line past its bound ---


def _image_folder(root: Path) -> Path:
    from PIL import Image

    root.mkdir()
    Image.new("RGB", (32, 32), "red").save(root / "a.png")
    (root / "a.txt").write_text("a red square\n")
    Image.new("RGB", (32, 32), "blue").save(root / "b.png")
    return root


def _errors(out: Path) -> dict:
    import pyarrow.parquet as pq

    return {
        r["key"]: r["error"]
        for f in sorted((out / "scores").glob("*.parquet"))
        for r in pq.read_table(f).to_pylist()
    }


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "too-long"])
def test_a_caption_file_that_is_no_regular_file_or_too_long_is_an_error_row_read_no_further(tmp_path, kind):
    import os

    folder = _image_folder(tmp_path / "images")
    caption = folder / "b.txt"
    if kind == "fifo":
        os.mkfifo(caption)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", caption)
    else:
        caption.write_text("a blue square " * 10_000)  # 140 KB
    result = score_corpus(folder, tmp_path / "out", model=MODEL, progress=False)
    errors = _errors(tmp_path / "out")
    assert errors["a"] is None and result.summary["scored"] == 1
    assert errors["b"].startswith("caption file b.txt of b.png cannot be read (")
    assert ("is not a regular file" if kind != "too-long" else "it holds more than 131,072 bytes") in errors[
        "b"
    ]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_corpus_file_that_is_a_fifo_is_refused_by_name_without_waiting(tmp_path, suffix):
    import os

    (tmp_path / "rows").mkdir()
    os.mkfifo(tmp_path / "rows" / f"pairs{suffix}")
    for source in (tmp_path / "rows", tmp_path / "rows" / f"pairs{suffix}"):
        with pytest.raises(ValueError, match=rf"pairs\{suffix} is not a regular file \(a FIFO\)"):
            score_corpus(source, tmp_path / "out", model=MODEL, progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_line_longer_than_any_row_refuses_its_file_naming_the_line_without_reading_on(
    tmp_path, suffix, monkeypatch
):
    import capeval.corpus.row_sources as row_sources

    monkeypatch.setattr(row_sources, "MAX_LINE_BYTES", 1000)
    head = "image,caption\n" if suffix == ".csv" else ""
    row = "a.png,a red square\n" if suffix == ".csv" else '{"image": "a.png", "caption": "a red square"}\n'
    path = tmp_path / f"pairs{suffix}"
    # The third line never ends: a sparse file, or one linked to /dev/zero, is such a line.
    path.write_text(head + row + row + "x" * 5000)
    with pytest.raises(
        ValueError, match=rf"pairs\{suffix} line {3 if suffix == '.jsonl' else 4} is longer than 1,000 bytes"
    ):
        score_corpus(path, tmp_path / "out", model=MODEL, progress=False)


def test_a_link_that_loops_in_an_image_folder_is_refused_naming_it(tmp_path):
    import os

    folder = _image_folder(tmp_path / "images")
    (folder / "sub").mkdir()
    os.symlink("..", folder / "sub" / "up")
    with pytest.raises(ValueError, match=r"images/sub/up is a link to \.\., a folder above it"):
        score_corpus(folder, tmp_path / "out", model=MODEL, progress=False)
    os.unlink(folder / "sub" / "up")
    os.symlink("self", folder / "sub" / "self")  # a link to itself
    with pytest.raises(
        ValueError, match=r"images/sub/self cannot be followed \(Too many levels of symbolic links\)"
    ):
        score_corpus(folder, tmp_path / "out", model=MODEL, progress=False)
    os.unlink(folder / "sub" / "self")
    os.symlink("loop.png", folder / "sub" / "loop.png")
    (folder / "sub" / "loop.txt").write_text("a loop")
    score_corpus(folder, tmp_path / "out", model=MODEL, progress=False)
    assert "Too many levels of symbolic links" in _errors(tmp_path / "out")["sub/loop"]


# --- A source that looks like a path is a path ---


@pytest.mark.parametrize(
    "source, why",
    [("shard/", "looks like a path"), ("my_pairs.jsonl", "has a data file's extension"),
     ("./pairs", "looks like a path"), ("shards/{00000..00009}.tar", "looks like a path")],
)  # fmt: skip
def test_a_missing_source_that_looks_like_a_path_is_refused_at_once_never_asked_of_the_hub(
    tmp_path, monkeypatch, capsys, source, why
):
    import datasets

    def no_hub(*args, **kwargs):
        raise AssertionError("the Hub was asked")

    monkeypatch.setattr(datasets, "load_dataset", no_hub)
    monkeypatch.chdir(tmp_path)
    if "{" not in source:
        with pytest.raises(
            ValueError, match=rf"corpus source not found: .*\(no such file or folder; .* since it {why}\)"
        ):
            score_corpus(source, tmp_path / "out", model=MODEL, progress=False)
    assert main(["corpus", source, "--output", str(tmp_path / "out"), "--model", MODEL]) != 0
    assert source.rstrip("/").split("/")[-1].split("{")[0] in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_dangling_link_as_source_names_its_target(tmp_path):
    import os

    os.symlink(tmp_path / "gone.jsonl", tmp_path / "pairs.jsonl")
    with pytest.raises(ValueError, match=r"pairs\.jsonl is a link to .*gone\.jsonl, which does not exist"):
        score_corpus(tmp_path / "pairs.jsonl", tmp_path / "out", model=MODEL, progress=False)
