"""No file runs code: crafted vectors files, sidecars, checkpoints and model folders are refused by name, and
the marker each payload would create never appears."""

from __future__ import annotations

import re
import shutil
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from capeval.text.vectors import clear_cache, load_vectors
from tests.pickle_payloads import Apply, Call, Ref, build, dumps

WORDS = ["dog", "cat", "runs"]


def _payloads(marker: Path, evil_pickle: Path) -> dict[str, object]:
    """Pickled calls that would each create ``marker`` (or ``marker.npy``) if anything resolved them."""
    m = str(marker)
    touch = [sys.executable, "-c", f"open({m!r}, 'w').close()"]
    return {
        "dotted name through gensim.utils": Call("gensim.utils", "subprocess.check_call", (touch,)),
        "Popen through gensim.utils": Call("gensim.utils", "subprocess.Popen", (touch,)),
        "os.system": Call("os", "system", (f"touch {m}",)),
        "posix.system": Call("posix", "system", (f"touch {m}",)),
        "builtins.exec": Call("builtins", "exec", (f"open({m!r}, 'w').close()",)),
        "builtins.open": Call("builtins", "open", (m, "w")),
        "getattr of __import__": Apply(
            Call("builtins", "getattr", (Call("builtins", "__import__", ("os",)), "system")), (f"touch {m}",)
        ),
        "numpy reached through a gensim module": Call("gensim.models.keyedvectors", "np.save", (m, [1])),
        "gensim's own plain-pickle loader through an allowed class": Call(
            "gensim.models.keyedvectors", "KeyedVectors.load", (str(evil_pickle),)
        ),
        "an allowed function's globals": Call(
            "numpy._core.multiarray", "_reconstruct.__globals__.get", ("__builtins__",)
        ),
        "copyreg reconstructor": Call(
            "copyreg", "_reconstructor", (Ref("pathlib", "Path"), Ref("builtins", "object"), None)
        ),
        "subprocess directly": Call("subprocess", "check_call", (touch,)),
    }


def _raw_exploit(marker: Path, protocol: int = 4) -> bytes:
    return dumps(Call("os", "system", (f"touch {marker}",)), protocol=protocol)


@pytest.fixture
def hostile(tmp_path):
    marker = tmp_path / "code-was-run"
    evil_pickle = tmp_path / "plain.pkl"
    evil_pickle.write_bytes(_raw_exploit(marker))
    clear_cache()
    yield marker, evil_pickle
    clear_cache()


def _assert_nothing_ran(marker: Path) -> None:
    time.sleep(0.2)  # a Popen child would have created it by now
    assert not any(marker.parent.glob(marker.name + "*")), "a payload ran"


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
    payload = _payloads(marker, evil_pickle)[case]
    path = tmp_path / "evil.kv"
    if where == "whole file":
        path.write_bytes(dumps(payload))
    else:
        kv = Ref("gensim.models.keyedvectors", "KeyedVectors")
        path.write_bytes(build(kv, {"index_to_key": WORDS, "key_to_index": {}, "vector_size": payload}))
    with pytest.raises(ValueError, match=r"evil\.kv: refusing to load .*nothing in the file was executed"):
        load_vectors(path)
    _assert_nothing_ran(marker)


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
    _assert_nothing_ran(marker)


def _kv_state(**extra) -> dict:
    return {
        "index_to_key": WORDS,
        "key_to_index": {w: i for i, w in enumerate(WORDS)},
        "vector_size": 4,
        **extra,
    }


def test_sparse_sidecar_that_gensim_would_unpickle_is_refused(tmp_path, hostile):
    marker, _ = hostile
    path = tmp_path / "side.kv"
    path.write_bytes(
        build(Ref("gensim.models.keyedvectors", "KeyedVectors"), _kv_state(__scipys=["vectors"]))
    )
    # gensim's SaveLoad would unpickle this file with plain pickle.
    (tmp_path / "side.kv.vectors.npy").write_bytes(_raw_exploit(marker))
    with pytest.raises(ValueError, match=r"side\.kv: refusing sparse sidecars \['vectors'\]"):
        load_vectors(path)
    _assert_nothing_ran(marker)


