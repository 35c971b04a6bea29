"""The papers' evaluation protocols: which rows count, which references a metric may see, how ratings aggregate.

Every function takes per-item metric scores aligned with a loader's rows and returns plain numbers, so any
metric (ours, a baseline, a user's callable) is measured the same way:

- Flickr8k-Expert (Hessel et al. 2021, app. A, after SPICE): drop the pairs whose candidate is one of its
  image's references (158); "method A" keeps each expert rating as its own row, "method B" averages them;
  Kendall tau-c (tau-b also reported).
- Flickr8k-CF: fraction of "yes"; every judged caption of an image is removed from that image's references
  (as the CLIPScore script does); Kendall tau-b.
- Composite: the human-written caption that was rated is removed from its image's references (the harder
  setting of Hessel et al.; ``exclude_candidate=False`` keeps it, the easier setting of earlier work); tau-c.
- Pascal-50S / Abstract-50S: accuracy per category against the consensus label; reference-based metrics see
  5 references drawn at random (seeded) from the pair's references, accuracy averaged over 5 draws.
- FOIL: accuracy of the correct caption over its foil with the first reference or all four.
- VATEX-EVAL: Kendall tau-b and Spearman against each annotator, averaged over the 3 annotators, metric scores
  rounded to 4 decimals first (as the EMScore script does); 0, 1 or 9 references (the first n).
- System level: Pearson / Spearman / Kendall of per-system mean scores against system-level human scores.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Sequence

import datasets
import numpy as np

from capeval.bench.statistics import kendall_tau, pairwise_accuracy, pearson, spearman

PASCAL_N_REFS = 5  # Hessel et al. 2021, sec. 4.2; Sarto et al. 2023: five references per pair
PASCAL_N_DRAWS = 5  # Sarto et al. (aimagelab/pacscore#4): averaged over five random draws
PASCAL_SEED = 0
VATEX_ROUND_DECIMALS = 4  # EMScore's compute_correlation_uniquehuman rounds predictions to 4 decimals


# ---------------------------------------------------------------- rating benchmarks


def exclude_candidates_in_references(ds: datasets.Dataset) -> datasets.Dataset:
    """Flickr8k-Expert rule: drop rows whose candidate is one of its own image's references."""
    if "candidate_in_references" not in ds.column_names:
        raise ValueError("this dataset has no 'candidate_in_references' column (use a Flickr8k loader)")
    keep = [i for i, flag in enumerate(ds["candidate_in_references"]) if not flag]
    return ds.select(keep)


def remove_judged_from_references(ds: datasets.Dataset) -> datasets.Dataset:
    """Flickr8k-CF rule: every caption judged for an image leaves that image's reference list.

    The CLIPScore script removes, image by image, each judged caption from the shared ground-truth list, so
    a caption also loses the other judged captions of its image (one occurrence each).
    """
    judged: dict[str, list[str]] = defaultdict(list)
    for img, cand in zip(ds["image_id"], ds["candidate"], strict=True):
        judged[img].append(cand)
    cache: dict[str, list[str]] = {}

    def refs_for(img: str, refs: list[str]) -> list[str]:
        if img not in cache:
            left = list(refs)
            for cand in judged[img]:
                if cand in left:
                    left.remove(cand)
            cache[img] = left
        return cache[img]

    new_refs = [refs_for(img, refs) for img, refs in zip(ds["image_id"], ds["references"], strict=True)]
    return ds.remove_columns("references").add_column(
        "references", new_refs, feature=ds.features["references"]
    )


def _closest(text: str, options: Sequence[str]) -> int:
    low = text.lower()
    for i, o in enumerate(options):
        if o.lower() == low:
            return i
    ratios = [difflib.SequenceMatcher(None, low, o.lower()).ratio() for o in options]
    return int(np.argmax(ratios))


