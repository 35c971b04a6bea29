"""The local and Ray executors fed the same odd and hostile sources write the same rows: every column of every
row (key, shard, index, caption, error, scores), the same shards reported unreadable, the same summary. The
sources are Parquet and WebDataset shards and the row sources cut into shards (JSONL, CSV, a datasets dataset).

Batches of 3 rows cut the shards mid-way, so on Ray one actor call holds the end of one shard, an unreadable
shard's failure row or the start of the next."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("ray")

from capeval.corpus.run import score_corpus  # noqa: E402
from capeval.diagnostics.categories import DuplicateKeyWarning  # noqa: E402
from capeval.shapes import shapes_clip_path  # noqa: E402
from capeval_dev.testing.shapes_shards import write_shapes_shards  # noqa: E402
from tests import hostile_shards as H  # noqa: E402
from tests.hostile_shards import write_tar  # noqa: E402

pytestmark = pytest.mark.slow
MODEL = str(shapes_clip_path())
METRICS = ["clipscore", "refclipscore"]
SCORES = ("clipscore", "refclipscore", "clip_s")
BATCH = 3


def _parquet_shards(folder, samples):
    """Parquet shards whose cells a reader could take several ways: references as one string, references as
    binary, empty and null captions, null references, and a last shard without a caption column."""
    folder.mkdir()
    keys = list(samples)
    jpg = [samples[k]["image"] for k in keys]
    caption = [samples[k]["caption"] for k in keys]
    refs = [samples[k]["references"] for k in keys]
    pq.write_table(pa.table({
        "key": keys[0:3], "jpg": jpg[0:3], "caption": [caption[0], "", None],
        "references": pa.array(["a red circle"] * 3, pa.string()),
    }), folder / "00000.parquet")  # fmt: skip
    pq.write_table(pa.table({
        "key": keys[3:5], "jpg": jpg[3:5], "caption": caption[3:5],
        "references": pa.array([b"a red circle", b'["a red circle"]'], pa.binary()),
    }), folder / "00001.parquet")  # fmt: skip
    pq.write_table(pa.table({
        "key": keys[5:11], "jpg": jpg[5:11],
        "caption": [caption[5], "", None, caption[8], caption[9], caption[10]],
        "references": pa.array([refs[5], refs[6], refs[7], None, refs[9], refs[10]], pa.list_(pa.string())),
    }), folder / "00002.parquet")  # fmt: skip
    pq.write_table(
        pa.table({"key": keys[11:12], "jpg": jpg[11:12], "alt": caption[11:12]}), folder / "00003.parquet"
    )


def _tar_shards(folder, samples):
    """img2dataset's tars, damaged (shard 1: a corrupt JPEG, an empty .txt caption; shard 2: cut inside its last
    member), then a tar using one key twice, an unreadable one, and one whose header after 4 good samples is
    refused (read part-way: none of its rows is kept)."""
    write_shapes_shards(folder, shards=3, rows_per_shard=4, damaged=True)
    members = []
    for key, sample in zip(["a", "b", "a", "c"], list(samples.values())[:4], strict=True):
        members += [(f"{key}.jpg", sample["image"]), (f"{key}.txt", sample["caption"].encode()),
                    (f"{key}.json", json.dumps({"references": sample["references"]}).encode())]  # fmt: skip
    write_tar(folder / "00003.tar", members)
    (folder / "00004.tar").write_bytes(b"not a tar" * 100)
    good = [H.member(f"g{i}.{ext}", data) for i, sample in enumerate(list(samples.values())[4:8])
            for ext, data in (("jpg", sample["image"]), ("txt", sample["caption"].encode()))]  # fmt: skip
    refused = H.extended_header(H.pax_record("path", b"1" * 200))  # a run of digits: refused by name
    (folder / "00005.tar").write_bytes(H.tar_of(*good, refused, *H.sample("z")))


def _records(folder, samples):
    """Records a reader could take several ways, as JSON objects: references as one string, references holding a
    number, an empty and a missing caption, a repeated id, a line that is no JSON, and ordinary ones."""
    folder.mkdir()
    records = []
    for key, sample in samples.items():
        (folder / f"{key}.jpg").write_bytes(sample["image"])
        records.append({"id": key, "image": f"{key}.jpg", "caption": sample["caption"],
                        "references": sample["references"]})  # fmt: skip
    records[0]["references"] = "a red circle"
    records[1]["references"] = ["a red circle", 7]
    records[2]["caption"] = ""
    del records[3]["caption"]
    records[5]["id"] = records[4]["id"]
    return records


def _row_sources(root, samples):
    """The same records as a JSONL file (one line damaged), a CSV file and a datasets dataset whose references
    are binary on one row."""
    import csv

    import datasets

    records = _records(root / "rows", samples)
    lines = [json.dumps(r) for r in records]
    lines[6] = '{"id": "broken", "caption": '
    (root / "rows" / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    with open(root / "rows" / "corpus.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "image", "caption", "references"])
        for r in records:
            refs = r["references"] if isinstance(r["references"], str) else json.dumps(r["references"])
            writer.writerow([r["id"], r["image"], r.get("caption"), refs])
    rows = [{**r, "image": str(root / "rows" / r["image"]), "caption": r.get("caption"),
             "references": json.dumps(r["references"]).encode()} for r in records]  # fmt: skip
    rows[8]["references"] = b"\xff binary"
    return {"jsonl": root / "rows" / "corpus.jsonl", "csv": root / "rows" / "corpus.csv",
            "datasets": datasets.Dataset.from_list(rows)}  # fmt: skip


ROW_SOURCES = ("jsonl", "csv", "datasets")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each source scored by both executors: ``{source: (local result, ray result)}``."""
    import ray

    root = tmp_path_factory.mktemp("agree")
    samples = write_shapes_shards(root / "src", shards=1, rows_per_shard=12, kind="parquet")
    _parquet_shards(root / "parquet", samples)
    _tar_shards(root / "tars", samples)
    if not ray.is_initialized():  # conftest's local_ray, which is per test: here Ray serves the module's runs
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    sources = {"parquet": root / "parquet", "tars": root / "tars", **_row_sources(root, samples)}
    results = {}
    for source, given in sources.items():
        pair = []
        for engine in ("local", "ray"):
            # A repeated key is warned of once per run, by both executors.
            repeated = source in ("tars", *ROW_SOURCES)
            with pytest.warns(DuplicateKeyWarning) if repeated else contextlib.nullcontext():
                # A dataset has no folder of its own: its rows' image paths are read in the root given.
                root_of_images = root / "rows" if source == "datasets" else None
                pair.append(score_corpus(given, root / f"{source}-{engine}", METRICS, model=MODEL,
                                         batch_size=BATCH, chunk_size=5, executor=engine,
                                         image_root=root_of_images))  # fmt: skip
        results[source] = tuple(pair)
    return results


