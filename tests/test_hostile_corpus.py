"""Hostile input against corpus mode (``capeval.score_corpus`` and ``capeval score --corpus``): damaged files on
disk, concurrent runs, empty sources and bad settings are refused or repaired by name, never a wrong number."""

from __future__ import annotations

# --- Item 10: corpus mode's damaged outputs, locking, empty sources, cache blobs ---
import json
import math
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import capeval
from capeval.cli import main
from capeval.corpus.embedding_cache import CacheFileError, EmbeddingCache, hash_text
from capeval.corpus.lock import FolderInUseError
from capeval.corpus.outputs import DamagedPartError, merge_parts
from capeval.corpus.run import score_corpus
from capeval.corpus.sources import EmptySourceError
from tests.test_corpus import make_corpus, read_jsonl

ITEM10_CHUNK = 6  # 23 rows: parts of 6, 6, 6 and 5 rows


@pytest.fixture(scope="module")
def item10_reference(tmp_path_factory, tiny_clip_dir):
    """A finished run of 23 rows (two of them error rows): the corpus, its output folder and its options."""
    root = tmp_path_factory.mktemp("item10")
    corpus = make_corpus(root, 23)
    options = dict(model=str(tiny_clip_dir), chunk_size=ITEM10_CHUNK, batch_size=4)
    result = score_corpus(corpus, root / "reference", **options)
    return corpus, root / "reference", options, result.summary


