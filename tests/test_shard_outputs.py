"""What a shard run writes and when a rerun trusts it (the local executor here; ``tests/test_executors_agree.py``
holds Ray to the same rows, records and kept keys, and ``tests/test_ray_engine.py`` to the same refusal of a shard
rewritten while it is read).

A rerun keeps a shard's output only when it is whole, written by capeval, and records the same input shard; a
changed shard is scored again and said so; an output folder of another source is refused. Columns given are
used as given; columns not given are chosen once per run. The keys kept are written with their shard, so they
cannot be confused, and repeated keys are reported. A folder capeval did not make is refused, nothing a run did
not write is deleted, and one run at a time holds a folder.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

import capeval
from capeval.cli import main
from capeval.corpus.lock import FolderInUseError, OutputLock
from capeval.corpus.run import score_corpus
from capeval.diagnostics.categories import DamagedFileWarning, DuplicateKeyWarning, InputChangedWarning
from capeval.shapes import shapes_clip_path
from capeval_dev.testing.shapes_shards import write_shapes_shards

MODEL = str(shapes_clip_path())


def _run(source, out, **kwargs):
    kwargs.setdefault("batch_size", 4)
    return score_corpus(source, out, ["clipscore"], model=MODEL, **kwargs)


def _rows(out, shard: str) -> list[dict]:
    return pq.read_table(out / "scores" / f"{shard}.parquet").to_pylist()


def _png(level: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((24, 24, 3), level, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _tar(path, samples: list[tuple[str, bytes, str]]) -> None:
    with tarfile.open(path, "w") as archive:
        for key, image, caption in samples:
            for name, data in ((f"{key}.png", image), (f"{key}.txt", caption.encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))


# --- Resuming: an output is kept only for the input it was computed from ---


def test_a_shard_rewritten_under_the_same_name_is_scored_again_and_said_so(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=3)
    _run(tmp_path / "in", tmp_path / "out")
    before = {r["key"]: r["caption"] for r in _rows(tmp_path / "out", "00000")}
    # Another download of shard 00000: other samples under the same file name.
    write_shapes_shards(tmp_path / "other", shards=1, rows_per_shard=4, seed=5)
    shutil.copy(tmp_path / "other" / "00000.tar", tmp_path / "in" / "00000.tar")
    with pytest.warns(
        InputChangedWarning,
        match=r"input shard 00000 \(.*00000.tar\) changed since .*00000.parquet was written \(.*content\)",
    ):
        result = _run(tmp_path / "in", tmp_path / "out")
    after = {r["key"]: r["caption"] for r in _rows(tmp_path / "out", "00000")}
    assert len(after) == 4 and after != before
    assert result.summary["shards_scored_now"] == 1  # shard 00001 was unchanged: kept
    assert result.summary["rows"] == 7


def test_a_download_cut_short_then_completed_is_scored_again(tmp_path):
    write_shapes_shards(tmp_path / "full", shards=1, rows_per_shard=4)
    whole = (tmp_path / "full" / "00000.tar").read_bytes()
    (tmp_path / "in").mkdir()
    with tarfile.open(tmp_path / "full" / "00000.tar") as archive:
        cut = archive.getmembers()[6].offset  # two samples of four written
    (tmp_path / "in" / "00000.tar").write_bytes(whole[:cut])
    first = _run(tmp_path / "in", tmp_path / "out")
    assert first.summary["rows"] == 2
    (tmp_path / "in" / "00000.tar").write_bytes(whole)
    with pytest.warns(InputChangedWarning, match="size"):
        second = _run(tmp_path / "in", tmp_path / "out")
    assert second.summary["rows"] == 4 and second.summary["errors"] == 0


def test_a_shard_rewritten_while_it_is_read_is_reported_not_written_and_scored_by_the_rerun(
    tmp_path, monkeypatch
):
    from capeval.corpus import local_executor

    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=3)
    write_shapes_shards(tmp_path / "other", shards=1, rows_per_shard=4, seed=5)
    rewritten = []

    def rewrite_once():  # a download finishing over the shard while the run reads it
        if not rewritten:
            shutil.copy(tmp_path / "other" / "00000.tar", tmp_path / "in" / "00000.tar")
            rewritten.append(True)

    score = local_executor.RowScorer.score
    monkeypatch.setattr(
        local_executor.RowScorer, "score", lambda self, b: (rewrite_once(), score(self, b))[1]
    )
    first = _run(tmp_path / "in", tmp_path / "out")
    why = first.summary["failed_shards"]["00000"]
    assert (
        why.startswith(f"shard {tmp_path / 'in' / '00000.tar'} changed while it was read (")
        and "content" in why
    )
    assert not (tmp_path / "out" / "scores" / "00000.parquet").exists()
    second = _run(tmp_path / "in", tmp_path / "out")
    assert second.summary["shards_scored_now"] == 1 and second.summary["rows"] == 7
    assert second.summary["failed_shards"] == {}


def test_an_unchanged_shard_is_not_scored_again_even_when_its_output_is_old(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=2)
    _run(tmp_path / "in", tmp_path / "out")
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputChangedWarning)
        again = _run(tmp_path / "in", tmp_path / "out")
    assert again.summary["shards_scored_now"] == 0 and again.summary["rows"] == 4


def test_an_output_folder_of_another_corpus_with_the_same_shard_names_is_refused(tmp_path):
    write_shapes_shards(tmp_path / "a", shards=2, rows_per_shard=2)
    write_shapes_shards(tmp_path / "b", shards=2, rows_per_shard=2, seed=3)
    _run(tmp_path / "a", tmp_path / "out")
    with pytest.raises(
        ValueError,
        match=r"other settings \(source: \{'kind': 'shards', 'folder': '.*/a'\} there, \{'kind': 'shards', 'folder': '.*/b'\} now",
    ):
        _run(tmp_path / "b", tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rows"] == 4  # corpus a's summary, not a mix


# --- Columns: used as given, or chosen once per run ---


def _parquet(path, **columns) -> None:
    pq.write_table(pa.table(columns), path)


def test_an_explicit_image_column_is_used_even_when_it_is_the_default_name(tmp_path):
    (tmp_path / "in").mkdir()
    dark, light = _png(10), _png(240)
    _parquet(
        tmp_path / "in" / "00000.parquet", key=["k"], image=[dark], jpg=[light], caption=["a dark square"]
    )
    _run(tmp_path / "in", tmp_path / "out", image_column="image")
    direct = capeval.CLIPScore(model=MODEL)(["a dark square"], images=[{"bytes": dark}])
    assert _rows(tmp_path / "out", "00000")[0]["clipscore"] == pytest.approx(direct["scores"][0], abs=1e-6)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["columns"] == {
        "caption": "caption",
        "image": "image",
        "references": None,
        "id": "key",
        "automatic": ["caption", "id"],
    }


def test_an_explicit_caption_column_a_shard_lacks_is_a_shard_error_naming_its_columns(tmp_path):
    (tmp_path / "in").mkdir()
    _parquet(tmp_path / "in" / "00000.parquet", key=["a"], jpg=[_png(10)], caption=["a dark square"])
    _parquet(tmp_path / "in" / "00001.parquet", key=["b"], jpg=[_png(20)], text=["a dark square"])
    result = _run(tmp_path / "in", tmp_path / "out", caption_column="caption")
    assert result.summary["failed_shards"]["00001"].endswith(
        "has no caption column 'caption'; its columns: ['key', 'jpg', 'text']"
    )


def test_a_column_chosen_automatically_holds_for_every_shard_and_is_recorded(tmp_path):
    (tmp_path / "in").mkdir()
    _parquet(tmp_path / "in" / "00000.parquet", key=["a"], jpg=[_png(10)], caption=["a dark square"])
    _parquet(tmp_path / "in" / "00001.parquet", key=["b"], jpg=[_png(20)], text=["a dark square"])
    result = _run(tmp_path / "in", tmp_path / "out")
    assert "has no caption column 'caption'" in result.summary["failed_shards"]["00001"]  # not read from text
    chosen = {"caption": "caption", "image": "jpg", "references": None, "id": "key",
              "automatic": ["caption", "image", "id"]}  # fmt: skip
    assert result.summary["columns"] == chosen
    assert json.loads((tmp_path / "out" / "run.json").read_text())["columns"] == chosen
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["columns"] == chosen


def test_the_cli_passes_explicit_columns_as_given(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    dark, light = _png(10), _png(240)
    _parquet(
        tmp_path / "in" / "00000.parquet", key=["k"], image=[dark], jpg=[light], caption=["a dark square"]
    )
    args = ["corpus", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--model", MODEL]
    assert main([*args, "--image-column", "image", "--caption-column", "caption"]) == 0
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["columns"] == {
        "caption": "caption",
        "image": "image",
        "references": None,
        "id": "key",
        "automatic": ["id"],
    }


# --- The keys kept, and keys that repeat ---


def test_kept_keys_name_their_shard_and_cannot_be_injected_and_repeats_are_reported(tmp_path):
    (tmp_path / "in").mkdir()
    _tar(tmp_path / "in" / "00000.tar", [("a", _png(30), "a dark square"), ("b\nc", _png(60), "a square")])
    _tar(tmp_path / "in" / "00001.tar", [("a", _png(90), "a grey square")])
    _parquet(tmp_path / "in" / "00002.parquet", key=pa.array(["d", "d", None], pa.string()),
             jpg=[_png(120), _png(150), _png(180)], caption=["a square"] * 3)  # fmt: skip
    # A folder of tars reads its tars only: the Parquet shard is given beside them as a list.
    source = sorted(str(p) for p in (tmp_path / "in").iterdir())
    with pytest.warns(DuplicateKeyWarning, match=r"2 sample key\(s\) appear more than once"):
        result = _run(source, tmp_path / "out", threshold=-1.0)
    kept = [json.loads(line) for line in (tmp_path / "out" / "kept.jsonl").read_text().splitlines()]
    assert kept == [
        {"shard": "00000", "key": "a", "index": 0},
        {"shard": "00000", "key": "b\nc", "index": 1},
        {"shard": "00001", "key": "a", "index": 0},
        {"shard": "00002", "key": "d", "index": 0},
        {"shard": "00002", "key": "d", "index": 1},
    ]  # the null key is an error row, not "None"
    assert result.summary["duplicate_keys"] == {
        "count": 2,
        "examples": [{"key": "a", "shards": ["00000", "00001"]}, {"key": "d", "shards": ["00002", "00002"]}],
    }
    null = _rows(tmp_path / "out", "00002")[2]
    assert null["key"] is None and null["error"] == "row 2 of column 'key' has no key (null)"


# --- The output folder: never someone else's, never deleted from, one run at a time ---


def test_an_existing_folder_that_is_not_a_capeval_output_is_refused_and_left_alone(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=1, rows_per_shard=2)
    folder = tmp_path / "photos"
    (folder / "scores").mkdir(parents=True)
    (folder / "scores" / "00000.parquet").write_bytes(b"my own file")
    (folder / "scores" / ".notes.tmp").write_text("notes")
    with pytest.raises(
        ValueError, match=r"photos is not a capeval output folder \(it holds scores and no run"
    ):
        _run(tmp_path / "in", folder)
    assert (folder / "scores" / "00000.parquet").read_bytes() == b"my own file"
    assert (folder / "scores" / ".notes.tmp").read_text() == "notes"


def test_foreign_files_in_a_run_folder_are_never_deleted_nor_read(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=2)
    _run(tmp_path / "in", tmp_path / "out")
    scores = tmp_path / "out" / "scores"
    pq.write_table(pa.table({"x": [1]}), scores / "foreign.parquet")
    (scores / ".notes.tmp").write_text("notes")
    result = _run(tmp_path / "in", tmp_path / "out")
    assert result.summary["rows"] == 4  # foreign.parquet is no shard of this run: not summarised
    assert (scores / "foreign.parquet").exists() and (scores / ".notes.tmp").read_text() == "notes"


def test_a_file_named_like_a_shard_output_that_capeval_did_not_write_is_refused_not_overwritten(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=2)
    _run(tmp_path / "in", tmp_path / "out")
    foreign = tmp_path / "out" / "scores" / "00000.parquet"
    pq.write_table(pa.table({"key": ["mine"]}), foreign)
    with pytest.raises(ValueError, match=r"00000.parquet was not written by capeval .*move it away"):
        _run(tmp_path / "in", tmp_path / "out")
    assert pq.read_table(foreign).column("key").to_pylist() == ["mine"]


def test_a_damaged_output_is_set_aside_not_deleted_and_the_shard_scored_again(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=2)
    _run(tmp_path / "in", tmp_path / "out")
    damaged = tmp_path / "out" / "scores" / "00001.parquet"
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) // 2])
    with pytest.warns(DamagedFileWarning, match=r"renamed to 00001.parquet.damaged"):
        result = _run(tmp_path / "in", tmp_path / "out")
    assert (tmp_path / "out" / "scores" / "00001.parquet.damaged").read_bytes() == data[: len(data) // 2]
    assert result.summary["shards_scored_now"] == 1 and result.summary["rows"] == 4


def test_a_second_shard_run_into_a_held_folder_is_refused(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=1, rows_per_shard=2)
    (tmp_path / "out").mkdir()
    with OutputLock(tmp_path / "out"), pytest.raises(FolderInUseError, match="another run holds the output"):
        _run(tmp_path / "in", tmp_path / "out")
    assert not (tmp_path / "out" / "scores").exists()
    assert os.listdir(tmp_path / "out") == ["run.lock"]
