"""Corpus scoring of what the real img2dataset writes (tests/img2dataset_runs.py: 31 URLs served on 127.0.0.1, some
broken or missing, one repeated), in WebDataset and Parquet modes: every sample downloaded is scored once with
img2dataset's uid, url and sizes carried into its row, every failed download is accounted for with
img2dataset's own status and message, an unfinished shard is reported, and the kept rows' uids are written as
DataComp's resharder reads them."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import capeval
from capeval.cli import main
from capeval.corpus.run import score_corpus
from capeval.shapes import shapes_clip_path
from tests.test_corpus import read_scores

MODEL = str(shapes_clip_path())


@pytest.fixture(scope="module")
def scored(img2dataset_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("i2d-scored")
    results = {}
    for mode in ("webdataset", "parquet"):
        results[mode] = score_corpus(getattr(img2dataset_run, mode), root / mode, ["clipscore"], model=MODEL,
                                     top_fraction=0.5, resharder_subset=True)  # fmt: skip
    return results


def _records(folder):
    """img2dataset's own per-sample records of a run (its Parquet files), by key."""
    rows = []
    for path in sorted(folder.glob("*.parquet")):
        rows += (
            pq.read_table(path)
            .drop_columns([c for c in pq.read_schema(path).names if c in ("jpg", "png", "webp")])
            .to_pylist()
        )
    return {r["key"]: r for r in rows}


def test_every_downloaded_sample_is_scored_once_with_img2datasets_uid_url_and_sizes(img2dataset_run, scored):
    records = _records(img2dataset_run.webdataset)
    rows = read_scores(scored["webdataset"].output_dir)
    downloaded = {k for k, r in records.items() if r["status"] == "success"}
    assert sorted(r["key"] for r in rows) == sorted(downloaded)
    for row in rows:
        want = records[row["key"]]
        got = {f: row[f] for f in ("uid", "url", "width", "height", "original_width", "original_height")}
        assert got == {f: want[f] for f in got}, row["key"]
        assert row["error"] is None
    # The scores are the plain API's on the bytes img2dataset wrote.
    first = rows[0]
    direct = capeval.CLIPScore(model=MODEL)(
        [first["caption"]], images=[_image_of(img2dataset_run, first["key"])]
    )
    assert first["clipscore"] == pytest.approx(direct["scores"][0], abs=1e-6)


def _image_of(run, key):
    import tarfile

    for tar in sorted(run.webdataset.glob("*.tar")):
        with tarfile.open(tar) as archive:
            names = [
                n for n in archive.getnames() if n.startswith(f"{key}.") and not n.endswith((".txt", ".json"))
            ]
            if names:
                return {"bytes": archive.extractfile(names[0]).read()}
    raise KeyError(key)


def test_failed_downloads_are_accounted_for_with_img2datasets_status_and_message(img2dataset_run, scored):
    records = _records(img2dataset_run.webdataset)
    failed = [r for r in records.values() if r["status"] != "success"]
    downloads = scored["webdataset"].summary["downloads"]
    assert downloads["failed"] == len(failed) == 6 and downloads["incomplete_shards"] == {}
    assert sum(n for by in downloads["failed_by_status"].values() for n in by.values()) == len(failed)
    assert any("404" in message for message in downloads["failed_by_status"]["failed_to_download"])
    # Parquet mode keeps a row per URL: the failed ones are error rows with img2dataset's own words.
    rows = read_scores(scored["parquet"].output_dir)
    not_downloaded = [r for r in rows if r["error"] and "not downloaded by img2dataset" in r["error"]]
    assert len(not_downloaded) == len(failed) and len(rows) == len(records)
    assert scored["parquet"].summary["error_kinds"] == {"not downloaded": len(failed)}
    assert all(r["uid"] is not None and r["url"] for r in not_downloaded)


def test_a_shard_img2dataset_did_not_finish_is_reported(img2dataset_run, tmp_path, capsys):
    shutil.copytree(img2dataset_run.webdataset, tmp_path / "in")
    (tmp_path / "in" / "00001_stats.json").unlink()  # as an interrupted download leaves it
    rc = main(
        ["corpus", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--model", MODEL, "--no-progress"]
    )
    err = capsys.readouterr().err
    assert rc == 0 and "shard 00001 may be incomplete: " in err and "00001_stats.json is missing" in err
    assert "img2dataset could not download 6 sample(s) (failed_to_download: " in err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert list(summary["downloads"]["incomplete_shards"]) == ["00001"]


def test_the_kept_uids_are_datacomps_resharder_subset(scored):
    result = scored["webdataset"]
    kept = [json.loads(line) for line in result.kept.read_text().splitlines()]
    subset = np.load(result.output_dir / "kept_uids.npy")
    assert subset.dtype == np.dtype("u8,u8") and len(subset) == len(kept) == result.summary["kept"]
    want = sorted((int(r["uid"][:16], 16), int(r["uid"][16:], 16)) for r in kept)
    assert [tuple(map(int, pair)) for pair in subset] == want  # sorted, as the resharder's search needs
    assert result.summary["resharder_subset"]["uids"] == len(kept)


def test_a_subset_without_a_cut_is_refused(img2dataset_run, tmp_path):
    with pytest.raises(
        ValueError, match="resharder_subset writes the kept rows' uids: give threshold or top_frac"
    ):
        score_corpus(img2dataset_run.webdataset, tmp_path / "out", model=MODEL, resharder_subset=True)


def test_the_embedding_layout_reads_back_with_embedding_reader_as_the_scored_rows(
    img2dataset_run, tmp_path, capsys
):
    from embedding_reader import EmbeddingReader

    out = tmp_path / "out"
    args = [
        "corpus",
        str(img2dataset_run.webdataset),
        "--output",
        str(out),
        "--model",
        MODEL,
        "--no-progress",
    ]
    assert main([*args, "--embedding-layout"]) == 0
    assert f"clip-retrieval embedding layout: {out / 'embeddings'}" in capsys.readouterr().out
    rows = read_scores(out)  # every row scored: the layout holds them all, shard by shard
    columns = ["image_path", "key", "uid", "url", "caption", "clipscore"]
    reader = EmbeddingReader(str(out / "embeddings" / "img_emb"), file_format="parquet_npy", meta_columns=columns,
                             metadata_folder=str(out / "embeddings" / "metadata"))  # fmt: skip
    assert reader.count == len(rows)
    batches = list(reader(batch_size=7, show_progress=False))
    embeddings = np.concatenate([b[0] for b in batches])
    metadata = [row for _, meta in batches for row in meta[columns].to_dict("records")]
    np.testing.assert_array_equal(embeddings, np.asarray([r["image_embedding"] for r in rows], np.float32))
    assert [(m["image_path"], m["uid"], m["url"]) for m in metadata] == [
        (r["key"], r["uid"], r["url"]) for r in rows
    ]
    assert [m["clipscore"] for m in metadata] == pytest.approx([r["clipscore"] for r in rows])
