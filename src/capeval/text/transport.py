"""Word Mover's Distance of a batch of captions to their references: exact transport, batched and pruned.

The batch is computed at once and gives, per candidate, exactly the distance of a gensim ``wmdistance`` loop
(to float rounding): every caption is tokenised once, the batch vocabulary embedded once, cost entries come
from one vectorised pass over the distinct word pairs, a pair of documents met several times is solved
once, pairs with a one-word side have a closed form (all mass moves to or from that word), and the relaxed
WMD lower bound of Kusner et al. (which dominates their word-centroid bound) skips references that cannot
beat the best distance found so far. Skipping never changes a score: a skipped reference's distance is
provably no smaller. Exact problems go to POT's network-simplex solver (``ot.lp.emd_c``, the routine behind
``ot.emd2``, called without ``ot.emd2``'s per-call checks, which cost 20 times the solve on caption-sized
problems), optionally in worker processes.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from capeval.diagnostics.categories import TransportWarning, user_stacklevel
from capeval.text.documents import Documents

MAX_ITER = 100_000  # POT ot.emd2 default numItermax
# Distinct in-vocabulary words per caption: a pair's cost matrix is m x n, and building it with its lower bounds
# takes about 150 bytes per entry (measured), so two 5,000-word texts took 3.2 GB. COCO and Flickr captions have
# fewer than 100 tokens, image paragraphs about 70 words; 1,000 distinct words is a text of several pages, and its
# pair with another of that size costs at most about 150 MB. Longer texts are refused by the WMD metric.
MAX_DOCUMENT_WORDS = 1_000
# Cost entries built at once: a batch above it is solved in slices of consecutive references (about 600 MB at
# most); every batch of COCO-sized captions fits in one slice (5,000 captions x 5 references x ~25 entries).
SLICE_ENTRIES = 4_000_000
# Processes pay once a batch's exact problems hold this many cost entries (long texts, not 10-word captions).
PARALLEL_MIN_ENTRIES = 2_000_000
_CHUNK_VALUES = 1 << 19  # vector components gathered per distance chunk (4 MiB of float64 per operand)


@dataclass
class WMDResult:
    """Per candidate: best-reference distance (inf when no reference is comparable) and its index (-1).

    ``pairs`` distinct (candidate, reference) documents pairs; of those, ``solved`` by POT, ``closed_form``
    without a solver, ``pruned`` skipped by the lower bound (the rest have an empty side).
    """

    distances: np.ndarray
    best_reference: np.ndarray
    pairs: int
    solved: int
    closed_form: int
    pruned: int


def _emd_solver():
    try:
        from ot.lp.emd_wrap import emd_c

        def solve(a: np.ndarray, b: np.ndarray, cost: np.ndarray) -> float:
            result = emd_c(a, b, cost, MAX_ITER, 1)
            if result[4] != 1:
                warnings.warn(
                    f"POT network simplex ended with code {result[4]} (not optimal)",
                    TransportWarning,
                    stacklevel=user_stacklevel(),
                )
            return float(result[1])

    except ImportError:  # a POT whose private layout moved: the public, slower entry point
        import ot

        def solve(a: np.ndarray, b: np.ndarray, cost: np.ndarray) -> float:
            return float(ot.emd2(a, b, cost, numItermax=MAX_ITER))

    return solve


def _solve_tasks(tasks: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[float]:
    solve = _emd_solver()
    out = []
    for a, b, cost in tasks:
        # As ot.emd2: rescale b so both sides carry exactly the same mass after rounding.
        out.append(solve(a, b * (a.sum() / b.sum()), cost))
    return out


def _pair_costs(docs: Documents, pc: np.ndarray, pr: np.ndarray):
    """Flat row-major cost matrices of the document pairs ``(pc[p], pr[p])`` (all non-empty)."""
    sizes = docs.sizes
    m, n = sizes[pc], sizes[pr]
    counts = m * n
    off = np.zeros(len(pc) + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    total = int(off[-1])
    owner = np.repeat(np.arange(len(pc)), counts)
    q = np.arange(total, dtype=np.int64) - off[owner]
    n_el = n[owner]
    row, col = q // n_el, q % n_el
    w1 = docs.words[docs.ptr[pc][owner] + row]
    w2 = docs.words[docs.ptr[pr][owner] + col]
    n_vocab = len(docs.vocabulary)
    keys, inverse = np.unique(w1 * n_vocab + w2, return_inverse=True)
    u1, u2 = keys // n_vocab, keys % n_vocab
    dist = np.empty(len(keys), dtype=np.float64)
    emb = docs.embeddings
    step = max(1, _CHUNK_VALUES // max(emb.shape[1], 1))  # word pairs per chunk: memory bounded for any dim
    for s in range(0, len(keys), step):
        diff = emb[u1[s : s + step]] - emb[u2[s : s + step]]
        dist[s : s + step] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    cost = dist[inverse.reshape(-1)]
    # Relaxed WMD (Kusner et al. 2015, sec. 4): each side moves all its mass to its nearest words.
    # Row-major layout: row a of pair p starts at off[p] + a * n[p]; pair p's rows start at sum(m[:p]).
    row_starts = np.flatnonzero(col == 0)
    row_min = np.minimum.reduceat(cost, row_starts)
    row_w = docs.weights[(docs.ptr[pc][owner] + row)[row_starts]]
    lb_rows = np.add.reduceat(row_min * row_w, _starts(m))
    # The same entries column-major: column b of pair p starts at off[p] + b * m[p].
    by_col = np.empty_like(cost)
    by_col[off[owner] + col * m[owner] + row] = cost
    first = np.flatnonzero(row == 0)
    col_min = np.minimum.reduceat(by_col, off[owner[first]] + col[first] * m[owner[first]])
    col_w = docs.weights[(docs.ptr[pr][owner] + col)[first]]
    lb_cols = np.add.reduceat(col_min * col_w, _starts(n))
    return cost, off, m, n, np.maximum(lb_rows, lb_cols), lb_rows, lb_cols


def _starts(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=out[1:])
    return out


def best_reference_wmd(
    docs: Documents,
    candidate_doc: np.ndarray,
    reference_doc: np.ndarray,
    owner: np.ndarray,
    prune: bool = True,
    num_workers: int | None = 1,
) -> WMDResult:
    """Smallest WMD from each candidate to its references.

    Memory stays bounded: references are taken in slices of at most ``SLICE_ENTRIES`` cost entries (a pair
    larger than that, beyond ``MAX_DOCUMENT_WORDS`` squared, is a slice of its own), each slice starting from
    the best distances the earlier ones found, so pruning carries over and the result is the same.

    Args:
        docs: the batch's documents.
        candidate_doc: (N,) document of each candidate.
        reference_doc: (M,) document of each reference, all references of all candidates in order.
        owner: (M,) candidate of each reference (non-decreasing).
        prune: skip references whose lower bound is no smaller than the best distance found.
        num_workers: processes for the exact problems; ``None`` picks them only for large problems.

    Returns:
        distances ``inf`` where the candidate or every reference has no in-vocabulary word.
    """
    sizes = docs.sizes
    entries = sizes[candidate_doc[owner]] * sizes[reference_doc]
    if int(entries.sum()) <= SLICE_ENTRIES:
        return _best_reference_wmd(docs, candidate_doc, reference_doc, owner, prune, num_workers)
    n_cand = len(candidate_doc)
    best = np.full(n_cand, np.inf)
    best_ref = np.full(n_cand, -1, dtype=np.int64)
    first_ref = np.searchsorted(owner, np.arange(n_cand), side="left")
    stats = np.zeros(4, dtype=np.int64)
    cumulative = np.cumsum(entries)
    start = 0
    while start < len(owner):
        base = int(cumulative[start - 1]) if start else 0
        end = max(int(np.searchsorted(cumulative, base + SLICE_ENTRIES, side="right")), start + 1)
        lo, hi = int(owner[start]), int(owner[end - 1]) + 1
        part = _best_reference_wmd(
            docs,
            candidate_doc[lo:hi],
            reference_doc[start:end],
            owner[start:end] - lo,
            prune,
            num_workers,
            initial=best[lo:hi],
        )
        better = np.flatnonzero(part.best_reference >= 0) + lo
        # The slice numbers a candidate's references from its first one inside the slice.
        shift = np.maximum(first_ref[better], start) - first_ref[better]
        best[better] = part.distances[better - lo]
        best_ref[better] = part.best_reference[better - lo] + shift
        stats += (part.pairs, part.solved, part.closed_form, part.pruned)
        start = end
    return WMDResult(best, best_ref, *(int(x) for x in stats))


def _best_reference_wmd(
    docs: Documents,
    candidate_doc: np.ndarray,
    reference_doc: np.ndarray,
    owner: np.ndarray,
    prune: bool,
    num_workers: int | None,
    initial: np.ndarray | None = None,
) -> WMDResult:
    """``best_reference_wmd`` of one slice; ``initial`` holds distances already found for its candidates
    (``best_reference`` is -1 where the slice found none smaller)."""
    pc, pr, pair_of_ref = _distinct_pairs(len(docs), candidate_doc[owner], reference_doc)
    table = _pair_table(docs, pc, pr)
    best = np.full(len(candidate_doc), np.inf) if initial is None else np.array(initial, dtype=np.float64)
    with _ExactSolver(docs, table, num_workers) as solver:
        best_ref = _closest_references(owner, pair_of_ref, table, solver, best, prune)
    return WMDResult(
        distances=best,
        best_reference=best_ref,
        pairs=len(pc),
        solved=solver.solved,
        closed_form=table.closed,
        pruned=int(np.isnan(table.exact).sum()),
    )


def _distinct_pairs(
    n_docs: int, candidate_of_ref: np.ndarray, reference_doc: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (candidate document, reference document) pairs of a slice's references.

    Args:
        n_docs: documents in the batch.
        candidate_of_ref: (M,) document of each reference's candidate.
        reference_doc: (M,) document of each reference.

    Returns:
        ``(pc, pr, pair_of_ref)``: (P,) candidate and reference document of each pair, in increasing
        ``(pc, pr)`` order, and (M,) the pair of each reference.
    """
    base = max(n_docs, 1)
    upairs, pair_of_ref = np.unique(candidate_of_ref * base + reference_doc, return_inverse=True)
    return upairs // base, upairs % base, pair_of_ref.reshape(-1)