def composite_references(ds: datasets.Dataset, exclude_candidate: bool = True) -> datasets.Dataset:
    """Composite: remove, for each image, the reference that was shown to raters as the human candidate.

    The rated copy can differ in case or punctuation from the reference file, so the closest reference
    (exact case-insensitive match, else the highest difflib ratio) is the one removed. With
    ``exclude_candidate=False`` the references stay complete (the easier setting).
    """
    if not exclude_candidate:
        return ds
    if "human_candidate" not in ds.column_names:
        raise ValueError("this dataset has no 'human_candidate' column (use load_composite)")
    drop: dict[tuple[str, str], int] = {}
    for cat, img, cand, refs, human in zip(
        ds["category"], ds["image_id"], ds["candidate"], ds["references"], ds["human_candidate"], strict=True
    ):
        if human and refs:
            drop[(cat, img)] = _closest(cand, refs)
    new_refs = [
        [r for j, r in enumerate(refs) if j != drop.get((cat, img), -1)]
        for cat, img, refs in zip(ds["category"], ds["image_id"], ds["references"], strict=True)
    ]
    return ds.remove_columns("references").add_column(
        "references", new_refs, feature=ds.features["references"]
    )


def rating_rows(ds: datasets.Dataset, method: str = "A") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Expand items to correlation rows.

    Returns:
        ``(item_index, human, group)``: for method ``"A"`` one row per rating (the three Flickr8k experts are
        three rows of the same item), for ``"B"`` one row per item with the mean rating. ``group`` is the item
        index, for resampling whole items in a bootstrap.
    """
    scores = ds["human_scores"]
    if method == "A":
        idx = np.array([i for i, s in enumerate(scores) for _ in s], dtype=np.int64)
        human = np.array([x for s in scores for x in s], dtype=np.float64)
    elif method == "B":
        idx = np.arange(len(scores), dtype=np.int64)
        human = np.array([float(np.mean(s)) if len(s) else np.nan for s in scores], dtype=np.float64)
    else:
        raise ValueError(f"method must be 'A' (one row per rating) or 'B' (mean rating), got {method!r}")
    return idx, human, idx.copy()


def rating_correlations(
    scores: Sequence[float],
    ds: datasets.Dataset,
    method: str = "A",
    measures: Sequence[str] = ("kendall_c", "kendall_b"),
) -> dict[str, float]:
    """Correlations (x 100) of per-item scores with the ratings, rows expanded by ``method``."""
    scores = np.asarray(scores, dtype=np.float64)
    if len(scores) != len(ds):
        raise ValueError(f"got {len(scores)} scores for {len(ds)} items")
    idx, human, _ = rating_rows(ds, method)
    x = scores[idx]
    out = {}
    for m in measures:
        if m == "kendall_c":
            out[m] = 100 * kendall_tau(x, human, "c")
        elif m == "kendall_b":
            out[m] = 100 * kendall_tau(x, human, "b")
        elif m == "spearman":
            out[m] = 100 * spearman(x, human)
        elif m == "pearson":
            out[m] = 100 * pearson(x, human)
        else:
            raise ValueError(f"unknown measure {m!r}")
    return out


# ---------------------------------------------------------------- pairwise benchmarks


def draw_references(
    references: Sequence[Sequence[str]],
    n_refs: int = PASCAL_N_REFS,
    n_draws: int = PASCAL_N_DRAWS,
    seed: int = PASCAL_SEED,
) -> list[list[list[str]]]:
    """``n_draws`` seeded draws of ``n_refs`` references per item (all of them when an item has fewer).

    Returns:
        ``draws[d][i]``: the references item ``i`` sees in draw ``d``.
    """
    if n_refs < 1 or n_draws < 1:
        raise ValueError(f"n_refs and n_draws must be >= 1, got {n_refs} and {n_draws}")
    draws = []
    for d in range(n_draws):
        rng = np.random.default_rng([seed, d])
        drawn = []
        for refs in references:
            refs = list(refs)
            if len(refs) <= n_refs:
                drawn.append(refs)
            else:
                pick = rng.choice(len(refs), size=n_refs, replace=False)
                drawn.append([refs[j] for j in sorted(pick)])
        draws.append(drawn)
    return draws


def accuracy_by_category(
    scores_a: Sequence[float],
    scores_b: Sequence[float],
    labels: Sequence[int],
    categories: Sequence[str],
    order: Sequence[str] | None = None,
    ties: str = "half",
    seed: int = 0,
) -> dict[str, float]:
    """Pairwise accuracy (x 100) per category and ``mean`` (the unweighted mean of the categories)."""
    a = np.asarray(scores_a, dtype=np.float64)
    b = np.asarray(scores_b, dtype=np.float64)
    y = np.asarray(labels)
    cats = np.asarray(categories)
    order = list(order) if order is not None else sorted(set(cats.tolist()))
    out = {}
    for c in order:
        m = cats == c
        if m.any():
            out[c] = 100 * pairwise_accuracy(a[m], b[m], y[m], ties=ties, seed=seed)
    if out:
        out["mean"] = float(np.mean(list(out.values())))
    return out


def length_scores(captions: Sequence[str]) -> list[float]:
    """The length baseline: a caption's number of words (the longer caption wins)."""
    return [float(len(c.split())) for c in captions]


