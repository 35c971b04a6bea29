"""Scoring prepared batches: the captions' token ids made where a batch is prepared give the scores of tokenising
in the scoring process, bit for bit, and spare it the tokenising; the raw_cosine column can be left out."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from capeval.clip import text_encoding
from capeval.corpus.reader import choose_columns, read_shard
from capeval.corpus.row_scoring import RowScorer, prepare_rows
from capeval.corpus.run import score_corpus
from capeval.corpus.shards import list_shards
from capeval.shapes import shapes_clip_path
from capeval_dev.testing.shapes_shards import write_shapes_shards

MODEL = str(shapes_clip_path())


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """One prepared batch of drawn shapes with references (two rows damaged), at the shapes CLIP's input size."""
    folder = tmp_path_factory.mktemp("rows")
    write_shapes_shards(folder, shards=2, rows_per_shard=12, damaged=True)
    shards = list_shards(folder)
    rows = read_shard(shards[1], choose_columns(shards, {}))
    return prepare_rows(rows, RowScorer(["clipscore"], {"model": MODEL, "device": "cpu"}).image_size)


@pytest.mark.filterwarnings("ignore::capeval.diagnostics.categories.CheckpointWarning")
@pytest.mark.parametrize("metrics", [["clipscore"], ["refclipscore", "clipscore"], ["pacscore"]])
def test_token_ids_made_beforehand_give_the_same_scores_and_no_tokenising(batch, metrics, monkeypatch):
    options = {"model": MODEL, "device": "cpu", "dtype": "float32", "checkpoint": MODEL}
    scorer = RowScorer(metrics, options, embeddings=True)
    plain = scorer.score(batch)
    given = {**batch, "token_ids": scorer.tokenize(batch)}

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("the scoring process tokenised")

    monkeypatch.setattr(text_encoding, "tokenize_texts", no_tokenizing)
    scored = scorer.score(given)
    assert scored["error"] == plain["error"] and sum(e is not None for e in plain["error"]) == 3
    for column in [*scorer.columns(), "image_embedding", "text_embedding"]:
        np.testing.assert_array_equal(scored[column], plain[column], err_msg=column)


def test_ids_for_a_prompt_a_metric_does_not_use_are_not_made(batch):
    scorer = RowScorer(["clipscore"], {"model": MODEL, "device": "cpu", "dtype": "float32", "prefix": ""})
    plan = scorer.tokenize(batch)
    # No prompt: raw_cosine reuses the metric's caption embeddings, so one set of ids, captions only.
    assert len(plan) == 1
    (ids,) = plan.values()
    live = [c for c, e in zip(batch["caption"], batch["error"], strict=True) if e is None]
    assert sorted(ids) == sorted(set(live))


def test_raw_cosine_can_be_left_out_and_a_rerun_must_say_the_same(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=1, rows_per_shard=6)
    score_corpus(tmp_path / "in", tmp_path / "out", model=MODEL, raw_cosine=False, progress=False)
    table = pq.read_table(tmp_path / "out" / "scores" / "00000.parquet")
    assert "raw_cosine" not in table.column_names and "clipscore" in table.column_names
    with pytest.raises(ValueError, match=r"holds a run with other settings \(columns_scored"):
        score_corpus(tmp_path / "in", tmp_path / "out", model=MODEL, progress=False)
    with pytest.raises(TypeError, match="raw_cosine must be True or False"):
        score_corpus(tmp_path / "in", tmp_path / "other", model=MODEL, raw_cosine="no")
