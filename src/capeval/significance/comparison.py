"""The result of a paired significance test: a ``Comparison`` record and its one-line summary.

:mod:`capeval.significance.paired_tests` computes it (``compare``, ``compare_many``); ``capeval compare`` prints its
summary, ``capeval score --baseline`` tabulates its fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Comparison:
    """Paired comparison of system ``a`` with system ``b`` on the same ``n`` items.

    Attributes:
        metric: the metric's name (from a result dict's signature, or given), or None.
        name_a, name_b: the systems' names.
        mean_a, mean_b: corpus scores (means of the per-item scores).
        delta: ``mean_a - mean_b``.
        ci_low, ci_high: percentile bootstrap interval of ``delta`` at ``confidence``.
        confidence: the interval's level, e.g. 0.95.
        p_value: two-sided p-value of H0 "the systems score the same".
        method: ``"permutation"`` or ``"bootstrap"``.
        n_resamples: permutations (when not exact) and bootstrap resamples drawn.
        exact: True when the permutation test enumerated all ``2^n`` assignments (p-value exact).
        n: number of paired items.
        seed: the random seed (None: fresh entropy, not reproducible).
        p_adjusted: Holm-adjusted p-value when several systems were compared with ``correction="holm"``.
    """

    metric: str | None
    name_a: str
    name_b: str
    mean_a: float
    mean_b: float
    delta: float
    ci_low: float
    ci_high: float
    confidence: float
    p_value: float
    method: str
    n_resamples: int
    exact: bool
    n: int
    seed: int | None
    p_adjusted: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every field."""
        return asdict(self)

    def __str__(self) -> str:
        head = f"{self.metric}: " if self.metric else ""
        level = f"{100 * self.confidence:g}%"
        if self.method == "permutation" and self.exact:
            how = f"exact paired permutation over all {2**self.n} assignments, n = {self.n}"
        else:
            how = f"paired {self.method}, {self.n_resamples} resamples, n = {self.n}"
        p = f"p = {_format_p(self.p_value)}"
        if self.p_adjusted is not None:
            p += f", Holm-adjusted p = {_format_p(self.p_adjusted)}"
        return (
            f"{head}{self.name_a} {self.mean_a:.4f} vs {self.name_b} {self.mean_b:.4f}, "
            f"delta {self.delta:+.4f} [{level} CI {self.ci_low:+.4f}, {self.ci_high:+.4f}], {p} ({how})"
        )


def _format_p(p: float) -> str:
    """A p-value to four decimals, or in scientific notation below 1e-4 (never a bare 0.0000)."""
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"
