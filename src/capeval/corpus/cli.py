"""``capeval corpus``: the command-line face of ``capeval.corpus.score_corpus``."""

from __future__ import annotations

import sys

from capeval.corpus.run import CHUNK_SIZE, EXECUTORS, score_corpus
from capeval.registry import row_image_metrics
from capeval.validation import check_count, check_finite_number, cli_type


def add_corpus_arguments(parser) -> None:
    """The arguments of ``capeval corpus SOURCE --output DIR`` beside the metric options (``capeval.cli`` makes
    the subcommand and adds those)."""
    parser.add_argument(
        "source",
        metavar="SOURCE",
        help="WebDataset tars or Parquet shards (a folder, a glob or files), a JSONL or CSV file or a folder of "
        "them, an image folder with .txt captions, a save_to_disk folder or a dataset name",
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
        help=f"per-row metrics ({', '.join(row_image_metrics())}; default clipscore)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=corpus_command)
    group = parser.add_argument_group(
        "rows and filtering",
        "every source is read as shards of rows and written as OUTPUT/scores/<shard>.parquet, resumable per shard",
    )
    # No default: an explicit field is used as given; unset, each is chosen once per run from the first shard's
    # fields (written in run.json).
    group.add_argument("--caption-column", default=None)
    group.add_argument("--image-column", default=None)
    group.add_argument("--references-column", default=None)
    group.add_argument("--id-column", default=None)
    _add_reading_arguments(group)
    _add_output_arguments(group)
    _add_executor_arguments(parser.add_argument_group("executors"))


def _add_reading_arguments(group) -> None:
    """Where rows come from: the dataset split, the image root, the chunk size of row files."""
    group.add_argument("--split", default=None, help="dataset split (datasets sources)")
    group.add_argument(
        "--image-root",
        metavar="DIR",
        default=None,
        help="the folder rows may read the images they name by path in (JSONL, CSV, Parquet, datasets); default: "
        "each row's data file's folder only (an absolute path or one leading out of it is an error row)",
    )
    group.add_argument(
        "--chunk-size",
        type=cli_type("chunk_size", int, check_count),
        default=CHUNK_SIZE,
        help=f"rows per shard of a JSONL, CSV, image-folder or datasets source (default {CHUNK_SIZE})",
    )


def _add_output_arguments(group) -> None:
    """What is written beside the scores: the kept rows and their cut, embeddings, the raw cosine."""
    group.add_argument(
        "--threshold",
        type=cli_type("threshold", float, check_finite_number),
        default=None,
        help="write kept.jsonl with rows scoring at least this",
    )
    group.add_argument(
        "--top-fraction",
        type=cli_type("top_fraction", float, check_fraction),
        default=None,
        help="write kept.jsonl with the top fraction of rows by --threshold-key (DataComp's cut, e.g. 0.3)",
    )
    group.add_argument("--threshold-key", default=None, help="per-row score the cut applies to")
    group.add_argument(
        "--save-embeddings", action="store_true", help="also write float16 image and caption embeddings"
    )
    group.add_argument(
        "--no-raw-cosine",
        action="store_true",
        help="leave out the raw_cosine column (the plain cosine LAION's and DataComp's thresholds apply to; with a "
        "metric's prompt it costs a second text forward pass per caption)",
    )
    group.add_argument(
        "--resharder-subset",
        action="store_true",
        help="also write OUTPUT/kept_uids.npy: the kept rows' img2dataset uids for DataComp's resharder.py "
        "--subset-file (needs --threshold or --top-fraction)",
    )
    group.add_argument(
        "--embedding-layout",
        action="store_true",
        help="also write OUTPUT/embeddings/ in clip-retrieval's layout (img_emb/, text_emb/, metadata/) for "
        "autofaiss and embedding-reader (implies --save-embeddings)",
    )


def _add_executor_arguments(where) -> None:
    where.add_argument("--executor", default="local", choices=EXECUTORS, help="where shards are scored")
    where.add_argument(
        "--num-workers",
        type=cli_type("num_workers", int, check_workers),
        default=None,
        help="local: processes decoding rows ahead of the model (default: every core beside a GPU, none on the "
        "CPU); ray: actors holding a model (default one per GPU, else 1)",
    )
    where.add_argument(
        "--ray-address", default=None, help="Ray cluster to join ('auto': the one `ray start` made)"
    )


def check_fraction(name: str, value: float) -> float:
    if not 0 < value <= 1:  # also refuses nan
        raise ValueError(f"{name} must be in (0, 1], got {value}")
    return value


def check_workers(name: str, value: int) -> int:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def corpus_command(args) -> int:
    """``capeval corpus SOURCE --output DIR [--metrics ...] [--executor ray]``: one Parquet per shard."""
    if args.threshold is not None and args.top_fraction is not None:
        raise SystemExit("capeval corpus: give --threshold or --top-fraction, not both")
    if args.ray_address is not None and args.executor != "ray":
        raise SystemExit("capeval corpus: --ray-address applies to --executor ray")
    result = score_corpus(
        args.source,
        args.output,
        args.metrics,
        executor=args.executor,
        caption_column=args.caption_column,
        image_column=args.image_column,
        references_column=args.references_column,
        id_column=args.id_column,
        split=args.split,
        threshold=args.threshold,
        top_fraction=args.top_fraction,
        threshold_key=args.threshold_key,
        chunk_size=args.chunk_size,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        save_embeddings=args.save_embeddings,
        resharder_subset=args.resharder_subset,
        embedding_layout=args.embedding_layout,
        progress=False if args.no_progress else None,
        ray={"address": args.ray_address} if args.executor == "ray" else None,
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        prefix=args.prefix,
        w=args.w,
        checkpoint=args.checkpoint,
        allow_pipe=True,  # the command line's own source argument: the user typed the command
        image_root=args.image_root,
        raw_cosine=not args.no_raw_cosine,
    )
    from capeval.corpus.distributed import process_state

    s = result.summary
    if not process_state().is_main_process:
        return 1 if s["failed_shards"] or s.get("threshold_missing") else 0
    means = ", ".join(f"{k} {v:.4f}" for k, v in s["mean"].items() if v is not None) or "no row scored"
    print(f"{s['scored']} of {s['rows']} rows scored in {s['shards']} shard file(s): {means}")
    if s["errors"]:
        print(f"{s['errors']} row(s) not scored ({s['error_kinds']}): see the error column", file=sys.stderr)
    for shard, why in s["failed_shards"].items():
        print(f"shard {shard} not read: {why}", file=sys.stderr)
    downloads = s.get("downloads")
    if downloads:
        by_status = "; ".join(
            f"{status}: " + ", ".join(f"{message or '(no message)'} x{n}" for message, n in messages.items())
            for status, messages in downloads["failed_by_status"].items()
        )
        if downloads["failed"]:
            print(
                f"img2dataset could not download {downloads['failed']} sample(s) ({by_status})",
                file=sys.stderr,
            )
        for shard, why in downloads["incomplete_shards"].items():
            print(f"shard {shard} may be incomplete: {why}", file=sys.stderr)
    if s.get("threshold_missing"):
        print(f"capeval corpus: {s['threshold_missing']}", file=sys.stderr)
    elif "kept" in s:
        print(f"kept {s['kept']} row(s) with {s['key_metric']} >= {s['threshold']:.4f}: {s['kept_file']}")
    if "resharder_subset" in s:
        print(
            f"DataComp resharder subset: {s['resharder_subset']['file']} ({s['resharder_subset']['uids']} uids)"
        )
    if "embedding_layout" in s:
        removed = s["embedding_layout_removed"]
        stale = f"; {len(removed)} file(s) of an earlier run's layout removed" if removed else ""
        print(
            f"clip-retrieval embedding layout: {s['embedding_layout']} ({s['embedding_layout_parts']} part(s){stale})"
        )
    for name, signature in s["signatures"].items():
        print(f"signature ({name}): {signature}")
    print(f"scores: {result.scores}  summary: {result.output_dir / 'summary.json'}")
    return 1 if s["failed_shards"] or s.get("threshold_missing") else 0
