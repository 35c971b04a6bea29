"""Counts in vectors file headers are checked against the file before anything is allocated
(capeval.text.vector_headers): a word2vec, fastText, numpy or pickle header claiming more than the file can
hold is refused naming the claim and what the file can hold, and the memory traced meanwhile stays far below
the claimed matrix."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from capeval.text.vectors import clear_cache, load_vectors
from tests.gensim_states import WORDS, kv_state
from tests.pickle_payloads import Call, Ref, build


def _error_and_peak(load) -> tuple[BaseException | None, int]:
    """The exception ``load()`` raised and the peak traced memory while it ran."""
    import tracemalloc

    import gensim.models  # noqa: F401 - imported before tracing: module imports are not the allocation measured
    import pyarrow.parquet  # noqa: F401

    clear_cache()
    tracemalloc.start()
    try:
        load()
        error = None
    except (ValueError, MemoryError) as e:
        error = e
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return error, peak


PEAK_BOUND = 16 * 2**20  # far below any claimed matrix: proves the refusal came before the allocation


# --- A word2vec header claiming more rows than the file holds is refused before allocating ---


@pytest.mark.parametrize("count", [1_000_000, 2_000_000_000])
@pytest.mark.parametrize("binary, possible", [(False, 4), (True, 2)], ids=["text", "binary"])
def test_word2vec_header_claiming_more_rows_than_the_file_holds_is_refused_before_allocating(
    tmp_path, count, binary, possible
):
    path = tmp_path / ("huge.bin" if binary else "huge.txt")
    # Two rows of 100 values; a row takes at least 201 bytes as text, 402 as binary.
    rows = [b"dog " + (np.ones(100, np.float32).tobytes() if binary else b" ".join([b"0.5"] * 100))] * 2
    path.write_bytes(f"{count} 100\n".encode() + b"\n".join(rows) + b"\n")
    error, peak = _error_and_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError), error
    claim = (
        f"huge.{path.suffix[1:]}: its header claims {count:,} words of 100 dimensions, but the file can hold "
    )
    assert claim + f"at most {possible} such rows" in str(error)
    assert "refusing to allocate" in str(error)
    assert peak < PEAK_BOUND


def test_gzip_header_is_bounded_by_deflates_largest_expansion(tmp_path):
    import gzip

    path = tmp_path / "huge.txt.gz"
    path.write_bytes(gzip.compress(b"50000000 300\ndog " + b" ".join([b"0.5"] * 300) + b"\n"))
    size = path.stat().st_size
    error, peak = _error_and_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert f"a gzip file of {size:,} bytes holds at most 1032x that" in str(error)
    assert "header claims 50,000,000 words of 300 dimensions" in str(error)
    assert peak < PEAK_BOUND


# --- A fastText header claiming more than the file holds is refused, never looped on ---


def _small_fasttext_bin(tmp_path: Path) -> tuple[bytes, int, int]:
    """A small fastText .bin (bytes), its word count and bucket count."""
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    sentences = [["a", "dog", "runs", "on", "grass"], ["a", "cat", "sleeps"]] * 5
    model = FastText(sentences, vector_size=4, min_count=1, epochs=1, bucket=20, seed=0, workers=1)
    save_facebook_model(model, str(tmp_path / "ft.bin"))
    return (tmp_path / "ft.bin").read_bytes(), len(model.wv), 20


def _patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    import struct

    return data[:offset] + struct.pack(fmt, value) + data[offset + struct.calcsize(fmt) :]


def test_fasttext_bin_with_a_huge_bucket_count_is_refused_before_allocating(tmp_path):
    data, _, _ = _small_fasttext_bin(tmp_path)
    path = tmp_path / "bucket.bin"
    path.write_bytes(_patched(data, 40, "<i", 2_000_000_000))  # args.bucket: 9th int32 after magic, version
    error, peak = _error_and_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert (
        "bucket.bin: its input matrix is declared 27 x 4, but the header's 7 words + 2,000,000,000 buckets"
        in str(error)
    )
    assert peak < PEAK_BOUND


def test_fasttext_bin_with_a_huge_matrix_header_is_refused_before_allocating(tmp_path):
    import struct

    data, nwords, bucket = _small_fasttext_bin(tmp_path)
    header = struct.pack("<2q", nwords + bucket, 4)
    at = data.index(header)
    path = tmp_path / "matrix.bin"
    # Header fields and matrix header agree on 10^9 buckets; the file holds 27 rows.
    patched = _patched(data, 40, "<i", 1_000_000_000)
    path.write_bytes(patched[:at] + struct.pack("<2q", nwords + 1_000_000_000, 4) + patched[at + 16 :])
    error, peak = _error_and_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert (
        f"matrix.bin: its header claims a {nwords + 1_000_000_000:,} x 4 input matrix, but the file can hold at "
        in (str(error))
    )
    assert "refusing to allocate 14.9 GiB" in str(error)
    assert peak < PEAK_BOUND


def test_fasttext_bin_whose_vocabulary_runs_past_the_end_is_refused_not_looped_on(tmp_path):
    data, nwords, _ = _small_fasttext_bin(tmp_path)
    path = tmp_path / "vocab.bin"
    # 1,000 claimed entries fit the size bound (10 bytes each), but only 7 are there: gensim's reader, which
    # compares each read byte with b"\0", would spin forever at the end of the file.
    patched = _patched(_patched(data, 64, "<i", 1000), 68, "<i", 1000)
    path.write_bytes(patched + b"x" * 20_000)
    error, _ = _error_and_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert "vocab.bin: the file ends inside word" in str(error) and "(truncated)" in str(error)


# --- A numpy header claiming a huge shape is refused before mapping or allocating ---


def _claiming_shape(npy: bytes, shape: bytes) -> bytes:
    """An .npy of shape (3, 4) whose header claims ``shape`` instead (header length kept: padding shrinks)."""
    grow = len(shape) - len(b"(3, 4)")
    end = npy.index(b"\n")
    return npy[: end - grow].replace(b"(3, 4)", shape) + npy[end:]


def test_gensim_sidecar_npy_claiming_a_huge_shape_is_refused_before_mapping(tmp_path):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=4, count=0)
    kv.add_vectors(WORDS, np.ones((3, 4), dtype=np.float32))
    path = tmp_path / "big.kv"
    kv.save(str(path), sep_limit=0)
    npy = tmp_path / "big.kv.vectors.npy"
    npy.write_bytes(_claiming_shape(npy.read_bytes(), b"(9000000000, 4)"))
    error, peak = _error_and_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert "big.kv.vectors.npy: its header claims an array of shape (9000000000, 4)" in str(error)
    assert "at most 3 such rows" in str(error) and "refusing to allocate 134.1 GiB" in str(error)
    assert peak < PEAK_BOUND


def test_gensim_npz_sidecar_claiming_a_huge_shape_is_refused_before_allocating(tmp_path):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=4, count=0)
    kv.add_vectors(WORDS, np.ones((3, 4), dtype=np.float32))
    path = tmp_path / "big.kv.gz"
    kv.save(str(path), sep_limit=0)
    npz = tmp_path / "big.kv.gz.vectors.npz"
    with zipfile.ZipFile(npz) as z:
        member = z.read("val.npy")
    with zipfile.ZipFile(npz, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("val.npy", _claiming_shape(member, b"(9000000000, 4)"))
    error, peak = _error_and_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert "big.kv.gz.vectors.npz: its header claims an array of shape (9000000000, 4)" in str(error)
    assert peak < PEAK_BOUND


def test_npy_parquet_folder_whose_npy_claims_more_rows_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "glove-like"
    folder.mkdir()
    np.save(folder / "v_emb.npy", np.ones((3, 4), dtype=np.float32))
    (folder / "v_emb.npy").write_bytes(
        _claiming_shape((folder / "v_emb.npy").read_bytes(), b"(3000000000, 4)")
    )
    pq.write_table(pa.table({"word": WORDS}), folder / "v_index.parquet")
    error, peak = _error_and_peak(lambda: load_vectors(folder))
    assert isinstance(error, ValueError)
    assert "v_emb.npy: its header claims an array of shape (3000000000, 4)" in str(error)
    assert peak < PEAK_BOUND


# --- A gensim pickle asking for more memory than it holds is refused ---


@pytest.mark.parametrize(
    "payload, message",
    [
        (Call("numpy._core.multiarray", "_reconstruct", (Ref("numpy", "ndarray"), (100_000, 100_000), "b")),
         r"refusing numpy array of shape \(100000, 100000\)"),
        # int("...") builds the length: the payload writer packs only 32-bit ints.
        (Call("builtins", "bytearray", (Call("builtins", "int", ("1000000000000",)),)),
         r"refusing bytearray\(1,000,000,000,000\)"),
    ],
    ids=["numpy _reconstruct", "bytearray"],
)  # fmt: skip
def test_gensim_pickle_asking_for_more_memory_than_it_holds_is_refused(tmp_path, payload, message):
    path = tmp_path / "alloc.kv"
    path.write_bytes(build(Ref("gensim.models.keyedvectors", "KeyedVectors"), kv_state(vectors=payload)))
    error, peak = _error_and_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError) and re.search(message, str(error)), error
    assert peak < PEAK_BOUND
