"""Corpus scoring (capeval.corpus): equal to the plain API, resumable, error-reporting, filterable."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import capeval
from capeval.cli import main
from capeval.corpus.embedding_cache import EmbeddingCache
from capeval.corpus.run import score_corpus

COLORS = ("red", "green", "blue", "yellow", "purple")


def make_corpus(root: Path, n: int, bad_rows: bool = True, seed: int = 0) -> Path:
    """``n`` rows of distinct noise images and captions; with ``bad_rows`` a corrupt image and an empty caption."""
    rng = np.random.default_rng(seed)
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        path = images / f"{i:06d}.png"
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(path)
        row = {
            "id": f"row{i}",
            "image": f"images/{path.name}",
            "caption": f"a {COLORS[i % 5]} shape {i % 23}",
        }
        row["references"] = [f"a {COLORS[(i + 1) % 5]} thing", "some shape"]
        lines.append(row)
    if bad_rows and n > 7:
        (images / "corrupt.png").write_bytes(b"\x89PNG not really")
        lines[3]["image"] = "images/corrupt.png"
        lines[7]["caption"] = "   "
    path = root / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("corpus"), 23)


def test_corpus_scores_match_the_plain_api_and_keep_every_row_in_order(corpus, tmp_path, tiny_clip_dir):
    result = score_corpus(corpus, tmp_path / "out", model=str(tiny_clip_dir), chunk_size=6, batch_size=4)
    rows = read_jsonl(result.scores)
    assert [r["index"] for r in rows] == list(range(23))
    assert [r["id"] for r in rows] == [f"row{i}" for i in range(23)]
    source = read_jsonl(corpus)
    good = [i for i in range(23) if i not in (3, 7)]
    plain = capeval.CLIPScore(model=str(tiny_clip_dir), batch_size=4)(
        [source[i]["caption"] for i in good], images=[str(corpus.parent / source[i]["image"]) for i in good]
    )
    # Other batches than the plain call: equal up to float rounding.
    assert [rows[i]["clipscore"] for i in good] == pytest.approx(plain["scores"], abs=1e-6)
    assert result.summary["corpus_score"] == pytest.approx(plain["clipscore"], abs=1e-6)
    assert result.summary["signature"] == plain["signature"]
    assert (result.summary["rows"], result.summary["scored"], result.summary["errors"]) == (23, 21, 2)
    errors = read_jsonl(result.errors)
    assert [e["index"] for e in errors] == [3, 7]
    assert "corrupt.png" in errors[0]["error"] and "caption" in errors[1]["error"]


def test_refclipscore_corpus_uses_the_references_column(corpus, tmp_path, tiny_clip_dir):
    result = score_corpus(
        corpus,
        tmp_path / "out",
        "refclipscore",
        references_column="references",
        model=str(tiny_clip_dir),
        chunk_size=10,
    )
    rows = read_jsonl(result.scores)
    source = read_jsonl(corpus)
    plain = capeval.RefCLIPScore(model=str(tiny_clip_dir))(
        [source[0]["caption"], source[1]["caption"]],
        references=[source[0]["references"], source[1]["references"]],
        images=[str(corpus.parent / source[i]["image"]) for i in (0, 1)],
    )
    assert [rows[0]["refclipscore"], rows[1]["refclipscore"]] == pytest.approx(plain["scores"], abs=1e-6)
    assert [rows[0]["clip_s"], rows[1]["clip_s"]] == pytest.approx(plain["clip_s_scores"], abs=1e-6)


def test_rerun_encodes_nothing_and_filters_with_a_new_threshold(corpus, tmp_path, tiny_clip_dir):
    out = tmp_path / "out"
    first = score_corpus(corpus, out, model=str(tiny_clip_dir), chunk_size=6)
    assert first.summary["this_run"]["images_encoded"] == 21  # the corrupt image is not an embedding
    scores = read_jsonl(first.scores)
    threshold = sorted(r["clipscore"] for r in scores if "clipscore" in r)[10]
    again = score_corpus(corpus, out, model=str(tiny_clip_dir), chunk_size=6, threshold=threshold)
    run = again.summary["this_run"]
    assert (run["parts"], run["parts_skipped"], run["images_encoded"], run["texts_encoded"]) == (0, 4, 0, 0)
    assert again.scores.read_bytes() == first.scores.read_bytes()
    kept = read_jsonl(again.kept)
    source = read_jsonl(corpus)
    expected = [r["index"] for r in scores if r.get("clipscore", -1) >= threshold]
    assert [k["id"] for k in kept] == [f"row{i}" for i in expected]
    assert kept[0] == {**source[expected[0]], "clipscore": scores[expected[0]]["clipscore"]}
    assert again.summary["kept"] == len(expected) == 11


def test_a_shared_cache_reuses_images_across_prefixes_but_not_across_models(
    corpus, tmp_path, tiny_clip_dir, tiny_clip_dir_b
):
    cache = tmp_path / "shared.sqlite"
    options = dict(chunk_size=50, cache=cache)
    score_corpus(corpus, tmp_path / "a", model=str(tiny_clip_dir), **options)
    other_prefix = score_corpus(
        corpus, tmp_path / "b", model=str(tiny_clip_dir), prefix="A drawing of", **options
    )
    run = other_prefix.summary["this_run"]
    assert run["images_encoded"] == 0 and run["image_cache_hits"] == 22  # 21 embeddings + 1 remembered error
    assert run["texts_encoded"] == run["text_cache_hits"] + run["texts_encoded"] > 0
    other_model = score_corpus(corpus, tmp_path / "c", model=str(tiny_clip_dir_b), **options)
    assert other_model.summary["this_run"]["image_cache_hits"] == 0
    assert other_model.summary["this_run"]["images_encoded"] == 21


# --- A shared cache and a model folder edited between runs ---


def test_a_shared_cache_serves_no_embedding_of_a_model_folder_since_edited(corpus, tmp_path, tiny_clip_dir):
    import shutil

    folder = Path(shutil.copytree(tiny_clip_dir, tmp_path / "clip"))
    options = dict(chunk_size=50, cache=tmp_path / "shared.sqlite")
    first = score_corpus(corpus, tmp_path / "a", model=str(folder), **options)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["hidden_act"] = config["vision_config"]["hidden_act"] = "gelu"
    (folder / "config.json").write_text(json.dumps(config))
    edited = score_corpus(corpus, tmp_path / "b", model=str(folder), **options)
    run = edited.summary["this_run"]
    assert (run["image_cache_hits"], run["images_encoded"]) == (0, 21)
    assert edited.summary["signature"] != first.summary["signature"]
    source = read_jsonl(corpus)
    good = [i for i in range(23) if i not in (3, 7)]
    fresh = capeval.CLIPScore(model=str(shutil.copytree(folder, tmp_path / "fresh")))(
        [source[i]["caption"] for i in good], images=[str(corpus.parent / source[i]["image"]) for i in good]
    )
    rows = read_jsonl(edited.scores)
    assert [rows[i]["clipscore"] for i in good] == pytest.approx(fresh["scores"], abs=1e-6)


def test_an_output_folder_of_another_run_is_refused(corpus, tmp_path, tiny_clip_dir):
    score_corpus(corpus, tmp_path / "out", model=str(tiny_clip_dir), chunk_size=6)
    with pytest.raises(ValueError, match="holds a run with other settings .*signature"):
        score_corpus(corpus, tmp_path / "out", model=str(tiny_clip_dir), chunk_size=6, w=2.0)
    with pytest.raises(ValueError, match="chunk_size"):
        score_corpus(corpus, tmp_path / "out", model=str(tiny_clip_dir), chunk_size=7)


def test_datasets_sources_score_like_the_jsonl_of_the_same_files(corpus, tmp_path, tiny_clip_dir):
    import datasets

    source = read_jsonl(corpus)[:12]
    data = {
        "id": [r["id"] for r in source],
        "image": [str(corpus.parent / r["image"]) for r in source],
        "caption": [r["caption"] if r["caption"].strip() else "" for r in source],
    }
    ds = datasets.Dataset.from_dict(data).cast_column("image", datasets.Image())
    jsonl = score_corpus(corpus, tmp_path / "jsonl", model=str(tiny_clip_dir), chunk_size=5)
    expected = read_jsonl(jsonl.scores)[:12]
    for name, dataset in {"dataset": ds, "iterable": ds.to_iterable_dataset()}.items():
        got = score_corpus(dataset, tmp_path / name, model=str(tiny_clip_dir), chunk_size=5, threshold=0.0)
        rows = read_jsonl(got.scores)
        assert [r["index"] for r in rows if "error" in r] == [3, 7]
        # The last part holds other rows than the JSONL's: other batches, equal up to float rounding.
        got_scores = [r.get("clipscore", 0.0) for r in rows]
        assert got_scores == pytest.approx([r.get("clipscore", 0.0) for r in expected], abs=1e-6), name
        kept = read_jsonl(got.kept)
        assert kept[0]["image"] == data["image"][0]  # the kept row names its image file, not its bytes
    in_memory = datasets.Dataset.from_dict(
        {
            "image": [Image.fromarray(np.asarray(Image.open(p))) for p in data["image"][:3]],
            "caption": ["a"] * 3,
        }
    )
    got = score_corpus(in_memory, tmp_path / "bytes", model=str(tiny_clip_dir), threshold=0.0)
    assert got.summary["scored"] == 3 and "image" not in read_jsonl(got.kept)[0]


def test_image_folder_with_text_captions(tmp_path, tiny_clip_dir):
    folder = tmp_path / "shards" / "00000"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(3)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.jpg")
        if i != 2:
            (folder / f"{i}.txt").write_text(f"caption {i}\n")
    result = score_corpus(tmp_path / "shards", tmp_path / "out", model=str(tiny_clip_dir))
    rows = read_jsonl(result.scores)
    assert [r["id"] for r in rows] == ["00000/0", "00000/1", "00000/2", "00000/3"]
    assert "no caption file 2.txt" in rows[2]["error"]


def test_cli_corpus_mode_prints_the_score_and_writes_kept_rows(corpus, tmp_path, tiny_clip_dir, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "corpus", str(corpus), "--output", str(out), "--model", str(tiny_clip_dir),
            "--threshold", "0.0", "--chunk-size", "8", "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    printed = capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    assert f"clipscore: {summary['corpus_score']:.4f} over 21 rows" in printed.out
    assert "kept 21 row(s) with clipscore >= 0.0" in printed.out
    assert "2 row(s) could not be scored" in printed.err
    assert len(read_jsonl(out / "kept.jsonl")) == 21


def test_progress_bar_reports_rate_and_eta(corpus, tmp_path, tiny_clip_dir, capsys):
    score_corpus(corpus, tmp_path / "out", model=str(tiny_clip_dir), chunk_size=6, progress=True)
    err = capsys.readouterr().err
    assert "23/23" in err and "row/s" in err and "<00:00" in err


def test_cache_survives_in_committed_batches(tmp_path):
    import torch

    with EmbeddingCache(tmp_path / "c.sqlite") as cache:
        ns = cache.namespace("image|test")
        cache.put_many(ns, [b"a" * 16, b"b" * 16], torch.eye(2))
        cache.put_many(ns, [b"c" * 16], errors=["corrupt"])
    with EmbeddingCache(tmp_path / "c.sqlite") as cache:
        found = cache.get_many(cache.namespace("image|test"), [b"a" * 16, b"c" * 16, b"d" * 16])
        assert found[b"a" * 16].tolist() == [1.0, 0.0] and found[b"c" * 16] == "corrupt" and len(found) == 2
        assert cache.get_many(cache.namespace("image|other"), [b"a" * 16]) == {}


def test_pacscore_corpus_scores_like_the_pacscore_api(corpus, tmp_path, tiny_clip_dir):
    # A converted PAC-S folder is a CLIP folder: the tiny CLIP stands in for one.
    result = score_corpus(corpus, tmp_path / "out", "pacscore", checkpoint=str(tiny_clip_dir), chunk_size=50)
    rows = read_jsonl(result.scores)
    source = read_jsonl(corpus)
    plain = capeval.PACScore(checkpoint=str(tiny_clip_dir))(
        [source[i]["caption"] for i in (0, 1, 2)],
        images=[str(corpus.parent / source[i]["image"]) for i in (0, 1, 2)],
    )
    assert [rows[i]["pacscore"] for i in (0, 1, 2)] == pytest.approx(plain["scores"], abs=1e-6)
    assert result.summary["signature"] == plain["signature"]


def test_refclipscore_without_a_references_column_is_refused_before_scoring(corpus, tmp_path, tiny_clip_dir):
    with pytest.raises(ValueError, match="refclipscore needs references"):
        score_corpus(corpus, tmp_path / "out", "refclipscore", model=str(tiny_clip_dir))
    assert not (tmp_path / "out").exists()


def _open_cache_at_once(path: str, barrier) -> None:
    barrier.wait()
    with EmbeddingCache(path) as cache:
        cache.namespace("image|test")


def test_processes_opening_one_new_cache_at_once_all_succeed(tmp_path):
    # torchrun starts every rank at the same moment; switching a new file to WAL used to fail in one of them
    # with "database is locked".
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for attempt in range(8):
        barrier = ctx.Barrier(4)
        path = str(tmp_path / f"c{attempt}.sqlite")
        procs = [ctx.Process(target=_open_cache_at_once, args=(path, barrier)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        assert [p.exitcode for p in procs] == [0, 0, 0, 0], f"attempt {attempt}"


# --- JSON files: duplicate keys, nesting, encodings ---


def test_jsonl_rows_with_a_repeated_key_other_bytes_or_deep_nesting_are_error_rows_naming_the_line(tmp_path):
    from capeval.corpus.sources import JsonlSource

    path = tmp_path / "corpus.jsonl"
    path.write_bytes(
        b'{"image": "a.png", "caption": "a dog"}\n'
        b'{"image": "b.png", "caption": "a cat", "caption": "a hen"}\n'
        b'{"image": "c.png", "caption": "caf\xe9"}\n'
        b'{"image": "d.png", "caption": "x", "references": ' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    )
    ((_, rows, _),) = list(JsonlSource([path]).parts(10, lambda part, count: True))
    assert rows[0][1]["caption"] == "a dog"
    assert [row.get("__error__") for _, row in rows[1:]] == [
        'corpus.jsonl line 2: key "caption" appears twice in one object (columns 20 and 40); '
        "each key may appear once",
        "corpus.jsonl line 3 is not UTF-8 text: byte 0xe9 (invalid continuation byte); save it as UTF-8",
        "corpus.jsonl line 4 nests arrays and objects more than 100 levels deep; capeval reads at most "
        "MAX_JSON_DEPTH = 100 (its layouts nest 5)",
    ]


# --- Which parts a process scores ---


def test_a_process_scores_its_own_parts_that_are_not_on_disk(tmp_path):
    from types import SimpleNamespace

    from capeval.corpus.part_run import PartRun

    state = SimpleNamespace(process_index=1, num_processes=2, is_main_process=False)
    run = PartRun(tmp_path, "clipscore", None, None, None, chunk_size=4, state=state, cache=tmp_path / "c")
    assert [run.wanted(p, 4) for p in range(4)] == [False, True, False, True]
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "part-00000001.jsonl").write_text("}{ not a part\n")
    with pytest.warns(UserWarning, match=r"part-00000001.jsonl is damaged .*scoring part 1 again"):
        assert run.wanted(1, 4)
    assert run.counters.parts_rescored == 1
