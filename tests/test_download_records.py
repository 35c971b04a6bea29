"""img2dataset's own records (per-shard Parquet and ``_stats.json``), read from the real tool's output and from
damaged copies of it."""

from __future__ import annotations

import json
import re
import shutil
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from img2dataset_runs import BROKEN_COUNT, IMAGE_SIZE, MISSING_COUNT, SAMPLES_PER_SHARD

from capeval.corpus import download_records
from capeval.corpus.download_records import (
    DownloadRecordsError,
    SampleOrigin,
    failure_counts,
    read_download_records,
    read_shard_stats,
    record_paths,
    sidecar_origin,
)


def _key(i: int) -> str:
    """img2dataset's key of URL row ``i``: shard number (5 digits) and place in the shard (2 digits for 20)."""
    return f"{i // SAMPLES_PER_SHARD:05d}{i % SAMPLES_PER_SHARD:02d}"


def _shards(folder, suffix):
    return sorted(p for p in folder.glob(f"*{suffix}") if not p.name.endswith("_stats.json"))


def _all_records(folder, suffix):
    return [read_download_records(p) for p in _shards(folder, suffix)]


def _copy_shard(run_folder, name, to):
    """The three files of shard ``name`` of the WebDataset output, copied into ``to``; the tar's path."""
    for file in run_folder.glob(f"{name}*"):
        shutil.copy(file, to / file.name)
    return to / f"{name}.tar"


@pytest.mark.parametrize("output", ["webdataset", "parquet"])
def test_failed_downloads_carry_status_message_url_and_uid_when_img2dataset_wrote_them(
    img2dataset_run, output
):
    folder = getattr(img2dataset_run, output)
    suffix = ".tar" if output == "webdataset" else ".parquet"
    failed = {f.key: f for records in _all_records(folder, suffix) for f in records.failed}
    expected = {
        _key(i): row for i, row in enumerate(img2dataset_run.rows) if row.kind in ("broken", "missing")
    }
    assert len(expected) == BROKEN_COUNT + MISSING_COUNT
    assert set(failed) == set(expected)
    for key, row in expected.items():
        assert (failed[key].url, failed[key].uid) == (row.url, row.uid)
        if row.kind == "broken":
            assert (failed[key].status, failed[key].error_message) == (
                "failed_to_resize",
                "Image decoding error",
            )
        else:
            assert failed[key].status == "failed_to_download"
            assert "404" in failed[key].error_message


def test_failure_counts_equal_the_stats_status_dict_of_img2dataset(img2dataset_run):
    for tar in _shards(img2dataset_run.webdataset, ".tar"):
        records = read_download_records(tar)
        stats = read_shard_stats(tar, records)
        counted = failure_counts(records.failed)
        by_message = {m: n for messages in counted.values() for m, n in messages.items()}
        assert by_message == {m: n for m, n in stats.status_counts.items() if m != "success"}
        assert sum(counted.get("failed_to_download", {}).values()) == stats.counts["failed_to_download"]


def test_failure_counts_group_by_status_then_message_most_frequent_first():
    failed = [
        download_records.FailedDownload("1", "failed_to_download", "timeout", None, None),
        download_records.FailedDownload("2", "failed_to_download", "HTTP Error 404", None, None),
        download_records.FailedDownload("3", "failed_to_download", "HTTP Error 404", None, None),
        download_records.FailedDownload("4", "failed_to_resize", None, None, None),
    ]
    counts = failure_counts(failed)
    assert counts == {
        "failed_to_download": {"HTTP Error 404": 2, "timeout": 1},
        "failed_to_resize": {"": 1},
    }
    assert list(counts["failed_to_download"]) == ["HTTP Error 404", "timeout"]


@pytest.mark.parametrize("output", ["webdataset", "parquet"])
def test_every_url_row_has_its_origin_under_its_key_with_uid_url_and_sizes(img2dataset_run, output):
    folder = getattr(img2dataset_run, output)
    suffix = ".tar" if output == "webdataset" else ".parquet"
    origins = {k: o for records in _all_records(folder, suffix) for k, o in records.origins.items()}
    assert len(origins) == len(img2dataset_run.rows)
    for i, row in enumerate(img2dataset_run.rows):
        origin = origins[_key(i)]
        assert (origin.key, origin.uid, origin.url) == (_key(i), row.uid, row.url)
        if row.kind in ("image", "repeat"):
            assert (origin.original_width, origin.original_height) == row.size
            assert min(origin.width, origin.height) == IMAGE_SIZE  # keep_ratio resizes the short side
        else:
            assert (origin.width, origin.height, origin.original_width, origin.original_height) == (None,) * 4


