"""The shard reader's limits: a hostile tar or Parquet shard costs work bounded by its size, and a sample that
cannot be scored is a row naming its key and member, from ``read_shard`` and ``score_corpus`` alike; a shard the
reader cannot trust is reported by name while the run goes on."""

from __future__ import annotations

import io
import os
import tarfile
import tracemalloc

import pyarrow.parquet as pq
import pytest

from capeval.corpus.location_kinds import LocalShard
from capeval.corpus.reader import read_shard
from capeval.corpus.run import score_corpus
from capeval.corpus.shards import MAX_MEMBER_BYTES, ShardReadError, list_shards
from capeval.corpus.tar_members import MAX_CHAINED_HEADERS, MAX_EXTENDED_HEADER_BYTES
from capeval.shapes import shapes_clip_path
from capeval.validation import MAX_REFERENCES
from tests import hostile_shards as H

MODEL = str(shapes_clip_path())


def _read(path):
    return read_shard(list_shards(path)[0])


class _TrackedFile(io.BufferedReader):
    """A shard file that remembers the furthest byte read from it."""

    furthest = 0

    def read(self, size=-1):
        # Asked for more than the file holds, a file gives what is left: asking for no more than its size gives the
        # same bytes without allocating the buffer a false claim would ask for.
        whole = os.fstat(self.fileno()).st_size
        data = super().read(-1 if size is None or size < 0 else min(size, whole))
        self.furthest = max(self.furthest, self.tell())
        return data


def _read_tracked(path, monkeypatch):
    """``_read`` of a local shard; returns its rows and the furthest byte of the file the reader read."""
    files = []

    def open_tracked(location):
        files.append(_TrackedFile(io.FileIO(location.url)))
        return files[-1]

    with monkeypatch.context() as patched:
        patched.setattr(LocalShard, "open", open_tracked)
        rows = _read(path)
    assert files, "the shard was not read through its location"
    return rows, max(f.furthest for f in files)


def _errors(rows):
    return [(r.key, r.index, r.error) for r in rows]


def _score(folder, out, metrics=("clipscore",)):
    """``score_corpus`` on the local engine; returns the summary and the output rows by (shard, index)."""
    result = score_corpus(folder, out, list(metrics), model=MODEL)
    rows = {}
    for f in sorted((out / "scores").glob("*.parquet")):
        for row in pq.read_table(f).to_pylist():
            rows[(row["shard"], row["index"])] = row
    return result.summary, rows


def _with_a_good_shard(folder):
    (folder / "00001.tar").write_bytes(H.tar_of(*H.sample("good")))
    return folder


# --- Samples: members grouped as WebDataset groups them, never merged and never dropped ---


def test_a_key_that_comes_back_after_another_key_is_a_second_sample_and_neither_is_scored(tmp_path):
    # WebDataset starts a sample whenever the key changes: a, b, a are three samples (the old reader merged the
    # two a's into one row scoring the later picture). Outputs are keyed by key, so both a's are error rows.
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "00000.tar"
    path.write_bytes(H.tar_of(*H.sample("a", seed=1), *H.sample("b", seed=2), *H.sample("a", seed=3)))
    rows = _read(path)
    assert [(r.key, r.index) for r in rows] == [("a", 0), ("b", 1), ("a", 2)]
    assert [r.image for r in rows] == [H.jpeg(1), H.jpeg(2), H.jpeg(3)]  # every picture kept, in its own row
    for row in (rows[0], rows[2]):
        assert row.error.startswith("key a names 2 samples of this shard (rows [0, 2]; members a.jpg, a.txt)")
    assert rows[1].error is None
    summary, out = _score(tmp_path / "in", tmp_path / "out")
    assert [(out[("00000", i)]["key"], out[("00000", i)]["error"] is None) for i in range(3)] == [
        ("a", False),
        ("b", True),
        ("a", False),
    ]
    assert summary["rows"] == 3 and summary["scored"] == 1