@pytest.mark.parametrize("compressed", [False, True])
def test_object_array_sidecar_is_refused_by_numpy(tmp_path, hostile, compressed):
    marker, _ = hostile
    name = "obj.kv.gz" if compressed else "obj.kv"
    path = tmp_path / name
    pickled = build(Ref("gensim.models.keyedvectors", "KeyedVectors"), _kv_state(__numpys=["vectors"]))
    if compressed:
        import gzip

        pickled = gzip.compress(pickled)
    path.write_bytes(pickled)
    header = b"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    header += b" " * (118 - len(header)) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + _raw_exploit(marker)
    if compressed:  # gensim's layout for .gz files: <file>.vectors.npz holding "val"
        with zipfile.ZipFile(tmp_path / f"{name}.vectors.npz", "w") as z:
            z.writestr("val.npy", npy)
    else:
        (tmp_path / f"{name}.vectors.npy").write_bytes(npy)
    with pytest.raises(ValueError, match=rf"{name} .*truncated or corrupt.*(Python objects|allow_pickle)"):
        load_vectors(path)
    _assert_nothing_ran(marker)


@pytest.mark.parametrize(
    "key, name",
    [("__numpys", "../../../etc/x"), ("__ignoreds", "a.b"), ("__recursive_saveloads", "__class__")],
)
def test_sidecar_names_that_are_not_identifiers_are_refused(tmp_path, key, name):
    path = tmp_path / "names.kv"
    path.write_bytes(build(Ref("gensim.models.keyedvectors", "KeyedVectors"), _kv_state(**{key: [name]})))
    with pytest.raises(ValueError, match=r"names\.kv: refusing sidecar attribute"):
        load_vectors(path)


def test_recursive_sidecar_must_point_at_vectors(tmp_path):
    path = tmp_path / "rec.kv"
    path.write_bytes(
        build(
            Ref("gensim.models.keyedvectors", "KeyedVectors"),
            _kv_state(__recursive_saveloads=["norms"], norms=[1]),
        )
    )
    with pytest.raises(ValueError, match=r"rec\.kv: refusing sidecar attribute 'norms': a list"):
        load_vectors(path)


def test_a_pickle_of_an_allowed_non_vectors_object_is_not_vectors(tmp_path):
    path = tmp_path / "dict.kv"
    path.write_bytes(dumps({"vectors": [1, 2]}))
    with pytest.raises(ValueError, match=r"dict\.kv: a pickle of dict, not gensim vectors"):
        load_vectors(path)


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


def _torch_zip_with(tmp_path: Path, name: str, payload: bytes) -> Path:
    """A real ``torch.save`` zip whose ``data.pkl`` is replaced by ``payload``."""
    src = tmp_path / "real.pt"
    torch.save({"x": 1}, src)
    out = tmp_path / name
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = payload if info.filename.endswith("/data.pkl") else zin.read(info)
            zout.writestr(info, data)
    return out


@pytest.mark.parametrize(
    "case",
    ["dotted name through gensim.utils", "builtins.open", "getattr of __import__", "subprocess directly"],
)
def test_checkpoint_payloads_are_refused_and_nothing_runs(tmp_path, hostile, case):
    from capeval.clip.checkpoints.files import read_state_dict

    marker, evil_pickle = hostile
    # torch's weights-only unpickler knows only GLOBAL (protocol 2), the layout torch.save writes.
    payload = dumps({"state_dict": {"w": _payloads(marker, evil_pickle)[case]}}, protocol=2)
    for path in (_torch_zip_with(tmp_path, "evil.pth", payload), tmp_path / "legacy.pth"):
        if path.name == "legacy.pth":
            path.write_bytes(payload)
        with pytest.raises(
            ValueError, match=rf"refused to load .*{path.name}: unpickling it needs .*nothing"
        ):
            read_state_dict(path)
    _assert_nothing_ran(marker)


