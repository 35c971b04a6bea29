"""``capeval corpus``: the command-line face of ``capeval.corpus.score_corpus`` and ``score_shards``."""

from __future__ import annotations

import sys

from capeval.corpus.run import CHUNK_SIZE, score_corpus
from capeval.registry import row_image_metrics
from capeval.validation import check_count, check_finite_number, cli_type


def add_corpus_arguments(parser) -> None:
    """The arguments of ``capeval corpus SOURCE --output DIR`` beside the metric options (``capeval.cli`` makes
    the subcommand and adds those)."""
    parser.add_argument(
        "source",
        metavar="SOURCE",
        help="WebDataset tars or Parquet shards (a folder, a glob or files), a JSONL file or folder, an image "
        "folder with .txt captions, a save_to_disk folder or a dataset name",
    )
    parser.add_argument(
        "--output", metavar="DIR", required=True, help="output folder (rerun with the same folder to resume)"
    )
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=["clipscore"],
        choices=row_image_metrics(),
        metavar="METRIC",
        help=f"per-row metrics ({', '.join(row_image_metrics())}; default clipscore); JSONL, image-folder "
        "and datasets sources take one",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(func=corpus_command)
    group = parser.add_argument_group("rows and filtering")
    # No default: an explicit column is used as given; unset, it is "caption"/"image" for JSONL corpora and
    # chosen once per run from the first Parquet shard's columns (written in run.json).
    group.add_argument("--caption-column", default=None)
    group.add_argument("--image-column", default=None)
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
        help="threads reading images; sharded corpora: processes decoding rows (default: every core beside a GPU, "
        "none on the CPU), with --engine ray actors holding a model (default one per GPU, else 1)",
    )
    shards = parser.add_argument_group(
        "sharded corpora",
        "WebDataset tars as img2dataset writes them (NNNNN.tar with <key>.jpg/.txt/.json) or Parquet files: one "
        "OUTPUT/scores/<shard>.parquet per shard, resumable per shard",
    )
    shards.add_argument("--engine", default="local", choices=["local", "ray"], help="where shards are scored")
    shards.add_argument(
        "--ray-address", default=None, help="Ray cluster to join ('auto': the one `ray start` made)"
    )
    shards.add_argument(
        "--top-fraction",
        type=cli_type("top_fraction", float, check_fraction),
        default=None,
        help="write kept.jsonl with the top fraction of rows by --threshold-key (DataComp's cut, e.g. 0.3)",
    )
    shards.add_argument(
        "--save-embeddings", action="store_true", help="also write float16 image and caption embeddings"
    )


def check_fraction(name: str, value: float) -> float:
    if not 0 < value <= 1:  # also refuses nan
        raise ValueError(f"{name} must be in (0, 1], got {value}")
    return value


def corpus_command(args) -> int:
    """``capeval corpus SOURCE --output DIR [...]``."""
    from capeval.corpus.shards import is_shard_source

    if args.engine == "ray" or is_shard_source(args.source):
        return shards_command(args)
    if args.top_fraction is not None:
        raise SystemExit(
            "capeval corpus: --top-fraction applies to shards (.tar/.parquet); use --threshold for this source"
        )
    if len(args.metrics) > 1:
        raise SystemExit(
            f"capeval corpus: a JSONL, image-folder or datasets source is scored with one metric per run, got "
            f"{args.metrics}; several metrics apply to shards (.tar/.parquet)"
        )
    metric = args.metrics[0]
    from capeval.clip.backbones import DEFAULT_MODEL

    # Unset --model: PAC-S takes its checkpoint's base model, the others the paper's CLIP.
    model = args.model or (None if metric == "pacscore" else DEFAULT_MODEL)
    options = dict(model=model, device=args.device, dtype=args.dtype, batch_size=args.batch_size)
    if args.prefix is not None:
        options["prefix"] = args.prefix
    if args.w is not None:
        options["w"] = args.w
    if args.checkpoint:
        options["checkpoint"] = args.checkpoint
    result = score_corpus(
        args.source,
        args.output,
        metric,
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
        print(f"{metric}: {score:.4f} over {s['scored']} rows" if score is not None else "no row scored")
        if s["errors"]:
            print(f"{s['errors']} row(s) could not be scored: see {result.errors}", file=sys.stderr)
        if s["kept"] is not None:
            print(f"kept {s['kept']} row(s) with {s['threshold_key']} >= {s['threshold']}: {result.kept}")
        print(f"signature: {s['signature']}")
        print(f"scores: {result.scores}")
    return 0


def shards_command(args) -> int:
    """``capeval corpus SHARDS --output DIR [--metrics ...] [--engine ray]``: one Parquet per shard."""
    from capeval.corpus.shard_run import score_shards

    if args.threshold is not None and args.top_fraction is not None:
        raise SystemExit("capeval corpus: give --threshold or --top-fraction, not both")
    result = score_shards(
        args.source,
        args.output,
        args.metrics,
        engine=args.engine,
        caption_column=args.caption_column,
        image_column=args.image_column,
        threshold=args.threshold,
        top_fraction=args.top_fraction,
        threshold_key=args.threshold_key,
        save_embeddings=args.save_embeddings,
        batch_size=args.batch_size,
        ray_address=args.ray_address,
        num_workers=args.num_workers,
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        prefix=args.prefix,
        w=args.w,
        checkpoint=args.checkpoint,
    )
    s = result.summary
    means = ", ".join(f"{k} {v:.4f}" for k, v in s["mean"].items() if v is not None) or "no row scored"
    print(f"{s['scored']} of {s['rows']} rows scored in {s['shards']} shard file(s): {means}")
    if s["errors"]:
        print(f"{s['errors']} row(s) not scored ({s['error_kinds']}): see the error column", file=sys.stderr)
    for shard, why in s["failed_shards"].items():
        print(f"shard {shard} not read: {why}", file=sys.stderr)
    if "kept" in s:
        print(f"kept {s['kept']} row(s) with {s['key_metric']} >= {s['threshold']:.4f}: {s['kept_file']}")
    print(f"scores: {result.scores}  summary: {result.output_dir / 'summary.json'}")
    return 1 if s["failed_shards"] else 0
