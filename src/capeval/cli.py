"""The ``capeval`` command line.

``capeval score candidates.json image_dir [--references-json refs.json]`` scores captions in the layout of
the CLIPScore authors' script: candidates ``{image_id: caption}``, a folder of images named by id, optional
references ``{image_id: [captions]}``; per-image scores go to ``--save-per-instance`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tiff", ".tif", ".bmp", ".webp", ".gif")


def _read_json(path: str, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError as err:
        raise SystemExit(f"capeval: {what} file not found: {path}") from err
    except json.JSONDecodeError as err:
        raise SystemExit(f"capeval: {what} file {path} is not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise SystemExit(f"capeval: {what} file {path} must hold a JSON object {{image_id: ...}}")
    return data


def find_images(image_dir: str | os.PathLike) -> dict[str, Path]:
    """Image files of a folder by id (file name without extension), as the CLIPScore script pairs them.

    Raises:
        SystemExit: the folder is missing, or two files share an id.
    """
    folder = Path(image_dir)
    if not folder.is_dir():
        raise SystemExit(f"capeval: image folder not found: {folder}")
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file():
            if path.stem in found:
                raise SystemExit(
                    f"capeval: two images share the id {path.stem!r}: {found[path.stem].name}, {path.name}"
                )
            found[path.stem] = path
    return found


def pair_inputs(candidates: dict, images: dict[str, Path], references: dict | None):
    """Ordered ids, captions, image paths and references; every candidate must have its image (and references)."""
    ids = list(candidates)
    missing = [i for i in ids if i not in images]
    if missing:
        raise SystemExit(
            f"capeval: {len(missing)} candidate id(s) have no image in the folder, e.g. {missing[:5]} "
            f"(images are matched by file name without extension)"
        )
    refs = None
    if references is not None:
        no_refs = [i for i in ids if i not in references]
        if no_refs:
            raise SystemExit(
                f"capeval: {len(no_refs)} candidate id(s) have no references, e.g. {no_refs[:5]}"
            )
        not_lists = [i for i in ids if not isinstance(references[i], list)]
        if not_lists:
            raise SystemExit(f"capeval: references of {not_lists[:5]} are not lists of captions")
        refs = [references[i] for i in ids]
    return ids, [candidates[i] for i in ids], [str(images[i]) for i in ids], refs


def _score_command(args: argparse.Namespace) -> int:
    import capeval

    if getattr(args, "corpus", None):
        from capeval.corpus.cli import corpus_command

        return corpus_command(args)
    if args.candidates_json is None or args.image_dir is None:
        raise SystemExit(
            "capeval score: give candidates_json and image_dir (or --corpus SOURCE --output DIR)"
        )
    candidates = _read_json(args.candidates_json, "candidates")
    references = _read_json(args.references_json, "references") if args.references_json else None
    images = find_images(args.image_dir)
    ids, captions, paths, refs = pair_inputs(candidates, images, references)
    unused = len(images) - len(ids)
    if unused:
        print(
            f"note: {unused} image(s) in {args.image_dir} have no candidate and are not scored",
            file=sys.stderr,
        )

    options = dict(model=args.model, device=args.device, dtype=args.dtype, batch_size=args.batch_size)
    options["progress"] = None if not args.no_progress else False
    if args.prefix is not None:
        options["prefix"] = args.prefix
    if args.w is not None:
        options["w"] = args.w
    if args.checkpoint:
        return _report(args, *_pacscore(options, args, captions, refs, paths, ids))
    from capeval.clip.backbones import DEFAULT_MODEL

    options["model"] = options["model"] or DEFAULT_MODEL
    if refs is None:
        result = capeval.CLIPScore(**options)(captions, images=paths)
        per_image = {i: {"CLIPScore": s} for i, s in zip(ids, result["scores"], strict=True)}
        print(f"CLIPScore: {result['clipscore']:.4f}")
    else:
        result = capeval.RefCLIPScore(**options)(captions, references=refs, images=paths)
        per_image = {
            i: {"CLIPScore": c, "RefCLIPScore": r}
            for i, c, r in zip(ids, result["clipscore_scores"], result["scores"], strict=True)
        }
        print(f"CLIPScore: {result['clipscore']:.4f}")
        print(f"RefCLIPScore: {result['refclipscore']:.4f}")
    return _report(args, result, per_image)


def _pacscore(options: dict, args, captions, refs, paths, ids) -> tuple[dict, dict]:
    """PAC-S (and RefPAC-S with references); ``--model`` left unset lets the checkpoint pick its base."""
    import capeval

    result = capeval.PACScore(checkpoint=args.checkpoint, **options)(captions, references=refs, images=paths)
    print(f"PAC-S: {result['pacscore']:.4f}")
    if refs is None:
        return result, {i: {"PAC-S": s} for i, s in zip(ids, result["scores"], strict=True)}
    print(f"RefPAC-S: {result['refpacscore']:.4f}")
    per_image = {
        i: {"PAC-S": p, "RefPAC-S": r}
        for i, p, r in zip(ids, result["scores"], result["refpacscore_scores"], strict=True)
    }
    return result, per_image


def _report(args, result: dict, per_image: dict) -> int:
    print(f"signature: {result['signature']}")
    if args.save_per_instance:
        out = Path(args.save_per_instance)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(json.dumps(per_image, indent=2))
        os.replace(tmp, out)  # atomic: a crash never leaves half a file
        print(f"per-image scores written to {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from capeval import __version__
    from capeval.clip.backbones import DEFAULT_MODEL
    from capeval.clip.batching import BATCH_SIZE
    from capeval.validation import check_count, check_positive_number, cli_type

    parser = argparse.ArgumentParser(prog="capeval", description="Caption-evaluation metrics.")
    parser.add_argument("--version", action="version", version=f"capeval {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    score = sub.add_parser(
        "score",
        help="score captions against an image folder (CLIPScore; RefCLIPScore with references)",
        description="Score candidate captions against images, in the layout of the CLIPScore authors' script.",
    )
    score.add_argument("candidates_json", nargs="?", help="JSON {image_id: caption}")
    score.add_argument("image_dir", nargs="?", help="folder of images named <image_id>.<ext>")
    score.add_argument("--references-json", help="JSON {image_id: [reference captions]}: adds RefCLIPScore")
    score.add_argument(
        "--save-per-instance", metavar="OUT.json", help="write per-image scores to this JSON file"
    )
    score.add_argument(
        "--model",
        default=None,
        help=f"CLIP Hub id or local folder (default {DEFAULT_MODEL}; with --checkpoint, the checkpoint's base)",
    )
    score.add_argument(
        "--checkpoint",
        default=None,
        help="PAC-S weights (.pth, converted folder or Hub repo): PAC-S / RefPAC-S",
    )
    score.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:1, ... (default: first GPU if any, else CPU)"
    )
    score.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    score.add_argument("--batch-size", type=cli_type("batch_size", int, check_count), default=BATCH_SIZE)
    score.add_argument(
        "--prefix", default=None, help='prompt before each caption (default "A photo depicts")'
    )
    score.add_argument(
        "--w",
        type=cli_type("w", float, check_positive_number),
        default=None,
        help="rescaling weight, a finite number > 0 (default 2.5; PAC-S 2.0)",
    )
    score.add_argument("--no-progress", action="store_true", help="no progress bars")
    from capeval.corpus.cli import add_corpus_arguments

    add_corpus_arguments(score)
    score.set_defaults(func=_score_command)

    try:
        from capeval.bench.cli import add_bench_parser
    except ImportError:
        pass
    else:
        add_bench_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from capeval.diagnostics.run_warnings import summarised_warnings

    try:
        with summarised_warnings(one_line=True):  # each kind of warning once, at the end of the command
            return args.func(args)
    except (ValueError, TypeError, OSError) as err:
        if os.environ.get("CAPEVAL_DEBUG"):
            raise
        # Input problems are reported as one line naming the item, not as a traceback.
        print(f"capeval: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
