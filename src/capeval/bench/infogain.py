"""Forward-selection information-gain analysis (Hessel et al. 2021, sec. 4.6 and fig. 2).

Which metrics carry complementary information about human ratings? Starting from no metric, each step adds
the metric whose inclusion most raises the cross-validated R^2 of a linear regression predicting the human
rating from the selected metrics' scores; the order of selection is the metrics' importance rank and the R^2
curve shows how much each addition gains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ForwardSelection:
    """``order[k]`` is the metric added at step k and ``r2[k]`` the cross-validated R^2 after adding it."""

    order: list[str]
    r2: list[float]


def forward_selection(
    metric_scores: dict[str, Sequence[float]],
    human: Sequence[float],
    groups: Sequence | None = None,
    folds: int = 10,
    seed: int = 0,
    max_features: int | None = None,
) -> ForwardSelection:
    """Greedy forward selection of metrics by cross-validated R^2 (scikit-learn ``LinearRegression``).

    Args:
        metric_scores: ``{metric name: per-row score}``, rows aligned with ``human``.
        human: per-row human rating.
        groups: keep rows of one group (e.g. the three ratings of a Flickr8k caption) in the same fold.
        folds: cross-validation folds (at most one per item or group).
        seed: shuffling seed of the folds.
        max_features: stop after this many metrics (default: all).
    """
    from sklearn.linear_model import LinearRegression
    from sklearn.model_selection import GroupKFold, KFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y = np.asarray(human, dtype=np.float64)
    names = list(metric_scores)
    if not names:
        raise ValueError("forward_selection needs at least one metric")
    X = np.column_stack([np.asarray(metric_scores[n], dtype=np.float64) for n in names])
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"metric scores have {X.shape[0]} rows, human ratings {y.shape[0]}")
    n_units = len(np.unique(groups)) if groups is not None else len(y)
    folds = min(folds, n_units // 2)  # at least two items per test fold, or R^2 is undefined
    if folds < 2:
        raise ValueError(f"cross-validation needs at least 4 items (or groups), got {n_units}")
    if groups is not None:
        cv = GroupKFold(n_splits=folds)
        split_kw = {"groups": np.asarray(groups)}
        # GroupKFold does not shuffle; a seeded permutation of the rows gives seeded folds.
        perm = np.random.default_rng(seed).permutation(len(y))
        X, y, split_kw["groups"] = X[perm], y[perm], split_kw["groups"][perm]
    else:
        cv = KFold(n_splits=folds, shuffle=True, random_state=seed)
        split_kw = {}
    chosen: list[int] = []
    order, curve = [], []
    limit = len(names) if max_features is None else min(max_features, len(names))
    while len(chosen) < limit:
        best, best_r2 = None, -np.inf
        for j in range(len(names)):
            if j in chosen:
                continue
            model = make_pipeline(StandardScaler(), LinearRegression())
            r2 = float(
                np.nanmean(cross_val_score(model, X[:, chosen + [j]], y, cv=cv, scoring="r2", **split_kw))
            )
            if best is None or r2 > best_r2:
                best, best_r2 = j, r2
        chosen.append(best)
        order.append(names[best])
        curve.append(float(best_r2))
    return ForwardSelection(order, curve)