def test_model_folder_with_a_pickled_weights_file_runs_nothing(tmp_path, tiny_clip_dir, hostile):
    from capeval.clip.backbones import clear_cache as clear_backbones
    from capeval.clip.backbones import load_backbone

    marker, _ = hostile
    folder = tmp_path / "model"
    shutil.copytree(tiny_clip_dir, folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(
        _torch_zip_with(tmp_path, "w.bin", _raw_exploit(marker, protocol=2)).read_bytes()
    )
    clear_backbones()
    with pytest.raises(
        ValueError, match=r"pytorch_model\.bin.*(os|posix)\.system.*nothing in the file was executed"
    ):
        load_backbone(str(folder), device="cpu")
    _assert_nothing_ran(marker)


# --- Item 5: NaN and inf inside weight and vectors files ---


def _item5_model_copy(tiny_clip_dir: Path, tmp_path: Path, name: str, edit) -> Path:
    """The tiny CLIP folder with its safetensors weights changed by ``edit(state_dict)``."""
    from safetensors.torch import load_file, save_file

    from capeval.clip.backbones import clear_cache as clear_backbones

    folder = tmp_path / name
    shutil.copytree(tiny_clip_dir, folder)
    sd = load_file(folder / "model.safetensors")
    edit(sd)
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})
    clear_backbones()
    return folder


def _item5_poison(sd: dict) -> None:
    sd["text_projection.weight"][0, 0] = float("nan")
    sd["vision_model.post_layernorm.bias"][:] = float("inf")


def test_model_folder_with_nan_and_inf_weights_is_refused_naming_the_tensors(tiny_clip_dir, tmp_path):
    import capeval

    folder = _item5_model_copy(tiny_clip_dir, tmp_path, "nan-model", _item5_poison)
    with pytest.raises(ValueError, match=r"nan-model holds NaN or inf in 2 tensor\(s\): ") as err:
        capeval.CLIPScore(model=str(folder), device="cpu")
    assert "vision_model.post_layernorm.bias (32 of 32 values)" in str(err.value)
    assert "text_projection.weight (1 of 512 values)" in str(err.value)


def test_pacs_checkpoint_file_with_inf_is_refused_naming_file_and_tensor(tiny_clip_dir, tmp_path):
    from safetensors.torch import load_file

    from capeval.clip.backbones import clear_cache as clear_backbones
    from capeval.clip.backbones import load_backbone

    sd = load_file(tiny_clip_dir / "model.safetensors")
    sd["visual_projection.weight"][3] = float("-inf")
    torch.save({"state_dict": sd}, tmp_path / "pacs.pth")
    clear_backbones()
    with pytest.raises(ValueError, match=r"pacs\.pth' holds NaN or inf in 1 tensor\(s\): visual_projection\.weight "
                       r"\(32 of 512 values\)"):  # fmt: skip
        load_backbone(str(tiny_clip_dir), device="cpu", checkpoint=str(tmp_path / "pacs.pth"))


def test_converted_pacs_folder_with_nan_is_refused(tiny_clip_dir, tmp_path):
    import capeval

    folder = _item5_model_copy(tiny_clip_dir, tmp_path, "converted", _item5_poison)
    with pytest.raises(ValueError, match=r"converted holds NaN or inf .*text_projection\.weight"):
        capeval.PACScore(checkpoint=str(folder), device="cpu")


def test_weights_that_overflow_float16_are_refused_and_bfloat16_still_loads(tiny_clip_dir, tmp_path):
    import capeval

    def big(sd: dict) -> None:
        sd["text_projection.weight"][0, 0] = 1e6  # float16's largest finite value is 65504

    folder = _item5_model_copy(tiny_clip_dir, tmp_path, "big-weight", big)
    with pytest.raises(ValueError, match=r"1 tensor\(s\) hold values too large for float16, which become inf: "
                       r"text_projection\.weight \(1 of 512 values\)"):  # fmt: skip
        capeval.CLIPScore(model=str(folder), device="cpu", dtype="float16")
    scores = capeval.CLIPScore(model=str(folder), device="cpu", dtype="bfloat16")(
        ["a dog"], image_embeds=np.ones((1, 16))
    )["scores"]
    assert np.isfinite(scores).all()


