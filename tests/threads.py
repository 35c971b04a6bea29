"""Running one call from several threads that start at the same moment, for the thread-safety tests."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_together(call: Callable[[], object], n: int = 4) -> list:
    """``call()`` in ``n`` threads released together by a barrier; each thread's result or exception, in order."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def work(i: int) -> None:
        barrier.wait()
        try:
            results[i] = call()
        except Exception as err:  # noqa: BLE001 - returned for the caller's assertion
            results[i] = err

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