@dataclass
class _PairTable:
    """What is known of a slice's distinct pairs before any solve, and the exact distances as they come.

    Attributes:
        pc, pr: (P,) candidate and reference document of each pair.
        lower: (P,) relaxed-WMD lower bound; ``inf`` where a side has no word.
        exact: (P,) exact WMD: ``inf`` where a side has no word, filled in for the closed forms, NaN until
            solved (NaN at the end: pruned).
        slot: (P,) index of each pair among the pairs with words on both sides (-1 for the others), which
            ``cost``, ``off``, ``m`` and ``n`` are indexed by.
        cost: flat row-major cost matrices of those pairs; pair ``s`` owns ``cost[off[s]:off[s + 1]]``.
        off: offsets into ``cost``; m, n: the sides' sizes (distinct words).
        closed: pairs whose distance has a closed form (a one-word side, or the same document twice).
    """

    pc: np.ndarray
    pr: np.ndarray
    lower: np.ndarray
    exact: np.ndarray
    slot: np.ndarray
    cost: np.ndarray | None = None
    off: np.ndarray | None = None
    m: np.ndarray | None = None
    n: np.ndarray | None = None
    closed: int = 0

    def problems(self, docs: Documents, pairs: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """POT's inputs of ``pairs`` (all with words on both sides): the weights ``a`` (m,), ``b`` (n,) and
        the (m, n) cost matrix of each."""
        out = []
        for p in pairs:
            s = self.slot[p]
            a = docs.weights[docs.ptr[self.pc[p]] : docs.ptr[self.pc[p] + 1]]
            b = docs.weights[docs.ptr[self.pr[p]] : docs.ptr[self.pr[p] + 1]]
            out.append((a, b, self.cost[self.off[s] : self.off[s + 1]].reshape(self.m[s], self.n[s])))
        return out


def _pair_table(docs: Documents, pc: np.ndarray, pr: np.ndarray) -> _PairTable:
    """Costs, lower bounds and closed-form distances of the pairs ``(pc[p], pr[p])`` (any, empty sides too)."""
    sizes = docs.sizes
    valid = (sizes[pc] > 0) & (sizes[pr] > 0)
    vidx = np.flatnonzero(valid)
    exact = np.full(len(pc), np.nan)
    exact[~valid] = np.inf
    slot = np.full(len(pc), -1, dtype=np.int64)
    slot[vidx] = np.arange(len(vidx))
    table = _PairTable(pc, pr, lower=np.full(len(pc), np.inf), exact=exact, slot=slot)
    if not len(vidx):
        return table
    table.cost, table.off, m, n, lb, lb_rows, lb_cols = _pair_costs(docs, pc[vidx], pr[vidx])
    table.m, table.n = m, n
    table.lower[vidx] = lb
    # One side with a single word: its mass is forced to (from) every word of the other side.
    single = (m == 1) | (n == 1)
    table.exact[vidx[single]] = np.where(m[single] == 1, lb_cols[single], lb_rows[single])
    same = pc[vidx] == pr[vidx]
    table.exact[vidx[same]] = 0.0
    table.closed = int((single | same).sum())
    return table


class _ExactSolver:
    """Solves pairs of a ``_PairTable`` with POT, writing their distances into its ``exact``.

    Large problems go to a process pool (``_workers`` decides), started on first need and shut down when the
    ``with`` block ends. ``solved`` counts the pairs solved.
    """

    def __init__(self, docs: Documents, table: _PairTable, num_workers: int | None) -> None:
        self.docs, self.table, self.num_workers = docs, table, num_workers
        self.executor: ProcessPoolExecutor | None = None
        self.solved = 0

    def __enter__(self) -> _ExactSolver:
        return self

    def __exit__(self, *exc) -> None:
        if self.executor is not None:
            self.executor.shutdown()

    def solve(self, pairs: np.ndarray) -> None:
        """Exact distances of ``pairs`` (pair indices, each with words on both sides) into ``table.exact``."""
        if not len(pairs):
            return
        tasks = self.table.problems(self.docs, pairs)
        workers = _workers(self.num_workers, sum(t[2].size for t in tasks))
        if workers > 1 and len(tasks) >= 4 * workers:
            if self.executor is None:
                self.executor = _executor(workers)
            chunks = np.array_split(np.arange(len(tasks)), workers * 4)
            futures = [self.executor.submit(_solve_tasks, [tasks[i] for i in c]) for c in chunks]
            values = [v for f in futures for v in f.result()]
        else:
            values = _solve_tasks(tasks)
        self.table.exact[pairs] = values
        self.solved += len(pairs)


def _closest_references(
    owner: np.ndarray,
    pair_of_ref: np.ndarray,
    table: _PairTable,
    solver: _ExactSolver,
    best: np.ndarray,
    prune: bool,
) -> np.ndarray:
    """Each candidate's closest reference, visiting its references in increasing lower bound.

    One round takes the next reference of every candidate still active; with ``prune`` a candidate stops at
    the first reference whose lower bound is no smaller than its best distance (every later one is no closer).
    Pairs are solved only when first needed (all at once without ``prune``).

    Args:
        owner: (M,) candidate of each reference (non-decreasing).
        pair_of_ref: (M,) the table's pair of each reference.
        table: the slice's pairs; ``exact`` is filled in as pairs are solved.
        solver: solves the pairs not yet known.
        best: (N,) distances to beat (``inf``, or those earlier slices found); lowered in place.
        prune: skip references that cannot beat ``best``.

    Returns:
        (N,) index of each candidate's closest reference among its own (-1 where none beat ``best``).
    """
    n_cand = len(best)
    lower, exact = table.lower, table.exact
    ref_sorted = np.lexsort((np.arange(len(owner)), lower[pair_of_ref], owner))
    starts = np.searchsorted(owner[ref_sorted], np.arange(n_cand), side="left")
    ends = np.searchsorted(owner[ref_sorted], np.arange(n_cand), side="right")
    best_ref = np.full(n_cand, -1, dtype=np.int64)
    pos = starts.copy()
    active = np.flatnonzero(pos < ends)
    if not prune:
        todo = np.unique(pair_of_ref)
        solver.solve(todo[np.isnan(exact[todo])])
    while len(active):
        refs = ref_sorted[pos[active]]
        pairs = pair_of_ref[refs]
        if prune:
            keep = lower[pairs] < best[active]
            active, refs, pairs = active[keep], refs[keep], pairs[keep]
        solver.solve(np.unique(pairs[np.isnan(exact[pairs])]))
        d = exact[pairs]
        better = d < best[active]
        best[active[better]] = d[better]
        best_ref[active[better]] = refs[better] - np.searchsorted(owner, owner[refs[better]], side="left")
        pos[active] += 1
        active = active[pos[active] < ends[active]]
    return best_ref


def _workers(num_workers: int | None, entries: int) -> int:
    if num_workers is None:
        if entries < PARALLEL_MIN_ENTRIES:
            return 1
        return max(1, min(os.cpu_count() or 1, 8))
    return max(1, int(num_workers))


def _executor(workers: int) -> ProcessPoolExecutor:
    import multiprocessing as mp

    method = "fork" if "fork" in mp.get_all_start_methods() and os.name == "posix" else "spawn"
    return ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context(method))
