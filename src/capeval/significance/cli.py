"""``capeval compare A.json B.json``: is system A's score different from system B's on the same images?

Reads two per-image score files as ``capeval score --save-per-instance`` writes them (the CLIPScore authors'
layout, ``{image_id: {"CLIPScore": 0.71, ...}}``; ``{image_id: score}`` is read too), pairs the images by id
and runs :func:`capeval.significance.paired_tests.compare` on every metric the two files share (or those named by
``--metrics``), one line (or one JSON object) per metric.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from capeval.diagnostics.extras import require_extra
from capeval.json_files import read_json_file
from capeval.significance.paired_tests import CONFIDENCE, METHODS, N_RESAMPLES, check_magnitudes, compare
from capeval.significance.score_names import CORPUS_NOT_MEAN, SENTENCE, sentence_name

# Registry names of the metrics whose per-image columns carry the CLIPScore authors' names.
_ALIASES = {"pacscore": "pacs", "refpacscore": "refpacs"}
_SCORE_KEY = ""  # the column of a file of bare numbers {image_id: score}


def _normalised(name: str) -> str:
    # "sentence BLEU-4" (what capeval score writes) and "BLEU-4" (older files, other tools) are one metric here.
    key = re.sub(r"[^0-9a-z]", "", name.lower()).removeprefix(SENTENCE)
    return _ALIASES.get(key, key)


def metric_label(column: str) -> str:
    """What a compared column is called in the output: the mean of per-image BLEU or METEOR scores is named
    ``sentence BLEU-4`` (whatever the file called it), never the corpus score's ``BLEU-4``."""
    key = _normalised(column)
    return sentence_name(key) if key in CORPUS_NOT_MEAN else column


def read_per_instance(path: str) -> dict[str, dict[str, float]]:
    """``{image_id: {column: score}}`` of a per-image score file (bare numbers become one unnamed column).

    Raises:
        ValueError: the file is missing or not JSON (any refusal of :func:`capeval.json_files.read_json_file`:
            a key written twice, not UTF-8, ...), not an object of image ids, or an image's entry is neither a
            number nor an object of numbers (named by id and column).
    """
    data = read_json_file(path, "score")
    if not isinstance(data, dict) or not data:
        raise ValueError(
            f"{path}: expected the per-image scores of `capeval score --save-per-instance`, "
            '{"image_id": {"CLIPScore": 0.71, ...}, ...}'
        )
    rows: dict[str, dict[str, float]] = {}
    for image_id, entry in data.items():
        if not isinstance(entry, dict):
            entry = {_SCORE_KEY: entry}
        elif entry and all(isinstance(v, dict) for v in entry.values()):
            raise ValueError(
                f"{path} holds the scores of several systems ({', '.join(list(data)[:5])}); "
                "compare the per-image files of two systems"
            )
        for column, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                shown = column or "score"
                raise ValueError(f"{path}: image {image_id!r} has {shown} = {value!r}, not a finite number")
        rows[str(image_id)] = {str(k): float(v) for k, v in entry.items()}
    return rows


def pair_scores(
    rows_a: dict[str, dict[str, float]], rows_b: dict[str, dict[str, float]], names: tuple[str, str]
) -> list[str]:
    """The image ids of both files, in A's order.

    Raises:
        ValueError: an id present in one file only (a few named, with the counts).
    """
    only_a = [i for i in rows_a if i not in rows_b]
    only_b = [i for i in rows_b if i not in rows_a]
    if only_a or only_b:
        parts = [
            f"{len(ids)} only in {name}, e.g. {ids[:5]}"
            for ids, name in ((only_a, names[0]), (only_b, names[1]))
            if ids
        ]
        raise ValueError(
            f"the two files score different images ({'; '.join(parts)}): a paired test needs the same images"
        )
    return list(rows_a)


def _columns(rows: dict[str, dict[str, float]], path: str) -> list[str]:
    """Columns every image of a file has (in the first image's order)."""
    first = next(iter(rows.values()))
    for image_id, entry in rows.items():
        missing = [c for c in first if c not in entry]
        if missing:
            raise ValueError(f"{path}: image {image_id!r} has no {missing[0]} score")
    return list(first)