def test_a_repeated_url_is_two_samples_with_their_own_keys_and_uids(img2dataset_run):
    rows = img2dataset_run.rows
    repeat = next(i for i, r in enumerate(rows) if r.kind == "repeat")
    first = next(i for i, r in enumerate(rows) if r.url == rows[repeat].url and i != repeat)
    origins = {k: o for r in _all_records(img2dataset_run.webdataset, ".tar") for k, o in r.origins.items()}
    assert origins[_key(first)].url == origins[_key(repeat)].url
    assert origins[_key(first)].uid != origins[_key(repeat)].uid


def test_every_sidecar_gives_the_origin_its_shards_parquet_gives(img2dataset_run):
    for tar in _shards(img2dataset_run.webdataset, ".tar"):
        origins = read_download_records(tar).origins
        with tarfile.open(tar) as archive:
            sidecars = [m for m in archive.getmembers() if m.name.endswith(".json")]
            assert sidecars
            for member in sidecars:
                key = member.name[: -len(".json")]
                origin, problem = sidecar_origin(json.loads(archive.extractfile(member).read()), key)
                assert problem is None
                assert origin == origins[key]


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (
            {"uid": 12345},
            r"sample 0000001 \(sidecar 0000001.json\) has a uid of type int \(12345\), not text",
        ),
        ({"url": ["http://a"]}, r"sample 0000001 .* has a url of type list"),
        ({"width": -3}, r"sample 0000001 .* has width = -3, not a size in pixels"),
        ({"original_height": 2.5}, r"original_height = 2.5, not a size"),
        ({"height": True}, r"height = True, not a size"),
        ({"key": "0000002"}, r"sample 0000001 .* names the key '0000002', not '0000001'"),
    ],
)
def test_a_sidecar_field_of_the_wrong_type_is_refused_naming_the_sample(metadata, message):
    origin, problem = sidecar_origin(metadata, "0000001")
    assert origin is None
    assert re.search(message, problem), problem


def test_a_sidecar_that_is_not_an_object_is_refused_with_its_member_name():
    origin, problem = sidecar_origin(["uid"], "0000001", "shard/0000001.json")
    assert origin is None
    assert problem == "sample 0000001 (sidecar shard/0000001.json) is a JSON list, not an object"


def test_a_sidecar_without_uid_or_with_nulls_gives_none_for_those_fields():
    origin, problem = sidecar_origin({"key": "7", "uid": None, "width": None, "url": "http://x/1.jpg"}, "7")
    assert problem is None
    assert origin == SampleOrigin(key="7", url="http://x/1.jpg")


def test_shards_img2dataset_finished_are_complete_and_agree_with_their_records(img2dataset_run):
    for folder, suffix in ((img2dataset_run.webdataset, ".tar"), (img2dataset_run.parquet, ".parquet")):
        for shard in _shards(folder, suffix):
            stats = read_shard_stats(shard, read_download_records(shard))
            assert stats.complete, stats.reason
            assert stats.reason is None
            assert stats.unrecorded == 0
            assert stats.counts["count"] == read_download_records(shard).rows


def test_a_shard_without_its_stats_file_is_incomplete_and_says_why(img2dataset_run, tmp_path):
    tar = _copy_shard(img2dataset_run.webdataset, "00000", tmp_path)
    (tmp_path / "00000_stats.json").unlink()
    stats = read_shard_stats(tar)
    assert not stats.complete
    assert "00000_stats.json is missing" in stats.reason
    assert "interrupted download" in stats.reason


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_stats_file_that_cannot_be_read_makes_its_shard_incomplete_and_the_run_summarises(
    img2dataset_run, tmp_path, kind
):
    import os

    from capeval.corpus.run import score_corpus
    from capeval.shapes import shapes_clip_path

    _copy_shard(img2dataset_run.webdataset, "00000", tmp_path)
    stats_file = tmp_path / "00000_stats.json"
    stats_file.unlink()
    os.mkdir(stats_file) if kind == "folder" else os.mkfifo(stats_file)
    stats = read_shard_stats(tmp_path / "00000.tar")
    assert not stats.complete and "00000_stats.json cannot be read (" in stats.reason
    assert f"is not a regular file ({'a folder' if kind == 'folder' else 'a FIFO'})" in stats.reason
    os.mkfifo(tmp_path / "00000.parquet.fifo")  # a records file that is a FIFO is refused, not waited on
    os.replace(tmp_path / "00000.parquet.fifo", tmp_path / "00000.parquet")
    with pytest.raises(DownloadRecordsError, match=r"00000.parquet cannot be read: .*not a regular file"):
        read_download_records(tmp_path / "00000.tar")
    # The run is scored and summarised, the shard named as possibly incomplete (it used to end with an OSError).
    result = score_corpus(
        tmp_path / "00000.tar", tmp_path / "out", model=str(shapes_clip_path()), progress=False
    )
    assert "00000_stats.json cannot be read" in result.summary["downloads"]["incomplete_shards"]["00000"]
    assert (tmp_path / "out" / "summary.json").is_file()


