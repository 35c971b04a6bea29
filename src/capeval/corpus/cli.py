"""``capeval score --corpus``: the command-line face of ``capeval.corpus.score_corpus``."""

from __future__ import annotations

import sys

from capeval.corpus.run import CHUNK_SIZE, IMAGE_METRICS, score_corpus
from capeval.validation import check_count, check_finite_number, cli_type


def add_corpus_arguments(parser) -> None:
    """The corpus options of ``capeval score`` (``--corpus SOURCE --output DIR`` selects the mode)."""
    group = parser.add_argument_group(
        "corpus mode", "score a JSONL file/folder, an image folder with .txt captions or a datasets dataset"
    )
    group.add_argument(
        "--corpus",
        metavar="SOURCE",
        help="JSONL file or folder, image folder, save_to_disk folder or dataset name",
    )
    group.add_argument("--output", metavar="DIR", help="output folder (rerun with the same folder to resume)")
    group.add_argument("--metric", default="clipscore", choices=IMAGE_METRICS)
    group.add_argument("--caption-column", default="caption")
    group.add_argument("--image-column", default="image")
    group.add_argument("--references-column", default=None)
    group.add_argument("--id-column", default="id")
    group.add_argument("--split", default=None, help="dataset split (datasets sources)")
    group.add_argument(
        "--threshold",
        type=cli_type("threshold", float, check_finite_number),
        default=None,
        help="write kept.jsonl with rows scoring at least this",
    )
    group.add_argument("--threshold-key", default=None, help="per-row score compared with --threshold")
    group.add_argument(
        "--cache", default=None, help="embedding cache file (default OUTPUT/embeddings.sqlite)"
    )
    group.add_argument(
        "--chunk-size",
        type=cli_type("chunk_size", int, check_count),
        default=CHUNK_SIZE,
        help=f"rows per part (default {CHUNK_SIZE})",
    )
    group.add_argument(
        "--num-workers",
        type=cli_type("num_workers", int, check_count),
        default=None,
        help="threads reading images",
    )


def corpus_command(args) -> int:
    """``capeval score --corpus SOURCE --output DIR [...]``."""
    if not args.output:
        raise SystemExit("capeval score --corpus: give --output DIR")
    from capeval.clip.backbones import DEFAULT_MODEL

    # Unset --model: PAC-S takes its checkpoint's base model, the others the paper's CLIP.
    model = args.model or (None if args.metric == "pacscore" else DEFAULT_MODEL)
    options = dict(model=model, device=args.device, dtype=args.dtype, batch_size=args.batch_size)
    if args.prefix is not None:
        options["prefix"] = args.prefix
    if args.w is not None:
        options["w"] = args.w
    if args.checkpoint:
        options["checkpoint"] = args.checkpoint
    result = score_corpus(
        args.corpus,
        args.output,
        args.metric,
        caption_column=args.caption_column,
        image_column=args.image_column,
        references_column=args.references_column,
        id_column=args.id_column,
        split=args.split,
        threshold=args.threshold,
        threshold_key=args.threshold_key,
        cache=args.cache,
        chunk_size=args.chunk_size,
        progress=False if args.no_progress else None,
        num_workers=args.num_workers,
        **options,
    )
    from capeval.corpus.distributed import process_state

    if process_state().is_main_process:
        s = result.summary
        score = s["corpus_score"]
        print(f"{args.metric}: {score:.4f} over {s['scored']} rows" if score is not None else "no row scored")
        if s["errors"]:
            print(f"{s['errors']} row(s) could not be scored: see {result.errors}", file=sys.stderr)
        if s["kept"] is not None:
            print(f"kept {s['kept']} row(s) with {s['threshold_key']} >= {s['threshold']}: {result.kept}")
        print(f"signature: {s['signature']}")
        print(f"scores: {result.scores}")
    return 0