def test_a_sample_with_two_pictures_or_a_field_twice_is_an_error_row_naming_every_member(tmp_path):
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "00000.tar"
    path.write_bytes(H.tar_of(
        H.member("c.jpg", H.jpeg(4)), H.member("c.JPG", H.jpeg(5)), H.member("c.txt", b"c"),
        H.member("d.png", H.jpeg(6)), H.member("d.jpg", H.jpeg(7)), H.member("d.txt", b"d"),
        *H.sample("e"), H.member("e.txt", b"another caption"),
        *H.sample("f"),
    ))  # fmt: skip
    assert _errors(_read(path)) == [
        ("c", 0, "sample c has 2 members for its field .jpg (c.jpg, c.JPG)"),
        ("d", 1, "sample d has 2 image members (d.png, d.jpg): which to score is unclear"),
        ("e", 2, "sample e has 2 members for its field .txt (e.txt, e.txt)"),
        ("f", 3, None),
    ]
    summary, out = _score(tmp_path / "in", tmp_path / "out")
    assert [out[("00000", i)]["error"] is None for i in range(4)] == [False, False, False, True]
    assert summary["scored"] == 1


def test_a_link_or_other_non_file_member_is_an_error_row_naming_it_and_a_folder_is_no_sample(tmp_path):
    path = tmp_path / "00000.tar"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as archive:
        link = tarfile.TarInfo("x.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
        folder = tarfile.TarInfo("y")
        folder.type = tarfile.DIRTYPE
        archive.addfile(folder)
        for name, data in (("y.jpg", H.jpeg()), ("y.txt", b"a caption")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    assert _errors(_read(path)) == [("x", 0, "member x.jpg is a symbolic link, not a file"), ("y", 1, None)]


# --- Tar headers that would make the reader work without end ---


@pytest.mark.parametrize(
    "claim",
    [H.pax_size_claim("big.jpg", 10**11), H.header("big.jpg", 10**11) + H.padded(b"x")],
    ids=["PAX size record", "GNU base-256 size"],
)
def test_a_member_claiming_more_bytes_than_the_file_holds_ends_its_shard_at_once(
    tmp_path, monkeypatch, claim
):
    # A streaming tarfile skips a claimed size block by block: 10**11 took 31 s, 10**15 would take days.
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "00000.tar"
    claim_ends = len(b"".join([*H.sample("a"), claim]))
    path.write_bytes(H.tar_of(*H.sample("a"), claim, *H.sample("never_read")))
    rows, furthest = _read_tracked(path, monkeypatch)
    assert furthest <= claim_ends  # not a byte of what follows the claim is read
    assert [(r.key, r.error is None) for r in rows] == [("a", True), ("big", False)]
    assert rows[1].error.startswith(f"tar member big.jpg claims {10**11} bytes where the file holds ")
    assert rows[1].error.endswith("the tar is truncated or damaged, and nothing after it is read")
    summary, out = _score(_with_a_good_shard(tmp_path / "in"), tmp_path / "out")
    assert out[("00000", 1)]["key"] == "big" and "claims" in out[("00000", 1)]["error"]
    assert summary["rows"] == 3 and summary["scored"] == 2


@pytest.mark.parametrize("sparse", [H.gnu_sparse_member, H.pax_sparse_member], ids=["GNU type S", "PAX 1.0"])
def test_a_sparse_member_is_refused_by_name_before_its_holes_are_filled(tmp_path, sparse):
    # Reading a sparse member fills its holes with zeros: 8 members of 9 KB of tar held 569 MB.
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "00000.tar"
    path.write_bytes(H.tar_of(*H.sample("a"), *[sparse(f"s{i}.jpg", 60 * 2**20) for i in range(8)]))
    tracemalloc.start()
    try:
        rows = _read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20
    assert [(r.key, r.error is None) for r in rows] == [("a", True), ("s0", False)]
    assert rows[1].error.startswith("member s0.jpg is a sparse file (")
    assert rows[1].error.endswith("refused: img2dataset never writes one")
    summary, out = _score(_with_a_good_shard(tmp_path / "in"), tmp_path / "out")
    assert "sparse file" in out[("00000", 1)]["error"] and summary["scored"] == 2


PAX_PAYLOADS = {
    # Python 3.11.7's tarfile (CVE-2024-6232): quadratic in a run of digits (64 KiB: 17 s, 160 KiB: 82 s) ...
    "a run of digits": (
        H.pax_record("path", b"1" * (MAX_EXTENDED_HEADER_BYTES - 20)),
        "holds more than 64 digits in a row at its byte 11",
    ),
    # ... and in records whose lengths land on other records (its loop rescans to the next "=" each time).
    "false record lengths": (
        b"2 " * (MAX_EXTENDED_HEADER_BYTES // 2 - 1) + b"=\n",
        "is malformed: no '<length> <keyword>=<value>' record at its byte 0",
    ),
    "over the size limit": (
        H.pax_record("path", b"a" * MAX_EXTENDED_HEADER_BYTES),
        f"is {MAX_EXTENDED_HEADER_BYTES + 12} bytes (limit {MAX_EXTENDED_HEADER_BYTES})",
    ),
}


@pytest.mark.parametrize("payload", list(PAX_PAYLOADS))
def test_a_pax_header_tarfile_would_parse_for_seconds_fails_its_shard_by_offset(
    tmp_path, monkeypatch, payload
):
    def parse(info, archive):
        pytest.fail(f"tarfile was given the PAX header at byte {info.offset} to parse")

    # The reader refuses the header before tarfile's own parser (the slow part) sees it.
    monkeypatch.setattr(tarfile.TarInfo, "_proc_pax", parse)
    data, problem = PAX_PAYLOADS[payload]
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "00000.tar"
    path.write_bytes(H.tar_of(*H.sample("a"), H.extended_header(data), *H.sample("b")))
    with pytest.raises(ShardReadError) as refused:
        _read(path)
    assert (
        f"00000.tar is not a readable tar file: extended header '././@PaxHeader' at byte 3072 {problem}"
        in str(refused.value)
    )
    summary, _ = _score(_with_a_good_shard(tmp_path / "in"), tmp_path / "out")
    assert list(summary["failed_shards"]) == ["00000"] and summary["scored"] == 1


def test_extended_headers_chained_without_end_fail_their_shard_not_the_run(tmp_path):
    # tarfile reads each chained GNU long-name header by recursion: 400 of them raised RecursionError.
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "00000.tar"
    path.write_bytes(H.tar_of(H.chained_long_names(400, "a.jpg"), H.padded(H.jpeg()), *H.sample("b")))
    with pytest.raises(
        ShardReadError, match=f"header {MAX_CHAINED_HEADERS + 1} in a row .limit {MAX_CHAINED_HEADERS}."
    ):
        _read(path)
    summary, _ = _score(_with_a_good_shard(tmp_path / "in"), tmp_path / "out")
    assert list(summary["failed_shards"]) == ["00000"] and summary["scored"] == 1


def test_a_damaged_header_before_more_members_is_reported_not_taken_for_the_end(tmp_path):
    # tarfile ends a tar at the first invalid header: the samples behind one vanished without a word.
    path = tmp_path / "00000.tar"
    damaged = bytearray(H.member("c.jpg", H.jpeg()))
    damaged[148:156] = b"0000000\0"  # a wrong checksum
    path.write_bytes(H.tar_of(*H.sample("a"), *H.sample("b"), bytes(damaged), *H.sample("d")))
    rows = _read(path)
    assert [(r.key, r.error is None) for r in rows] == [("a", True), ("b", False)]
    assert rows[1].error == (
        "the tar has no valid header at byte 6144 but data at byte 6144: it is damaged, and nothing after it is read"
    )
    # Zeros after the end are a tar's padding, not damage.
    (tmp_path / "ok.tar").write_bytes(H.tar_of(*H.sample("a")) + bytes(9000))
    assert _errors(_read(tmp_path / "ok.tar")) == [("a", 0, None)]


def test_ordinary_long_names_and_pax_records_are_read_as_before(tmp_path):
    long_key = "x" * 150  # over ustar's 100 characters: GNU writes an L header, PAX a path record
    path = tmp_path / "00000.tar"
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        with tarfile.open(path, "w", format=fmt) as archive:
            for name, data in ((f"{long_key}.jpg", H.jpeg()), (f"{long_key}.txt", "été".encode())):
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), 1.5  # a float time: a PAX mtime record
                archive.addfile(info, io.BytesIO(data))
        assert _errors(_read(path)) == [(long_key, 0, None)]


# --- Rows whose content cannot be read ---


SIDECARS = {
    "nested too deeply": (
        H.nested_json(100_000),
        "the sidecar a.json of sample a nests arrays and objects more than 100 levels deep",
    ),
    "not JSON": (
        b"{references: [",
        "the sidecar a.json of sample a is not valid JSON: Expecting property name",
    ),
    "references not text": (
        b'{"references": [1, 2]}',
        "sample a (sidecar a.json) has references that are not all text: reference 0 is int (1)",
    ),
}


@pytest.mark.parametrize("sidecar", list(SIDECARS))
def test_an_unreadable_sidecar_is_an_error_row_naming_its_key_and_member(tmp_path, sidecar):
    # A deeply nested .json raised RecursionError out of the reader and ended the whole run.
    data, problem = SIDECARS[sidecar]
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "00000.tar"
    path.write_bytes(H.tar_of(*H.sample("a"), H.member("a.json", data), *H.sample("b")))
    rows = _read(path)
    assert rows[0].key == "a" and rows[0].error.startswith(problem)
    assert rows[1].key == "b" and rows[1].error is None
    summary, out = _score(tmp_path / "in", tmp_path / "out")
    assert out[("00000", 0)]["error"].startswith(problem) and summary["scored"] == 1


def test_more_references_than_the_limit_is_an_error_row_on_tars_and_parquet_alike(tmp_path):
    # 20,000 references in one row took 138 s on the tiny CLIP; the rows over the limit are not encoded.
    over = MAX_REFERENCES + 1
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "00000.tar"
    path.write_bytes(H.tar_of(
        *H.sample("a"), H.member("a.json", H.references_json(over)),
        *H.sample("b"), H.member("b.json", H.references_json(3)),
    ))  # fmt: skip
    limit = f"{over} references, over the limit of {MAX_REFERENCES} (capeval.validation.MAX_REFERENCES)"
    rows = _read(path)
    assert _errors(rows) == [("a", 0, f"sample a (sidecar a.json) has {limit}"), ("b", 1, None)]
    summary, out = _score(tmp_path / "in", tmp_path / "out", ["refclipscore"])
    assert out[("00000", 0)]["error"] == f"sample a (sidecar a.json) has {limit}"
    assert summary["scored"] == 1
    H.write_parquet(
        tmp_path / "pq.parquet",
        {"key": ["p", "q"], "jpg": [H.jpeg(), H.jpeg()], "caption": ["x", "y"],
         "references": [["r"] * over, ["a red circle"]]},
    )  # fmt: skip
    summary, out = _score(tmp_path / "pq.parquet", tmp_path / "out_pq", ["refclipscore"])
    assert out[("pq", 0)]["error"] == f"row p has {limit}" and out[("pq", 1)]["error"] is None


def test_the_reference_limit_is_the_metrics_and_every_row_sources_one(tmp_path):
    import json

    from capeval.corpus.reader import open_corpus
    from capeval.validation import check_references

    refs = [f"reference {i}" for i in range(MAX_REFERENCES + 1)]
    with pytest.raises(
        ValueError, match=f"references 0 holds {MAX_REFERENCES + 1} references, over the limit"
    ):
        check_references([refs], 1)
    assert check_references([refs[:MAX_REFERENCES]], 1) == [refs[:MAX_REFERENCES]]
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"caption": "a", "image": "x.jpg", "refs": refs}) + "\n")
    (shard,) = open_corpus(path, 8).shards
    (row,) = read_shard(shard, {"caption": "caption", "image": "image", "references": "refs", "id": None})
    assert row.error == (
        f"rows.jsonl line 1 has {MAX_REFERENCES + 1} references, over the limit of {MAX_REFERENCES} "
        "(capeval.validation.MAX_REFERENCES)"
    )