def _with_stats(img2dataset_run, tmp_path, edit):
    tar = _copy_shard(img2dataset_run.webdataset, "00000", tmp_path)
    path = tmp_path / "00000_stats.json"
    text = edit(json.loads(path.read_text()))
    path.write_text(text if isinstance(text, str) else json.dumps(text))
    return tar


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda s: '{"count": 20, "count": 21}', r'key "count" appears twice'),
        (lambda s: json.dumps(s)[:40], r"the stats file .*00000_stats.json is not valid JSON"),
        (lambda s: "[1, 2]", r"00000_stats.json holds a JSON list, not img2dataset's stats object"),
        (
            lambda s: {k: v for k, v in s.items() if k != "successes"},
            r"has no 'successes': it is not img2dataset",
        ),
        (lambda s: {**s, "failed_to_resize": -1}, r"has failed_to_resize = -1, not a count"),
        (lambda s: {**s, "count": "20"}, r"has count = '20', not a count"),
        (lambda s: {**s, "count": 5}, r"counts 20 outcomes for 5 URLs"),
        (
            lambda s: {**s, "status_dict": {"success": "many"}},
            r"status_dict\['success'\] = 'many', not a count",
        ),
        (lambda s: "[" * 200 + "]" * 200, r"nests arrays and objects more than 100 levels"),
    ],
)
def test_a_damaged_stats_file_makes_its_shard_incomplete_with_the_reason(
    img2dataset_run, tmp_path, edit, reason
):
    stats = read_shard_stats(_with_stats(img2dataset_run, tmp_path, edit))
    assert not stats.complete
    assert re.search(reason, stats.reason), stats.reason


def test_a_stats_file_over_the_size_limit_is_not_read(img2dataset_run, tmp_path, monkeypatch):
    monkeypatch.setattr(download_records, "MAX_STATS_BYTES", 100)
    stats = read_shard_stats(_copy_shard(img2dataset_run.webdataset, "00000", tmp_path))
    assert not stats.complete
    assert "00000_stats.json is over 100 bytes; it is not read" in stats.reason


def test_stats_counting_urls_recorded_nowhere_leave_the_shard_complete_with_them_counted(
    img2dataset_run, tmp_path
):
    tar = _with_stats(img2dataset_run, tmp_path, lambda s: {**s, "count": s["count"] + 2})
    stats = read_shard_stats(tar, read_download_records(tar))
    assert stats.complete
    assert stats.unrecorded == 2


def test_stats_of_another_shard_beside_the_records_make_the_shard_incomplete(img2dataset_run, tmp_path):
    tar = _copy_shard(img2dataset_run.webdataset, "00000", tmp_path)
    shutil.copy(img2dataset_run.webdataset / "00001_stats.json", tmp_path / "00000_stats.json")
    stats = read_shard_stats(tar, read_download_records(tar))
    assert not stats.complete
    assert "holds 20 rows but" in stats.reason
    assert "counts 11 recorded URLs" in stats.reason


def test_stats_whose_statuses_differ_from_the_records_make_the_shard_incomplete(img2dataset_run, tmp_path):
    def swap(stats):
        return {
            **stats,
            "successes": stats["successes"] - 1,
            "failed_to_resize": stats["failed_to_resize"] + 1,
        }

    tar = _with_stats(img2dataset_run, tmp_path, swap)
    stats = read_shard_stats(tar, read_download_records(tar))
    assert not stats.complete
    assert "rows 'success' but" in stats.reason


def test_record_paths_are_the_parquet_and_stats_beside_a_tar_and_the_shard_itself_for_parquet(tmp_path):
    assert record_paths(tmp_path / "00003.tar") == (tmp_path / "00003.parquet", tmp_path / "00003_stats.json")
    assert record_paths(tmp_path / "00003.parquet") == (
        tmp_path / "00003.parquet",
        tmp_path / "00003_stats.json",
    )


def test_missing_records_are_refused_naming_the_file(tmp_path):
    with pytest.raises(DownloadRecordsError, match=r"00000.parquet is missing: img2dataset writes it"):
        read_download_records(tmp_path / "00000.tar")


