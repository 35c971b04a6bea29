"""clip-retrieval's layout (img_emb/, text_emb/, metadata/), read back with embedding-reader, what autofaiss and
clip-retrieval read it with: the same embeddings (float16) and metadata, in order; rows without embeddings refused."""

from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from capeval.corpus.embedding_layout import EmbeddingLayoutWriter, incomplete_parts, part_digits

DIM = 16


def _unit(rng, n):
    matrix = rng.standard_normal((n, DIM))
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _rows(part, n):
    return [
        {
            "key": f"{part:05d}{i:04d}",
            "caption": f"caption {part}-{i}",
            "url": f"http://127.0.0.1/{part}/{i}.jpg",
            "uid": f"{part:016x}{i:016x}",
            "clipscore": 0.25 + i / 100,
        }
        for i in range(n)
    ]


@pytest.fixture
def written(tmp_path):
    """Parts 0 and 2 of 3 in two batches each, part 1 with no row (all its samples were error rows)."""
    rng = np.random.default_rng(0)
    writer = EmbeddingLayoutWriter(tmp_path / "emb", part_count=3)
    expected = {"rows": [], "image": [], "text": []}
    for part, batches in ((0, (3, 4)), (1, ()), (2, (5, 1))):
        start = 0
        for n in batches:
            rows = _rows(part, start + n)[start:]
            image, text = _unit(rng, n), _unit(rng, n)
            writer.add(part, rows, image_embeddings=image, text_embeddings=text)
            expected["rows"] += rows
            expected["image"].append(image)
            expected["text"].append(text)
            start += n
        writer.finish(part)
    return tmp_path / "emb", {k: v if k == "rows" else np.concatenate(v) for k, v in expected.items()}


def test_the_files_are_named_and_typed_as_clip_retrieval_writes_them(written):
    folder, expected = written
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == [
        "img_emb", "img_emb/img_emb_0.npy", "img_emb/img_emb_2.npy",
        "metadata", "metadata/metadata_0.parquet", "metadata/metadata_2.parquet",
        "text_emb", "text_emb/text_emb_0.npy", "text_emb/text_emb_2.npy",
    ]  # fmt: skip
    image = np.load(folder / "img_emb" / "img_emb_0.npy")
    assert image.dtype == np.float16 and image.shape == (7, DIM)
    assert pq.read_schema(folder / "metadata" / "metadata_0.parquet").names == [
        "image_path", "caption", "key", "url", "uid", "clipscore"
    ]  # fmt: skip


def test_embedding_reader_reads_back_the_same_embeddings_and_metadata_in_order(written):
    from embedding_reader import EmbeddingReader

    folder, expected = written
    columns = ["image_path", "caption", "key", "url", "uid", "clipscore"]
    reader = EmbeddingReader(
        str(folder / "img_emb"),
        file_format="parquet_npy",
        meta_columns=columns,
        metadata_folder=str(folder / "metadata"),
    )
    assert (reader.count, reader.dimension) == (13, DIM)
    batches = list(reader(batch_size=4, show_progress=False))
    embeddings = np.concatenate([b[0] for b in batches])
    metadata = [row for _, meta in batches for row in meta[columns].to_dict("records")]
    np.testing.assert_array_equal(embeddings, expected["image"].astype(np.float16).astype(np.float32))
    assert metadata == [{"image_path": r["key"], **{c: r[c] for c in columns[1:]}} for r in expected["rows"]]
    texts = EmbeddingReader(str(folder / "text_emb"), file_format="npy")
    read_texts = np.concatenate([b[0] for b in texts(batch_size=13, show_progress=False)])
    np.testing.assert_array_equal(read_texts, expected["text"].astype(np.float16).astype(np.float32))


def test_part_numbers_are_padded_as_clip_retrieval_pads_them_for_the_part_count(tmp_path):
    assert [part_digits(n) for n in (1, 9, 10, 99, 100, 12345)] == [1, 1, 2, 2, 3, 5]
    writer = EmbeddingLayoutWriter(tmp_path, part_count=120, text=False)
    assert {k: p.name for k, p in writer.paths(7).items()} == {
        "image": "img_emb_007.npy",
        "metadata": "metadata_007.parquet",
    }


