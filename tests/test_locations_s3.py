"""Shards on S3, against a real S3 API: moto's server on 127.0.0.1, objects put with boto3, read through s3fs:
brace patterns, listings and globs, a bucket that does not exist, identity by size and ETag, tars and Parquet read
from the objects as from local files."""

from __future__ import annotations

import pickle

import pytest

from capeval.corpus.file_identity import identity_changes
from capeval.corpus.location_kinds import LocationError, RemoteShard
from capeval.corpus.locations import list_locations
from capeval.corpus.parquet_cells import CheckedParquet
from capeval.corpus.tar_members import tar_samples
from tests import hostile_shards as H
from tests import s3_server

WANTED = ("jpg", "txt", "json")


@pytest.fixture
def s3(s3_endpoint, request):
    """``(put(name, bytes), url prefix, storage options)`` in a prefix of its own for each test."""
    client = s3_server.client(s3_endpoint)
    prefix = request.node.name.replace("[", "-").replace("]", "")

    def put(name: str, data: bytes) -> None:
        client.put_object(Bucket=s3_server.BUCKET, Key=f"{prefix}/{name}", Body=data)

    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": s3_endpoint, "region_name": "us-east-1"},
    }
    return put, f"s3://{s3_server.BUCKET}/{prefix}", options


def _tar_bytes(tmp_path, *keys) -> bytes:
    path = tmp_path / "shard.tar"
    H.write_tar(
        path, [m for k in keys for m in ((f"{k}.jpg", H.jpeg()), (f"{k}.txt", f"caption {k}".encode()))]
    )
    return path.read_bytes()


def _keys(location):
    with location.open() as fh:
        return [s.key for s in tar_samples(fh, WANTED, 2**20)]


def test_a_brace_pattern_names_objects_and_each_is_read_as_a_tar(s3, tmp_path):
    put, prefix, options = s3
    for i in range(10):
        put(f"{i:05d}.tar", _tar_bytes(tmp_path, f"{i:05d}0000", f"{i:05d}0001"))
    locations = list_locations(f"{prefix}/{{00000..00009}}.tar", storage_options=options)
    assert [(loc.name, loc.kind, loc.url) for loc in locations] == [
        (f"{i:05d}", "webdataset", f"{prefix}/{i:05d}.tar") for i in range(10)
    ]
    assert all(isinstance(loc, RemoteShard) for loc in locations)
    assert _keys(locations[7]) == ["000070000", "000070001"]


def test_a_folder_is_listed_for_its_tars_and_a_glob_matches_parquet(s3, tmp_path):
    put, prefix, options = s3
    for i in range(3):
        put(f"{i:05d}.tar", _tar_bytes(tmp_path, f"k{i}"))
        put(f"{i:05d}.parquet", b"img2dataset metadata")
        put(f"{i:05d}_stats.json", b"{}")
    put("sub/00009.tar", b"")
    listed = list_locations(f"{prefix}/", storage_options=options)
    assert [(loc.name, loc.kind) for loc in listed] == [(f"{i:05d}", "webdataset") for i in range(3)]
    globbed = list_locations(f"{prefix}/*.parquet", storage_options=options)
    assert [(loc.name, loc.kind) for loc in globbed] == [(f"{i:05d}", "parquet") for i in range(3)]


def test_a_bucket_that_does_not_exist_is_named(s3):
    _, _, options = s3
    with pytest.raises(
        LocationError,
        match=r"shard 's3://no-such-bucket/shards/00000\.tar' does not exist; s3://no-such-bucket does not exist "
        r"\(for s3:// and gs://: no bucket of that name",
    ):
        list_locations("s3://no-such-bucket/shards/00000.tar", storage_options=options)
    with pytest.raises(
        LocationError, match=r"matches no file: none of its 3 names exists .*; s3://no-such-bucket does not"
    ):
        list_locations("s3://no-such-bucket/{0..2}.tar", storage_options=options)


def test_missing_objects_of_a_pattern_are_named_and_an_empty_prefix_shows_its_folder(s3, tmp_path):
    put, prefix, options = s3
    for i in (0, 1, 3):
        put(f"{i:05d}.tar", _tar_bytes(tmp_path, "k"))
    put("notes.txt", b"x")
    with pytest.raises(
        LocationError,
        match=r"names 5 files and 2 of them do not exist: s3://.*/00002\.tar, s3://.*/00004\.tar$",
    ):
        list_locations(f"{prefix}/{{00000..00004}}.tar", storage_options=options)
    with pytest.raises(
        LocationError, match=r"no file matches 's3://.*/\*\.parquet'; s3://.* holds \['\.tar', '\.txt'\]"
    ):
        list_locations(f"{prefix}/*.parquet", storage_options=options)