def _rows(result):
    return {f.stem: pq.read_table(f).to_pydict() for f in sorted(result.scores.glob("*.parquet"))}


def _assert_equal_rows(local, remote):
    a, b = _rows(local), _rows(remote)
    assert sorted(a) == sorted(b)
    for shard in a:
        assert list(a[shard]) == list(b[shard])  # the same columns, in the same order
        for column in a[shard]:
            if column in SCORES:
                np.testing.assert_allclose(
                    np.array(b[shard][column], dtype=float), np.array(a[shard][column], dtype=float),
                    atol=1e-6, equal_nan=True, err_msg=f"{shard}.{column}",
                )  # fmt: skip
            else:
                assert b[shard][column] == a[shard][column], f"{shard}.{column}"


def _errors(result):
    return {(s, k): e for s, t in _rows(result).items() for k, e in zip(t["key"], t["error"], strict=True)}


def test_parquet_shards_with_odd_cells_give_equal_rows_on_both_executors(runs):
    local, remote = runs["parquet"]
    _assert_equal_rows(local, remote)
    errors = _errors(remote)
    keys = sorted(k for _, k in errors)
    assert sorted(errors) == [("00000", k) for k in keys[0:3]] + [("00001", k) for k in keys[3:5]] + [
        ("00002", k) for k in keys[5:11]
    ]
    assert errors[("00000", keys[0])] == (
        f"row {keys[0]} has references given as one string ('a red circle'), not a list of strings"
    )
    assert errors[("00000", keys[1])] == f"row {keys[1]} has an empty caption in column 'caption'"
    assert errors[("00000", keys[2])] == f"row {keys[2]} has no caption in column 'caption'"
    assert errors[("00001", keys[3])] == (
        f"row {keys[3]} has references stored as binary (12 bytes), not a list of strings"
    )
    assert errors[("00002", keys[8])] == f"row {keys[8]} has no references (refclipscore needs them)"
    assert [errors[("00002", k)] for k in (keys[5], keys[9], keys[10])] == [None] * 3
    assert remote.summary["scored"] == local.summary["scored"] == 3