def test_an_image_decoder_failing_in_any_way_is_an_error_row_not_the_end_of_the_run(tmp_path, monkeypatch):
    import capeval.clip.images as images

    real = images.preprocess_image

    def failing(image, index, size):  # a PIL plugin may raise anything on hostile bytes
        if isinstance(image, dict) and image.get("bytes") == H.jpeg(9):
            raise KeyError("tile 7")
        return real(image, index, size)

    monkeypatch.setattr(images, "preprocess_image", failing)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "00000.tar").write_bytes(H.tar_of(*H.sample("a", seed=9), *H.sample("b")))
    summary, out = _score(tmp_path / "in", tmp_path / "out")
    assert out[("00000", 0)]["error"] == "image of a cannot be read: KeyError: 'tile 7'"
    assert out[("00000", 1)]["error"] is None and summary["scored"] == 1


# --- Parquet cells larger than the reader holds ---


def test_a_parquet_cell_over_the_cap_is_an_error_row_and_its_row_group_is_never_read(tmp_path, monkeypatch):
    # A 16 KB Parquet file holding a 300 MB cell of zeros took 1.3 GB to read.
    big = MAX_MEMBER_BYTES + 2**20
    path = tmp_path / "00000.parquet"
    H.write_parquet(
        path, {"key": ["big", "ok"], "jpg": [bytes(big), H.jpeg()], "caption": ["x", "y"]}, row_group_size=1
    )
    assert path.stat().st_size < 100_000
    read = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(
        pq.ParquetFile,
        "read_row_group",
        lambda self, g, columns=None, **kw: read.append((g, columns)) or real(self, g, columns=columns, **kw),
    )
    rows = _read(path)
    assert (0, ["jpg"]) not in read and (1, ["jpg"]) in read
    assert rows[0].key == "big" and rows[0].image is None
    assert rows[0].error.startswith("row big: column 'jpg' of row group 0 (1 rows) holds 68,15")  # its pages
    assert rows[0].error.endswith(f"bytes uncompressed (limit {MAX_MEMBER_BYTES:,}); it is not read")
    assert rows[1].error is None and rows[1].image == H.jpeg()


