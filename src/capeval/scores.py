"""Score formulas on embeddings: pure tensor/numpy maths, no I/O, no models.

The plain image-caption cosine, CLIP-S, the reference-based harmonic mean (RefCLIP-S, RefPAC-S) and WEmbSim's
cosines of mean word embeddings. Every function returns one value per candidate, so the metric modules, the CLI, the Trainer
hooks and the benchmarks all share one implementation. (EMScore's matching: ``capeval.emscore_matching``.)
"""

from __future__ import annotations

import numpy as np
import torch

W_CLIP_S = 2.5  # Hessel et al. 2021, sec. 3: rescales CLIP-S of ViT-B/32 to roughly [0, 1]
W_PAC_S = 2.0  # Sarto et al. 2023, sec. 4: the rescaling weight of PAC-S
# Sharif et al. 2020, eq. 2: cossim(a, b) = |a . b| / (|a| |b|), the absolute value of the cosine.
WEMBSIM_ABSOLUTE_COSINE = True


def raw_cosine(image_emb: torch.Tensor, text_emb: torch.Tensor) -> torch.Tensor:
    """cos(c, v) row by row: the plain cosine, neither rescaled (no w) nor clipped at 0, in [-1, 1].

    The number web-data filters threshold, computed on the caption as written (no prompt such as CLIP-S's
    "A photo depicts"): LAION-400M kept pairs whose OpenAI CLIP ViT-B/32 cosine was at least 0.3 (its release
    notes, 2021) and LAION-5B's English part those at least 0.28 (Schuhmann et al. 2022). DataComp's metadata
    holds it as ``clip_b32_similarity_score`` and ``clip_l14_similarity_score`` (OpenAI ViT-B/32 and ViT-L/14),
    which its baselines threshold or cut at a top fraction (mlfoundations/datacomp ``baselines/apply_filter.py``;
    its ``laion2b`` baseline keeps B/32 scores of at least 0.28).

    Args:
        image_emb (torch.Tensor): (N, D), L2-normalised.
        text_emb (torch.Tensor): (N, D), L2-normalised; row i is the caption of image i.

    Returns:
        torch.Tensor: (N,) float32.
    """
    if image_emb.shape != text_emb.shape:
        raise ValueError(
            f"image embeddings {tuple(image_emb.shape)} and text embeddings {tuple(text_emb.shape)} differ"
        )
    return (image_emb.float() * text_emb.float()).sum(dim=-1)


def clip_s(image_emb: torch.Tensor, text_emb: torch.Tensor, w: float = W_CLIP_S) -> torch.Tensor:
    """CLIP-S(c, v) = w * max(cos(c, v), 0), row by row (``raw_cosine`` rescaled and clipped).

    Args:
        image_emb (torch.Tensor): (N, D), L2-normalised.
        text_emb (torch.Tensor): (N, D), L2-normalised; row i is the caption of image i.
        w: rescaling weight.

    Returns:
        torch.Tensor: (N,) float32.
    """
    return w * raw_cosine(image_emb, text_emb).clamp(min=0)


def best_reference_cosine(
    cand_emb: torch.Tensor, ref_emb: torch.Tensor, ref_owner: torch.Tensor, n_candidates: int | None = None
) -> torch.Tensor:
    """max over its references r of cos(c, r), for every candidate c.

    Args:
        cand_emb (torch.Tensor): (N, D), L2-normalised.
        ref_emb (torch.Tensor): (M, D), L2-normalised references of all candidates, flattened.
        ref_owner (torch.Tensor): (M,) long, the candidate index each reference belongs to.
        n_candidates: N (defaults to ``len(cand_emb)``); every candidate must own a reference.

    Returns:
        torch.Tensor: (N,) float32.
    """
    n = len(cand_emb) if n_candidates is None else n_candidates
    owner = ref_owner.long()
    cos = (cand_emb.float()[owner] * ref_emb.float()).sum(dim=-1)
    best = torch.full((n,), float("-inf"))
    best = best.scatter_reduce(0, owner, cos, reduce="amax", include_self=True)
    if torch.isinf(best).any():
        missing = torch.nonzero(torch.isinf(best)).flatten()[:5].tolist()
        raise ValueError(f"candidates {missing} have no reference")
    return best


