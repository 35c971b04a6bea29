"""The resharder's subset file: checked against the contract of DataComp's ``apply_filter.py`` (what it saves) and
``resharder.py`` (how it looks a sample's uid up), written out here rather than imported (DataComp is no package)."""

from __future__ import annotations

import numpy as np
import pytest

from capeval.corpus.datacomp import (
    ResharderSubset,
    resharder_uids,
    shared_uids,
    uid_pair,
    write_resharder_uids,
)

UIDS = [
    "ffffffffffffffffffffffffffffffff",  # 2**128 - 1: both halves past int64's range
    "00000000000000000000000000000000",
    "8000000000000000000000000000000f",  # high half's top bit set: a signed order would put it first
    "7fffffffffffffff0000000000000001",
    "0123456789abcdef0123456789abcdef",
]


def _contract(path) -> np.ndarray:
    """What the resharder requires of its subset file, checked on the bytes written."""
    with open(path, "rb") as fh:
        assert fh.read(6) == b"\x93NUMPY"  # load_subset takes a file without this magic for a raw memmap
    subset = np.load(path, mmap_mode="r")
    assert subset.dtype == np.dtype("u8,u8")
    assert subset.dtype.descr == [("f0", "<u8"), ("f1", "<u8")]
    assert subset.ndim == 1
    as_tuples = [tuple(int(v) for v in row) for row in subset]
    assert as_tuples == sorted(set(as_tuples))  # sorted as unsigned pairs, each once
    return subset


def _matches(subset: np.ndarray, uid: str) -> int:
    """How many times the resharder writes the sample of ``uid``: its searchsorted count over the subset."""
    wanted = np.array([divmod(int(uid, 16), 2**64)], np.dtype("u8,u8"))[0]
    return int(np.searchsorted(subset, wanted, "right") - np.searchsorted(subset, wanted, "left"))


def test_the_subset_file_holds_each_uid_split_into_high_and_low_halves_sorted_unsigned(tmp_path):
    result = write_resharder_uids([(f"k{i}", u) for i, u in enumerate(UIDS)], tmp_path / "kept.npy")
    subset = _contract(tmp_path / "kept.npy")
    expected = sorted((int(u[:16], 16), int(u[16:], 16)) for u in UIDS)
    assert [tuple(int(v) for v in row) for row in subset] == expected
    assert result == ResharderSubset(tmp_path / "kept.npy", len(UIDS), {})


def test_the_resharder_lookup_finds_every_kept_uid_once_and_no_other(tmp_path):
    kept, dropped = UIDS[::2], UIDS[1::2]
    write_resharder_uids([(u[:4], u) for u in kept], tmp_path / "kept.npy")
    subset = _contract(tmp_path / "kept.npy")
    assert [_matches(subset, u) for u in kept] == [1] * len(kept)
    assert [_matches(subset, u) for u in dropped] == [0] * len(dropped)


def test_a_uid_given_by_two_keys_is_written_once_and_reported_with_both_keys(tmp_path):
    uid = UIDS[4]
    result = write_resharder_uids([("a", uid), ("b", UIDS[0]), ("c", uid.upper())], tmp_path / "kept.npy")
    assert result.count == 2
    assert result.repeated == {uid: ["a", "c"]}
    assert _matches(_contract(tmp_path / "kept.npy"), uid) == 1


def test_shared_uids_finds_samples_of_a_pool_the_resharder_cannot_tell_apart():
    pool = [("0000000", UIDS[0]), ("0000001", UIDS[1]), ("0000107", UIDS[0])]
    assert shared_uids(pool) == {UIDS[0]: ["0000000", "0000107"]}


@pytest.mark.parametrize(
    ("uid", "message"),
    [
        (12345, r"key 'k7' has a uid of type int \(12345\), not text"),
        (None, r"key 'k7' has a uid of type NoneType"),
        ("a" * 31, r"key 'k7' has the uid 'a{31}', not 32 hexadecimal characters"),
        ("a" * 33, r"key 'k7' has the uid 'a{33}', not 32 hexadecimal"),
        ("0x" + "a" * 30, r"key 'k7' has the uid '0xa{30}'"),
        ("a" * 15 + "_" + "a" * 16, r"key 'k7' has the uid"),
        ("\u0663" * 32, r"key 'k7' has the uid"),  # Arabic-Indic digits, which int(..., 16) would take
        ("a" * 32 + "\n", r"key 'k7' has the uid"),
        ("g" * 32, r"key 'k7' has the uid 'g{32}'"),
    ],
)
def test_a_uid_that_is_not_32_hex_characters_is_refused_naming_its_key_and_nothing_is_written(
    tmp_path, uid, message
):
    with pytest.raises(ValueError, match=message):
        write_resharder_uids([("k0", UIDS[0]), ("k7", uid)], tmp_path / "kept.npy")
    assert list(tmp_path.iterdir()) == []


def test_a_refused_uid_leaves_an_earlier_subset_file_as_it_was(tmp_path):
    path = tmp_path / "kept.npy"
    write_resharder_uids([("k0", UIDS[0])], path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="key 'k1'"):
        write_resharder_uids([("k1", "nope")], path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.npy"]


def test_the_file_is_written_at_the_path_given_even_without_the_npy_suffix(tmp_path):
    write_resharder_uids([("k0", UIDS[0])], tmp_path / "subset")
    assert [p.name for p in tmp_path.iterdir()] == ["subset"]
    assert len(_contract(tmp_path / "subset")) == 1


def test_no_kept_sample_writes_an_empty_subset(tmp_path):
    result = write_resharder_uids([], tmp_path / "kept.npy")
    assert result.count == 0
    assert len(_contract(tmp_path / "kept.npy")) == 0


def test_uid_pair_splits_as_apply_filter_does():
    uid = "0123456789abcdef" + "fedcba9876543210"
    assert uid_pair(uid, "k") == (0x0123456789ABCDEF, 0xFEDCBA9876543210)
    assert uid_pair(uid, "k") == divmod(int(uid, 16), 2**64)


def test_resharder_uids_of_img2dataset_samples_select_exactly_the_kept_ones(img2dataset_run):
    from capeval.corpus.download_records import read_download_records

    origins = [
        o
        for tar in sorted(img2dataset_run.webdataset.glob("*.tar"))
        for o in read_download_records(tar).origins.values()
    ]
    kept = [o for o in origins if o.width is not None][::3]
    pairs, repeated = resharder_uids((o.key, o.uid) for o in kept)
    assert repeated == {}
    assert len(pairs) == len(kept)
    assert [_matches(pairs, o.uid) for o in origins] == [int(o in kept) for o in origins]