# ---------------------------------------------------------------- VATEX-EVAL


def vatex_references(references: Sequence[Sequence[str]], n_refs: int) -> list[list[str]] | None:
    """The first ``n_refs`` references of each item (the EMScore script's ``refs[:, :n]``); None for 0."""
    if n_refs < 0:
        raise ValueError(f"n_refs must be >= 0, got {n_refs}")
    if n_refs == 0:
        return None
    return [list(r[:n_refs]) for r in references]


def vatex_eval_correlation(
    scores: Sequence[float],
    human_scores: Sequence[Sequence[float]] | datasets.Dataset,
    round_decimals: int | None = VATEX_ROUND_DECIMALS,
) -> dict[str, object]:
    """VATEX-EVAL protocol: Kendall tau-b and Spearman per annotator, averaged over annotators (x 100).

    Args:
        scores: one metric score per candidate, in the dataset's row order.
        human_scores: the ``human_scores`` column (one list of 3 ratings per candidate) or the dataset itself.
        round_decimals: round the metric scores first, as the authors' script does (``None``: no rounding).

    Returns:
        ``{"kendall": mean tau-b, "spearman": mean rho, "kendall_per_annotator": [...],
        "spearman_per_annotator": [...]}``, all x 100.
    """
    if isinstance(human_scores, datasets.Dataset):
        human_scores = human_scores["human_scores"]
    h = np.asarray(human_scores, dtype=np.float64)
    x = np.asarray(scores, dtype=np.float64)
    if h.ndim != 2 or h.shape[0] != x.shape[0]:
        raise ValueError(
            f"got {x.shape[0]} scores for human scores of shape {h.shape}; expected (n, annotators)"
        )
    if round_decimals is not None:
        x = np.around(x, decimals=round_decimals)
    kt = [100 * kendall_tau(x, h[:, j], "b") for j in range(h.shape[1])]
    sp = [100 * spearman(x, h[:, j]) for j in range(h.shape[1])]
    return {
        "kendall": float(np.mean(kt)),
        "spearman": float(np.mean(sp)),
        "kendall_per_annotator": kt,
        "spearman_per_annotator": sp,
    }


# ---------------------------------------------------------------- system level


def system_means(scores: Sequence[float], systems: Sequence[str]) -> dict[str, float]:
    """Mean score per system, systems in first-seen order."""
    sums: dict[str, list[float]] = {}
    for s, sys in zip(scores, systems, strict=True):
        sums.setdefault(sys, []).append(float(s))
    return {k: float(np.mean(v)) for k, v in sums.items()}


def system_level_correlation(
    scores: Sequence[float],
    systems: Sequence[str],
    human: dict[str, float] | Sequence[float],
    exclude: Sequence[str] = (),
) -> dict[str, float]:
    """Pearson, Spearman and Kendall tau-b (x 100) of per-system mean scores against system human scores.

    Args:
        scores: per-item metric scores.
        systems: the system of each item.
        human: ``{system: human score}`` (e.g. COCO 2015 M1) or per-item human scores to average per system.
        exclude: systems left out (e.g. ``["Human"]`` on THumB).
    """
    if len(scores) != len(systems):
        raise ValueError(f"got {len(scores)} scores for {len(systems)} system labels")
    metric = {k: v for k, v in system_means(scores, systems).items() if k not in exclude}
    if not isinstance(human, dict):
        human = system_means(human, systems)
    missing = [k for k in metric if k not in human]
    if missing:
        raise ValueError(f"no human score for systems {missing}")
    names = list(metric)
    if len(names) < 3:
        raise ValueError(f"a system-level correlation needs at least 3 systems, got {len(names)}")
    x = [metric[k] for k in names]
    y = [human[k] for k in names]
    return {
        "pearson": 100 * pearson(x, y),
        "spearman": 100 * spearman(x, y),
        "kendall_b": 100 * kendall_tau(x, y, "b"),
        "n_systems": len(names),
    }
