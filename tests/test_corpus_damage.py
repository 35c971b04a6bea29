"""Corpus mode (``capeval.score_corpus`` and ``capeval corpus``) on a damaged output folder: a damaged shard output
is set aside and its shard scored again with a warning naming the file, a damaged manifest is refused by name and
left as it was, and a model that overflows gives error rows; never a wrong number."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest

from capeval.cli import main
from capeval.corpus.run import score_corpus
from capeval.diagnostics.categories import DamagedFileWarning
from tests.test_corpus import read_scores


def _copy_run(reference: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    return out


# --- A damaged shard output is set aside and its shard scored again ---


@pytest.mark.parametrize(
    "damage",
    [lambda b: b[: len(b) // 2], lambda b: b"", lambda b: b"PAR1" + b"\0" * 64 + b"PAR1"],
    ids=["cut short", "empty", "no footer"],
)
def test_a_damaged_shard_output_is_set_aside_and_scored_again_on_the_command_line(
    finished_run, tmp_path, damage, pinned_threads
):
    corpus, reference, options, _ = finished_run
    out = _copy_run(reference, tmp_path)
    path = out / "scores" / "corpus.jsonl-00001.parquet"
    path.write_bytes(damage(path.read_bytes()))
    args = ["corpus", str(corpus), "--output", str(out), "--model", options["model"], "--chunk-size", "6"]
    with pytest.warns(DamagedFileWarning, match=f"shard output {re.escape(str(path))} is damaged"):
        assert main([*args, "--batch-size", "4", "--no-progress"]) == 0
    assert read_scores(out) == read_scores(reference)
    assert (out / "scores" / "corpus.jsonl-00001.parquet.damaged").exists()  # kept for the user, not deleted


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
    result = score_corpus(corpus, tmp_path / "out", **options, save_embeddings=True)
    rows = read_scores(tmp_path / "out")
    bad = [r for r in rows if "non-finite score" in (r["error"] or "")]
    assert bad and all(r["clipscore"] is None and r["text_embedding"] is None for r in bad)
    assert math.isfinite(result.summary["mean"]["clipscore"])
    assert result.summary["scored"] + result.summary["errors"] == 23
