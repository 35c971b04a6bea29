"""Image paths named by rows: read only inside the data file's folder, or inside an image root the user gives;
a path leading out (absolute, ``..``, ``~``, a link) is an error row that names the rule and the option and tells
nothing of the file outside. The same rule on every source (JSONL, CSV, Parquet, datasets, image folders) and the
command line; ``tests/test_executors_agree.py`` holds Ray to it."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

from capeval.cli import main
from capeval.corpus.image_paths import ImagePaths, changed_files, file_record
from capeval.corpus.run import score_corpus
from capeval.shapes import shapes_clip_path
from tests.hostile_shards import jpeg

MODEL = str(shapes_clip_path())
HINT = r"image_root=DIR in Python, --image-root DIR on the command line"


def _rows(out):
    return {
        r["key"]: r for f in sorted((out / "scores").glob("*.parquet")) for r in pq.read_table(f).to_pylist()
    }


@pytest.fixture
def layout(tmp_path):
    """``data/rows.jsonl`` beside ``data/images/in.jpg``; ``private/secret.jpg`` outside the data folder."""
    (tmp_path / "data" / "images").mkdir(parents=True)
    (tmp_path / "private").mkdir()
    (tmp_path / "data" / "images" / "in.jpg").write_bytes(jpeg(1))
    (tmp_path / "private" / "secret.jpg").write_bytes(jpeg(2))
    return tmp_path


# --- The rule ---


def test_a_relative_path_inside_the_folder_is_read_there(layout):
    paths = ImagePaths(layout / "data")
    assert paths.resolve("images/in.jpg", "row 0") == (str(layout / "data" / "images" / "in.jpg"), None)
    assert paths.resolve("images/../images/in.jpg", "row 0")[1] is None


@pytest.mark.parametrize(
    "value", ["../private/secret.jpg", "{private}/secret.jpg", "~/secret.jpg", "/etc/passwd"]
)
def test_a_path_leading_out_of_the_folder_is_refused_naming_the_rule_and_the_option(layout, value):
    value = value.replace("{private}", str(layout / "private"))
    path, problem = ImagePaths(layout / "data").resolve(value, "rows.jsonl line 3")
    assert path is None
    assert problem.startswith(
        f"rows.jsonl line 3 names an image path that leads outside its data file's folder {layout / 'data'}"
    )
    assert HINT in problem


def test_a_link_inside_the_folder_to_a_file_outside_is_refused_as_the_path_would_be(layout):
    os.symlink(layout / "private" / "secret.jpg", layout / "data" / "images" / "link.jpg")
    _, problem = ImagePaths(layout / "data").resolve("images/link.jpg", "row 0")
    assert "leads outside its data file's folder" in problem


def test_the_refusal_tells_nothing_of_whether_the_file_outside_exists(layout):
    paths = ImagePaths(layout / "data")
    _, there = paths.resolve("../private/secret.jpg", "row 0")
    _, missing = paths.resolve("../private/absent.jpg", "row 0")
    _, folder = paths.resolve("../private/images", "row 0")
    (layout / "private" / "images").mkdir()
    _, folder_now = paths.resolve("../private/images", "row 0")
    assert (
        there.replace("secret.jpg", "X")
        == missing.replace("absent.jpg", "X")
        == folder.replace("images", "X", 1)
    )
    assert folder_now == folder


def test_an_image_root_allows_paths_inside_it_and_is_named_in_the_refusal(layout):
    paths = ImagePaths(layout / "data", layout)
    assert paths.resolve(str(layout / "private" / "secret.jpg"), "row 0")[1] is None
    assert paths.resolve("../private/secret.jpg", "row 0")[1] is None  # still read in the data file's folder
    _, problem = paths.resolve("/etc/passwd", "row 0")
    assert f"leads outside the image root {layout}" in problem


def test_a_source_without_a_folder_reads_no_path_unless_given_a_root(layout):
    _, problem = ImagePaths(None).resolve("in.jpg", "row 4")
    assert (
        problem.startswith("row 4 names its image by a path ('in.jpg'), and its source has no folder")
        and HINT in problem
    )
    assert ImagePaths(None, layout / "data").resolve("images/in.jpg", "row 4")[1] is None


def test_a_path_with_a_nul_is_refused_by_name(layout):
    _, problem = ImagePaths(layout / "data").resolve("images/in\0.jpg", "row 0")
    assert "names its image by a path that is not usable" in problem


def test_a_recorded_image_file_is_found_changed_when_replaced_touched_or_gone(layout):
    image = layout / "data" / "images" / "in.jpg"
    recorded = [file_record(str(image)), file_record(str(layout / "gone.jpg"))]
    assert recorded[1] == [str(layout / "gone.jpg"), None, None] and changed_files(recorded) == []
    image.write_bytes(jpeg(3) + b"\0" * 7)
    assert changed_files(recorded) == [str(image)]
    os.utime(image, ns=(recorded[0][2], recorded[0][2]))
    (layout / "gone.jpg").write_bytes(b"")
    assert changed_files(recorded) == [str(image), str(layout / "gone.jpg")]


# --- Every source, the command line ---


def _jsonl(layout, images):
    path = layout / "data" / "rows.jsonl"
    path.write_text(
        "".join(json.dumps({"image": im, "caption": f"a picture {i}"}) + "\n" for i, im in enumerate(images))
    )
    return path


def test_a_jsonl_corpus_scores_images_inside_its_folder_and_refuses_the_others(layout):
    source = _jsonl(
        layout, ["images/in.jpg", "../private/secret.jpg", str(layout / "private" / "secret.jpg")]
    )
    result = score_corpus(source, layout / "out", model=MODEL, progress=False, embedding_layout=True)
    rows = list(_rows(layout / "out").values())
    assert rows[0]["error"] is None and rows[0]["clipscore"] is not None
    for row in rows[1:]:
        assert "leads outside its data file's folder" in row["error"] and row["image_embedding"] is None
    assert result.summary["scored"] == 1
    # The embeddings written for the indexers hold only the image inside.
    assert pq.read_table(layout / "out" / "embeddings" / "metadata" / "metadata_0.parquet").num_rows == 1


def test_files_of_absolute_paths_keep_working_through_an_image_root(layout):
    source = _jsonl(
        layout, [str(layout / "private" / "secret.jpg"), str(layout / "data" / "images" / "in.jpg")]
    )
    result = score_corpus(source, layout / "out", model=MODEL, progress=False, image_root=layout)
    assert result.summary["scored"] == 2


def test_csv_parquet_and_datasets_rows_follow_the_same_rule(layout):
    import datasets
    import pyarrow as pa

    inside, outside = "images/in.jpg", str(layout / "private" / "secret.jpg")
    (layout / "data" / "rows.csv").write_text(f"image,caption\n{inside},a picture\n{outside},a picture\n")
    pq.write_table(
        pa.table({"image_path": [inside, outside], "caption": ["a", "b"]}), layout / "data" / "00000.parquet"
    )
    dataset = datasets.Dataset.from_list([{"image": str(layout / "data" / inside), "caption": "a"},
                                          {"image": outside, "caption": "b"}])  # fmt: skip
    for name, source in {
        "csv": layout / "data" / "rows.csv",
        "parquet": layout / "data" / "00000.parquet",
    }.items():
        score_corpus(source, layout / name, model=MODEL, progress=False)
        errors = [r["error"] for r in _rows(layout / name).values()]
        assert errors[0] is None and "leads outside its data file's folder" in errors[1], name
    score_corpus(dataset, layout / "ds", model=MODEL, progress=False)
    assert all(
        "its source has no folder to read paths in" in r["error"] for r in _rows(layout / "ds").values()
    )
    score_corpus(dataset, layout / "ds-root", model=MODEL, progress=False, image_root=layout / "data")
    errors = [r["error"] for r in _rows(layout / "ds-root").values()]
    assert errors[0] is None and "leads outside the image root" in errors[1]


def test_an_image_folder_refuses_a_linked_image_outside_it(layout):
    folder = layout / "folder"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(jpeg(4))
    (folder / "a.txt").write_text("a picture")
    os.symlink(layout / "private" / "secret.jpg", folder / "b.jpg")
    (folder / "b.txt").write_text("a picture")
    score_corpus(folder, layout / "out", model=MODEL, progress=False)
    rows = _rows(layout / "out")
    assert rows["a"]["error"] is None and "leads outside its data file's folder" in rows["b"]["error"]


def test_the_command_line_takes_an_image_root_and_refuses_one_that_is_no_folder(layout, capsys):
    source = _jsonl(layout, [str(layout / "private" / "secret.jpg")])
    args = ["corpus", str(source), "--model", MODEL, "--no-progress", "--output"]
    assert main([*args, str(layout / "out")]) == 0
    assert "1 row(s) not scored" in capsys.readouterr().err
    assert main([*args, str(layout / "rooted"), "--image-root", str(layout)]) == 0
    assert "1 of 1 rows scored" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"image_root .*nothing is not a folder"):
        score_corpus(source, layout / "none", model=MODEL, image_root=layout / "nothing")
    assert not (layout / "none").exists()
