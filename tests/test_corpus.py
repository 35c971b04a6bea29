"""Corpus scoring of row sources (JSONL, CSV, image folders, datasets): shards of rows, scored like the plain API,
resumable per shard, error-reporting, filterable."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import capeval
from capeval.cli import main
from capeval.corpus.run import score_corpus

COLORS = ("red", "green", "blue", "yellow", "purple")


def make_corpus(root: Path, n: int, bad_rows: bool = True, seed: int = 0) -> Path:
    """``n`` rows of distinct noise images and captions; with ``bad_rows`` a corrupt image and an empty caption."""
    rng = np.random.default_rng(seed)
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        path = images / f"{i:06d}.png"
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(path)
        row = {
            "id": f"row{i}",
            "image": f"images/{path.name}",
            "caption": f"a {COLORS[i % 5]} shape {i % 23}",
        }
        row["references"] = [f"a {COLORS[(i + 1) % 5]} thing", "some shape"]
        lines.append(row)
    if bad_rows and n > 7:
        (images / "corrupt.png").write_bytes(b"\x89PNG not really")
        lines[3]["image"] = "images/corrupt.png"
        lines[7]["caption"] = "   "
    path = root / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def read_scores(output: Path) -> list[dict]:
    """Every output row of a run, in shard then row order."""
    import pyarrow.parquet as pq

    rows = []
    for path in sorted((output / "scores").glob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return rows


def write_csv(path: Path, rows: list[dict]) -> Path:
    """The corpus rows as CSV with a header; references as a JSON list in their cell."""
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "image", "caption", "references"])
        for r in rows:
            writer.writerow([r["id"], r["image"], r["caption"], json.dumps(r["references"])])
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("corpus"), 23)


# --- Rows scored as the plain API scores them, every row kept, in order ---


def test_jsonl_rows_score_as_the_plain_api_per_row_and_every_row_is_kept_in_order(
    corpus, tmp_path, tiny_clip_dir
):
    result = score_corpus(corpus, tmp_path / "out", model=str(tiny_clip_dir), chunk_size=6, batch_size=4)
    rows = read_scores(tmp_path / "out")
    assert [r["key"] for r in rows] == [f"row{i}" for i in range(23)]
    assert [r["shard"] for r in rows][::6] == [f"corpus.jsonl-{n:05d}" for n in range(4)]
    source = read_jsonl(corpus)
    good = [i for i in range(23) if i not in (3, 7)]
    plain = capeval.CLIPScore(model=str(tiny_clip_dir), batch_size=4)(
        [source[i]["caption"] for i in good], images=[str(corpus.parent / source[i]["image"]) for i in good]
    )
    # Other batches than the plain call: equal up to float rounding.
    assert [rows[i]["clipscore"] for i in good] == pytest.approx(plain["scores"], abs=1e-6)
    assert result.summary["mean"]["clipscore"] == pytest.approx(plain["clipscore"], abs=1e-6)
    assert result.summary["signatures"] == {"clipscore": plain["signature"]}
    assert (result.summary["rows"], result.summary["scored"], result.summary["errors"]) == (23, 21, 2)
    assert "corrupt.png" in rows[3]["error"] and rows[3]["clipscore"] is None
    assert rows[7]["error"] == "corpus.jsonl line 8 has an empty caption in field 'caption'"


def test_refclipscore_reads_the_references_field_and_scores_as_the_api(corpus, tmp_path, tiny_clip_dir):
    score_corpus(corpus, tmp_path / "out", ["refclipscore"], model=str(tiny_clip_dir), chunk_size=10)
    rows = read_scores(tmp_path / "out")
    source = read_jsonl(corpus)
    plain = capeval.RefCLIPScore(model=str(tiny_clip_dir))(
        [source[0]["caption"], source[1]["caption"]],
        references=[source[0]["references"], source[1]["references"]],
        images=[str(corpus.parent / source[i]["image"]) for i in (0, 1)],
    )
    assert [rows[0]["refclipscore"], rows[1]["refclipscore"]] == pytest.approx(plain["scores"], abs=1e-6)
    assert [rows[0]["clip_s"], rows[1]["clip_s"]] == pytest.approx(plain["clip_s_scores"], abs=1e-6)


def test_pacscore_corpus_scores_like_the_pacscore_api(corpus, tmp_path, tiny_clip_dir):
    # A converted PAC-S folder is a CLIP folder: the tiny CLIP stands in for one.
    result = score_corpus(
        corpus, tmp_path / "out", ["pacscore"], checkpoint=str(tiny_clip_dir), chunk_size=50
    )
    rows = read_scores(tmp_path / "out")
    source = read_jsonl(corpus)
    plain = capeval.PACScore(checkpoint=str(tiny_clip_dir))(
        [source[i]["caption"] for i in (0, 1, 2)],
        references=[source[i]["references"] for i in (0, 1, 2)],
        images=[str(corpus.parent / source[i]["image"]) for i in (0, 1, 2)],
    )
    assert [rows[i]["pacscore"] for i in (0, 1, 2)] == pytest.approx(plain["scores"], abs=1e-6)
    assert [rows[i]["refpacscore"] for i in (0, 1, 2)] == pytest.approx(plain["refpacscore_scores"], abs=1e-6)
    assert result.summary["signatures"]["pacscore"] == plain["signature"]


# --- Every row source gives the same rows ---


def test_csv_datasets_and_saved_datasets_give_the_rows_of_the_jsonl(
    corpus, tmp_path, tiny_clip_dir, pinned_threads
):
    import datasets

    source = read_jsonl(corpus)
    absolute = [{**r, "image": str(corpus.parent / r["image"])} for r in source]
    ds = datasets.Dataset.from_list(absolute).cast_column("image", datasets.Image())
    ds.save_to_disk(str(tmp_path / "saved-dataset"))
    sources = {
        "csv": write_csv(corpus.parent / "corpus.csv", source),
        "dataset": ds,
        "iterable": ds.to_iterable_dataset(),
        "saved": tmp_path / "saved-dataset",
    }
    # The datasets name their images by absolute path: the image root lets them be read.
    options = dict(model=str(tiny_clip_dir), chunk_size=5, batch_size=5, image_root=corpus.parent)
    score_corpus(corpus, tmp_path / "jsonl", ["refclipscore"], **options)
    want = read_scores(tmp_path / "jsonl")
    for name, given in sources.items():
        score_corpus(given, tmp_path / name, ["refclipscore"], **options)
        got = read_scores(tmp_path / name)
        assert [r["key"] for r in got] == [r["key"] for r in want], name
        assert [r["refclipscore"] for r in got] == [r["refclipscore"] for r in want], name
        assert [r["error"] is None for r in got] == [r["error"] is None for r in want], name
        assert "cannot be read" in got[3]["error"] and "empty caption" in got[7]["error"], name


def test_a_dataset_of_decoded_pictures_is_scored(tmp_path, tiny_clip_dir):
    import datasets

    rng = np.random.default_rng(4)
    pictures = [Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)) for _ in range(3)]
    in_memory = datasets.Dataset.from_dict({"image": pictures, "caption": ["a", "b", "c"]})
    got = score_corpus(in_memory, tmp_path / "out", model=str(tiny_clip_dir), threshold=0.0)
    assert got.summary["scored"] == 3
    plain = capeval.CLIPScore(model=str(tiny_clip_dir))(["a", "b", "c"], images=pictures)
    assert [r["clipscore"] for r in read_scores(tmp_path / "out")] == pytest.approx(plain["scores"], abs=1e-6)


def test_image_folder_with_text_captions(tmp_path, tiny_clip_dir):
    folder = tmp_path / "shards" / "00000"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(3)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.jpg")
        if i != 2:
            (folder / f"{i}.txt").write_text(f"caption {i}\n")
    score_corpus(tmp_path / "shards", tmp_path / "out", model=str(tiny_clip_dir))
    rows = read_scores(tmp_path / "out")
    assert [r["key"] for r in rows] == ["00000/0", "00000/1", "00000/2", "00000/3"]
    assert rows[2]["error"] == "no caption file 2.txt beside 00000/2.jpg"
    assert rows[0]["caption"] == "caption 0"


def test_jsonl_lines_with_a_repeated_key_other_bytes_or_deep_nesting_are_error_rows_naming_the_line(tmp_path):
    from capeval.corpus.reader import choose_columns, open_corpus, read_shard

    path = tmp_path / "corpus.jsonl"
    path.write_bytes(
        b'{"image": "a.png", "caption": "a dog"}\n'
        b'{"image": "b.png", "caption": "a cat", "caption": "a hen"}\n'
        b"\n"
        b'{"image": "c.png", "caption": "caf\xe9"}\n'
        b'{"image": "d.png", "caption": "x", "references": ' + b"[" * 5000 + b"]" * 5000 + b"}\n"
        b'["not", "an", "object"]\n'
    )
    (shard,) = open_corpus(path, 10).shards
    rows = read_shard(shard, choose_columns([shard], {}))
    assert rows[0].caption == "a dog" and rows[0].image == str(tmp_path / "a.png") and rows[0].error is None
    assert [r.key for r in rows] == ["corpus.jsonl:1", "corpus.jsonl:2", "corpus.jsonl:4", "corpus.jsonl:5",
                                     "corpus.jsonl:6"]  # fmt: skip
    assert [r.error for r in rows[1:]] == [
        'corpus.jsonl line 2: key "caption" appears twice in one object (columns 20 and 40); '
        "each key may appear once",
        "corpus.jsonl line 4 is not UTF-8 text: byte 0xe9 (invalid continuation byte); save it as UTF-8",
        "corpus.jsonl line 5 nests arrays and objects more than 100 levels deep; capeval reads at most "
        "MAX_JSON_DEPTH = 100 (its layouts nest 5)",
        "corpus.jsonl line 6 is a JSON list, not an object",
    ]


def test_csv_records_spanning_lines_are_cut_into_shards_by_record(tmp_path):
    from capeval.corpus.reader import choose_columns, open_corpus, read_shard

    path = tmp_path / "rows.csv"
    path.write_text(
        "image,caption,references\n"
        'a.png,"a dog\non two lines","[""a dog""]"\n'
        "b.png,a cat,\n"
        "\n"
        'c.png,a hen,"a hen"\n'
        'd.png,a cow,"[""a cow"", 3]"\n',
        encoding="utf-8",
    )
    shards = open_corpus(path, 2).shards
    assert [s.name for s in shards] == ["rows.csv-00000", "rows.csv-00001"]
    columns = choose_columns(shards, {})
    first, second = (read_shard(s, columns) for s in shards)
    assert [(r.key, r.caption, r.references, r.error) for r in first] == [
        ("rows.csv:2", "a dog\non two lines", ["a dog"], None),
        ("rows.csv:4", "a cat", None, None),
    ]
    assert second[0].key == "rows.csv:6" and "the 'references' field of rows.csv line 6" in second[0].error
    assert second[1].error == "rows.csv line 7 has references that are not all text: reference 1 is int (3)"


# --- Resuming: per shard, and only for an unchanged input ---


def test_a_rerun_scores_nothing_and_filters_with_a_new_threshold(corpus, tmp_path, tiny_clip_dir):
    out = tmp_path / "out"
    first = score_corpus(corpus, out, model=str(tiny_clip_dir), chunk_size=6)
    written = {p.name: p.read_bytes() for p in (out / "scores").iterdir()}
    scores = read_scores(out)
    threshold = sorted(r["clipscore"] for r in scores if r["error"] is None)[10]
    again = score_corpus(corpus, out, model=str(tiny_clip_dir), chunk_size=6, threshold=threshold)
    assert first.summary["shards_scored_now"] == 4 and again.summary["shards_scored_now"] == 0
    assert {p.name: p.read_bytes() for p in (out / "scores").iterdir()} == written
    kept = read_jsonl(again.kept)
    expected = [r["key"] for r in scores if r["error"] is None and r["clipscore"] >= threshold]
    assert [k["key"] for k in kept] == expected and again.summary["kept"] == len(expected) == 11
    assert kept[0] == {"shard": "corpus.jsonl-00000", "key": expected[0], "index": int(expected[0][3:])}


def test_rows_appended_to_a_jsonl_file_leave_its_earlier_shards_done_and_an_edited_line_is_rescored(
    tmp_path, tiny_clip_dir
):
    from capeval.diagnostics.categories import InputChangedWarning

    corpus = make_corpus(tmp_path, 12, bad_rows=False)
    options = dict(model=str(tiny_clip_dir), chunk_size=5)
    score_corpus(corpus, tmp_path / "out", **options)
    lines = corpus.read_text().splitlines(keepends=True)
    more = (
        make_corpus(tmp_path / "more", 4, bad_rows=False)
        .read_text()
        .replace('"images/', '"more/images/')
        .replace('"row', '"more')
    )
    corpus.write_text("".join(lines) + more)
    with pytest.warns(InputChangedWarning, match=r"corpus.jsonl-00002 .*rows 2 -> 5, content"):
        grown = score_corpus(corpus, tmp_path / "out", **options)
    # Shards 0 and 1 are unchanged; the last one grew from 2 to 5 rows and one more holds the last row.
    assert grown.summary["shards_scored_now"] == 2 and grown.summary["rows"] == 16
    lines = corpus.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace("shape", "form")
    corpus.write_text("".join(lines))
    with pytest.warns(InputChangedWarning, match=r"input shard corpus.jsonl-00000 .*changed .*content"):
        edited = score_corpus(corpus, tmp_path / "out", **options)
    assert edited.summary["shards_scored_now"] == 1
    assert read_scores(tmp_path / "out")[1]["caption"] == "a green form 1"


def test_an_output_folder_of_another_run_is_refused(corpus, tmp_path, tiny_clip_dir):
    score_corpus(corpus, tmp_path / "out", model=str(tiny_clip_dir), chunk_size=6)
    with pytest.raises(ValueError, match="holds a run with other settings .*signatures"):
        score_corpus(corpus, tmp_path / "out", model=str(tiny_clip_dir), chunk_size=6, w=2.0)
    with pytest.raises(ValueError, match="holds a run with other settings .*chunk_size: 6 there, 7 now"):
        score_corpus(corpus, tmp_path / "out", model=str(tiny_clip_dir), chunk_size=7)


# --- Rows that lack references ---


def test_refclipscore_rows_without_references_are_error_rows_naming_the_row(corpus, tmp_path, tiny_clip_dir):
    rows = read_jsonl(corpus)
    for i in (0, 10):
        del rows[i]["references"]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        "".join(json.dumps({**r, "image": str(corpus.parent / r["image"])}) + "\n" for r in rows)
    )
    result = score_corpus(
        mixed, tmp_path / "out", ["refclipscore"], model=str(tiny_clip_dir), image_root=corpus.parent
    )
    got = read_scores(tmp_path / "out")
    assert (
        got[0]["error"] == "row row0 has no references (refclipscore needs them)" and got[1]["error"] is None
    )
    assert result.summary["scored"] == 19 and result.summary["error_kinds"]["references"] == 2


def test_pacscore_scores_rows_without_references_and_counts_each_mean(corpus, tmp_path, tiny_clip_dir):
    rows = read_jsonl(corpus)
    for i in (0, 1, 2, 10):
        del rows[i]["references"]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        "".join(json.dumps({**r, "image": str(corpus.parent / r["image"])}) + "\n" for r in rows)
    )
    # Batches of 4 mix rows with and without references: each row's values are those of the plain API.
    result = score_corpus(
        mixed,
        tmp_path / "out",
        ["pacscore"],
        checkpoint=str(tiny_clip_dir),
        batch_size=4,
        image_root=corpus.parent,
    )
    got = read_scores(tmp_path / "out")
    assert got[0]["refpacscore"] is None and got[0]["error"] is None and got[4]["refpacscore"] is not None
    assert result.summary["score_counts"] == {"pacscore": 21, "refpacscore": 17, "raw_cosine": 21}
    plain = capeval.PACScore(checkpoint=str(tiny_clip_dir))(
        [rows[i]["caption"] for i in (4, 5)],
        references=[rows[i]["references"] for i in (4, 5)],
        images=[str(corpus.parent / rows[i]["image"]) for i in (4, 5)],
    )
    assert [got[4]["refpacscore"], got[5]["refpacscore"]] == pytest.approx(
        plain["refpacscore_scores"], abs=1e-6
    )


# --- The command line and the progress bar ---


def test_cli_corpus_prints_the_means_and_writes_kept_rows(corpus, tmp_path, tiny_clip_dir, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "corpus", str(corpus), "--output", str(out), "--model", str(tiny_clip_dir),
            "--threshold", "0.0", "--chunk-size", "8", "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    printed = capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    assert (
        f"21 of 23 rows scored in 3 shard file(s): clipscore {summary['mean']['clipscore']:.4f}"
        in printed.out
    )
    assert "kept 21 row(s) with clipscore >= 0.0000" in printed.out
    assert "2 row(s) not scored" in printed.err
    assert len(read_jsonl(out / "kept.jsonl")) == 21


def test_progress_bar_counts_shards_and_rows(corpus, tmp_path, tiny_clip_dir, capsys):
    score_corpus(corpus, tmp_path / "out", model=str(tiny_clip_dir), chunk_size=6, progress=True)
    err = capsys.readouterr().err
    assert "4/4" in err and "shard/s" in err and "rows=23" in err


# --- raw_cosine: the number web-data filters threshold ---


def test_raw_cosine_is_the_plain_cosine_of_image_and_caption_without_prompt(corpus, tmp_path, tiny_clip_dir):
    from capeval.clip.backbones import load_backbone
    from capeval.clip.image_encoding import encode_images
    from capeval.clip.text_encoding import encode_texts

    score_corpus(corpus, tmp_path / "out", ["clipscore"], model=str(tiny_clip_dir), chunk_size=10)
    rows = read_scores(tmp_path / "out")
    source = read_jsonl(corpus)
    good = [i for i in range(23) if i not in (3, 7)]
    backbone = load_backbone(str(tiny_clip_dir))
    images = encode_images(backbone, [str(corpus.parent / source[i]["image"]) for i in good])
    texts = encode_texts(backbone, [source[i]["caption"] for i in good], prefix="")
    cosines = (images * texts).sum(dim=1).tolist()
    assert [rows[i]["raw_cosine"] for i in good] == pytest.approx(cosines, abs=1e-6)
    assert rows[3]["raw_cosine"] is None  # an error row has none