def test_webdataset_tars_with_damage_give_equal_rows_on_both_executors(runs):
    local, remote = runs["tars"]
    _assert_equal_rows(local, remote)
    errors = _errors(remote)
    assert errors[("00001", "000010001")].startswith("image of 000010001 cannot be read")
    assert errors[("00001", "000010002")] == "sample 000010002 has an empty caption (.txt)"
    last = errors[("00002", "000020003")]
    assert "truncated" in last or "tar ends inside a member" in last
    rows = _rows(remote)["00003"]
    assert rows["key"] == ["a", "b", "a", "c"] and rows["index"] == [0, 1, 2, 3]
    assert rows["error"][0].startswith("key a names 2 samples of this shard (rows [0, 2]")
    assert rows["error"][2].startswith("key a names 2 samples of this shard (rows [0, 2]")
    assert rows["error"][1] is None and rows["error"][3] is None
    assert remote.summary["scored"] == local.summary["scored"] == 4 + 2 + 3 + 2


@pytest.mark.parametrize("source", ["parquet", "tars"])
def test_both_executors_report_the_same_unreadable_shards_and_summary(runs, source):
    local, remote = runs[source]
    assert (
        list(remote.summary["failed_shards"])
        == list(local.summary["failed_shards"])
        == (["00003"] if source == "parquet" else ["00004", "00005"])
    )
    if source == "tars":
        assert "extended header" in local.summary["failed_shards"]["00005"]
    assert remote.summary["failed_shards"] == local.summary["failed_shards"]
    for field in ("rows", "scored", "errors", "error_kinds", "shards"):
        assert remote.summary[field] == local.summary[field], field
    for metric, mean in local.summary["mean"].items():
        assert remote.summary["mean"][metric] == pytest.approx(mean, abs=1e-6)


@pytest.mark.parametrize("source", ROW_SOURCES)
def test_row_sources_with_odd_records_give_equal_rows_on_both_executors(runs, source):
    local, remote = runs[source]
    _assert_equal_rows(local, remote)
    for field in ("rows", "scored", "errors", "error_kinds", "shards", "duplicate_keys"):
        assert remote.summary[field] == local.summary[field], field
    rows = [r for t in _rows(remote).values() for r in zip(t["key"], t["error"], strict=True)]
    errors = [e for _, e in rows]
    assert len(rows) == 12 and remote.summary["shards"] == 3  # shards of 5, 5 and 2 rows
    where = {"jsonl": "corpus.jsonl line {}", "csv": "corpus.csv line {}", "datasets": "row {}"}[source]
    line = (lambda i: i + 1) if source == "jsonl" else (lambda i: i + 2) if source == "csv" else (lambda i: i)
    if source == "datasets":  # its references are JSON text in bytes: refused as binary, whatever they hold
        assert (
            errors[0]
            == f"{where.format(0)} has references stored as binary (14 bytes), not a list of strings"
        )
    elif source == "csv":  # a CSV references cell holds a JSON list: one bare string is no JSON
        assert (
            errors[0].startswith("the 'references' field of corpus.csv line 2 ") and "JSON list" in errors[0]
        )
    else:
        assert (
            errors[0]
            == "corpus.jsonl line 1 has references given as one string ('a red circle'), not a list "
            "of strings"
        )
    if source != "datasets":
        assert (
            errors[1]
            == f"{where.format(line(1))} has references that are not all text: reference 1 is int (7)"
        )
    if source != "datasets":
        assert errors[2] == f"{where.format(line(2))} has an empty caption in field 'caption'"
        # A CSV cell cannot hold a null: a missing caption is an empty one there.
        missing = "an empty caption" if source == "csv" else "no caption"
        assert errors[3] == f"{where.format(line(3))} has {missing} in field 'caption'"
    if source == "jsonl":
        assert errors[6].startswith("corpus.jsonl line 7") and "JSON" in errors[6]
    assert rows[4][0] == rows[5][0]  # a repeated id is kept on both rows, and reported in the summary
    assert remote.summary["duplicate_keys"]["count"] >= 1