def test_a_row_without_an_embedding_is_refused_by_key_not_written_as_zeros(tmp_path):
    writer = EmbeddingLayoutWriter(tmp_path, part_count=1, text=False)
    image = _unit(np.random.default_rng(1), 3)
    for broken in (np.nan, 0.0):
        bad = image.copy()
        bad[1] = broken
        with pytest.raises(
            ValueError,
            match=r"row 1 of the batch \(key '000000001'\) has a image embedding that is not finite or is all zeros",
        ):
            writer.add(0, _rows(0, 3), image_embeddings=bad)
    assert writer.finish(0) == []  # nothing was added


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(part=3), r"part 3 is outside 0\.\.1"),
        (dict(rows=[{"key": "a"}] * 2), r"row 0 of the batch has no caption"),
        (dict(image=np.ones((3, DIM))), r"image embeddings have shape \(3, 16\); expected \(2, dim\)"),
        (dict(text=None), r"this layout needs text embeddings"),
    ],
)
def test_batches_that_do_not_fit_the_layout_are_refused_naming_why(tmp_path, change, message):
    writer = EmbeddingLayoutWriter(tmp_path, part_count=2)
    rng = np.random.default_rng(2)
    args = {"part": 0, "rows": _rows(0, 2), "image": _unit(rng, 2), "text": _unit(rng, 2), **change}
    with pytest.raises(ValueError, match=message):
        writer.add(args["part"], args["rows"], image_embeddings=args["image"], text_embeddings=args["text"])


def test_a_part_of_another_dimension_is_refused(tmp_path):
    writer = EmbeddingLayoutWriter(tmp_path, part_count=2, text=False)
    writer.add(0, _rows(0, 2), image_embeddings=_unit(np.random.default_rng(3), 2))
    with pytest.raises(ValueError, match="image embeddings have 8 dimensions; this layout's have 16"):
        writer.add(1, _rows(1, 1), image_embeddings=np.ones((1, 8)))


def test_a_part_cut_short_before_its_metadata_is_reported_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    writer = EmbeddingLayoutWriter(tmp_path, part_count=1, text=False)
    writer.add(0, _rows(0, 2), image_embeddings=_unit(np.random.default_rng(4), 2))
    real = os.replace

    def fail_on_metadata(src, dst):
        if str(dst).endswith(".parquet"):
            raise OSError("disk full")
        real(src, dst)

    monkeypatch.setattr(os, "replace", fail_on_metadata)
    with pytest.raises(OSError, match="disk full"):
        writer.finish(0)
    assert incomplete_parts(tmp_path) == ["part 0 has ['image'] embeddings but no metadata_0.parquet"]
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".capeval-tmp")]


def test_a_whole_layout_has_no_incomplete_part(written):
    folder, _ = written
    assert incomplete_parts(folder) == []


# --- A rerun's layout holds its own rows only ---


def test_a_rerun_makes_the_layout_anew_removing_an_earlier_runs_parts_and_says_so(tmp_path):
    from capeval.corpus.run import score_corpus
    from capeval.shapes import shapes_clip_path
    from capeval_dev.testing.shapes_shards import write_shapes_shards
    from tests.hostile_shards import write_tar

    shards, out = tmp_path / "shards", tmp_path / "out"
    write_shapes_shards(shards, shards=9, rows_per_shard=2)
    options = dict(model=str(shapes_clip_path()), embedding_layout=True, progress=False)
    first = score_corpus(shards, out, **options)
    assert first.summary["embedding_layout_parts"] == 9 and first.summary["embedding_layout_removed"] == []
    (out / "embeddings" / "index").mkdir()
    (out / "embeddings" / "index" / "knn.index").write_bytes(b"an index built from the layout")
    # A tenth shard: the part numbers get two digits, and the nine one-digit parts are an earlier run's.
    write_shapes_shards(tmp_path / "more", shards=10, rows_per_shard=2)
    os.replace(tmp_path / "more" / "00009.tar", shards / "00009.tar")
    second = score_corpus(shards, out, **options)
    names = sorted(p.name for p in (out / "embeddings" / "img_emb").iterdir())
    assert names == [f"img_emb_{i:02d}.npy" for i in range(10)]
    assert len(second.summary["embedding_layout_removed"]) == 27  # 9 parts x (img, text, metadata)
    assert sum(pq.read_metadata(p).num_rows for p in (out / "embeddings" / "metadata").iterdir()) == 20
    # A shard whose every sample became an error row: its part goes, not its old vectors.
    write_tar(shards / "00004.tar", [("a.jpg", b"not a picture"), ("a.txt", b"a red circle")])
    third = score_corpus(shards, out, **options)
    assert sorted(third.summary["embedding_layout_removed"]) == [
        "img_emb/img_emb_04.npy",
        "metadata/metadata_04.parquet",
        "text_emb/text_emb_04.npy",
    ]
    assert third.summary["embedding_layout_parts"] == 9 and incomplete_parts(out / "embeddings") == []
    assert (out / "embeddings" / "index" / "knn.index").read_bytes() == b"an index built from the layout"