def _item5_text_vectors(path: Path, rows: dict[str, list[float]], header: bool = True) -> Path:
    dim = len(next(iter(rows.values())))
    lines = [f"{len(rows)} {dim}"] if header else []
    lines += [f"{w} " + " ".join(str(x) for x in v) for w, v in rows.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


_ITEM5_ROWS = {"dog": [0.1, 0.2, 0.3], "cat": [0.2, 0.1, 0.0], "runs": [0.3, 0.3, 0.1]}


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("header", [True, False], ids=["word2vec-text", "glove-text"])
def test_text_vectors_with_nan_or_inf_are_refused_naming_word_and_row(tmp_path, value, header):
    rows = {**_ITEM5_ROWS, "runs": [0.3, float(value), 0.1]}
    path = _item5_text_vectors(tmp_path / "bad.txt", rows, header)
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
    kv.add_vectors(list(_ITEM5_ROWS), np.array(list(_ITEM5_ROWS.values()), dtype=np.float32))
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


# --- Item 9: counts in vectors file headers checked against the file before allocating ---


def _item9_peak(load) -> tuple[BaseException | None, int]:
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


_ITEM9_BOUND = 16 * 2**20  # far below any claimed matrix: proves the refusal came before the allocation


@pytest.mark.parametrize("count", [1_000_000, 2_000_000_000])
@pytest.mark.parametrize("binary, possible", [(False, 4), (True, 2)], ids=["text", "binary"])
def test_word2vec_header_claiming_more_rows_than_the_file_holds_is_refused_before_allocating(
    tmp_path, count, binary, possible
):
    path = tmp_path / ("huge.bin" if binary else "huge.txt")
    # Two rows of 100 values; a row takes at least 201 bytes as text, 402 as binary.
    rows = [b"dog " + (np.ones(100, np.float32).tobytes() if binary else b" ".join([b"0.5"] * 100))] * 2
    path.write_bytes(f"{count} 100\n".encode() + b"\n".join(rows) + b"\n")
    error, peak = _item9_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError), error
    claim = (
        f"huge.{path.suffix[1:]}: its header claims {count:,} words of 100 dimensions, but the file can hold "
    )
    assert claim + f"at most {possible} such rows" in str(error)
    assert "refusing to allocate" in str(error)
    assert peak < _ITEM9_BOUND


def test_gzip_header_is_bounded_by_deflates_largest_expansion(tmp_path):
    import gzip

    path = tmp_path / "huge.txt.gz"
    path.write_bytes(gzip.compress(b"50000000 300\ndog " + b" ".join([b"0.5"] * 300) + b"\n"))
    size = path.stat().st_size
    error, peak = _item9_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert f"a gzip file of {size:,} bytes holds at most 1032x that" in str(error)
    assert "header claims 50,000,000 words of 300 dimensions" in str(error)
    assert peak < _ITEM9_BOUND


def _item9_claim_shape(npy: bytes, shape: bytes) -> bytes:
    """An .npy of shape (3, 4) whose header claims ``shape`` instead (header length kept: padding shrinks)."""
    grow = len(shape) - len(b"(3, 4)")
    end = npy.index(b"\n")
    return npy[: end - grow].replace(b"(3, 4)", shape) + npy[end:]


def _item9_fasttext(tmp_path: Path) -> tuple[bytes, int, int]:
    """A small fastText .bin (bytes), its word count and bucket count."""
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    sentences = [["a", "dog", "runs", "on", "grass"], ["a", "cat", "sleeps"]] * 5
    model = FastText(sentences, vector_size=4, min_count=1, epochs=1, bucket=20, seed=0, workers=1)
    save_facebook_model(model, str(tmp_path / "ft.bin"))
    return (tmp_path / "ft.bin").read_bytes(), len(model.wv), 20


def _item9_patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    import struct

    return data[:offset] + struct.pack(fmt, value) + data[offset + struct.calcsize(fmt) :]


def test_fasttext_bin_with_a_huge_bucket_count_is_refused_before_allocating(tmp_path):
    data, _, _ = _item9_fasttext(tmp_path)
    path = tmp_path / "bucket.bin"
    path.write_bytes(
        _item9_patch(data, 40, "<i", 2_000_000_000)
    )  # args.bucket: 9th int32 after magic, version
    error, peak = _item9_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert (
        "bucket.bin: its input matrix is declared 27 x 4, but the header's 7 words + 2,000,000,000 buckets"
        in str(error)
    )
    assert peak < _ITEM9_BOUND