def test_a_parquet_cell_over_the_cap_among_others_is_one_error_row(tmp_path):
    big = MAX_MEMBER_BYTES + 2**20
    path = tmp_path / "00000.parquet"
    H.write_parquet(
        path, {"key": ["a", "big", "c"], "jpg": [H.jpeg(1), bytes(big), H.jpeg(2)], "caption": ["x"] * 3}
    )
    assert _errors(_read(path)) == [
        ("a", 0, None), ("big", 1, f"row big: its cell in column 'jpg' is {big:,} bytes (limit {MAX_MEMBER_BYTES:,})"), ("c", 2, None)
    ]  # fmt: skip
    summary, out = _score(path, tmp_path / "out")
    assert [out[("00000", i)]["error"] is None for i in range(3)] == [True, False, True]


def test_a_value_a_dictionary_repeats_in_every_row_is_refused_before_it_is_decoded(tmp_path, monkeypatch):
    import capeval.corpus.parquet_cells as cells

    monkeypatch.setattr(cells, "MAX_COLUMN_CHUNK_BYTES", 100 * 2**20)
    path = tmp_path / "00000.parquet"
    caption = "a" * (10 * 2**20)  # stored once in the dictionary, repeated by 20 rows: 200 MB decoded
    H.write_parquet(
        path,
        {"key": [f"k{i}" for i in range(20)], "jpg": [H.jpeg()] * 20, "caption": [caption] * 20},
        dictionary_pagesize_limit=64 * 2**20,
    )
    rows = _read(path)
    decoded = f"column 'caption' of row group 0 (20 rows) decodes to {20 * len(caption):,} bytes"
    assert [r.error for r in rows] == [f"row {r.key}: {decoded} (limit {100 * 2**20:,})" for r in rows]
    assert all(r.caption is None for r in rows)
