"""No vectors file runs code: gensim pickles are read without resolving anything but plain data, so crafted
payloads (the whole file, inside a KeyedVectors state, in sidecars, through codecs) are refused by name and the
marker each would create never appears, while whole gensim models and compressed files still load."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from capeval.text.vectors import clear_cache, load_vectors
from tests.gensim_states import WORDS, kv_state
from tests.pickle_payloads import (
    Call,
    Ref,
    assert_nothing_ran,
    build,
    dumps,
    marker_payloads,
    plant_marker,
    touch_marker_pickle,
)


@pytest.fixture
def hostile(tmp_path):
    """The marker a payload would create and a plain pickle that would create it; no vectors cached."""
    planted = plant_marker(tmp_path)
    clear_cache()
    yield planted
    clear_cache()


# --- Pickled payloads in vectors files run nothing ---


@pytest.mark.parametrize(
    "case",
    [
        "dotted name through gensim.utils",
        "Popen through gensim.utils",
        "os.system",
        "posix.system",
        "builtins.exec",
        "builtins.open",
        "getattr of __import__",
        "numpy reached through a gensim module",
        "gensim's own plain-pickle loader through an allowed class",
        "an allowed function's globals",
        "copyreg reconstructor",
        "subprocess directly",
    ],
)
@pytest.mark.parametrize("where", ["whole file", "inside KeyedVectors state"])
def test_vectors_pickle_payloads_are_refused_and_nothing_runs(tmp_path, hostile, case, where):
    marker, evil_pickle = hostile
    payload = marker_payloads(marker, evil_pickle)[case]
    path = tmp_path / "evil.kv"
    if where == "whole file":
        path.write_bytes(dumps(payload))
    else:
        kv = Ref("gensim.models.keyedvectors", "KeyedVectors")
        path.write_bytes(build(kv, {"index_to_key": WORDS, "key_to_index": {}, "vector_size": payload}))
    with pytest.raises(ValueError, match=r"evil\.kv: refusing to load .*nothing in the file was executed"):
        load_vectors(path)
    assert_nothing_ran(marker)


def test_protocol_0_and_persistent_id_pickles_are_refused(tmp_path, hostile):
    marker, _ = hostile
    text = tmp_path / "p0.kv"
    text.write_bytes(f"cos\nsystem\n(Vtouch {marker}\ntR.".encode())
    # Only protocol 2+ pickles (first byte 0x80) are read as gensim files at all.
    with pytest.raises(ValueError, match=r"p0\.kv: unknown vector format"):
        load_vectors(text)
    pid = tmp_path / "pid.kv"
    pid.write_bytes(b"\x80\x04" + b"\x8c\x04evil" + b"Q.")  # BINPERSID
    with pytest.raises(ValueError, match=r"pid\.kv: refusing the persistent id"):
        load_vectors(pid)
    assert_nothing_ran(marker)


# --- Sidecars are read as plain arrays, never unpickled ---


def test_sparse_sidecar_that_gensim_would_unpickle_is_refused(tmp_path, hostile):
    marker, _ = hostile
    path = tmp_path / "side.kv"
    path.write_bytes(build(Ref("gensim.models.keyedvectors", "KeyedVectors"), kv_state(__scipys=["vectors"])))
    # gensim's SaveLoad would unpickle this file with plain pickle.
    (tmp_path / "side.kv.vectors.npy").write_bytes(touch_marker_pickle(marker))
    with pytest.raises(ValueError, match=r"side\.kv: refusing sparse sidecars \['vectors'\]"):
        load_vectors(path)
    assert_nothing_ran(marker)


@pytest.mark.parametrize("compressed", [False, True])
def test_object_array_sidecar_is_refused_by_numpy(tmp_path, hostile, compressed):
    marker, _ = hostile
    name = "obj.kv.gz" if compressed else "obj.kv"
    path = tmp_path / name
    pickled = build(Ref("gensim.models.keyedvectors", "KeyedVectors"), kv_state(__numpys=["vectors"]))
    if compressed:
        import gzip

        pickled = gzip.compress(pickled)
    path.write_bytes(pickled)
    header = b"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    header += b" " * (118 - len(header)) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + touch_marker_pickle(marker)
    if compressed:  # gensim's layout for .gz files: <file>.vectors.npz holding "val"
        with zipfile.ZipFile(tmp_path / f"{name}.vectors.npz", "w") as z:
            z.writestr("val.npy", npy)
    else:
        (tmp_path / f"{name}.vectors.npy").write_bytes(npy)
    with pytest.raises(ValueError, match=rf"{name} .*truncated or corrupt.*(Python objects|allow_pickle)"):
        load_vectors(path)
    assert_nothing_ran(marker)


@pytest.mark.parametrize(
    "key, name",
    [("__numpys", "../../../etc/x"), ("__ignoreds", "a.b"), ("__recursive_saveloads", "__class__")],
)
def test_sidecar_names_that_are_not_identifiers_are_refused(tmp_path, key, name):
    path = tmp_path / "names.kv"
    path.write_bytes(build(Ref("gensim.models.keyedvectors", "KeyedVectors"), kv_state(**{key: [name]})))
    with pytest.raises(ValueError, match=r"names\.kv: refusing sidecar attribute"):
        load_vectors(path)


def test_recursive_sidecar_must_point_at_vectors(tmp_path):
    path = tmp_path / "rec.kv"
    path.write_bytes(
        build(
            Ref("gensim.models.keyedvectors", "KeyedVectors"),
            kv_state(__recursive_saveloads=["norms"], norms=[1]),
        )
    )
    with pytest.raises(ValueError, match=r"rec\.kv: refusing sidecar attribute 'norms': a list"):
        load_vectors(path)


# --- A pickle of anything but gensim vectors is not vectors ---


def test_a_pickle_of_an_allowed_non_vectors_object_is_not_vectors(tmp_path):
    path = tmp_path / "dict.kv"
    path.write_bytes(dumps({"vectors": [1, 2]}))
    with pytest.raises(ValueError, match=r"dict\.kv: a pickle of dict, not gensim vectors"):
        load_vectors(path)


# --- Gensim's own files still load ---


@pytest.mark.parametrize("sep_limit", [0, 10**9])
@pytest.mark.parametrize("kind", ["word2vec", "fasttext"])
def test_whole_gensim_models_still_load_their_vectors(tmp_path, kind, sep_limit):
    from gensim.models import FastText, Word2Vec

    sentences = [["a", "dog", "runs", "on", "grass"], ["a", "cat", "sleeps", "on", "a", "sofa"]] * 20
    cls = FastText if kind == "fasttext" else Word2Vec
    extra = {"bucket": 1000} if kind == "fasttext" else {}
    model = cls(sentences, vector_size=8, window=2, min_count=1, epochs=2, seed=0, workers=1, **extra)
    path = tmp_path / f"{kind}.model"
    model.save(str(path), sep_limit=sep_limit)
    wv = load_vectors(path)
    for word in ("dog", "sofa"):
        np.testing.assert_array_equal(wv.keyed_vectors[word], model.wv[word])
    if kind == "fasttext":
        np.testing.assert_allclose(wv.embed(["doggo"])[0], model.wv["doggo"], rtol=1e-6, atol=1e-6)


def test_compressed_keyedvectors_with_npz_sidecar_load(tmp_path):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=4, count=0)
    kv.add_vectors(WORDS, np.arange(12, dtype=np.float32).reshape(3, 4))
    path = tmp_path / "small.kv.gz"
    kv.save(str(path), sep_limit=0)
    assert (tmp_path / "small.kv.gz.vectors.npz").exists()
    np.testing.assert_array_equal(load_vectors(path).keyed_vectors["cat"], kv["cat"])


# --- The one codec gensim 3 files need, and no other ---


@pytest.mark.parametrize("encoding", ["rot13", "zlib", "base64", "utf-16"])
def test_codecs_encode_serves_only_latin1_as_protocol_2_bytes_need(tmp_path, encoding):
    path = tmp_path / "codec.kv"
    path.write_bytes(dumps(Call("_codecs", "encode", ("abc", encoding)), protocol=2))
    with pytest.raises(ValueError, match=rf"codec\.kv: refusing _codecs\.encode with encoding '{encoding}'"):
        load_vectors(path)