def test_fasttext_bin_with_a_huge_matrix_header_is_refused_before_allocating(tmp_path):
    import struct

    data, nwords, bucket = _item9_fasttext(tmp_path)
    header = struct.pack("<2q", nwords + bucket, 4)
    at = data.index(header)
    path = tmp_path / "matrix.bin"
    # Header fields and matrix header agree on 10^9 buckets; the file holds 27 rows.
    patched = _item9_patch(data, 40, "<i", 1_000_000_000)
    path.write_bytes(patched[:at] + struct.pack("<2q", nwords + 1_000_000_000, 4) + patched[at + 16 :])
    error, peak = _item9_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert (
        f"matrix.bin: its header claims a {nwords + 1_000_000_000:,} x 4 input matrix, but the file can hold at "
        in (str(error))
    )
    assert "refusing to allocate 14.9 GiB" in str(error)
    assert peak < _ITEM9_BOUND


def test_fasttext_bin_whose_vocabulary_runs_past_the_end_is_refused_not_looped_on(tmp_path):
    data, nwords, _ = _item9_fasttext(tmp_path)
    path = tmp_path / "vocab.bin"
    # 1,000 claimed entries fit the size bound (10 bytes each), but only 7 are there: gensim's reader, which
    # compares each read byte with b"\0", would spin forever at the end of the file.
    patched = _item9_patch(_item9_patch(data, 64, "<i", 1000), 68, "<i", 1000)
    path.write_bytes(patched + b"x" * 20_000)
    error, _ = _item9_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert "vocab.bin: the file ends inside word" in str(error) and "(truncated)" in str(error)


def test_gensim_sidecar_npy_claiming_a_huge_shape_is_refused_before_mapping(tmp_path):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=4, count=0)
    kv.add_vectors(WORDS, np.ones((3, 4), dtype=np.float32))
    path = tmp_path / "big.kv"
    kv.save(str(path), sep_limit=0)
    npy = tmp_path / "big.kv.vectors.npy"
    npy.write_bytes(_item9_claim_shape(npy.read_bytes(), b"(9000000000, 4)"))
    error, peak = _item9_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert "big.kv.vectors.npy: its header claims an array of shape (9000000000, 4)" in str(error)
    assert "at most 3 such rows" in str(error) and "refusing to allocate 134.1 GiB" in str(error)
    assert peak < _ITEM9_BOUND


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
        z.writestr("val.npy", _item9_claim_shape(member, b"(9000000000, 4)"))
    error, peak = _item9_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError)
    assert "big.kv.gz.vectors.npz: its header claims an array of shape (9000000000, 4)" in str(error)
    assert peak < _ITEM9_BOUND


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
    path.write_bytes(build(Ref("gensim.models.keyedvectors", "KeyedVectors"), _kv_state(vectors=payload)))
    error, peak = _item9_peak(lambda: load_vectors(path))
    assert isinstance(error, ValueError) and re.search(message, str(error)), error
    assert peak < _ITEM9_BOUND


def test_npy_parquet_folder_whose_npy_claims_more_rows_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "glove-like"
    folder.mkdir()
    np.save(folder / "v_emb.npy", np.ones((3, 4), dtype=np.float32))
    (folder / "v_emb.npy").write_bytes(
        _item9_claim_shape((folder / "v_emb.npy").read_bytes(), b"(3000000000, 4)")
    )
    pq.write_table(pa.table({"word": WORDS}), folder / "v_index.parquet")
    error, peak = _item9_peak(lambda: load_vectors(folder))
    assert isinstance(error, ValueError)
    assert "v_emb.npy: its header claims an array of shape (3000000000, 4)" in str(error)
    assert peak < _ITEM9_BOUND


# --- Item 1: the one codec gensim 3 files need ---


@pytest.mark.parametrize("encoding", ["rot13", "zlib", "base64", "utf-16"])
def test_codecs_encode_serves_only_latin1_as_protocol_2_bytes_need(tmp_path, encoding):
    path = tmp_path / "codec.kv"
    path.write_bytes(dumps(Call("_codecs", "encode", ("abc", encoding)), protocol=2))
    with pytest.raises(ValueError, match=rf"codec\.kv: refusing _codecs\.encode with encoding '{encoding}'"):
        load_vectors(path)
