"""The ``capeval`` command line.

``capeval score candidates.json [more.json ...] image_dir [--references-json refs.json] [--metrics ...]`` scores
the captions of one or more systems: candidates in the CLIPScore authors' layout ``{image_id: caption}`` or a COCO
results list, images named by id or by COCO's patterns, references in the authors' layout, COCO annotations or
Karpathy's split file (``capeval.scoring``); one row per system, one column per metric, a signature per metric;
per-image scores go to ``--save-per-instance`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path


def _read_inputs(args: argparse.Namespace):
    """The candidates files, image folder and references named on the command line, paired by image id.

    The image folder is ``--image-dir``, else the last positional argument when it is a folder (or no JSON file):
    ``capeval score a.json b.json images/``.
    """
    from capeval.scoring.formats import InputFileError, read_caption_files

    paths = list(args.inputs)
    image_dir = args.image_dir
    if image_dir is None and len(paths) > 1 and _is_image_folder(paths[-1]):
        image_dir = paths.pop()
    if not paths:
        raise SystemExit(
            "capeval score: give candidates files and an image folder (a corpus: capeval corpus SOURCE --output DIR)"
        )
    try:
        return read_caption_files(paths, image_dir, args.references_json)
    except InputFileError as err:
        raise SystemExit(f"capeval: {err}") from None


def _is_image_folder(path: str) -> bool:
    p = Path(path)
    return p.is_dir() or (not p.exists() and p.suffix.lower() not in (".json", ".jsonl"))


def _default_metrics(args, references) -> list[str]:
    """The authors' script's metrics: CLIP-S, and RefCLIP-S with references (PAC-S's with --checkpoint)."""
    plain, ref = ("pacscore", "refpacscore") if args.checkpoint else ("clipscore", "refclipscore")
    return [plain] if references is None else [plain, ref]


def _score_command(args: argparse.Namespace) -> int:
    from capeval.scoring.systems import score_systems
    from capeval.scoring.tables import comparison_lines, per_instance, render, signature_lines

    inputs = _read_inputs(args)
    if inputs.unused_images:
        print(
            f"note: {inputs.unused_images} image(s) in the folder have no candidate and are not scored",
            file=sys.stderr,
        )
    if (args.compare or args.baseline) and (
        len(inputs.systems) < 2 or args.baseline not in (None, *inputs.systems)
    ):
        raise SystemExit(
            f"capeval score: --baseline/--compare need two or more systems and a baseline among them; "
            f"the systems are {list(inputs.systems)}"
        )
    if args.compare or args.baseline:  # refused before scoring, not after it
        from capeval.diagnostics.extras import require_extra

        require_extra("stats", "capeval score --compare/--baseline")
    result = score_systems(
        inputs.systems,
        images=inputs.images,
        references=inputs.references,
        metrics=args.metrics or _default_metrics(args, inputs.references),
        ids=inputs.ids,
        model=args.model,
        checkpoint=args.checkpoint,
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
        prefix=args.prefix,
        w=args.w,
        vectors=args.vectors,
        progress=False if args.no_progress else None,
    )
    if args.compare or args.baseline:
        from capeval.scoring.systems import compare_systems

        compare_systems(
            result,
            args.baseline or result.systems[0],
            method=args.compare_method,
            n_resamples=args.n_resamples,
            confidence=args.confidence,
            seed=args.seed,
            correction=args.correction,
        )
    print(render(result, args.format))
    if args.format == "csv":
        print("\n".join(signature_lines(result) + comparison_lines(result)), file=sys.stderr)
    if args.save_per_instance:
        out = Path(args.save_per_instance)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(json.dumps(per_instance(result), indent=2))
        os.replace(tmp, out)  # atomic: a crash never leaves half a file
        print(f"per-image scores written to {out}", file=sys.stderr if args.format != "text" else sys.stdout)
    return 0


_INSTALL_MODULES_HELP = """\
Place the six evaluate modules of this capeval in evaluate's module cache, in the layout evaluate writes for a
module it downloaded, so that evaluate.load("clipscore") works by bare name from any directory: at once with
HF_EVALUATE_OFFLINE=1, and online after evaluate's Hub look-up of evaluate-metric/<name> misses.

Conditions: the process that calls evaluate.load must see the same HF_MODULES_CACHE (default HF_HOME/modules)
as this command; online, every such load first asks the Hub (HF_ENDPOINT) and falls back to the cache only
because the Hub has no canonical module of that name; evaluate logs "Using the latest cached version of the
module" each time. Idempotent: a second run writes nothing; after upgrading capeval, run it again: the
current code replaces older copies of the six (evaluate would otherwise import the newest file among them).
Prefer capeval.load("<name>") in code, which needs neither the cache nor the Hub.
"""


def _install_modules_command(args: argparse.Namespace) -> int:
    from capeval.integrations.module_cache import default_modules_cache, install_modules

    cache = args.modules_cache or default_modules_cache()
    for item in install_modules(args.metrics, cache):
        removed = f" (removed {len(item.removed)} older copies)" if item.removed else ""
        print(f"{item.name}: {item.status}{removed} {item.script}")
    return 0


def _add_install_modules_parser(sub, help: str) -> None:
    from capeval.registry import METRICS

    install = sub.add_parser(
        "install-modules",
        help=help,
        description=_INSTALL_MODULES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    install.add_argument(
        "--metrics", nargs="+", default=list(METRICS), choices=METRICS, help="default: all six"
    )
    install.add_argument(
        "--modules-cache",
        metavar="DIR",
        default=None,
        help="evaluate's module cache (default: $HF_MODULES_CACHE, else $HF_HOME/modules, as evaluate reads them)",
    )
    install.set_defaults(func=_install_modules_command)


def _confidence(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:  # also refuses nan
        raise argparse.ArgumentTypeError(f"confidence must be in (0, 1), got {text}")
    return value


# Each subcommand's one-line help, shown by `capeval --help`; its own arguments are built only when it is the
# command given (its module imports what the task needs: torch for score and corpus, scipy for compare).
SUBCOMMANDS = {
    "score": "score captions of one or more systems against their images and references",
    "corpus": "score every row of a corpus (JSONL, image folder, datasets, WebDataset or Parquet shards), resumably, "
    "and keep the best",
    "compare": "is the difference real? paired permutation / bootstrap test of two systems on the same images",
    "install-modules": 'make evaluate.load("<name>") work by bare name from any directory (evaluate\'s module cache)',
    "bench": "reproduce human-agreement tables (Flickr8k, Composite, Pascal-50S, FOIL, VATEX-EVAL, ...)",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``capeval`` command, one subcommand per task: ``score``, ``corpus``, ``compare``, ``install-modules``
    and ``bench``.

    Args:
        argv: the arguments to be parsed: only the subcommand they name gets its arguments (the others are listed
            by name and help, so ``capeval --help`` and ``capeval corpus ...`` import nothing of the other tasks);
            None: every subcommand in full.
    """
    from capeval import __version__

    parser = argparse.ArgumentParser(prog="capeval", description="Caption-evaluation metrics.")
    parser.add_argument("--version", action="version", version=f"capeval {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    adders = {
        "score": _add_score_parser,
        "corpus": _add_corpus_parser,
        "compare": _add_compare_parser,
        "install-modules": _add_install_modules_parser,
        "bench": _add_bench_parser,
    }
    for name, add in adders.items():
        if chosen is None or chosen == name:
            add(sub, SUBCOMMANDS[name])
        else:
            sub.add_parser(name, help=SUBCOMMANDS[name])
    return parser


def _add_compare_parser(sub, help: str) -> None:
    from capeval.significance.cli import add_compare_parser

    add_compare_parser(sub, help)


def _add_bench_parser(sub, help: str) -> None:
    from capeval.diagnostics.extras import missing, require_extra

    if missing("bench"):  # its arguments list the benchmarks, which need the extra's libraries to be read

        def refuse(args) -> int:
            require_extra("bench", "capeval bench")
            return 1

        bench = sub.add_parser("bench", help=help)
        bench.add_argument("rest", nargs=argparse.REMAINDER)
        bench.set_defaults(func=refuse)
        return
    from capeval.bench.cli import add_bench_parser

    add_bench_parser(sub, help)


def _add_score_parser(sub, help: str) -> None:
    """``capeval score``: caption files of one or more systems against images and references."""
    score = sub.add_parser(
        "score",
        help=help,
        description=(
            "Score candidate captions (one file per system: {image_id: caption} or a COCO results list) against "
            "a folder of images (<id>.<ext>, COCO_val2014_%%012d.jpg, %%012d.jpg) and references "
            "({image_id: [captions]}, captions_val2014.json or Karpathy's dataset_coco.json)."
        ),
    )
    score.add_argument(
        "inputs",
        nargs="*",
        metavar="CANDIDATES [IMAGE_DIR]",
        help="candidates files (one per system), then the image folder (or give it with --image-dir)",
    )
    score.add_argument("--image-dir", default=None, help="folder of images named by image id")
    score.add_argument(
        "--references-json",
        help="references: {image_id: [captions]}, COCO captions_*.json or Karpathy's dataset_*.json",
    )
    score.add_argument(
        "--metrics",
        nargs="+",
        default=None,
        metavar="METRIC",
        help="metric names as in `capeval bench` (clipscore refclipscore wmd wembsim bleu1..bleu4 meteor rougeL "
        "cider spice pacscore refpacscore, groups, package.module:callable); default: clipscore, and "
        "refclipscore with references (pacscore, refpacscore with --checkpoint)",
    )
    score.add_argument(
        "--format", default="text", choices=["text", "markdown", "csv", "json"], help="table format"
    )
    score.add_argument(
        "--save-per-instance",
        metavar="OUT.json",
        help="write per-image scores of every metric: {image_id: {metric: score}} for one system, "
        "{system: {image_id: {metric: score}}} for several",
    )
    _add_comparison_arguments(score)
    add_metric_options(score)
    score.add_argument("--no-progress", action="store_true", help="no progress bars")
    score.set_defaults(func=_score_command)


def _add_corpus_parser(sub, help: str) -> None:
    """``capeval corpus SOURCE --output DIR``: every row of a corpus scored, resumably, and filtered."""
    from capeval.corpus.cli import add_corpus_arguments

    corpus = sub.add_parser(
        "corpus",
        help=help,
        description=(
            "Score every row of a corpus with per-row image metrics and write the scores, a summary and, with "
            "--threshold or --top-fraction, the kept rows. Rerun with the same --output to resume."
        ),
    )
    from capeval.registry import row_image_metrics

    add_metric_options(corpus, vectors=False, metrics=row_image_metrics())
    add_corpus_arguments(corpus)


def _add_comparison_arguments(score) -> None:
    """The paired test of each metric's corpus score between systems (``capeval.compare_many``)."""
    from capeval.validation import check_count, cli_type

    compare = score.add_argument_group(
        "comparison of systems (paired test of each metric's corpus score, capeval.compare_many)"
    )
    compare.add_argument(
        "--baseline", metavar="SYSTEM", help="compare every other system with this one (its file's stem)"
    )
    compare.add_argument("--compare", action="store_true", help="compare with the first system")
    compare.add_argument("--compare-method", default="permutation", choices=["permutation", "bootstrap"])
    compare.add_argument(
        "--n-resamples", type=cli_type("n_resamples", int, check_count), default=None, help="default 10000"
    )
    compare.add_argument(
        "--confidence", type=float, default=None, help="level of the interval (default 0.95)"
    )
    compare.add_argument("--seed", type=int, default=0, help="seed of the resampling (default 0)")
    compare.add_argument("--correction", default="none", choices=["none", "holm"], help="across systems")


def declared_defaults(option: str, metrics: Iterable[str] | None = None) -> str:
    """The defaults the metrics declare for ``option``, in words (``"2.5: clipscore, refclipscore; 2.0:
    pacscore"``), for a flag's help; ``metrics``: those of a command (default: every metric)."""
    from capeval.registry import spec, specs

    by_value: dict[str, list[str]] = {}
    declarations = specs().items() if metrics is None else ((name, spec(name)) for name in metrics)
    for name, declared in declarations:
        if option in declared.option_names():
            by_value.setdefault(repr(declared.option(option).default), []).append(name)
    return "; ".join(f"{value}: {', '.join(names)}" for value, names in by_value.items())


# The metric options a whole run gives its metrics (each reaches the metrics that declare it, run_wide).
RUN_OPTIONS = ("model", "checkpoint", "vectors", "device", "dtype", "batch_size", "prefix", "w")


def add_metric_options(parser, vectors: bool = True, metrics: Iterable[str] | None = None) -> None:
    """The flags of ``RUN_OPTIONS``, checked by the rule every path uses, their defaults the metrics' own
    (``vectors=False``: no ``--vectors``, for commands whose metrics read no word vectors; ``metrics``: the ones a
    command scores with, whose declarations give the defaults shown)."""
    from capeval.clip.backbones import DEFAULT_MODEL
    from capeval.clip.batching import BATCH_SIZE
    from capeval.validation import MAX_W, check_count, check_weight, cli_type

    group = parser.add_argument_group("metric options (each reaches the metrics that take it)")
    group.add_argument(
        "--model",
        default=None,
        help=f"CLIP Hub id or local folder (default {DEFAULT_MODEL}; with --checkpoint, the checkpoint's base)",
    )
    group.add_argument(
        "--checkpoint",
        default=None,
        help="PAC-S weights (.pth, converted folder or Hub repo): PAC-S / RefPAC-S",
    )
    if vectors:
        group.add_argument(
            "--vectors", default=None, help="word vectors of wmd and wembsim (name, path or Hub repo)"
        )
    group.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:1, ... (default: first GPU if any, else CPU)"
    )
    group.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    group.add_argument("--batch-size", type=cli_type("batch_size", int, check_count), default=BATCH_SIZE)
    group.add_argument(
        "--prefix",
        default=None,
        help='prompt before each caption (default: the model family\'s, "A photo depicts" for English models)',
    )
    group.add_argument(
        "--w",
        type=cli_type("w", float, check_weight),
        default=None,
        help=f"rescaling weight, a number > 0 and <= {MAX_W:g} (default {declared_defaults('w', metrics)})",
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    from capeval.diagnostics.extras import MissingExtraError
    from capeval.diagnostics.run_warnings import summarised_warnings

    try:
        with summarised_warnings(one_line=True):  # each kind of warning once, at the end of the command
            return args.func(args)
    except (ValueError, TypeError, OSError, MissingExtraError) as err:
        if os.environ.get("CAPEVAL_DEBUG"):
            raise
        from capeval.clip.model_sources import HubModelUnavailableError

        # Input problems are reported as one line naming the item, not as a traceback; advice in this
        # interface's words (--model, not model=).
        message = err.command_line if isinstance(err, HubModelUnavailableError) else err
        print(f"capeval: error: {message}", file=sys.stderr)
        return 2
    finally:
        distributed = sys.modules.get("capeval.corpus.distributed")  # imported only where a command scored
        if distributed is not None:
            distributed.release_process_group()


if __name__ == "__main__":
    sys.exit(main())
