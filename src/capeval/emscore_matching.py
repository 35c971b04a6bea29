"""EMScore's matching maths (Shi et al., CVPR 2022): IDF weights, fine-grained and coarse matching.

Pure tensor maths on L2-normalised embeddings, no I/O and no model. Notation: a candidate caption X has
token embeddings x_i with IDF weights w_i; a reference X* has tokens r_j with weights w*_j; a video V has
frame embeddings v_k and the video embedding = normalise(mean_k v_k).

- Fine-grained vs a reference: P = sum_i w_i max_j cos(x_i, r_j), R = sum_j w*_j max_i cos(x_i, r_j),
  with each caption's weights normalised to sum 1; F = 2PR / (P + R).
- Fine-grained vs a video: P = sum_i w_i max_k cos(x_i, v_k), R = mean_k max_i cos(x_i, v_k).
- Coarse: cos(global caption embedding, global embedding of the reference or the video).
- full = (fine + coarse) / 2 for each of P, R, F.

Differences from the authors' batched code, all where theirs depends on batch composition or fails:
padded positions are excluded from the maxima; F is 0 instead of NaN when P + R = 0; a caption whose IDF
weights are all 0 (e.g. a one-caption corpus) falls back to uniform weights instead of NaN.

The authors' padding (``authors_padding=True``): ShiYaya/emscore ``emscore/utils.py``, ``em_cos_score`` pads
each batch of ``batch_size`` consecutive pairs to its longest caption and its longest video
(``pad_local_batch_stats``, ``pad_vid_local_batch_stats``: zeros), and ``refs_greedy_cos`` / ``vid_greedy_cos``
multiply the cosines by the pair mask before ``sim.max``. A padded position is thus a similarity of exactly 0
in every maximum, so a token's best frame is max(its true best, 0) whenever its pair's video has fewer frames
than the longest in the batch (and likewise a frame's best token, a reference token's best candidate token):
the score depends on which other pairs share the batch.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from capeval.scores import harmonic_mean

PAIR_CHUNK = 2048  # caption pairs per batched matching step (bounds memory, not results)


class IdfTable(dict):
    """Token id -> IDF weight, with a default for ids the corpus never saw (as a ``defaultdict`` would).

    Attributes:
        default: weight of an unseen id, ln(N + 1) for a corpus of N captions.
        n_docs: N, the number of captions it was computed from (``None`` for a user-supplied table).
    """

    def __init__(self, values: dict[int, float], default: float | None, n_docs: int | None = None) -> None:
        super().__init__(values)
        self.default = default
        self.n_docs = n_docs

    def __missing__(self, token_id: int) -> float:
        if self.default is None:
            raise KeyError(token_id)
        return self.default


# IDF weights are logarithms, ln((N + 1) / (df + 1)) <= ln(N + 1), about 28 for 10^12 captions. The bound leaves
# room for any rescaled table while the float32 sum of a caption's weights (normalise_weights) stays finite.
IDF_WEIGHT_MAX = 1e30


def _check_idf_weight(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"idf weight of {what} is {type(value).__name__} ({value!r:.40}), expected a number")
    weight = float(value)
    if not (math.isfinite(weight) and 0.0 <= weight <= IDF_WEIGHT_MAX):
        raise ValueError(
            f"idf weight of {what} is {weight}: weights must be finite numbers in [0, {IDF_WEIGHT_MAX:g}]"
        )
    return weight


def check_idf_table(idf: Mapping) -> IdfTable:
    """A user's IDF mapping checked whole, before any caption is encoded, and copied: token-id keys (ints),
    weights and default (``IdfTable.default``, or a ``defaultdict``'s factory, called once) finite numbers in
    [0, ``IDF_WEIGHT_MAX``].

    A negative, NaN or infinite weight would make a caption's weights no distribution (scores outside the
    cosine's range, or NaN); a string key ("320" from a JSON file) would never match a token id. The copy is
    never written to (a ``defaultdict`` grows on every lookup), so one scorer serves several threads.

    Raises:
        TypeError: a key that is not an int, a weight that is not a number.
        ValueError: a weight out of range.
    """
    values: dict[int, float] = {}
    for key, value in idf.items():
        if isinstance(key, bool) or not isinstance(key, numbers.Integral):
            hint = " (a table read from JSON: convert it with {int(k): v for k, v in table.items()})"
            raise TypeError(
                f"idf key {key!r} is {type(key).__name__}: keys are CLIP token ids (ints)"
                + (hint if isinstance(key, str) else "")
            )
        values[int(key)] = _check_idf_weight(value, f"token id {key}")
    default = getattr(idf, "default", None)
    if default is None and getattr(idf, "default_factory", None) is not None:
        default = idf.default_factory()
    if default is not None:
        default = _check_idf_weight(default, "unseen token ids (the default)")
    return IdfTable(values, default=default, n_docs=getattr(idf, "n_docs", None))


def idf_from_token_ids(docs: Sequence[Sequence[int]], eos_id: int) -> IdfTable:
    """idf(t) = ln((N + 1) / (df(t) + 1)) over N tokenised captions, as the EMScore (and BERTScore) code.

    Each caption counts once per distinct id (start- and end-of-text included, so both get idf 0 before the
    end-of-text weight is replaced). The end-of-text id then gets the mean idf of every id seen, as in the
    authors' ``idf_dict[max(keys)] = mean(values)``. Ids never seen weigh ln(N + 1). Only real tokens are
    counted: the authors tokenised the corpus padded to 77 with id 0, which counted padding as a token in
    every caption (weighting a real "!", id 0, as 0, and adding one extra 0 to the mean).

    Args:
        docs: token ids of each caption of the corpus (no padding).
        eos_id: the end-of-text id (49,407 for CLIP).

    Returns:
        IdfTable: id -> weight, defaulting to ln(N + 1).
    """
    n = len(docs)
    if n == 0:
        raise ValueError("the IDF corpus is empty")
    df: Counter = Counter()
    for ids in docs:
        df.update(set(int(t) for t in ids))
    values = {t: math.log((n + 1) / (c + 1)) for t, c in df.items()}
    if values:
        values[eos_id] = sum(values.values()) / len(values)
    return IdfTable(values, default=math.log(n + 1), n_docs=n)


def uniform_weights(docs: Iterable[Sequence[int]]) -> list[torch.Tensor]:
    """Weight 1 per token (``idf=False``): every caption's tokens count equally once normalised."""
    return [torch.ones(len(ids)) for ids in docs]


def token_weights(ids: Sequence[int], idf) -> torch.Tensor:
    """IDF weight of each token of a caption, looked up in ``idf`` (a mapping id -> weight).

    Raises:
        KeyError: an id missing from a mapping without a default.
    """
    return torch.tensor([float(idf[int(t)]) for t in ids], dtype=torch.float32)


def normalise_weights(w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Row-normalise (B, L) weights over the valid positions; all-zero rows become uniform."""
    w = w * mask
    total = w.sum(dim=1, keepdim=True)
    uniform = mask / mask.sum(dim=1, keepdim=True).clamp(min=1)
    return torch.where(total > 0, w / torch.where(total > 0, total, torch.ones_like(total)), uniform)


def _pad(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in seqs])
    padded = pad_sequence(seqs, batch_first=True)
    mask = torch.arange(padded.shape[1])[None, :] < lengths[:, None]
    return padded, mask


def _masked_similarity(a, a_mask, b, b_mask, authors_padding: bool = False) -> torch.Tensor:
    """(B, La, Lb) cosines; where either position is padding: -inf (excluded from maxima), or 0 as the authors'
    ``sim * masks``."""
    sim = torch.bmm(a.float(), b.float().transpose(1, 2))
    valid = a_mask[:, :, None] & b_mask[:, None, :]
    return sim.masked_fill(~valid, 0.0 if authors_padding else float("-inf"))


def fine_grained_text(
    cand_tokens: Sequence[torch.Tensor],
    cand_weights: Sequence[torch.Tensor],
    ref_tokens: Sequence[torch.Tensor],
    ref_weights: Sequence[torch.Tensor],
    pairs: torch.Tensor,
    chunk: int = PAIR_CHUNK,
    authors_padding: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token-level greedy matching of candidate captions against reference captions.

    Args:
        cand_tokens: per candidate a (L_i, D) tensor of L2-normalised token embeddings.
        cand_weights: per candidate its (L_i,) unnormalised token weights (IDF or ones).
        ref_tokens: per reference a (L_j, D) tensor.
        ref_weights: per reference its (L_j,) weights.
        pairs (torch.Tensor): (M, 2) long, rows (candidate index, reference index).
        chunk: pairs matched together; with ``authors_padding`` the authors' batch (their ``batch_size``).
        authors_padding: padded positions count as similarity 0 within each chunk, as the authors' code.

    Returns:
        (P, R, F): three (M,) float32 tensors.
    """
    out_p, out_r = [], []
    for start in range(0, len(pairs), chunk):
        block = pairs[start : start + chunk].tolist()
        x, x_mask = _pad([cand_tokens[c] for c, _ in block])
        r, r_mask = _pad([ref_tokens[j] for _, j in block])
        wx = normalise_weights(_pad([cand_weights[c] for c, _ in block])[0], x_mask)
        wr = normalise_weights(_pad([ref_weights[j] for _, j in block])[0], r_mask)
        sim = _masked_similarity(x, x_mask, r, r_mask, authors_padding)
        best_for_x = sim.max(dim=2).values.masked_fill(~x_mask, 0.0)
        best_for_r = sim.max(dim=1).values.masked_fill(~r_mask, 0.0)
        out_p.append((best_for_x * wx).sum(dim=1))
        out_r.append((best_for_r * wr).sum(dim=1))
    p = torch.cat(out_p) if out_p else torch.zeros(0)
    r = torch.cat(out_r) if out_r else torch.zeros(0)
    return p, r, harmonic_mean(p, r)


def fine_grained_video(
    cand_tokens: Sequence[torch.Tensor],
    cand_weights: Sequence[torch.Tensor],
    frames: Sequence[torch.Tensor],
    pairs: torch.Tensor,
    chunk: int = PAIR_CHUNK,
    authors_padding: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy matching of caption tokens against video frames.

    P weighs each token's best frame by the token's normalised weight; R averages each frame's best token
    (frames are unweighted, as in the authors' ``vid_greedy_cos``).

    Args:
        cand_tokens: per candidate (L_i, D), L2-normalised.
        cand_weights: per candidate (L_i,) unnormalised weights.
        frames: per video (K_v, D), L2-normalised frame embeddings.
        pairs (torch.Tensor): (M, 2) long, rows (candidate index, video index).
        chunk: pairs matched together; with ``authors_padding`` the authors' batch (their ``batch_size``).
        authors_padding: padded positions count as similarity 0 within each chunk, as the authors' code.

    Returns:
        (P, R, F): three (M,) float32 tensors.
    """
    out_p, out_r = [], []
    for start in range(0, len(pairs), chunk):
        block = pairs[start : start + chunk].tolist()
        x, x_mask = _pad([cand_tokens[c] for c, _ in block])
        v, v_mask = _pad([frames[k] for _, k in block])
        wx = normalise_weights(_pad([cand_weights[c] for c, _ in block])[0], x_mask)
        sim = _masked_similarity(x, x_mask, v, v_mask, authors_padding)
        best_for_x = sim.max(dim=2).values.masked_fill(~x_mask, 0.0)
        best_for_v = sim.max(dim=1).values.masked_fill(~v_mask, 0.0)
        out_p.append((best_for_x * wx).sum(dim=1))
        out_r.append(best_for_v.sum(dim=1) / v_mask.sum(dim=1))
    p = torch.cat(out_p) if out_p else torch.zeros(0)
    r = torch.cat(out_r) if out_r else torch.zeros(0)
    return p, r, harmonic_mean(p, r)


def video_embedding(frames: torch.Tensor) -> torch.Tensor:
    """normalise(mean of the L2-normalised frame embeddings): (K, D) -> (D,)."""
    return F.normalize(frames.float().mean(dim=0), dim=-1)


def coarse(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine of L2-normalised (M, D) global embeddings."""
    return (a.float() * b.float()).sum(dim=-1)


def best_per_candidate(values: torch.Tensor, owner: torch.Tensor, n: int) -> torch.Tensor:
    """max over each candidate's references: (M,) pair values, (M,) owners -> (n,)."""
    best = torch.full((n,), float("-inf"))
    best = best.scatter_reduce(0, owner.long(), values.float(), reduce="amax", include_self=True)
    if torch.isinf(best).any():
        missing = torch.nonzero(torch.isinf(best)).flatten()[:5].tolist()
        raise ValueError(f"candidates {missing} have no reference")
    return best


def full_scores(figr_p, figr_r, figr_f, cogr) -> dict[str, torch.Tensor]:
    """The authors' result layout: fine-grained P/R/F, coarse, and full = (fine + coarse) / 2."""
    return {
        "figr_P": figr_p,
        "figr_R": figr_r,
        "figr_F": figr_f,
        "cogr": cogr,
        "full_P": (figr_p + cogr) / 2,
        "full_R": (figr_r + cogr) / 2,
        "full_F": (figr_f + cogr) / 2,
    }


def combine_variants(
    video: dict[str, torch.Tensor], text: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """EMScore(X,V,X*): the mean of the (X,V) and (X,X*) fine and coarse parts, then ``full`` from those."""
    parts = {k: (video[k] + text[k]) / 2 for k in ("figr_P", "figr_R", "figr_F", "cogr")}
    return full_scores(parts["figr_P"], parts["figr_R"], parts["figr_F"], parts["cogr"])
