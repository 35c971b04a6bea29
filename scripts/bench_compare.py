#!/usr/bin/env python
"""Speed of capeval.compare's paired permutation test against scipy's on the same data.

    .venv/bin/python scripts/bench_compare.py                      # 5,000 and 40,000 items, 10,000 draws
    .venv/bin/python scripts/bench_compare.py --items 5000 --repeats 5

Per corpus size: ``scipy.stats.permutation_test((d,), |mean|, permutation_type="samples")`` (the field's
general resampler) against capeval's batched sign flips (the same test: flipping the sign of ``a_i - b_i`` is
swapping the two systems on item i), p-value only, the median of ``--repeats`` runs of each after a warm-up,
and the two p-values, which agree within Monte Carlo error. Then ``capeval.compare`` in full (test and
bootstrap interval) for each method.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial

import numpy as np
from scipy import stats


def _median_time(fn, repeats: int):
    fn()
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value


def main(argv: list[str] | None = None) -> int:
    from capeval.significance.paired_tests import _abs_mean, _batch, _permutation_p, compare

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, nargs="+", default=[5000, 40_000])
    parser.add_argument("--n-resamples", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    print(f"{'items':>7} {'scipy s':>9} {'capeval s':>9} {'ratio':>6} {'p scipy':>8} {'p capeval':>9}")
    for n in args.items:
        rng = np.random.default_rng(0)
        a = rng.random(n)
        b = a - 0.002 + rng.normal(0, 0.1, n)
        d = a - b
        scipy_p = partial(
            stats.permutation_test, (d,), _abs_mean, permutation_type="samples", vectorized=True,
            n_resamples=args.n_resamples, alternative="greater", batch=_batch(n),
        )  # fmt: skip
        t_scipy, p_scipy = _median_time(
            lambda f=scipy_p: f(rng=np.random.default_rng(1)).pvalue, args.repeats
        )
        ours = partial(_permutation_p, d, args.n_resamples)
        t_ours, p_ours = _median_time(lambda f=ours: f(np.random.default_rng(1))[0], args.repeats)
        print(
            f"{n:>7} {t_scipy:>9.2f} {t_ours:>9.2f} {t_scipy / t_ours:>6.1f} {p_scipy:>8.4f} {p_ours:>9.4f}"
        )
        for method in ("permutation", "bootstrap"):
            run = partial(compare, a, b, method=method, n_resamples=args.n_resamples)
            t, result = _median_time(run, 1)
            print(f"        compare(method={method!r}) {t:.2f} s: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
