"""A finished corpus run, to damage, to hold or to compare with, for the corpus tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from capeval.corpus.run import score_corpus
from tests.test_corpus import make_corpus

CHUNK = 6  # 23 rows: shards of 6, 6, 6 and 5 rows


def finish_a_run(root: Path, model: str) -> tuple[Path, Path, dict, dict]:
    """A finished run of 23 rows (two of them error rows): the corpus, its output folder, its options and its
    summary. Its torch threads are pinned as the ``pinned_threads`` fixture pins a test's, so that a test's run on
    the same rows can be compared with it bit for bit."""
    corpus = make_corpus(root, 23)
    options = dict(model=model, chunk_size=CHUNK, batch_size=4)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))
        result = score_corpus(corpus, root / "reference", **options)
    return corpus, root / "reference", options, result.summary