def test_a_truncated_records_file_is_refused_naming_it(img2dataset_run, tmp_path):
    tar = _copy_shard(img2dataset_run.webdataset, "00000", tmp_path)
    data = (tmp_path / "00000.parquet").read_bytes()
    (tmp_path / "00000.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(DownloadRecordsError, match=r"00000.parquet is not a readable Parquet file"):
        read_download_records(tar)


def test_a_parquet_without_img2dataset_columns_is_not_taken_for_its_records(tmp_path):
    pq.write_table(pa.table({"url": ["http://x"], "caption": ["c"]}), tmp_path / "00000.parquet")
    with pytest.raises(
        DownloadRecordsError, match=r"has no column \['key', 'status'\]: it is not img2dataset"
    ):
        read_download_records(tmp_path / "00000.tar")


def test_records_with_more_rows_than_the_limit_are_refused(img2dataset_run, tmp_path, monkeypatch):
    monkeypatch.setattr(download_records, "MAX_RECORD_ROWS", 5)
    tar = _copy_shard(img2dataset_run.webdataset, "00000", tmp_path)
    with pytest.raises(DownloadRecordsError, match=r"00000.parquet has 20 rows \(limit 5\)"):
        read_download_records(tar)


def _records_file(tmp_path, **columns):
    base = {
        "key": ["0", "1", "2"],
        "status": ["success", "failed_to_download", "success"],
        "error_message": [None, "HTTP Error 404: File not found", None],
        "uid": ["a" * 32, "b" * 32, "c" * 32],
        "width": pa.array([4, None, 5], pa.int32()),
    }
    pq.write_table(pa.table({**base, **columns}), tmp_path / "00000.parquet")
    return read_download_records(tmp_path / "00000.tar")


def test_a_row_with_a_repeated_key_an_unknown_status_or_no_key_is_listed_and_the_rest_read(tmp_path):
    records = _records_file(
        tmp_path, key=["0", "0", None], status=["success", "success", "success"], error_message=[None] * 3
    )
    assert list(records.origins) == ["0"]
    assert records.problems == [
        f"row 1 (key 0) of {tmp_path / '00000.parquet'} repeats the key of row 0",
        f"row 2 of {tmp_path / '00000.parquet'} has no key (null)",
    ]
    records = _records_file(tmp_path, status=["success", "done", None])
    assert list(records.origins) == ["0"]
    assert "row 1 (key 1)" in records.problems[0] and "has status 'done', not one of" in records.problems[0]
    assert "row 2 (key 2)" in records.problems[1] and "has status None" in records.problems[1]


def test_a_uid_column_that_is_not_text_is_reported_and_its_uids_left_out(tmp_path):
    records = _records_file(tmp_path, uid=pa.array([1, 2, 3], pa.int64()))
    assert records.problems == [
        f"column 'uid' of {tmp_path / '00000.parquet'} is int64, not what img2dataset writes"
    ]
    assert records.origins["0"] == SampleOrigin(key="0", width=4)
    assert [f.key for f in records.failed] == ["1"]


def test_a_negative_size_is_refused_by_row(tmp_path):
    records = _records_file(tmp_path, width=pa.array([4, None, -5], pa.int32()))
    assert list(records.origins) == ["0", "1"]
    assert records.problems == [
        f"row 2 (key 2) of {tmp_path / '00000.parquet'} has width = -5, not a size in pixels"
    ]


def test_a_cell_over_the_size_limit_is_refused_by_row_naming_its_key(tmp_path, monkeypatch):
    monkeypatch.setattr(download_records, "MAX_RECORD_CELL_BYTES", 400)
    keys = [str(i) for i in range(10)]  # ten rows: their column chunk may hold 10 x 400 bytes
    messages = [None] * 10
    messages[3] = "x" * 500
    table = pa.table({"key": keys, "status": ["failed_to_download"] * 10, "error_message": messages})
    pq.write_table(table, tmp_path / "00000.parquet")
    records = read_download_records(tmp_path / "00000.tar")
    assert list(records.origins) == [k for k in keys if k != "3"]
    assert len(records.problems) == 1
    assert records.problems[0].startswith(
        f"row 3 (key 3) of {tmp_path / '00000.parquet'}: its cell in column"
    )
    assert "'error_message' is 500 bytes (limit 400)" in records.problems[0]


def test_records_never_read_the_image_column_of_a_parquet_shard(img2dataset_run, monkeypatch):
    read = []
    original = download_records.CheckedParquet.column

    def spy(self, name):
        read.append(name)
        return original(self, name)

    monkeypatch.setattr(download_records.CheckedParquet, "column", spy)
    read_download_records(_shards(img2dataset_run.parquet, ".parquet")[0])
    assert "jpg" in pq.read_schema(_shards(img2dataset_run.parquet, ".parquet")[0]).names
    assert "jpg" not in read
    assert set(read) == {
        "key",
        "status",
        "error_message",
        "uid",
        "url",
        "width",
        "height",
        "original_width",
        "original_height",
    }
