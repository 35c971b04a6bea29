"""Sharded corpora on the local engine: img2dataset's WebDataset layout and Parquet, read safely, scored
per row equal to the metrics called directly, one Parquet per shard, resumable, DataComp's top-fraction cut."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import capeval
from capeval.cli import main
from capeval.corpus.reader import read_shard
from capeval.corpus.run import score_corpus
from capeval.corpus.shard_outputs import output_path
from capeval.corpus.shard_summary import top_fraction_threshold
from capeval.corpus.shards import ShardReadError, list_shards
from capeval.diagnostics.categories import DamagedFileWarning
from capeval.shapes import shapes_clip_path
from capeval_dev.testing.shapes_shards import write_shapes_shards
from tests.hostile_shards import write_tar

MODEL = str(shapes_clip_path())


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards") / "in"
    samples = write_shapes_shards(folder, shards=4, rows_per_shard=6, damaged=True)
    return folder, samples


@pytest.fixture(scope="module")
def scored(shards, tmp_path_factory):
    folder, samples = shards
    out = tmp_path_factory.mktemp("out") / "run"
    result = score_corpus(
        folder, out, ["clipscore", "refclipscore"], model=MODEL, batch_size=4, top_fraction=0.3
    )
    return out, result


def _rows(out):
    return [row for f in sorted((out / "scores").glob("*.parquet")) for row in pq.read_table(f).to_pylist()]


def test_img2dataset_layout_is_read_from_its_tars_not_its_side_files(shards):
    folder, samples = shards
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"0000{i}{ext}" for i in range(4) for ext in (".tar", ".parquet", "_stats.json")]
    )
    listed = list_shards(folder)
    assert [s.name for s in listed] == ["00000", "00001", "00002", "00003"]
    assert {s.kind for s in listed} == {"webdataset"}
    rows = read_shard(listed[0])
    assert [r.key for r in rows] == [f"00000{j:04d}" for j in range(6)]
    assert rows[0].caption == samples["000000000"]["caption"]
    assert rows[0].image == samples["000000000"]["image"]
    assert rows[0].references == samples["000000000"]["references"]  # from the sample's .json


def test_members_in_folders_group_by_webdataset_keys(tmp_path):
    jpeg = write_shapes_shards(tmp_path / "src", shards=1, rows_per_shard=1)["000000000"]["image"]
    write_tar(tmp_path / "00000.tar", [
        ("a/x.txt", b"first"), ("a/x.jpg", jpeg), ("b.jpg", jpeg), ("b.txt", b"second"), ("c.seg.jpg", jpeg),
    ])  # fmt: skip
    rows = read_shard(list_shards(tmp_path / "00000.tar")[0])
    # WebDataset's key: the path up to the first dot of the file name; the rest is the field (c's "seg.jpg").
    assert [(r.key, r.caption, r.error) for r in rows[:2]] == [("a/x", "first", None), ("b", "second", None)]
    assert rows[2].key == "c" and rows[2].error == "sample c has no image member (found: ['.seg.jpg'])"


def test_hostile_tars_are_refused_by_name_without_extracting_anything(tmp_path):
    jpeg = write_shapes_shards(tmp_path / "src", shards=1, rows_per_shard=1)["000000000"]["image"]
    write_tar(
        tmp_path / "00000.tar",
        [("../evil.jpg", jpeg), ("../evil.txt", b"x"), ("ok.jpg", jpeg), ("ok.txt", b"y")],
    )
    rows = read_shard(list_shards(tmp_path / "00000.tar")[0])
    assert rows[0].key == "../evil" and "leaves the shard" in rows[0].error
    assert rows[1].key == "ok" and rows[1].error is None
    assert not (tmp_path.parent / "evil.jpg").exists()
    (tmp_path / "00001.tar").write_bytes(b"this is not a tar file" * 40)
    with pytest.raises(ShardReadError, match=r"00001\.tar is not a readable tar file"):
        read_shard(list_shards(tmp_path / "00001.tar")[0])


def test_damaged_samples_keep_their_key_and_say_why(scored):
    out, _ = scored
    errors = {r["key"]: r["error"] for r in _rows(out) if r["error"] is not None}
    assert set(errors) == {"000010001", "000010002", "000030005"}
    assert errors["000010001"].startswith("image of 000010001 cannot be read")
    assert errors["000010002"] == "sample 000010002 has an empty caption (.txt)"
    assert "truncated" in errors["000030005"] or "tar ends inside a member" in errors["000030005"]


def test_per_row_scores_equal_the_metrics_called_directly(shards, scored):
    folder, samples = shards
    out, result = scored
    rows = [r for r in _rows(out) if r["error"] is None]
    assert len(rows) == 21 and result.summary["rows"] == 24 and result.summary["errors"] == 3
    images = [{"bytes": samples[r["key"]]["image"]} for r in rows]
    captions = [r["caption"] for r in rows]
    refs = [samples[r["key"]]["references"] for r in rows]
    direct = capeval.CLIPScore(model=MODEL, progress=False)(captions, images=images)
    ref_direct = capeval.RefCLIPScore(model=MODEL, progress=False)(captions, references=refs, images=images)
    np.testing.assert_allclose([r["clipscore"] for r in rows], direct["scores"], atol=1e-5)
    np.testing.assert_allclose([r["refclipscore"] for r in rows], ref_direct["scores"], atol=1e-5)
    np.testing.assert_allclose([r["clip_s"] for r in rows], ref_direct["clip_s_scores"], atol=1e-5)
    assert result.summary["mean"]["clipscore"] == pytest.approx(np.mean(direct["scores"]), abs=1e-5)


def test_top_fraction_is_datacomps_cut_and_kept_keys_match(scored):
    out, result = scored
    rows = [r for r in _rows(out) if r["error"] is None]
    scores = np.array([r["clipscore"] for r in rows])
    # DataComp: sort descending, threshold = value at int(21 * 0.3) = 6, keep everything >= it (7 rows).
    cut = np.sort(scores)[::-1][6]
    assert result.summary["threshold"] == pytest.approx(cut)
    kept = [json.loads(line) for line in (out / "kept.jsonl").read_text().splitlines()]
    assert sorted((k["shard"], k["key"], k["index"]) for k in kept) == sorted(
        (r["shard"], r["key"], r["index"]) for r in rows if r["clipscore"] >= cut
    )
    assert len(kept) == 7 == result.summary["kept"]
    assert top_fraction_threshold(np.array([3.0, 1.0, 2.0, 2.0]), 0.5) == 2.0  # ties at the cut are all kept
    with pytest.raises(ValueError, match=r"top_fraction must be in \(0, 1\], got 0"):
        top_fraction_threshold(scores, 0)


def test_a_rerun_skips_whole_shards_and_redoes_a_damaged_one(shards, scored):
    folder, _ = shards
    out, _ = scored
    mtimes = {p.name: p.stat().st_mtime_ns for p in (out / "scores").glob("*.parquet")}
    damaged = output_path(out, "00002")
    damaged.write_bytes(damaged.read_bytes()[:100])
    with pytest.warns(DamagedFileWarning, match="00002.parquet is damaged"):
        again = score_corpus(
            folder, out, ["clipscore", "refclipscore"], model=MODEL, batch_size=4, top_fraction=0.3
        )
    assert again.summary["shards_scored_now"] == 1
    after = {p.name: p.stat().st_mtime_ns for p in (out / "scores").glob("*.parquet")}
    assert {n for n in after if after[n] != mtimes[n]} == {"00002.parquet"}
    assert again.summary["rows"] == 24
    with pytest.raises(ValueError, match=r"holds a run with other settings \(metrics"):
        score_corpus(folder, out, ["clipscore"], model=MODEL)


def test_parquet_shards_with_bytes_or_paths(tmp_path):
    samples = write_shapes_shards(tmp_path / "pq", shards=2, rows_per_shard=3, kind="parquet")
    a = score_corpus(tmp_path / "pq", tmp_path / "a", ["clipscore"], model=MODEL)
    keys = list(samples)
    for k in keys:
        (tmp_path / f"{k}.jpg").write_bytes(samples[k]["image"])
    pq.write_table(
        pa.table(
            {
                "key": keys,
                "image_path": [f"{k}.jpg" for k in keys],
                "txt": [samples[k]["caption"] for k in keys],
            }
        ),
        tmp_path / "paths.parquet",
    )
    b = score_corpus(tmp_path / "paths.parquet", tmp_path / "b", ["clipscore"], model=MODEL)
    assert b.summary["scored"] == a.summary["scored"] == 6
    assert b.summary["mean"]["clipscore"] == pytest.approx(a.summary["mean"]["clipscore"], abs=1e-6)
    pq.write_table(pa.table({"key": ["x"], "picture": [b""], "caption": ["c"]}), tmp_path / "bad.parquet")
    with pytest.raises(
        ValueError, match=r"has no image column .*its columns: \['key', 'picture', 'caption'\]"
    ):
        score_corpus(tmp_path / "bad.parquet", tmp_path / "c", ["clipscore"], model=MODEL)


def test_an_unreadable_shard_is_reported_and_the_others_scored(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=3)
    (tmp_path / "in" / "00002.tar").write_bytes(b"garbage" * 100)
    result = score_corpus(tmp_path / "in", tmp_path / "out", ["clipscore"], model=MODEL)
    assert list(result.summary["failed_shards"]) == ["00002"]
    assert "not a readable tar file" in result.summary["failed_shards"]["00002"]
    assert result.summary["scored"] == 6
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["failed_shards"] == result.summary["failed_shards"]


def test_a_parquet_shard_without_the_columns_is_reported_when_the_first_has_them(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=3, kind="parquet")
    # The first shard's columns are checked before any work; a later shard lacking them fails alone.
    table = pq.read_table(tmp_path / "in" / "00001.parquet").rename_columns(
        ["key", "jpg", "alt", "references"]
    )
    pq.write_table(table, tmp_path / "in" / "00001.parquet")
    result = score_corpus(tmp_path / "in", tmp_path / "out", ["clipscore"], model=MODEL)
    assert list(result.summary["failed_shards"]) == ["00001"]
    assert "its columns: ['key', 'jpg', 'alt', 'references']" in result.summary["failed_shards"]["00001"]
    assert result.summary["scored"] == 3 and result.summary["shards"] == 1


def test_parquet_captions_and_references_that_are_not_text_are_row_errors(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=2, kind="parquet")
    numbers = pq.read_table(tmp_path / "in" / "00000.parquet")
    pq.write_table(numbers.set_column(2, "caption", pa.array([5, 6])), tmp_path / "in" / "00000.parquet")
    nulls = pq.read_table(tmp_path / "in" / "00001.parquet")
    refs = pa.array([["a red circle", None], ["a blue square"]], type=pa.list_(pa.string()))
    pq.write_table(nulls.set_column(3, "references", refs), tmp_path / "in" / "00001.parquet")
    result = score_corpus(tmp_path / "in", tmp_path / "out", ["refclipscore"], model=MODEL)
    errors = {r["key"]: r["error"] for r in _rows(tmp_path / "out")}
    assert errors["000000000"] == "row 000000000 has a caption of type int (5) in column 'caption'"
    assert (
        errors["000010000"]
        == "row 000010000 has references that are not all text: reference 1 is NoneType (None)"
    )
    assert errors["000010001"] is None  # the other row of that shard is scored
    assert result.summary["scored"] == 1 and result.summary["errors"] == 3


def test_invisible_captions_and_empty_references_are_row_errors_not_a_failed_batch(tmp_path):
    jpeg = write_shapes_shards(tmp_path / "src", shards=1, rows_per_shard=1)["000000000"]["image"]
    refs = [["a red circle"], ["", "a red circle"], ["a red circle"]]
    captions = ["\u200b\u200b", "a red circle", "a red circle"]  # U+200B: zero-width space, not whitespace
    members = []
    for key, caption, references in zip("abc", captions, refs, strict=True):
        members += [(f"{key}.jpg", jpeg), (f"{key}.txt", caption.encode()),
                    (f"{key}.json", json.dumps({"references": references}).encode())]  # fmt: skip
    (tmp_path / "in").mkdir()
    write_tar(tmp_path / "in" / "00000.tar", members)
    # The metrics' input checks refuse both for the whole call; the rows carry it instead, and c is scored.
    result = score_corpus(tmp_path / "in", tmp_path / "out", ["clipscore", "refclipscore"], model=MODEL)
    errors = {r["key"]: r["error"] for r in _rows(tmp_path / "out")}
    assert errors["a"] == "sample a has an empty caption (.txt) (only invisible characters)"
    assert errors["b"] == ("row b has an empty reference (0: ''); refclipscore needs text in every one")
    assert errors["c"] is None and result.summary["scored"] == 1


def test_corpus_level_and_unknown_metrics_are_refused_by_name(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=1, rows_per_shard=2)
    with pytest.raises(
        ValueError, match=r"metric 1 'emscore' cannot score shards: its per-row scores depend"
    ):
        score_corpus(tmp_path / "in", tmp_path / "o", ["clipscore", "emscore"], model=MODEL)
    with pytest.raises(ValueError, match=r"executor must be one of \('local', 'ray'\), got 'spark'"):
        score_corpus(tmp_path / "in", tmp_path / "o", ["clipscore"], model=MODEL, executor="spark")


def test_cli_scores_shards_with_several_metrics_and_a_top_fraction(tmp_path, capsys):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=4)
    rc = main([
        "corpus", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--model", MODEL,
        "--metrics", "clipscore", "refclipscore", "--top-fraction", "0.5", "--no-progress",
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "8 of 8 rows scored in 2 shard file(s): clipscore " in out and "refclipscore" in out
    assert "kept 5 row(s) with clipscore >=" in out  # DataComp keeps int(8 * 0.5) + 1 rows (no ties)
    table = pq.read_table(tmp_path / "out" / "scores" / "00001.parquet")
    assert table.column_names == [
        "key",
        "shard",
        "index",
        "caption",
        "uid",
        "url",
        "width",
        "height",
        "original_width",
        "original_height",
        "clipscore",
        "refclipscore",
        "clip_s",
        "raw_cosine",
        "error",
    ]
    # score_corpus takes shards too, and the same files come out
    result = capeval.score_corpus(tmp_path / "in", tmp_path / "out2", metrics=["clipscore"], model=MODEL)
    assert result.summary["scored"] == 8


def test_embeddings_are_saved_as_float16_when_asked(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=1, rows_per_shard=3)
    score_corpus(tmp_path / "in", tmp_path / "out", ["clipscore"], model=MODEL, save_embeddings=True)
    table = pq.read_table(output_path(tmp_path / "out", "00000"))
    assert table.schema.field("image_embedding").type == pa.list_(pa.float16())
    image = np.array(table.column("image_embedding").to_pylist(), dtype=np.float32)
    text = np.array(table.column("text_embedding").to_pylist(), dtype=np.float32)
    np.testing.assert_allclose(np.linalg.norm(image, axis=1), 1.0, atol=2e-3)
    # CLIP-S = 2.5 * max(cos, 0) from the saved (float16) embeddings, to float16's precision
    cos = (image * text).sum(1) / np.linalg.norm(image, axis=1) / np.linalg.norm(text, axis=1)
    np.testing.assert_allclose(2.5 * np.maximum(cos, 0), table.column("clipscore").to_numpy(), atol=5e-3)


def _given(**changes):
    given = dict(model=None, device=None, dtype="float32", prefix=None, w=None, checkpoint=None)
    return {**given, **changes}


def test_metric_options_fill_the_default_model_and_keep_only_the_options_given():
    from capeval.clip.backbones import DEFAULT_MODEL
    from capeval.corpus.run import _metric_options

    options = _metric_options(["refclipscore"], _given(w=2.0))
    assert options == {"model": DEFAULT_MODEL, "device": None, "dtype": "float32", "w": 2.0}
    options = _metric_options(["pacscore"], _given(checkpoint="pacs.pth", prefix="A"))
    assert options["model"] is None  # PAC-S has no default backbone to fill in
    assert (options["checkpoint"], options["prefix"]) == ("pacs.pth", "A")


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"executor": "spark"}, ValueError, "executor must be one of .*'spark'"),
        ({"metrics": ["clipscore", "emscore"]}, ValueError, "metric 1 'emscore' cannot score shards"),
        ({"batch_size": 0}, ValueError, "batch_size must be >= 1, got 0"),
        ({"chunk_size": "6"}, TypeError, "chunk_size must be an integer, got str '6'"),
        ({"num_workers": -1}, ValueError, "num_workers must be >= 0, got -1"),
        ({"metrics": ["pacscore"]}, ValueError, "pacscore needs its weights: give checkpoint="),
        ({"threshold": 0.3, "top_fraction": 0.5}, ValueError, "give threshold or top_fraction, not both"),
        ({"top_fraction": 1.5}, ValueError, r"top_fraction must be in \(0, 1\], got 1.5"),
        ({"threshold": float("nan")}, ValueError, "threshold must be a finite number, got nan"),
        ({"threshold": "0.3"}, TypeError, "threshold must be a number, got str '0.3'"),
        ({"ray": {"address": "auto"}}, ValueError, "applies to executor='ray', not 'local'"),
        (
            {"executor": "ray", "ray": {"adress": "auto"}},
            ValueError,
            r"unknown Ray setting\(s\) \['adress'\]",
        ),
        ({"model": object()}, TypeError, "a model object cannot be resumed"),
    ],
)
def test_bad_settings_are_refused_naming_them_before_anything_is_read_or_written(
    tmp_path, settings, error, message
):
    settings = {"metrics": ["clipscore"], "model": MODEL, **settings}
    with pytest.raises(error, match=message):
        score_corpus(tmp_path / "no-such-source", tmp_path / "out", **settings)
    assert not (tmp_path / "out").exists()


def test_the_driver_loads_the_models_on_its_cpu_for_ray_and_where_asked_for_locally():
    from capeval.corpus.run import _driver_options

    options = {"model": MODEL, "device": "cuda:7", "dtype": "float32"}
    assert _driver_options(options, "ray") == {"model": MODEL, "device": "cpu", "dtype": "float32"}
    assert _driver_options(options, "local") == options and options["device"] == "cuda:7"


def test_threshold_column_is_the_first_metrics_unless_named_and_must_be_written():
    from types import SimpleNamespace

    from capeval.corpus.run import _threshold_column

    scorer = SimpleNamespace(metrics=["refclipscore"], columns=lambda: ["refclipscore", "clip_s"])
    assert _threshold_column(scorer, None) == "refclipscore"
    assert _threshold_column(scorer, "clip_s") == "clip_s"
    with pytest.raises(ValueError, match=r"threshold_key 'pacscore' is not a score column .*'clip_s'"):
        _threshold_column(scorer, "pacscore")


def test_run_manifest_records_what_a_resumed_run_must_share(tmp_path):
    from types import SimpleNamespace

    from capeval.corpus.reader import open_corpus
    from capeval.corpus.run_plan import RunPlan
    from capeval.corpus.shard_outputs import FORMAT

    write_shapes_shards(tmp_path / "in", shards=1, rows_per_shard=2)
    plan = RunPlan(
        corpus=open_corpus(tmp_path / "in", 8), executor="local", columns={"caption": "txt", "image": "jpg"},
        chunk_size=8, batch_size=4, embeddings=True, key_metric="clipscore", cut={}, num_workers=None,
        progress=False, ray={}, exports={},
    )  # fmt: skip
    scorer = SimpleNamespace(
        metrics=["clipscore"],
        signatures={"clipscore": "clipscore|model=m"},
        columns=lambda: ["clipscore", "clip_s"],
    )
    assert plan.manifest(scorer) == {
        "format": FORMAT,
        "metrics": ["clipscore"],
        "signatures": {"clipscore": "clipscore|model=m"},
        "source": {"kind": "shards", "folder": str((tmp_path / "in").resolve())},
        "columns": {"caption": "txt", "image": "jpg"},
        "chunk_size": 8,
        "embeddings": True,
        "columns_scored": ["clipscore", "clip_s"],
    }


def test_claimed_output_is_created_locked_and_recorded_and_refuses_other_settings(tmp_path):
    from capeval.corpus.lock import FolderInUseError, OutputLock
    from capeval.corpus.run_folder import claimed_output
    from capeval.corpus.shard_outputs import remove_stale_temporaries

    out = tmp_path / "new" / "run"
    with claimed_output(out, {"metrics": ["clipscore"]}, remove_stale_temporaries) as held:
        assert held == out and json.loads((out / "run.json").read_text()) == {"metrics": ["clipscore"]}
        with pytest.raises(FolderInUseError):
            OutputLock(out).acquire()
    (out / "scores").mkdir()
    stale = out / "scores" / ".00000.parquet.123.capeval-tmp"
    stale.write_bytes(b"half")
    with claimed_output(out, {"metrics": ["clipscore"]}, remove_stale_temporaries):
        assert not stale.exists()  # a killed run's temporary, removed once the folder is held
    with pytest.raises(ValueError, match="holds a run with other settings"):
        with claimed_output(out, {"metrics": ["refclipscore"]}, remove_stale_temporaries):
            pass


def test_claimed_output_refuses_a_folder_capeval_did_not_make(tmp_path):
    from capeval.corpus.run_folder import claimed_output
    from capeval.corpus.shard_outputs import remove_stale_temporaries

    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"is not a capeval output folder \(it holds cat.jpg"):
        with claimed_output(tmp_path / "photos", {"metrics": ["clipscore"]}, remove_stale_temporaries):
            pass
    assert (tmp_path / "photos" / "cat.jpg").read_bytes() == b"x"


def test_the_cli_reads_brace_patterns_and_pipe_commands_as_the_folder(tmp_path, capsys, pinned_threads):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=3)
    args = ["--model", MODEL, "--no-progress"]
    assert main(["corpus", str(tmp_path / "in"), "--output", str(tmp_path / "folder"), *args]) == 0
    pattern = str(tmp_path / "in" / "{00000..00001}.tar")
    assert main(["corpus", pattern, "--output", str(tmp_path / "braces"), *args]) == 0
    assert main(["corpus", f"pipe:cat {pattern}", "--output", str(tmp_path / "pipe"), *args]) == 0
    want = _rows(tmp_path / "folder")
    assert _rows(tmp_path / "braces") == want and _rows(tmp_path / "pipe") == want
    assert json.loads((tmp_path / "pipe" / "run.json").read_text())["source"]["kind"] == "shards"
    missing = str(tmp_path / "in" / "{00000..00002}.tar")
    capsys.readouterr()
    assert main(["corpus", missing, "--output", str(tmp_path / "none"), *args]) == 2
    assert "00002.tar" in capsys.readouterr().err
