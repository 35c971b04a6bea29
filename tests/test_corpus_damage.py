"""Corpus mode (``capeval.score_corpus`` and ``capeval corpus``) on a damaged output folder or cache: a
damaged part is scored again with a warning naming the file, a damaged manifest or a cache file that is not
capeval's is refused by name and left as it was, a damaged cache entry is dropped and encoded again, and a model
that overflows gives error rows; never a wrong number."""

from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from capeval.cli import main
from capeval.corpus.embedding_cache import CacheFileError, EmbeddingCache, hash_text
from capeval.corpus.outputs import DamagedPartError, merge_parts
from capeval.corpus.run import score_corpus
from tests.corpus_runs import CHUNK, finish_a_run
from tests.test_corpus import read_jsonl


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_clip_dir):
    """A finished run of 23 rows (two of them error rows): the corpus, its output folder and its options."""
    return finish_a_run(tmp_path_factory.mktemp("finished-run"), str(tiny_clip_dir))


# --- A damaged part is scored again, with a warning naming the file ---


def _copy_run(reference: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    return out


def _edit_part(out: Path, part: int, edit) -> Path:
    """Rewrite one part file's lines (a list of str) with ``edit``; returns its path."""
    path = out / "parts" / f"part-{part:08d}.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("".join(line + "\n" for line in edit(lines)))
    return path


def _edit_entry(line: str, change) -> str:
    entry = json.loads(line)
    change(entry)
    return json.dumps(entry)


def _replace_line(lines, k, text):
    return lines[:k] + [text] + lines[k + 1 :]


def _with_header(lines, **changes):
    header = {**json.loads(lines[0]), **changes}
    return [json.dumps(header)] + lines[1:]


PART_DAMAGES = {
    "a garbage line": (lambda ls: _replace_line(ls, 2, "}{garbage"), "line 3 is not valid JSON"),
    "an empty file": (lambda ls: [], "is empty"),
    "a missing row": (lambda ls: ls[:3] + ls[4:], "line 4: index 9 where row 8 was expected"),
    "a truncated tail": (lambda ls: ls[:-1], "holds 5 rows where its header says 6"),
    "a row twice": (lambda ls: ls + ls[-1:], "line 8: more rows than the header's 6"),
    "a NaN score": (
        lambda ls: _replace_line(
            ls, 1, _edit_entry(ls[1], lambda e: e["scores"].update(clipscore=float("nan")))
        ),
        "score 'clipscore' is nan, not a finite number",
    ),
    "a score as a string": (
        lambda ls: _replace_line(ls, 1, _edit_entry(ls[1], lambda e: e["scores"].update(clipscore="1"))),
        "score 'clipscore' is '1', not a finite number",
    ),
    "scores without the metric": (
        lambda ls: _replace_line(ls, 1, _edit_entry(ls[1], lambda e: e.update(scores={"x": 1.0}))),
        "do not hold 'clipscore'",
    ),
    "a header that ends the corpus early": (
        lambda ls: _with_header(ls[:-1], rows=5, last=True),
        "the header \\(line 1\\) says 5 rows where the source has 6",
    ),
    "a header of another part": (lambda ls: _with_header(ls, part=2, start=12), "has part 2 where 1"),
    "bytes that are not UTF-8": (lambda ls: _replace_line(ls, 3, "\udcff"), "line 4 is not valid JSON"),
    "a row that is a list": (
        lambda ls: _replace_line(ls, 1, "[1, 2]"),
        "line 2: a JSON list, not an object",
    ),
}


@pytest.mark.parametrize("damage", list(PART_DAMAGES))
def test_a_damaged_part_is_scored_again_with_a_warning_naming_the_file(finished_run, tmp_path, damage):
    corpus, reference, options, summary = finished_run
    out = _copy_run(reference, tmp_path)
    edit, problem = PART_DAMAGES[damage]
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


def test_a_damaged_part_of_a_datasets_source_is_scored_again_once(finished_run, tmp_path):
    import datasets

    corpus, _, options, _ = finished_run
    rows = read_jsonl(corpus)
    data = {"id": [r["id"] for r in rows], "caption": [r["caption"] for r in rows]}
    data["image"] = [str(corpus.parent / r["image"]) for r in rows]
    dataset = datasets.Dataset.from_dict(data)
    first = score_corpus(dataset, tmp_path / "out", **options)
    path = _edit_part(tmp_path / "out", 3, lambda ls: ls[:1])
    with pytest.warns(UserWarning, match="holds 0 rows where its header says 5") as caught:
        again = score_corpus(dataset, tmp_path / "out", **options)
    assert [str(w.message).count(str(path)) for w in caught] == [1]
    assert again.summary["this_run"]["parts_rescored"] == 1
    assert again.scores.read_bytes() == first.scores.read_bytes()


def test_the_merge_refuses_a_damaged_part_naming_the_file_and_line(finished_run, tmp_path):
    _, reference, _, _ = finished_run
    out = _copy_run(reference, tmp_path)
    path = _edit_part(out, 2, lambda ls: _replace_line(ls, 4, "{not json"))
    with pytest.raises(DamagedPartError, match=f"{re.escape(str(path))}: line 5 is not valid JSON"):
        merge_parts(out, "clipscore", None, "clipscore", CHUNK)
    (out / "parts" / "part-00000003.jsonl").unlink()
    path.write_bytes((reference / "parts" / path.name).read_bytes())
    with pytest.raises(ValueError, match="part-00000003.jsonl: is missing: run again to finish the corpus"):
        merge_parts(out, "clipscore", None, "clipscore", CHUNK)


# --- A damaged manifest is refused naming run.json ---


def test_a_damaged_manifest_is_refused_naming_run_json(finished_run, tmp_path):
    corpus, reference, options, _ = finished_run
    out = _copy_run(reference, tmp_path)
    for garbage in (b"{garbage", b"[1, 2]", b"\xff\xfe"):
        (out / "run.json").write_bytes(garbage)
        with pytest.raises(
            ValueError, match=f"{re.escape(str(out / 'run.json'))} is damaged .* choose another"
        ):
            score_corpus(corpus, out, **options)
    assert (out / "run.json").read_bytes() == b"\xff\xfe"  # left for the user to look at


# --- A cache file that is not a capeval cache is refused naming it, and left as it was ---


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"garbage" * 500, "file is not a database"),
        ("half", "database disk image is malformed"),
    ],
    ids=["not SQLite", "truncated SQLite"],
)
def test_an_unusable_cache_file_is_refused_naming_it_and_left_as_it_was(
    finished_run, tmp_path, content, problem
):
    corpus, reference, options, _ = finished_run
    cache = tmp_path / "embeddings.sqlite"
    whole = (reference / "embeddings.sqlite").read_bytes()
    cache.write_bytes(whole[: len(whole) // 2] if content == "half" else content)
    before = cache.read_bytes()
    with pytest.raises(
        CacheFileError, match=f"{re.escape(str(cache))} is not a usable embedding cache \\({problem}\\)"
    ):
        score_corpus(corpus, tmp_path / "out", cache=cache, **options)
    assert cache.read_bytes() == before


def test_another_programs_sqlite_database_is_refused_and_not_written(finished_run, tmp_path):
    corpus, _, options, _ = finished_run
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


# --- A damaged cache entry is dropped and encoded again, never scored ---


def _damage_cache(path: Path, change) -> list[bytes]:
    """Apply ``change(vec) -> new value`` to the first two embeddings stored; returns their keys."""
    db = sqlite3.connect(path)
    rows = db.execute("SELECT key, vec FROM embeddings WHERE vec IS NOT NULL ORDER BY key LIMIT 2").fetchall()
    for key, vec in rows:
        db.execute("UPDATE embeddings SET vec = ?, error = NULL WHERE key = ?", (change(vec), key))
    db.commit()
    db.close()
    return [key for key, _ in rows]


def _scaled(vec: bytes, factor: float) -> bytes:
    return (np.frombuffer(vec, dtype=np.float32) * np.float32(factor)).tobytes()


def _with_nan(vec: bytes) -> bytes:
    arr = np.frombuffer(vec, dtype=np.float32).copy()
    arr[3] = np.nan
    return arr.tobytes()


BLOB_DAMAGES = {
    "truncated": (lambda v: v[:16], "a blob of 16 bytes where 64 \\(dimension 16\\) were expected"),
    "one byte short": (lambda v: v[:-1], "a blob of 63 bytes"),
    "NaN": (_with_nan, "NaN or infinity in the embedding"),
    "infinite": (lambda v: _scaled(v, math.inf), "NaN or infinity in the embedding"),
    "rescaled": (lambda v: _scaled(v, 3.0), "norm 3 where stored embeddings have norm 1"),
    "text": (lambda v: "0.5", "a str where an embedding blob was expected"),
}


@pytest.mark.parametrize("damage", list(BLOB_DAMAGES))
def test_a_damaged_cache_blob_is_dropped_and_encoded_again_never_scored(finished_run, tmp_path, damage):
    corpus, reference, options, summary = finished_run
    cache = tmp_path / "cache.sqlite"
    shutil.copy(reference / "embeddings.sqlite", cache)
    change, problem = BLOB_DAMAGES[damage]
    keys = _damage_cache(cache, change)
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


def test_a_remembered_error_under_a_caption_key_is_damage_not_a_crash(finished_run, tmp_path):
    corpus, reference, options, summary = finished_run
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


# --- A model that overflows gives error rows, not a NaN corpus score ---


def test_a_model_that_overflows_gives_error_rows_not_a_nan_corpus_score(finished_run, tmp_path, monkeypatch):
    import torch

    import capeval.clip.text_encoding as text_encoding

    corpus, _, options, _ = finished_run
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


# --- The command names a damaged part and an unusable cache ---


def test_cli_damaged_part_and_cache_are_named_on_the_command_line(finished_run, tmp_path, capsys):
    corpus, reference, options, _ = finished_run
    out = _copy_run(reference, tmp_path)
    path = _edit_part(out, 0, lambda ls: ls[:2])
    args = [
        "corpus",
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