def choose_metrics(
    columns_a: list[str], columns_b: list[str], wanted: list[str] | None
) -> list[tuple[str, str]]:
    """``(column in A, column in B)`` of each metric to compare: those named, else every one both files have.

    Raises:
        ValueError: a named metric missing from a file, or no metric in common (the columns are listed).
    """
    by_key_b = {_normalised(c): c for c in columns_b}
    if wanted:
        by_key_a = {_normalised(c): c for c in columns_a}
        chosen = []
        for name in wanted:
            key = _normalised(name)
            if key not in by_key_a or key not in by_key_b:
                raise ValueError(
                    f"no {name!r} scores in both files (A has {', '.join(columns_a)}; B has {', '.join(columns_b)})"
                )
            chosen.append((by_key_a[key], by_key_b[key]))
        return chosen
    chosen = [(c, by_key_b[_normalised(c)]) for c in columns_a if _normalised(c) in by_key_b]
    if not chosen:
        raise ValueError(
            f"the two files share no metric (A has {', '.join(columns_a)}; B has {', '.join(columns_b)})"
        )
    return chosen


def _system_names(path_a: str, path_b: str) -> tuple[str, str]:
    a, b = Path(path_a).stem, Path(path_b).stem
    return (a, b) if a != b else (path_a, path_b)


def compare_command(args: argparse.Namespace) -> int:
    require_extra("stats", "capeval compare")
    names = _system_names(args.a_json, args.b_json)
    rows_a = read_per_instance(args.a_json)
    rows_b = read_per_instance(args.b_json)
    ids = pair_scores(rows_a, rows_b, names)
    metrics = choose_metrics(_columns(rows_a, args.a_json), _columns(rows_b, args.b_json), args.metrics)
    results = []
    for column_a, column_b in metrics:
        a, b = [rows_a[i][column_a] for i in ids], [rows_b[i][column_b] for i in ids]
        label = metric_label(column_a) or None
        # Checked here too, to name the files and the image ids rather than the systems and indices.
        check_magnitudes(a, b, (args.a_json, args.b_json), items=ids, metric=label)
        result = compare(
            a,
            b,
            method=args.method,
            n_resamples=args.n_resamples,
            confidence=args.confidence,
            seed=args.seed,
            names=names,
            metric=label,
        )
        results.append(result)
        if args.format == "text":
            print(result)
    not_means = [metric_label(c) for c, _ in metrics if _normalised(c) in CORPUS_NOT_MEAN]
    if not_means:
        print(
            f"note: {', '.join(not_means)}: means of per-image sentence scores, not the corpus scores "
            "(pycocoevalcap's, from the whole corpus's statistics) that `capeval score` prints as "
            f"{', '.join(n.removeprefix(SENTENCE + ' ') for n in not_means)}",
            file=sys.stderr,
        )
    if args.format == "json":
        payload = {"a": args.a_json, "b": args.b_json, "comparisons": [r.as_dict() for r in results]}
        print(json.dumps(payload, indent=2))
    return 0


def add_compare_parser(subparsers, help: str) -> argparse.ArgumentParser:
    """Add the ``compare`` command, with its one-line ``help``, to an argparse subparsers object."""
    from capeval.validation import check_count, cli_type

    def confidence_level(text: str) -> float:
        value = float(text)
        if not 0 < value < 1:
            raise argparse.ArgumentTypeError(f"confidence must be in (0, 1), got {text}")
        return value

    parser = subparsers.add_parser(
        "compare",
        help=help,
        description=(
            "Paired significance test of two systems' corpus scores from their per-image score files "
            "(`capeval score --save-per-instance`): the difference A - B, its bootstrap confidence interval "
            "and a two-sided p-value (the tests of sacreBLEU's paired-ar / paired-bs). The mean of per-image "
            "BLEU or METEOR scores is named 'sentence BLEU-4', 'sentence METEOR': it is not the corpus score."
        ),
    )
    parser.add_argument("a_json", help="per-image scores of system A (capeval score --save-per-instance)")
    parser.add_argument("b_json", help="per-image scores of system B, on the same image ids")
    parser.add_argument(
        "--metrics",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="metrics to compare (e.g. CLIPScore or clipscore; default: every metric both files hold)",
    )
    parser.add_argument(
        "--method",
        choices=METHODS,
        default="permutation",
        help="paired permutation (approximate randomisation, exact when 2^n <= N) or paired bootstrap",
    )
    parser.add_argument(
        "--n-resamples",
        type=cli_type("n_resamples", int, check_count),
        default=N_RESAMPLES,
        metavar="N",
        help=f"random permutations / bootstrap resamples (default {N_RESAMPLES})",
    )
    parser.add_argument(
        "--confidence",
        type=confidence_level,
        default=CONFIDENCE,
        help=f"level of the bootstrap interval (default {CONFIDENCE})",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0; same seed, same result)")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.set_defaults(func=compare_command)
    return parser
