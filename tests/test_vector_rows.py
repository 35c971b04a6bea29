"""The rows of loaded word vectors (capeval.text.vector_rows): NaN or inf is refused naming the word and its row,
a matrix with fewer rows than words is refused, the scan reads a memory map in bounded chunks, and all-zero rows
are unknown words, with a warning, wherever vectors are normalised."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from capeval.text.vectors import clear_cache, load_vectors
from tests.gensim_states import WORDS

# --- NaN and inf in vectors files are refused naming the word and its row ---


def _text_vectors(path: Path, rows: dict[str, list[float]], header: bool = True) -> Path:
    dim = len(next(iter(rows.values())))
    lines = [f"{len(rows)} {dim}"] if header else []
    lines += [f"{w} " + " ".join(str(x) for x in v) for w, v in rows.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


ROWS = {"dog": [0.1, 0.2, 0.3], "cat": [0.2, 0.1, 0.0], "runs": [0.3, 0.3, 0.1]}


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("header", [True, False], ids=["word2vec-text", "glove-text"])
def test_text_vectors_with_nan_or_inf_are_refused_naming_word_and_row(tmp_path, value, header):
    rows = {**ROWS, "runs": [0.3, float(value), 0.1]}
    path = _text_vectors(tmp_path / "bad.txt", rows, header)
    clear_cache()
    with pytest.raises(ValueError, match=r"bad\.txt: the vectors of 'runs' \(row 2\) hold NaN or inf"):
        load_vectors(path)


def test_npy_parquet_vectors_with_nan_are_refused_naming_word_and_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "glove-like"
    folder.mkdir()
    matrix = np.ones((5, 4), dtype=np.float32)
    matrix[3, 1] = np.nan
    np.save(folder / "v_emb.npy", matrix)
    pq.write_table(pa.table({"word": ["a", "b", "c", "d", "e"]}), folder / "v_index.parquet")
    clear_cache()
    with pytest.raises(ValueError, match=r"glove-like: the vectors of 'd' \(row 3\) hold NaN or inf"):
        load_vectors(folder)


def test_fasttext_model_with_nan_in_an_ngram_bucket_is_refused_naming_the_bucket(tmp_path):
    from gensim.models import FastText

    sentences = [["a", "dog", "runs", "on", "grass"], ["a", "cat", "sleeps"]] * 5
    model = FastText(sentences, vector_size=4, min_count=1, epochs=1, bucket=50, seed=0, workers=1)
    model.wv.vectors_ngrams[7, 2] = np.inf
    path = tmp_path / "ft.model"
    model.save(str(path))
    clear_cache()
    with pytest.raises(
        ValueError, match=r"ft\.model: the character n-gram vectors of bucket 7 \(row 7\) hold NaN"
    ):
        load_vectors(path)


def test_keyed_vectors_object_with_nan_is_refused(tmp_path):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=3, count=0)
    kv.add_vectors(list(ROWS), np.array(list(ROWS.values()), dtype=np.float32))
    kv.vectors[1, 0] = np.nan
    with pytest.raises(
        ValueError, match=r"KeyedVectors passed in\): the vectors of 'cat' \(row 1\) hold NaN"
    ):
        load_vectors(kv)


def test_gensim_file_with_fewer_vector_rows_than_words_is_refused(tmp_path):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=4, count=0)
    kv.add_vectors(WORDS, np.ones((3, 4), dtype=np.float32))
    kv.vectors = kv.vectors[:2]  # 'runs' would index past the matrix
    kv.save(str(tmp_path / "short.kv"))
    clear_cache()
    with pytest.raises(
        ValueError, match=r"short\.kv: inconsistent vectors: a matrix of shape \(2, 4\) for 3 words"
    ):
        load_vectors(tmp_path / "short.kv")


def test_row_scan_of_a_memory_map_reads_it_in_bounded_chunks(tmp_path):
    import tracemalloc

    from capeval.text.vector_rows import check_vector_rows

    # 200,000 x 50 float32 (40 MB) on disk, memory-mapped: the scan must not copy it whole.
    matrix = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.float32, shape=(200_000, 50))
    matrix[:] = 1.0
    matrix[123_456] = 0.0
    matrix.flush()

    class Mapped:
        vectors = np.load(tmp_path / "big.npy", mmap_mode="r")
        vector_size = 50
        index_to_key = [f"w{i}" for i in range(200_000)]
        key_to_index = {w: i for i, w in enumerate(index_to_key)}

    tracemalloc.start()
    try:
        zero = check_vector_rows(Mapped(), "big.npy")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert zero == {"w123456"}
    assert (
        peak < 40 * 2**20
    )  # one chunk of 4M values and its |x| copy: 32 MiB at most, never the 40 MB matrix


# --- All-zero rows are unknown words where vectors are normalised ---


@pytest.fixture
def zero_row_vectors(tmp_path):
    """word2vec text vectors in which ``pad`` has an all-zero vector."""
    from capeval.text.vectors import clear_cache

    rows = {"dog": [3, 4, 0], "cat": [4, 3, 0], "runs": [0, 4, 3], "beach": [1, 1, 1], "pad": [0, 0, 0]}
    path = tmp_path / "zero-row.txt"
    path.write_text("5 3\n" + "".join(f"{w} {' '.join(map(str, v))}\n" for w, v in rows.items()))
    clear_cache()
    yield path
    clear_cache()


def test_wmd_normalized_treats_zero_vector_words_as_unknown_with_a_warning(zero_row_vectors):
    import capeval

    with pytest.warns(
        UserWarning, match=r"wmd: 1 word\(s\) of vectors zero-row\.txt.* all-zero vector.*'pad'"
    ):
        wmd = capeval.WMD(vectors=str(zero_row_vectors), normalize_vectors=True)
    out = wmd(["dog pad runs", "dog cat"], [["cat beach"], ["pad cat dog"]])
    # gensim 4 divides 0 by 0 here; with 'pad' unknown both distances are finite, the second exactly 0.
    assert np.isfinite(out["distances"]).all() and out["distances"][1] == 0.0
    assert "vectors=zero-row.txt@" in out["signature"] and ",zero_rows_oov=1|" in out["signature"]


def test_wmd_on_raw_vectors_keeps_zero_vector_words_as_gensim_does(zero_row_vectors):
    import warnings

    from gensim.models import KeyedVectors

    import capeval

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # raw vectors: nothing is dropped, nothing to warn about
        wmd = capeval.WMD(vectors=str(zero_row_vectors))
    out = wmd(["dog pad runs"], [["cat beach"]])
    kv = KeyedVectors.load_word2vec_format(str(zero_row_vectors))
    assert out["distances"][0] == pytest.approx(
        kv.wmdistance(["dog", "pad", "runs"], ["cat", "beach"], norm=False)
    )
    assert "zero_rows_oov" not in out["signature"]


def test_wembsim_warns_and_a_caption_of_zero_vector_words_is_reported_not_silently_zero(
    zero_row_vectors,
):
    import capeval

    with pytest.warns(UserWarning, match=r"wembsim: 1 word\(s\) .*'pad'"):
        wembsim = capeval.WEmbSim(vectors=str(zero_row_vectors), normalize_vectors=True)
    with pytest.warns(UserWarning, match=r"1 predictions have no in-vocabulary word .*index 1"):
        out = wembsim(["dog pad", "pad"], [["dog"], ["cat"]])
    assert out["scores"] == [pytest.approx(1.0), 0.0]
    assert ",zero_rows_oov=1|" in out["signature"]