def harmonic_mean(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """2ab / (a + b), and 0 where a + b = 0.

    The CLIPScore authors' code divides by zero there (NaN when both terms are 0); a caption with no
    similarity to either side scores 0 here instead. Elsewhere the formula is theirs, unclipped.
    """
    a, b = a.float(), b.float()
    denom = a + b
    safe = torch.where(denom == 0, torch.ones_like(denom), denom)
    return torch.where(denom == 0, torch.zeros_like(denom), 2 * a * b / safe)


# |a + b| below this share of |a| + |b| counts as near zero: there 2ab / (a + b) exceeds ten times the harmonic
# mean of |a| and |b| (|2ab / (a + b)| >= 2|a||b| / (0.1 (|a| + |b|))), far outside either term's range. Only terms
# of opposite signs come near it: a negative best-reference cosine against a positive CLIP-S.
NEAR_ZERO_DENOMINATOR = 0.1


def near_zero_denominators(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Indices where the harmonic mean's denominator a + b is near zero relative to the terms.

    That is ``|a + b| < NEAR_ZERO_DENOMINATOR * (|a| + |b|)``; both terms 0 (scored 0) is not.

    Returns:
        torch.Tensor: (K,) long, increasing.
    """
    a, b = a.float(), b.float()
    scale = a.abs() + b.abs()
    return torch.nonzero((scale > 0) & ((a + b).abs() < NEAR_ZERO_DENOMINATOR * scale)).flatten()


def ref_clip_s(
    clip_scores: torch.Tensor, best_ref_cos: torch.Tensor, clip_reference_cosine: bool = False
) -> torch.Tensor:
    """RefCLIP-S = H-Mean(CLIP-S(c, v), max_r cos(c, r)); RefPAC-S is the same on PAC-S values.

    Args:
        clip_scores (torch.Tensor): (N,) CLIP-S (or PAC-S) values (already rescaled by w and clipped at 0).
        best_ref_cos (torch.Tensor): (N,) best-reference cosines.
        clip_reference_cosine: use max(0, max_r cos(c, r)) as the papers write it (Hessel et al. 2021, eq. 2;
            Sarto et al. 2023, eq. 5-6); both authors' released code (the default) does not clip
            (jmhessel/clipscore ``clipscore.py`` ``get_refonlyclipscore``; aimagelab/pacscore
            ``evaluation/pac_score/pac_score.py`` ``RefPACScore``).

    Returns:
        torch.Tensor: (N,) float32.
    """
    text_side = best_ref_cos.clamp(min=0) if clip_reference_cosine else best_ref_cos
    return harmonic_mean(clip_scores, text_side)


def reference_cosines(
    centroids: np.ndarray,
    candidate_doc: np.ndarray,
    reference_doc: np.ndarray,
    owner: np.ndarray,
    absolute: bool = WEMBSIM_ABSOLUTE_COSINE,
) -> np.ndarray:
    """(M,) cosine of each reference's mean embedding with its candidate's; NaN where either is zero.

    Args:
        centroids (np.ndarray): (K, D) mean word embeddings of every document.
        candidate_doc (np.ndarray): (N,) row of each candidate in ``centroids``.
        reference_doc (np.ndarray): (M,) row of each reference in ``centroids``.
        owner (np.ndarray): (M,) the candidate each reference belongs to.
        absolute: |a . b| / (|a| |b|) as Sharif et al. 2020 write it (eq. 2), so opposite mean embeddings
            count as similar as aligned ones; ``False`` keeps the sign (a . b / (|a| |b|), in [-1, 1]).
    """
    norms = np.linalg.norm(centroids, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        unit = centroids / norms[:, None]
    unit[norms == 0] = np.nan
    c = unit[candidate_doc[owner]]
    r = unit[reference_doc]
    cosines = np.einsum("ij,ij->i", c, r)
    return np.abs(cosines) if absolute else cosines


def reduce_over_references(cosines: np.ndarray, owner: np.ndarray, n: int, reduction: str) -> np.ndarray:
    """(n,) per-candidate ``mean``/``max``/``min`` of its finite cosines; 0 when none is finite."""
    valid = np.isfinite(cosines)
    counts = np.bincount(owner, weights=valid, minlength=n)
    out = np.zeros(n)
    if reduction == "mean":
        sums = np.bincount(owner, weights=np.where(valid, cosines, 0.0), minlength=n)
        np.divide(sums, counts, out=out, where=counts > 0)
        return out
    fill = -np.inf if reduction == "max" else np.inf
    values = np.where(valid, cosines, fill)
    best = np.full(n, fill)
    (np.maximum if reduction == "max" else np.minimum).at(best, owner, values)
    return np.where(counts > 0, best, 0.0)
