"""EMScore's ``batch_padding="authors"``: the authors' batch-dependent padding, reproduced exactly.

The reference below restates ShiYaya/emscore (emscore/utils.py: ``em_cos_score`` batches ``batch_size``
consecutive pairs, ``pad_local_batch_stats`` / ``pad_vid_local_batch_stats`` pad them with zeros,
``refs_greedy_cos`` / ``vid_greedy_cos`` multiply the cosines by the pair mask before the maxima) in numpy
float64, written from their code's arithmetic and sharing nothing with capeval's matching.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from capeval.emscore import EMScore
from capeval.emscore_matching import fine_grained_text, fine_grained_video
from capeval.signature import parse_signature


def _pad(seqs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    longest = max(len(s) for s in seqs)
    out = np.zeros((len(seqs), longest) + seqs[0].shape[1:])
    mask = np.zeros((len(seqs), longest))
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return out, mask


def authors_greedy(hyps, hyp_idf, refs, ref_idf, batch_size, video: bool):
    """Per pair (P, R, F) as the authors' batched code computes them (ref_idf unused for videos)."""
    out = []
    for start in range(0, len(hyps), batch_size):
        h, hm = _pad(hyps[start : start + batch_size])
        r, rm = _pad(refs[start : start + batch_size])
        hi, _ = _pad([w[:, None] for w in hyp_idf[start : start + batch_size]])
        sim = np.einsum("bid,bjd->bij", h, r) * (hm[:, :, None] * rm[:, None, :])
        precision, recall = sim.max(axis=2), sim.max(axis=1)
        hi = hi[:, :, 0] / hi[:, :, 0].sum(axis=1, keepdims=True)
        p = (precision * hi).sum(axis=1)
        if video:
            rec = recall.sum(axis=1) / rm.sum(axis=1)
        else:
            ri, _ = _pad([w[:, None] for w in ref_idf[start : start + batch_size]])
            ri = ri[:, :, 0] / ri[:, :, 0].sum(axis=1, keepdims=True)
            rec = (recall * ri).sum(axis=1)
        out += list(zip(p, rec, 2 * p * rec / (p + rec), strict=True))
    return np.array(out)


def _unit_rows(rng, n, d=6):
    x = rng.normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def embeddings():
    # Lengths chosen so every batch of 2 or 3 mixes short and long items; random unit vectors in 6-D give many
    # negative cosines, where the authors' padded zeros win the maxima.
    rng = np.random.default_rng(7)
    tokens = [_unit_rows(rng, n) for n in (3, 9, 5, 2, 7, 4, 6)]
    frames = [_unit_rows(rng, n) for n in (1, 12, 4, 30, 2, 10, 5)]
    weights = [rng.uniform(0.1, 3.0, size=len(t)) for t in tokens]
    return tokens, weights, frames


