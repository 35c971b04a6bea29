"""Caption encoding in tokenised windows: the same batches with or without the background thread, overlap,
exact sharing of those batches across processes, and each distinct id sequence encoded once."""

from __future__ import annotations

import threading

import pytest
import torch

import capeval
import capeval.corpus.distributed as dist_api
from capeval.clip.text_encoding import (
    FIRST_WINDOW,
    WINDOW,
    CaptionIds,
    encode_batches,
    encode_texts,
    length_batches,
    tokenize_windows,
)

PREFIX = "A photo depicts"


def _captions(n: int) -> list[str]:
    return [f"{'big ' * (i % 9)}shape number {i}" for i in range(n)]


@pytest.fixture(scope="module")
def backbone(tiny_clip_dir):
    return capeval.load_backbone(str(tiny_clip_dir), device="cpu")


def test_windows_are_small_at_both_ends_and_hold_at_least_four_batches_between():
    sizes = [len(w) for w in tokenize_windows(20_000, 64)]
    assert sizes == [FIRST_WINDOW, 2048, WINDOW, WINDOW, WINDOW, 1568, 2048, FIRST_WINDOW]
    assert [len(w) for w in tokenize_windows(20_000, 2048)] == [1024, 2048, 8192, 5664, 2048, 1024]
    assert [len(w) for w in tokenize_windows(9000, 64)] == [1024, 4096, 3880]
    assert [len(w) for w in tokenize_windows(1500, 64)] == [1024, 476]
    assert tokenize_windows(0, 64) == []
    for n in (1, 1024, 1025, 10_239, 10_240, 50_001):
        windows = tokenize_windows(n, 256)
        assert windows[0].start == 0 and windows[-1].stop == n
        assert all(a.stop == b.start for a, b in zip(windows, windows[1:], strict=False))


def test_background_tokenising_cuts_the_same_batches(backbone):
    texts = _captions(3500)
    plain = CaptionIds(backbone, texts, PREFIX)
    threaded = CaptionIds(backbone, texts, PREFIX)
    batches = list(length_batches(plain, 64))
    assert list(length_batches(threaded, 64, background=True)) == batches
    assert threaded.ids == plain.ids and threaded.inverse == plain.inverse
    # every distinct caption in exactly one batch, each window sorted by length
    flat = [p for b in batches for p in b]
    assert sorted(flat) == list(range(len(plain.ids)))
    first = [len(plain.ids[p]) for p in flat[:FIRST_WINDOW]]
    assert first == sorted(first)


def test_the_next_window_is_tokenised_while_this_one_is_encoded(backbone, monkeypatch):
    captions = CaptionIds(backbone, _captions(2000), PREFIX)
    second_started = threading.Event()
    real = captions.tokenize

    def spy(window):
        if window.start > 0:
            second_started.set()
        return real(window)

    monkeypatch.setattr(captions, "tokenize", spy)
    batches = length_batches(captions, 64, background=True)
    next(batches)  # the caller now holds the first window's first batch, as if running the model on it
    assert second_started.wait(timeout=30), "the second window was not tokenised ahead of the model"
    assert sum(len(b) for b in batches) + 64 == len(captions.ids)


def test_many_windows_give_the_embeddings_of_captions_encoded_alone(backbone):
    texts = _captions(2200)
    texts += [t.upper() for t in texts[:50]]  # same ids after lower-casing: no second encoding
    got = encode_texts(backbone, texts, prefix=PREFIX, batch_size=64)
    assert got.shape == (len(texts), backbone.embed_dim)
    assert got[2200:].equal(got[:50])
    for i in [0, 1, 7, 1023, 1024, 1500, 2199]:
        alone = encode_texts(backbone, [texts[i]], prefix=PREFIX, batch_size=1)
        torch.testing.assert_close(got[i], alone[0], atol=2e-6, rtol=0)


def test_each_distinct_id_sequence_is_encoded_once_across_windows(backbone, monkeypatch):
    texts = _captions(1500)
    texts += [t.replace("shape", "SHAPE") for t in texts[:1200]]  # new strings in later windows, old ids
    seen = []
    real = encode_batches

    def count(bb, ids, batches, *args, **kw):
        def spy():
            for b in batches:
                seen.extend(ids[p] for p in b)
                yield b

        return real(bb, ids, spy(), *args, **kw)

    import capeval.clip.text_encoding as text_encoding

    monkeypatch.setattr(text_encoding, "encode_batches", count)
    encode_texts(backbone, texts, prefix=PREFIX, batch_size=64)
    assert len(seen) == len(set(seen)) == 1500


class _Rank:
    def __init__(self, index: int, n: int) -> None:
        self.process_index, self.num_processes, self.is_main_process = index, n, index == 0


def test_two_ranks_share_out_the_single_process_batches_exactly(backbone, monkeypatch):
    texts = _captions(2600)
    monkeypatch.setattr(dist_api, "_sum_across", lambda tensor, state: tensor)
    parts = [dist_api.sharded_encode_texts(backbone, texts, PREFIX, 64, _Rank(r, 2)) for r in range(2)]
    # each row comes from one rank, the other left it zero: the all-reduce sum is exact
    assert all(((parts[0] != 0).any(1) ^ (parts[1] != 0).any(1)).tolist())
    assert (parts[0] + parts[1]).equal(encode_texts(backbone, texts, prefix=PREFIX, batch_size=64))


def test_garbage_collection_is_paused_while_tokenising_and_restored_after(backbone, monkeypatch):
    import gc

    from capeval.clip.batching import gc_paused

    seen = []
    real = CaptionIds.tokenize
    monkeypatch.setattr(CaptionIds, "tokenize", lambda self, w: seen.append(gc.isenabled()) or real(self, w))
    assert gc.isenabled()
    encode_texts(backbone, _captions(1500), prefix=PREFIX, batch_size=256)
    assert seen == [False, False] and gc.isenabled()
    with pytest.raises(RuntimeError, match="boom"), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
