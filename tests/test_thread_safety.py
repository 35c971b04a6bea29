"""One scorer object shared by several threads: each call gets the result it gets alone, and nothing shared is
written under another thread (an idf table, cuDNN's TF32 switch, the tokenizer's word cache)."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest
import torch

import capeval
from tests.threads import run_together
from tests.tiny_scorers import every_scorer


@pytest.fixture(scope="module")
def scorers(tiny_clip_dir):
    """Each callable, with a call that scores ``predictions`` (and ``references`` where it takes them)."""
    return every_scorer(tiny_clip_dir)


@pytest.mark.parametrize("name", ["clipscore", "refclipscore", "emscore", "wmd", "wembsim"])
def test_one_scorer_called_from_four_threads_gives_each_the_sequential_result(scorers, name):
    # Non-ASCII captions take the tokenizer's slow path, ASCII ones the shared word cache.
    preds, refs = ["a dark café image", "a bright image"], [["a black picture"], ["a white café picture"]]
    call = scorers[name]
    sequential = call(preds, refs)
    results = run_together(lambda: call(preds, refs))
    assert all(isinstance(r, dict) for r in results), results
    assert [r["scores"] for r in results] == [sequential["scores"]] * 4
    assert call(preds, refs)["scores"] == sequential["scores"]


def test_an_idf_defaultdict_is_never_written_to_so_threads_can_share_the_scorer(tiny_clip_dir):
    # Looking up a defaultdict inserts the key: a shared scorer would mutate it while another thread iterates it.
    table = defaultdict(lambda: 1.0, {49406: 0.0, 49407: 0.5})
    before = dict(table)
    scorer = capeval.EMScore(model=str(tiny_clip_dir), device="cpu", idf=table)
    results = run_together(lambda: scorer(["a zebra runs", "two cats"], [["a horse"], ["cats"]]))
    assert all(isinstance(r, dict) for r in results), results
    assert len({tuple(r["scores"]) for r in results}) == 1
    assert dict(table) == before


def test_overlapping_float32_gpu_encodings_restore_cudnns_tf32_switch(monkeypatch):
    from capeval.clip import image_encoding

    class FakeBackbone:
        device = torch.device("cuda", 0)
        dtype = torch.float32

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    first = image_encoding._ieee_fp32_convolutions(FakeBackbone())
    second = image_encoding._ieee_fp32_convolutions(FakeBackbone())
    first.__enter__()
    second.__enter__()  # another thread starts while the first is still encoding
    assert torch.backends.cudnn.allow_tf32 is False
    first.__exit__(None, None, None)
    assert torch.backends.cudnn.allow_tf32 is False  # the second is still encoding in IEEE float32
    second.__exit__(None, None, None)
    assert torch.backends.cudnn.allow_tf32 is True  # the user's setting, not the first thread's "off"


def test_threads_meeting_a_new_tokenizer_build_its_caches_once(tiny_clip_dir, monkeypatch):
    from transformers import AutoTokenizer

    from capeval.clip import tokenization

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_clip_dir))
    probes = []
    original = tokenization._encode_with_tokenizer

    def counting(tok, cleaned):
        if tok is tokenizer:
            probes.append(threading.get_ident())
        return original(tok, cleaned)

    monkeypatch.setattr(tokenization, "_encode_with_tokenizer", counting)
    caches = run_together(lambda: tokenization._cached_ids_for(tokenizer))
    assert len({id(c) for c in caches}) == 1 and caches[0] is not None
    assert len(probes) == 1