@pytest.mark.parametrize("batch_size", [1, 2, 3, 7])
def test_authors_padding_equals_the_authors_batched_video_matching(embeddings, batch_size):
    tokens, weights, frames = embeddings
    expected = authors_greedy(tokens, weights, frames, None, batch_size, video=True)
    n = len(tokens)
    pairs = torch.stack([torch.arange(n), torch.arange(n)], dim=1)
    t = [torch.tensor(x, dtype=torch.float32) for x in tokens]
    w = [torch.tensor(x, dtype=torch.float32) for x in weights]
    v = [torch.tensor(x, dtype=torch.float32) for x in frames]
    got = fine_grained_video(t, w, v, pairs, chunk=batch_size, authors_padding=True)
    np.testing.assert_allclose(torch.stack(got, dim=1).numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_authors_padding_equals_the_authors_batched_reference_matching(embeddings, batch_size):
    tokens, weights, _ = embeddings
    # (candidate, reference) pairs flattened as the authors' scorer does: each candidate's references in turn.
    pairs = torch.tensor([[0, 1], [0, 2], [3, 4], [3, 1], [3, 6], [5, 0]])
    hyps = [tokens[c] for c, _ in pairs.tolist()]
    refs = [tokens[r] for _, r in pairs.tolist()]
    expected = authors_greedy(
        hyps, [weights[c] for c, _ in pairs.tolist()], refs, [weights[r] for _, r in pairs.tolist()], batch_size,
        video=False,
    )  # fmt: skip
    t = [torch.tensor(x, dtype=torch.float32) for x in tokens]
    w = [torch.tensor(x, dtype=torch.float32) for x in weights]
    got = fine_grained_text(t, w, t, w, pairs, chunk=batch_size, authors_padding=True)
    np.testing.assert_allclose(torch.stack(got, dim=1).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_a_longer_batch_neighbour_raises_a_negative_best_cosine_to_zero():
    # Caption 0: one token at cosine -0.6 with its one frame. Alone (or excluded padding): P = -0.6.
    # Beside a 2-frame video in the authors' batch, the token's row gains a padded 0: P = max(-0.6, 0) = 0.
    tokens = [torch.tensor([[-0.6, 0.8]]), torch.tensor([[1.0, 0.0]])]
    frames = [torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]])]
    w = [torch.ones(1), torch.ones(1)]
    pairs = torch.tensor([[0, 0], [1, 1]])
    p_excl, r_excl, _ = fine_grained_video(tokens, w, frames, pairs)
    p_auth, r_auth, _ = fine_grained_video(tokens, w, frames, pairs, chunk=2, authors_padding=True)
    p_alone, _, _ = fine_grained_video(tokens, w, frames, pairs, chunk=1, authors_padding=True)
    assert float(p_excl[0]) == pytest.approx(-0.6) and float(p_alone[0]) == pytest.approx(-0.6)
    assert float(p_auth[0]) == 0.0
    # Caption 1's second frame (cosine 0 with its only token) is unaffected: R = (1 + 0) / 2 either way.
    assert float(r_auth[1]) == pytest.approx(0.5) and float(r_excl[1]) == pytest.approx(0.5)


def test_the_scorer_option_changes_scores_with_batch_neighbours_and_names_itself(tiny_clip_dir):
    rng = np.random.default_rng(3)
    captions = ["a red circle", "two blue squares move to the left quickly", "a cat", "a green triangle"]
    embeds = [rng.normal(size=(k, 16)).astype(np.float32) for k in (2, 9, 3, 14)]
    default = EMScore(model=str(tiny_clip_dir), device="cpu", idf=False)
    authors = EMScore(
        model=str(tiny_clip_dir), device="cpu", idf=False, batch_padding="authors", batch_size=2
    )
    alone = EMScore(model=str(tiny_clip_dir), device="cpu", idf=False, batch_padding="authors", batch_size=1)
    d, a, s = (m(captions, video_embeds=embeds) for m in (default, authors, alone))
    # A batch of one has no padding: the authors' arithmetic then equals capeval's default exactly.
    np.testing.assert_allclose(s["scores"], d["scores"], rtol=1e-6, atol=1e-6)
    # Batched, a padded zero can only raise a maximum, so P and R never fall, and one of them rises here.
    rises = []
    for key in ("figr_P", "figr_R"):
        diff = np.array(a["details"]["EMScore(X,V)"][key]) - np.array(d["details"]["EMScore(X,V)"][key])
        assert (diff >= -1e-6).all(), key
        rises.append(diff.max())
    assert max(rises) > 1e-3
    assert a["scores"] != d["scores"]
    assert "batch_padding" not in parse_signature(d["signature"])[1]
    assert parse_signature(a["signature"])[1]["batch_padding"] == "authors:2"


def test_an_unknown_batch_padding_is_a_clear_error(tiny_clip_dir):
    with pytest.raises(ValueError, match="batch_padding='zeros': choose from 'exclude', 'authors'"):
        EMScore(model=str(tiny_clip_dir), device="cpu", batch_padding="zeros")
