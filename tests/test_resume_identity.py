"""What a resumed run compares before it keeps a shard's output: the input's bytes and everything that gives them
their meaning. A replaced image a row names by path, a streamed dataset's edited rows, a CSV header whose fields
were renamed, blank lines that move a JSONL row's default key, another image root: each shard it touches is scored
again and said so; an unchanged shard is kept."""

from __future__ import annotations

import json
import os
import shutil
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capeval.corpus.run import score_corpus
from capeval.diagnostics.categories import InputChangedWarning
from capeval.shapes import Scene, draw, shapes_clip_path

MODEL = str(shapes_clip_path())
SCENES = [
    Scene("red", "circle", "left"),
    Scene("blue", "square", "top"),
    Scene("green", "triangle", "bottom"),
]


def _scores(out):
    return [r for f in sorted((out / "scores").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


@pytest.fixture
def pictures(tmp_path):
    """Three drawn pictures in ``data/images`` and a fourth, of something else, to replace one with."""
    folder = tmp_path / "data" / "images"
    folder.mkdir(parents=True)
    for i, scene in enumerate(SCENES):
        draw(scene).save(folder / f"{i}.png")
    draw(Scene("yellow", "circle", "right")).save(tmp_path / "other.png")
    return tmp_path


def _captions():
    return [f"a {s.color} {s.shape} at the {s.position}" for s in SCENES]


def _run(source, out, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = score_corpus(source, out, model=MODEL, progress=False, chunk_size=2, **options)
    said = [str(w.message) for w in caught if issubclass(w.category, InputChangedWarning)]
    return result, said


def _sources(root):
    """The same three rows as JSONL, CSV, Parquet (a path column) and a dataset, each naming images by path."""
    import datasets

    data = root / "data"
    rows = [{"id": f"r{i}", "image": f"images/{i}.png", "caption": c} for i, c in enumerate(_captions())]
    (data / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "rows.csv").write_text(
        "id,image,caption\n" + "".join(f"{r['id']},{r['image']},{r['caption']}\n" for r in rows)
    )
    pq.write_table(pa.table({"key": [r["id"] for r in rows], "image_path": [r["image"] for r in rows],
                             "caption": [r["caption"] for r in rows]}), data / "00000.parquet")  # fmt: skip
    dataset = datasets.Dataset.from_list([{**r, "image": str(data / r["image"])} for r in rows])
    return {"jsonl": data / "rows.jsonl", "csv": data / "rows.csv", "parquet": data / "00000.parquet",
            "datasets": dataset}  # fmt: skip


# --- A replaced image is scored again ---


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet", "datasets"])
def test_a_replaced_image_a_row_names_is_scored_again_and_said_so(pictures, kind):
    source = _sources(pictures)[kind]
    options = {"image_root": pictures / "data"} if kind == "datasets" else {}
    first, said = _run(source, pictures / "out", **options)
    assert said == [] and first.summary["scored"] == 3
    before = _scores(pictures / "out")
    shutil.copyfile(pictures / "other.png", pictures / "data" / "images" / "0.png")
    second, said = _run(source, pictures / "out", **options)
    named = (
        3 if kind == "parquet" else 2
    )  # a Parquet file is one shard; the others are cut into shards of 2 rows
    assert len(said) == 1 and f"1 of the {named} image file(s) its rows name changed" in said[0]
    assert "0.png" in said[0]
    assert second.summary["shards_scored_now"] == 1
    after = _scores(pictures / "out")
    assert after[0]["clipscore"] != before[0]["clipscore"] and after[1:] == before[1:]
    fresh, _ = _run(source, pictures / "fresh", **options)
    assert _scores(pictures / "fresh") == after  # the resumed output is what a fresh run gives
    third, said = _run(source, pictures / "out", **options)
    assert said == [] and third.summary["shards_scored_now"] == 0


def test_another_image_root_scores_the_shards_again(pictures):
    source = _sources(pictures)["jsonl"]
    _run(source, pictures / "out")
    again, said = _run(source, pictures / "out", image_root=pictures)
    assert again.summary["shards_scored_now"] == 2 and all("image root None -> " in s for s in said)


# --- What gives the bytes their meaning ---


def test_a_csv_header_that_swaps_two_fields_scores_the_shards_again(pictures):
    path = pictures / "data" / "rows.csv"
    lines = ["id,image,caption,alt"] + [
        f"r{i},images/{i}.png,{c},a yellow blob" for i, c in enumerate(_captions())
    ]
    path.write_text("\n".join(lines) + "\n")
    _run(path, pictures / "out")
    first = [r["clipscore"] for r in _scores(pictures / "out")]
    path.write_text(
        "\n".join(["id,image,alt,caption", *lines[1:]]) + "\n"
    )  # the header fixed: alt is caption
    again, said = _run(path, pictures / "out")
    assert again.summary["shards_scored_now"] == 2 and all("header" in s for s in said)
    fresh, _ = _run(path, pictures / "fresh")
    assert [r["clipscore"] for r in _scores(pictures / "out")] == [
        r["clipscore"] for r in _scores(pictures / "fresh")
    ]
    assert [r["clipscore"] for r in _scores(pictures / "out")] != first


def test_blank_lines_before_a_jsonl_shard_move_its_default_keys_and_score_it_again(pictures):
    path = pictures / "data" / "rows.jsonl"
    rows = [{"image": f"images/{i}.png", "caption": c} for i, c in enumerate(_captions())]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _run(path, pictures / "out")
    assert [r["key"] for r in _scores(pictures / "out")] == ["rows.jsonl:1", "rows.jsonl:2", "rows.jsonl:3"]
    path.write_text("\n\n" + "".join(json.dumps(r) + "\n" for r in rows))
    again, said = _run(path, pictures / "out")
    assert again.summary["shards_scored_now"] == 2 and all("first line" in s for s in said)
    assert [r["key"] for r in _scores(pictures / "out")] == ["rows.jsonl:3", "rows.jsonl:4", "rows.jsonl:5"]


def test_an_edited_streamed_dataset_is_scored_again(pictures):
    import datasets

    rows = [
        {"image": str(pictures / "data" / "images" / f"{i}.png"), "caption": c}
        for i, c in enumerate(_captions())
    ]

    def stream(captions):
        return datasets.Dataset.from_list(
            [{**r, "caption": c} for r, c in zip(rows, captions, strict=True)]
        ).to_iterable_dataset()

    root = {"image_root": pictures}
    _run(stream(_captions()), pictures / "out", **root)
    unchanged, said = _run(stream(_captions()), pictures / "out", **root)
    assert said == [] and unchanged.summary["shards_scored_now"] == 0
    edited = [*_captions()[:2], "a purple square in the middle"]
    again, said = _run(stream(edited), pictures / "out", **root)
    assert again.summary["shards_scored_now"] == 1 and "content" in said[0]
    assert _scores(pictures / "out")[2]["caption"] == "a purple square in the middle"


def test_an_image_touched_but_equal_in_size_is_scored_again_by_its_time(pictures):
    source = _sources(pictures)["jsonl"]
    _run(source, pictures / "out")
    image = pictures / "data" / "images" / "1.png"
    stat = image.stat()
    os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    again, said = _run(source, pictures / "out")
    assert again.summary["shards_scored_now"] == 1 and "1.png" in said[0]