def test_identity_is_size_and_etag_and_an_overwrite_shows_while_the_same_bytes_do_not(s3, tmp_path):
    put, prefix, options = s3
    first = _tar_bytes(tmp_path, "a")
    put("00000.tar", first)
    [location] = list_locations(f"{prefix}/00000.tar", storage_options=options)
    before = location.identity()
    assert before["checked_by"] == "etag" and before["size"] == len(first) and before["url"] == location.url
    put("00000.tar", first)  # the same bytes again: a single-part upload's ETag is their MD5
    assert identity_changes(before, location.identity()) == []
    put("00000.tar", _tar_bytes(tmp_path, "b"))  # same size, other bytes
    changes = identity_changes(before, location.identity())
    assert changes and changes[0].startswith(f"ETag {before['etag']} -> ")
    assert _keys(location) == ["b"]


def test_a_hostile_tar_on_s3_reads_as_the_same_file_does_locally(s3, tmp_path):
    put, prefix, options = s3
    data = H.tar_of(*H.sample("a"), H.pax_size_claim("big.jpg", 10**11), *H.sample("never_read"))
    put("00000.tar", data)
    (tmp_path / "00000.tar").write_bytes(data)
    [location] = list_locations(f"{prefix}/00000.tar", storage_options=options)
    with location.open() as fh:
        remote = [(s.key, s.problem) for s in tar_samples(fh, WANTED, 2**20)]
    assert remote == [(s.key, s.problem) for s in tar_samples(tmp_path / "00000.tar", WANTED, 2**20)]
    assert remote[1][1].startswith(f"tar member big.jpg claims {10**11} bytes where the file holds ")


def test_a_parquet_object_is_read_with_its_cell_limits(s3, tmp_path):
    put, prefix, options = s3
    H.write_parquet(
        tmp_path / "p.parquet", {"key": ["a", "big"], "jpg": [H.jpeg(), bytes(5000)]}, row_group_size=1
    )
    put("part-0.parquet", (tmp_path / "p.parquet").read_bytes())
    [location] = list_locations(f"{prefix}/part-0.parquet", storage_options=options)
    with location.open() as fh:
        table = CheckedParquet(fh, 4096)
        assert table.column("jpg").to_pylist() == [H.jpeg(), None]
    assert table.problems[1].startswith(
        "column 'jpg' of row group 1 (1 rows) holds "
    )  # refused from the footer
    assert table.problems[1].endswith("bytes uncompressed (limit 4,096); it is not read")


def test_a_location_travels_to_another_process_by_pickle(s3, tmp_path):
    put, prefix, options = s3
    put("00000.tar", _tar_bytes(tmp_path, "a"))
    [location] = list_locations(f"{prefix}/00000.tar", storage_options=options)
    copy = pickle.loads(pickle.dumps(location))
    assert copy == location and _keys(copy) == ["a"]


def test_the_endpoint_and_keys_can_come_from_the_environment(s3, tmp_path, monkeypatch):
    import s3fs

    put, prefix, options = s3
    put("00000.tar", _tar_bytes(tmp_path, "a"))
    for name, value in s3_server.environment(options["client_kwargs"]["endpoint_url"]).items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()  # a filesystem made before these variables would not see them
    try:
        [location] = list_locations(f"{prefix}/00000.tar")
        assert _keys(location) == ["a"]
    finally:
        s3fs.S3FileSystem.clear_instance_cache()


# --- A corpus run on shards in S3 ---


def test_a_corpus_run_on_an_s3_brace_pattern_scores_as_on_local_files_and_resumes_by_etag(
    s3, tmp_path, monkeypatch, pinned_threads
):
    from capeval.corpus.run import score_corpus
    from capeval.diagnostics.categories import DuplicateKeyWarning, InputChangedWarning
    from capeval.shapes import shapes_clip_path
    from capeval_dev.testing.shapes_shards import write_shapes_shards
    from tests.test_corpus import read_scores

    put, prefix, options = s3
    for name, value in s3_server.environment(options["client_kwargs"]["endpoint_url"]).items():
        monkeypatch.setenv(name, value)
    write_shapes_shards(tmp_path / "local", shards=2, rows_per_shard=3)
    for tar in sorted((tmp_path / "local").glob("*.tar")):
        put(tar.name, tar.read_bytes())
    model = str(shapes_clip_path())
    score_corpus(tmp_path / "local", tmp_path / "want", model=model)
    remote = score_corpus(f"{prefix}/{{00000..00001}}.tar", tmp_path / "got", model=model)
    assert read_scores(tmp_path / "got") == read_scores(tmp_path / "want")
    assert remote.summary["shards_scored_now"] == 2
    assert (
        score_corpus(f"{prefix}/{{00000..00001}}.tar", tmp_path / "got", model=model).summary[
            "shards_scored_now"
        ]
        == 0
    )  # unchanged objects: nothing scored again
    put("00001.tar", (tmp_path / "local" / "00000.tar").read_bytes())  # another object under the same name
    with (
        pytest.warns(InputChangedWarning, match=r"input shard 00001 \(s3://.*\) changed .*ETag"),
        pytest.warns(DuplicateKeyWarning),  # the keys of 00000 are now in 00001 too
    ):
        again = score_corpus(f"{prefix}/{{00000..00001}}.tar", tmp_path / "got", model=model)
    assert again.summary["shards_scored_now"] == 1
