"""Shard samples become rows through one set of checks, so both engines receive, and write, the same rows.

A key, a caption and a references value mean the same whichever file they came from: a references string is an
error row (never a list of its characters), binary references are an error row, a null key is an error row
with no invented key, a caption over the size cap is an error row, and text keeps its trailing NULs. The engine
tests score one corpus holding each case on the local engine; ``tests/test_executors_agree.py`` scores the same
corpora on Ray and expects the same rows.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from capeval.corpus.reader import read_shard
from capeval.corpus.row_checks import MAX_CAPTION_BYTES, caption_problem, key_problem, references_problem
from capeval.corpus.run import score_corpus
from capeval.corpus.shards import list_shards

# --- Keys ---


def test_text_and_integer_keys_are_kept_and_a_null_key_is_no_key():
    assert key_problem("0001", "row 0") == ("0001", None)
    assert key_problem(42, "row 0") == ("42", None)
    assert key_problem(None, "row 3") == (None, "row 3 has no key (null)")
    assert key_problem(b"k", "row 1") == (None, "row 1 has a key of type bytes (b'k'), not text")
    assert key_problem(True, "row 2")[1] == "row 2 has a key of type bool (True), not text"


# --- Captions ---


def test_a_caption_is_kept_exactly_and_refused_when_empty_invisible_or_not_text():
    assert caption_problem("a cat\x00\x00", "row a") is None
    assert caption_problem(None, "row a") == "row a has no caption"
    assert caption_problem(5, "row a") == "row a has a caption of type int (5)"
    assert caption_problem("\u200b", "row a") == "row a has an empty caption (only invisible characters)"
    assert caption_problem("  ", "row a") == "row a has an empty caption"


def test_a_caption_over_the_size_cap_is_refused_naming_its_size():
    assert caption_problem("x" * MAX_CAPTION_BYTES, "row a") is None
    assert caption_problem("é" * (MAX_CAPTION_BYTES // 2 + 1), "row a") == (
        "row a has a caption of 65,538 bytes; capeval reads at most 65,536 "
        "(capeval.corpus.row_checks.MAX_CAPTION_BYTES)"
    )


# --- References ---


def test_references_are_a_list_of_strings_or_nothing():
    assert references_problem(None, "row a") == (None, None)
    assert references_problem(("x", "y"), "row a") == (["x", "y"], None)
    assert references_problem([], "row a") == ([], None)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ab", "row a has references given as one string ('ab'), not a list of strings"),
        (b"ab", "row a has references stored as binary (2 bytes), not a list of strings"),
        ({"x": 1}, "row a has references of type dict, not a list of strings"),
        (["x", None], "row a has references that are not all text: reference 1 is NoneType (None)"),
        (["x", b"y"], "row a has references that are not all text: reference 1 is bytes (b'y')"),
    ],
)
def test_references_that_are_not_a_list_of_strings_are_refused_never_split(value, message):
    assert references_problem(value, "row a") == (None, message)


# --- The same rows from every shard format and on both engines ---


def _png(level: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((24, 24, 3), level, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def write_hostile_rows(folder, prefix: str = "") -> None:
    """Three Parquet shards (``{prefix}00000.parquet`` ...): references as one string per row, references as binary,
    and a shard with a NUL caption, an oversized caption and a null key beside a good row."""
    images = [_png(40 * i) for i in range(4)]
    pq.write_table(
        pa.table({"key": ["s0", "s1"], "jpg": images[:2], "caption": ["a dark square"] * 2,
                  "references": ["ab", "a black picture"]}),
        folder / f"{prefix}00000.parquet",
    )  # fmt: skip
    pq.write_table(
        pa.table({"key": ["b0"], "jpg": images[:1], "caption": ["a dark square"],
                  "references": pa.array([b"binary refs"], pa.binary())}),
        folder / f"{prefix}00001.parquet",
    )  # fmt: skip
    pq.write_table(
        pa.table({
            "key": pa.array(["nul", "long", None, "ok"], pa.string()),
            "jpg": images,
            "caption": ["a grey square\x00\x00", "x" * (MAX_CAPTION_BYTES + 1), "a square", "a light square"],
            "references": [["a grey picture"], ["a picture"], ["a picture"], ["a light picture"]],
        }),
        folder / f"{prefix}00002.parquet",
    )  # fmt: skip


@pytest.fixture(scope="module")
def hostile_rows(tmp_path_factory):
    """``write_hostile_rows``' shards in a folder of their own."""
    folder = tmp_path_factory.mktemp("rows") / "in"
    folder.mkdir()
    write_hostile_rows(folder)
    return folder