def _item10_copy(reference: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    return out


def _item10_edit_part(out: Path, part: int, edit) -> Path:
    """Rewrite one part file's lines (a list of str) with ``edit``; returns its path."""
    path = out / "parts" / f"part-{part:08d}.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("".join(line + "\n" for line in edit(lines)))
    return path


def _item10_edit_entry(line: str, change) -> str:
    entry = json.loads(line)
    change(entry)
    return json.dumps(entry)


def _item10_replace(lines, k, text):
    return lines[:k] + [text] + lines[k + 1 :]


def _item10_header(lines, **changes):
    header = {**json.loads(lines[0]), **changes}
    return [json.dumps(header)] + lines[1:]


ITEM10_DAMAGES = {
    "a garbage line": (lambda ls: _item10_replace(ls, 2, "}{garbage"), "line 3 is not valid JSON"),
    "an empty file": (lambda ls: [], "is empty"),
    "a missing row": (lambda ls: ls[:3] + ls[4:], "line 4: index 9 where row 8 was expected"),
    "a truncated tail": (lambda ls: ls[:-1], "holds 5 rows where its header says 6"),
    "a row twice": (lambda ls: ls + ls[-1:], "line 8: more rows than the header's 6"),
    "a NaN score": (
        lambda ls: _item10_replace(
            ls, 1, _item10_edit_entry(ls[1], lambda e: e["scores"].update(clipscore=float("nan")))
        ),
        "score 'clipscore' is nan, not a finite number",
    ),
    "a score as a string": (
        lambda ls: _item10_replace(
            ls, 1, _item10_edit_entry(ls[1], lambda e: e["scores"].update(clipscore="1"))
        ),
        "score 'clipscore' is '1', not a finite number",
    ),
    "scores without the metric": (
        lambda ls: _item10_replace(ls, 1, _item10_edit_entry(ls[1], lambda e: e.update(scores={"x": 1.0}))),
        "do not hold 'clipscore'",
    ),
    "a header that ends the corpus early": (
        lambda ls: _item10_header(ls[:-1], rows=5, last=True),
        "the header \\(line 1\\) says 5 rows where the source has 6",
    ),
    "a header of another part": (lambda ls: _item10_header(ls, part=2, start=12), "has part 2 where 1"),
    "bytes that are not UTF-8": (lambda ls: _item10_replace(ls, 3, "\udcff"), "line 4 is not valid JSON"),
    "a row that is a list": (
        lambda ls: _item10_replace(ls, 1, "[1, 2]"),
        "line 2: a JSON list, not an object",
    ),
}


@pytest.mark.parametrize("damage", list(ITEM10_DAMAGES))
def test_a_damaged_part_is_scored_again_with_a_warning_naming_the_file(item10_reference, tmp_path, damage):
    corpus, reference, options, summary = item10_reference
    out = _item10_copy(reference, tmp_path)
    edit, problem = ITEM10_DAMAGES[damage]
    path = out / "parts" / "part-00000001.jsonl"
    lines = path.read_text().splitlines()
    path.write_bytes("".join(line + "\n" for line in edit(lines)).encode("utf-8", "surrogateescape"))
    with pytest.warns(
        UserWarning, match=f"{re.escape(str(path))} is damaged \\(.*{problem}.*\\): scoring part 1"
    ):
        result = score_corpus(corpus, out, **options)
    run = result.summary["this_run"]
    assert (run["parts_rescored"], run["parts"], run["parts_skipped"]) == (1, 1, 3)
    assert result.scores.read_bytes() == (reference / "scores.jsonl").read_bytes()
    assert result.summary["corpus_score"] == summary["corpus_score"]
    assert path.read_bytes() == (reference / "parts" / path.name).read_bytes()  # repaired on disk


def test_a_damaged_part_of_a_datasets_source_is_scored_again_once(item10_reference, tmp_path):
    import datasets

    corpus, _, options, _ = item10_reference
    rows = read_jsonl(corpus)
    data = {"id": [r["id"] for r in rows], "caption": [r["caption"] for r in rows]}
    data["image"] = [str(corpus.parent / r["image"]) for r in rows]
    dataset = datasets.Dataset.from_dict(data)
    first = score_corpus(dataset, tmp_path / "out", **options)
    path = _item10_edit_part(tmp_path / "out", 3, lambda ls: ls[:1])
    with pytest.warns(UserWarning, match="holds 0 rows where its header says 5") as caught:
        again = score_corpus(dataset, tmp_path / "out", **options)
    assert [str(w.message).count(str(path)) for w in caught] == [1]
    assert again.summary["this_run"]["parts_rescored"] == 1
    assert again.scores.read_bytes() == first.scores.read_bytes()


def test_the_merge_refuses_a_damaged_part_naming_the_file_and_line(item10_reference, tmp_path):
    _, reference, _, _ = item10_reference
    out = _item10_copy(reference, tmp_path)
    path = _item10_edit_part(out, 2, lambda ls: _item10_replace(ls, 4, "{not json"))
    with pytest.raises(DamagedPartError, match=f"{re.escape(str(path))}: line 5 is not valid JSON"):
        merge_parts(out, "clipscore", None, "clipscore", ITEM10_CHUNK)
    (out / "parts" / "part-00000003.jsonl").unlink()
    path.write_bytes((reference / "parts" / path.name).read_bytes())
    with pytest.raises(ValueError, match="part-00000003.jsonl: is missing: run again to finish the corpus"):
        merge_parts(out, "clipscore", None, "clipscore", ITEM10_CHUNK)


def test_a_damaged_manifest_is_refused_naming_run_json(item10_reference, tmp_path):
    corpus, reference, options, _ = item10_reference
    out = _item10_copy(reference, tmp_path)
    for garbage in (b"{garbage", b"[1, 2]", b"\xff\xfe"):
        (out / "run.json").write_bytes(garbage)
        with pytest.raises(
            ValueError, match=f"{re.escape(str(out / 'run.json'))} is damaged .* choose another"
        ):
            score_corpus(corpus, out, **options)
    assert (out / "run.json").read_bytes() == b"\xff\xfe"  # left for the user to look at


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"garbage" * 500, "file is not a database"),
        ("half", "database disk image is malformed"),
    ],
    ids=["not SQLite", "truncated SQLite"],
)
def test_an_unusable_cache_file_is_refused_naming_it_and_left_as_it_was(
    item10_reference, tmp_path, content, problem
):
    corpus, reference, options, _ = item10_reference
    cache = tmp_path / "embeddings.sqlite"
    whole = (reference / "embeddings.sqlite").read_bytes()
    cache.write_bytes(whole[: len(whole) // 2] if content == "half" else content)
    before = cache.read_bytes()
    with pytest.raises(
        CacheFileError, match=f"{re.escape(str(cache))} is not a usable embedding cache \\({problem}\\)"
    ):
        score_corpus(corpus, tmp_path / "out", cache=cache, **options)
    assert cache.read_bytes() == before


def test_another_programs_sqlite_database_is_refused_and_not_written(item10_reference, tmp_path):
    corpus, _, options, _ = item10_reference
    cache = tmp_path / "app.db"
    db = sqlite3.connect(cache)
    db.execute("CREATE TABLE users (name TEXT)")
    db.execute("CREATE TABLE embeddings (key BLOB, vec BLOB, error TEXT)")
    db.execute("CREATE TRIGGER spy AFTER INSERT ON embeddings BEGIN INSERT INTO users VALUES ('x'); END")
    db.commit()
    db.close()
    before = cache.read_bytes()
    with pytest.raises(CacheFileError, match="not a capeval embedding cache .*table 'users', trigger 'spy'"):
        score_corpus(corpus, tmp_path / "out", cache=cache, **options)
    assert cache.read_bytes() == before and not Path(f"{cache}-wal").exists()
    # A table of the right name with other columns is not this cache either.
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE embeddings (key BLOB, payload BLOB)")
    db.commit()
    db.close()
    with pytest.raises(CacheFileError, match=r"table 'embeddings' with columns \['key', 'payload'\]"):
        EmbeddingCache(other)


def _item10_damage_cache(path: Path, change) -> list[bytes]:
    """Apply ``change(vec) -> new value`` to the first two embeddings stored; returns their keys."""
    db = sqlite3.connect(path)
    rows = db.execute("SELECT key, vec FROM embeddings WHERE vec IS NOT NULL ORDER BY key LIMIT 2").fetchall()
    for key, vec in rows:
        db.execute("UPDATE embeddings SET vec = ?, error = NULL WHERE key = ?", (change(vec), key))
    db.commit()
    db.close()
    return [key for key, _ in rows]


def _item10_scale(vec: bytes, factor: float) -> bytes:
    return (np.frombuffer(vec, dtype=np.float32) * np.float32(factor)).tobytes()


def _item10_with_nan(vec: bytes) -> bytes:
    arr = np.frombuffer(vec, dtype=np.float32).copy()
    arr[3] = np.nan
    return arr.tobytes()


ITEM10_BLOBS = {
    "truncated": (lambda v: v[:16], "a blob of 16 bytes where 64 \\(dimension 16\\) were expected"),
    "one byte short": (lambda v: v[:-1], "a blob of 63 bytes"),
    "NaN": (_item10_with_nan, "NaN or infinity in the embedding"),
    "infinite": (lambda v: _item10_scale(v, math.inf), "NaN or infinity in the embedding"),
    "rescaled": (lambda v: _item10_scale(v, 3.0), "norm 3 where stored embeddings have norm 1"),
    "text": (lambda v: "0.5", "a str where an embedding blob was expected"),
}


@pytest.mark.parametrize("damage", list(ITEM10_BLOBS))
def test_a_damaged_cache_blob_is_dropped_and_encoded_again_never_scored(item10_reference, tmp_path, damage):
    corpus, reference, options, summary = item10_reference
    cache = tmp_path / "cache.sqlite"
    shutil.copy(reference / "embeddings.sqlite", cache)
    change, problem = ITEM10_BLOBS[damage]
    keys = _item10_damage_cache(cache, change)
    # One warning per cache lookup that met damage: the two entries may share a lookup or not, depending on how
    # the run's items fell into lookups; every key is named either way, and both are counted.
    with pytest.warns(
        UserWarning,
        match=f"{re.escape(str(cache))}: [12] damaged cache entr(y|ies) deleted and encoded again \\(key ",
    ) as caught:
        result = score_corpus(corpus, tmp_path / "out", cache=cache, **options)
    said = " ".join(str(w.message) for w in caught)
    assert all(key.hex() in said for key in keys) and problem.replace("\\", "") in said
    assert result.summary["this_run"]["cache_entries_dropped"] == 2
    got, want = read_jsonl(result.scores), read_jsonl(reference / "scores.jsonl")
    # Re-encoded in other batches than the first run: equal up to float rounding.
    assert [r.get("clipscore") for r in got] == pytest.approx([r.get("clipscore") for r in want], abs=1e-6)
    assert result.summary["corpus_score"] == pytest.approx(summary["corpus_score"], abs=1e-6)
    with EmbeddingCache(cache) as store:  # the damaged entries were replaced by good ones
        rows = store._db.execute("SELECT key, vec FROM embeddings").fetchall()
    repaired = {k: v for k, v in rows if k in keys}
    assert len(repaired) == 2 and all(len(v) == 64 for v in repaired.values())


def test_a_remembered_error_under_a_caption_key_is_damage_not_a_crash(item10_reference, tmp_path):
    corpus, reference, options, summary = item10_reference
    cache = tmp_path / "cache.sqlite"
    shutil.copy(reference / "embeddings.sqlite", cache)
    db = sqlite3.connect(cache)
    (ns,) = db.execute("SELECT ns FROM namespaces WHERE description LIKE 'text|%'").fetchone()
    captions = [
        r["caption"] for i, r in enumerate(read_jsonl(corpus)) if i in (0, 1, 2, 4)
    ]  # rows 3, 7: errors
    keys = [EmbeddingCache.key(ns, hash_text(c)) for c in captions]
    db.executemany("UPDATE embeddings SET vec = NULL, error = 'forged' WHERE key = ?", [(k,) for k in keys])
    assert db.total_changes == 4
    db.commit()
    db.close()
    with pytest.warns(UserWarning, match="an error entry where an embedding was expected"):
        result = score_corpus(corpus, tmp_path / "out", cache=cache, **options)
    assert result.summary["corpus_score"] == pytest.approx(summary["corpus_score"], abs=1e-6)


def test_the_cache_reads_nothing_damaged_through_its_own_api(tmp_path):
    import torch

    with EmbeddingCache(tmp_path / "c.sqlite") as cache:
        ns = cache.namespace("image|test")
        cache.put_many(ns, [b"a" * 16, b"b" * 16], torch.eye(2))
        cache.put_many(ns, [b"n" * 16, b"z" * 16], torch.tensor([[math.nan, 1.0], [0.0, 0.0]]))
        cache._db.execute(
            "UPDATE embeddings SET vec = ? WHERE key = ?", (b"\x00" * 7, cache.key(ns, b"b" * 16))
        )
        with pytest.warns(
            UserWarning, match=f"{re.escape(str(tmp_path / 'c.sqlite'))}: 1 damaged cache entry .*7 bytes"
        ):
            found = cache.get_many(ns, [b"a" * 16, b"b" * 16, b"n" * 16, b"z" * 16], dim=2)
        assert list(found) == [b"a" * 16] and cache.dropped == 1
        assert cache.count() == 1  # the damaged entry is gone; NaN and zero vectors were never stored


def test_a_model_that_overflows_gives_error_rows_not_a_nan_corpus_score(
    item10_reference, tmp_path, monkeypatch
):
    import torch

    import capeval.clip.text_encoding as text_encoding

    corpus, _, options, _ = item10_reference
    real = text_encoding.encode_texts

    def overflowing(backbone, texts, **kwargs):
        emb = real(backbone, texts, **kwargs)
        return torch.where(torch.arange(len(texts))[:, None] % 2 == 0, torch.full_like(emb, math.nan), emb)

    monkeypatch.setattr(text_encoding, "encode_texts", overflowing)
    result = score_corpus(corpus, tmp_path / "out", **options)
    rows = read_jsonl(result.scores)
    bad = [r for r in rows if "non-finite score" in r.get("error", "")]
    assert bad and all("clipscore" not in r for r in bad)
    assert math.isfinite(result.summary["corpus_score"])
    assert result.summary["scored"] + result.summary["errors"] == 23
    with EmbeddingCache(tmp_path / "out" / "embeddings.sqlite") as store:
        vecs = [v for (v,) in store._db.execute("SELECT vec FROM embeddings WHERE vec IS NOT NULL")]
    assert all(np.isfinite(np.frombuffer(v, dtype=np.float32)).all() for v in vecs)


# Empty sources --------------------------------------------------------------------------------------


def _item10_folder(root: Path, names: list[str]) -> Path:
    root.mkdir(parents=True)
    for name in names:
        (root / name).write_bytes(b"x")
    return root


@pytest.mark.parametrize(
    "names, message",
    [
        ([], r"holds no file"),
        (["b.csv", "notes"], r"found 2 files \(1 \(no extension\), 1 \*\.csv\).*CSV"),
        (["rows.json"], r"a \.json file is read when given itself"),
    ],
    ids=["empty folder", "csv", "json"],
)
def test_a_folder_without_rows_is_refused_saying_what_it_holds(item10_reference, tmp_path, names, message):
    corpus, _, options, _ = item10_reference
    folder = _item10_folder(tmp_path / "source", names)
    out = tmp_path / "out"
    with pytest.raises(EmptySourceError, match=f"no rows to score.*{re.escape(str(folder))}.*{message}"):
        score_corpus(folder, out, **options)
    assert not (out / "run.json").exists()  # the same folder then takes the corrected source
    assert score_corpus(corpus, out, **options).summary["rows"] == 23


def test_empty_jsonl_files_and_datasets_are_refused_by_name(item10_reference, tmp_path):
    import datasets

    _, _, options, _ = item10_reference
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    with pytest.raises(
        EmptySourceError, match=r"blank\.jsonl \(4 bytes\) is empty or holds only blank lines"
    ):
        score_corpus(tmp_path / "blank.jsonl", tmp_path / "a", **options)
    folder = tmp_path / "jsonl"
    folder.mkdir()
    for name in ("a.jsonl", "b.ndjson"):
        (folder / name).write_text("")
    with pytest.raises(EmptySourceError, match=r"a\.jsonl \(0 bytes\), .*b\.ndjson \(0 bytes\) are empty"):
        score_corpus(folder, tmp_path / "b", **options)
    empty = datasets.Dataset.from_dict({"image": [], "caption": []})
    streamed = datasets.IterableDataset.from_generator(lambda: iter(()), features=empty.features)
    for source in (empty, streamed):
        with pytest.raises(EmptySourceError, match=r"no rows to score: the dataset .* is empty"):
            score_corpus(source, tmp_path / "c", **options)


def test_cli_corpus_on_unreadable_shards_exits_with_one_line_naming_each(item10_reference, tmp_path, capsys):
    _, _, options, _ = item10_reference
    folder = _item10_folder(tmp_path / "shards", ["000.tar", "001.tar"])
    rc = main(
        ["score", "--corpus", str(folder), "--output", str(tmp_path / "out"), "--model", options["model"]]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert f"capeval: error: none of the 2 shard(s) in {folder} could be read (000: shard " in err
    assert "001: shard" in err and "is not a readable tar file" in err


# Settings -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting, error, message",
    [
        ({"chunk_size": 0}, ValueError, "chunk_size must be >= 1, got 0"),
        ({"chunk_size": "6"}, TypeError, "chunk_size must be an integer, got str '6'"),
        ({"chunk_size": True}, TypeError, "chunk_size must be an integer, got bool True"),
        ({"num_workers": 0}, ValueError, "num_workers must be >= 1, got 0"),
        ({"threshold": math.nan}, ValueError, "threshold must be a finite number, got nan"),
        ({"threshold": -math.inf}, ValueError, "threshold must be a finite number, got -inf"),
        ({"threshold": "0.3"}, TypeError, "threshold must be a number, got str '0.3'"),
    ],
)
def test_bad_run_settings_are_refused_before_anything_is_written(
    item10_reference, tmp_path, setting, error, message
):
    corpus, _, options, _ = item10_reference
    with pytest.raises(error, match=message):
        score_corpus(corpus, tmp_path / "out", **{**options, **setting})
    assert not (tmp_path / "out").exists()


def test_cli_threshold_nan_is_refused(item10_reference, tmp_path, capsys):
    corpus, _, options, _ = item10_reference
    args = ["score", "--corpus", str(corpus), "--output", str(tmp_path / "out"), "--model", options["model"]]
    # Refused by the argument parser (capeval.validation's rule), before the run starts.
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--threshold", "nan"])
    assert exit_info.value.code == 2
    assert "argument --threshold: threshold must be a finite number, got nan" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_references_that_some_rows_lack_are_scored_per_row_with_counted_means(item10_reference, tmp_path):
    corpus, _, options, _ = item10_reference
    rows = read_jsonl(corpus)
    for i in (0, 1, 2, 10):
        del rows[i]["references"]
    mixed = corpus.parent / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = {k: v for k, v in options.items() if k != "model"}
    result = score_corpus(
        mixed,
        tmp_path / "pacs",
        "pacscore",
        checkpoint=options["model"],
        references_column="references",
        **base,
    )
    got = read_jsonl(result.scores)
    assert "refpacscore" not in got[0] and "refpacscore" in got[4]
    assert result.summary["score_counts"] == {"pacscore": 21, "refpacscore": 17}
    plain = capeval.PACScore(checkpoint=options["model"])(
        [rows[i]["caption"] for i in (4, 5)],
        references=[rows[i]["references"] for i in (4, 5)],
        images=[str(corpus.parent / rows[i]["image"]) for i in (4, 5)],
    )
    assert [got[4]["refpacscore"], got[5]["refpacscore"]] == pytest.approx(
        plain["refpacscore_scores"], abs=1e-6
    )
    # CLIPScore ignores a references column instead of failing on it.
    clip = score_corpus(mixed, tmp_path / "clip", references_column="references", **options)
    assert clip.summary["scored"] == 21


# Two runs on one output folder ------------------------------------------------------------------------

ITEM10_HOLDER = """
import os, sys, time
from pathlib import Path
from capeval.corpus.run import score_corpus
from capeval.corpus.sources import JsonlSource

corpus, out, model, started, release = sys.argv[1:6]


class HeldSource(JsonlSource):
    # Holds the run (and so its lock) until the test lets it go.
    def parts(self, chunk_size, wanted):
        Path(started).write_text(str(os.getpid()))
        deadline = time.time() + 300
        while not Path(release).exists():
            if time.time() > deadline:
                raise SystemExit("never released")
            time.sleep(0.02)
        yield from super().parts(chunk_size, wanted)


result = score_corpus(HeldSource([Path(corpus)]), out, model=model, chunk_size=6, batch_size=4)
print("rows", result.summary["rows"])
"""


class _Item10Holder:
    """Another process running ``score_corpus`` on ``out``, paused once it holds the folder."""

    def __init__(self, tmp_path: Path, corpus: Path, out: Path, model: str) -> None:
        script = tmp_path / "holder.py"
        script.write_text(ITEM10_HOLDER)
        self.started, self.release = tmp_path / "started", tmp_path / "release"
        src = str(Path(capeval.__file__).resolve().parents[1])
        env = dict(
            os.environ,
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
        )
        self.log = open(tmp_path / "holder.log", "w")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(corpus), str(out), model, str(self.started), str(self.release)],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        deadline = time.time() + 300
        while not self.started.exists():
            assert self.proc.poll() is None, (tmp_path / "holder.log").read_text()[-3000:]
            assert time.time() < deadline, "the holding run never started"
            time.sleep(0.05)

    def finish(self) -> tuple[int, str]:
        self.release.touch()
        return self.wait()

    def kill(self) -> int:
        self.proc.send_signal(signal.SIGKILL)
        return self.wait()[0]

    def wait(self) -> tuple[int, str]:
        code = self.proc.wait(timeout=300)
        self.log.close()
        return code, Path(self.log.name).read_text()


@pytest.fixture
def item10_holder(item10_reference, tmp_path, tiny_clip_dir):
    corpus = item10_reference[0]
    holder = _Item10Holder(tmp_path, corpus, tmp_path / "out", str(tiny_clip_dir))
    yield holder
    if holder.proc.poll() is None:
        holder.kill()


def test_a_second_run_on_a_held_folder_is_refused_in_python_and_on_the_command_line(
    item10_reference, item10_holder, tmp_path, capsys
):
    corpus, reference, options, _ = item10_reference
    out = tmp_path / "out"
    pid = item10_holder.started.read_text()
    with pytest.raises(
        FolderInUseError, match=f"another run holds the output folder {re.escape(str(out))} \\(process {pid} "
    ):
        score_corpus(corpus, out, **options)
    args = ["score", "--corpus", str(corpus), "--output", str(out), "--model", options["model"]]
    assert main([*args, "--chunk-size", "6", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"capeval: error: another run holds the output folder {out} (process {pid} " in err
    code, log = item10_holder.finish()  # the refused runs touched nothing of the first
    assert code == 0 and "rows 23" in log, log[-3000:]
    got, want = read_jsonl(out / "scores.jsonl"), read_jsonl(reference / "scores.jsonl")
    # Another process, other thread count: equal up to float rounding.
    assert [r.get("clipscore") for r in got] == pytest.approx([r.get("clipscore") for r in want], abs=1e-6)
    again = score_corpus(corpus, out, **options)  # released: the folder is free again
    assert again.summary["this_run"]["parts_skipped"] == 4


def test_a_killed_run_leaves_no_lock_behind(item10_reference, item10_holder, tmp_path):
    corpus, reference, options, _ = item10_reference
    out = tmp_path / "out"
    assert item10_holder.kill() == -signal.SIGKILL
    assert (out / "run.lock").exists()  # the file stays; the OS lock went with the process
    result = score_corpus(corpus, out, **options)
    assert result.scores.read_bytes() == (reference / "scores.jsonl").read_bytes()


def test_cli_damaged_part_and_cache_are_named_on_the_command_line(item10_reference, tmp_path, capsys):
    corpus, reference, options, _ = item10_reference
    out = _item10_copy(reference, tmp_path)
    path = _item10_edit_part(out, 0, lambda ls: ls[:2])
    args = [
        "score",
        "--corpus",
        str(corpus),
        "--output",
        str(out),
        "--model",
        options["model"],
        "--chunk-size",
        "6",
    ]
    with pytest.warns(
        UserWarning, match=f"{re.escape(str(path))} is damaged \\(holds 1 rows where its header says 6\\)"
    ):
        assert main([*args, "--no-progress"]) == 0
    assert (out / "scores.jsonl").read_bytes() == (reference / "scores.jsonl").read_bytes()
    (out / "embeddings.sqlite").write_bytes(b"not a database" * 100)
    shutil.rmtree(out / "parts")
    assert main([*args, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"capeval: error: {out / 'embeddings.sqlite'} is not a usable embedding cache" in err