EXPECTED_ERRORS = {
    ("00000", "s0"): "row s0 has references given as one string ('ab'), not a list of strings",
    ("00000", "s1"): "row s1 has references given as one string ('a black picture'), not a list of strings",
    ("00001", "b0"): "row b0 has references stored as binary (11 bytes), not a list of strings",
    ("00002", "nul"): None,
    ("00002", "long"): (
        "row long has a caption of 65,537 bytes in column 'caption'; capeval reads at most 65,536 "
        "(capeval.corpus.row_checks.MAX_CAPTION_BYTES)"
    ),
    ("00002", None): "row 2 of column 'key' has no key (null)",
    ("00002", "ok"): None,
}


def test_the_reader_makes_the_rows_the_engines_score(hostile_rows):
    rows = [row for shard in list_shards(hostile_rows) for row in read_shard(shard)]
    assert {(r.shard, r.key): r.error for r in rows} == EXPECTED_ERRORS
    nul = next(r for r in rows if r.key == "nul")
    assert nul.caption == "a grey square\x00\x00" and nul.references == ["a grey picture"]


def _written(out) -> dict:
    tables = [pq.read_table(p).to_pylist() for p in sorted((out / "scores").glob("*.parquet"))]
    return {(r["shard"], r["key"]): r for t in tables for r in t}


def _assert_rows(out):
    rows = _written(out)
    assert {k: r["error"] for k, r in rows.items()} == EXPECTED_ERRORS
    assert rows[("00002", "nul")]["caption"] == "a grey square\x00\x00"  # trailing NULs kept
    assert rows[("00002", None)]["index"] == 2
    for key in (("00002", "nul"), ("00002", "ok")):
        assert np.isfinite(rows[key]["refclipscore"])


def test_the_local_engine_writes_an_error_row_for_each_hostile_value(hostile_rows, tmp_path, tiny_clip_dir):
    score_corpus(hostile_rows, tmp_path / "out", ["refclipscore"], model=str(tiny_clip_dir), device="cpu",
                 batch_size=2)  # fmt: skip
    _assert_rows(tmp_path / "out")


# --- Text that is not valid Unicode ---


def test_a_lone_surrogate_in_a_key_caption_reference_or_url_is_refused_naming_the_character():
    from capeval.corpus.row_checks import origin_fields

    assert key_problem("\ud800x", "row 1") == (
        None,
        "row 1 has a key that is not valid Unicode (a lone surrogate, '\\ud800', at character 0)",
    )
    assert caption_problem("a \udfff b", "row 2") == (
        "row 2 has a caption that is not valid Unicode (a lone surrogate, '\\udfff', at character 2)"
    )
    assert references_problem(["ok", "x\ud800"], "row 3")[1] == (
        "row 3 has a reference (1) that is not valid Unicode (a lone surrogate, '\\ud800', at character 1)"
    )
    assert origin_fields({"url": "http://x/\ud800"}, "row 4")[1].startswith(
        "row 4 has a url that is not valid"
    )


def test_a_reference_over_the_caption_size_cap_is_refused_naming_its_size():
    refs = ["fine", "x" * (MAX_CAPTION_BYTES + 1)]
    assert references_problem(refs, "row a") == (None, (
        "row a has a reference (1) of 65,537 bytes; capeval reads at most 65,536 per reference, as per caption "
        "(capeval.corpus.row_checks.MAX_CAPTION_BYTES)"
    ))  # fmt: skip


def test_lone_surrogates_in_jsonl_rows_and_tar_sidecars_are_error_rows(tmp_path):
    from capeval.shapes import shapes_clip_path
    from tests.hostile_shards import write_tar

    Image.fromarray(np.zeros((24, 24, 3), np.uint8)).save(tmp_path / "a.png")
    lines = [
        r'{"image": "a.png", "caption": "a black \ud800 square"}',
        r'{"id": "\ud800", "image": "a.png", "caption": "a black square"}',
        r'{"image": "a.png", "caption": "a black square", "url": "http://x/\udfff"}',
        r'{"image": "a.png", "caption": "a black square", "\ud800": 1, "\ud800": 2}',
        r'{"image": "a.png", "caption": "a black square"}',
    ]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "tars").mkdir()
    write_tar(tmp_path / "tars" / "00000.tar", [
        ("a.png", _png(0)), ("a.txt", b"a black square"), ("a.json", rb'{"uid": "\ud800"}'),
        ("b.png", _png(9)), ("b.txt", b"a black square"), ("b.json", rb'{"references": ["\udfff"]}'),
        ("c.png", _png(9)), ("c.txt", b"a black square"),
    ])  # fmt: skip
    model = str(shapes_clip_path())
    for source in (tmp_path / "rows.jsonl", tmp_path / "tars"):
        run = score_corpus(source, tmp_path / f"{source.name}-out", model=model, progress=False)
        errors = [r["error"] for r in _written(tmp_path / f"{source.name}-out").values()]
        assert run.summary["scored"] == 1 and errors.count(None) == 1
        assert all("not valid Unicode" in e or '"\\ud800" appears twice' in e for e in errors if e)
