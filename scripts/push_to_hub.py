"""Create or update one Hugging Face Space per metric under an organisation (capeval.integrations.hub).

Each Space holds the evaluate module and its card (metrics/<name>/), the demo (spaces/<name>/app.py) and a
requirements.txt pinning this package's release or a commit, so that evaluate.load("<org>/<name>") and the
browser demo both work for users.

Examples:
    # write the exact folders that would be uploaded, and stop
    .venv/bin/python scripts/push_to_hub.py my-org --dry-run build/spaces
    # pin the current commit (pushed to the repository first) and upload all six Spaces
    .venv/bin/python scripts/push_to_hub.py my-org --commit "$(git rev-parse HEAD)"
    # pin a PyPI release; give the pacscore Space its weights
    .venv/bin/python scripts/push_to_hub.py my-org --version 0.1.0 --metrics pacscore \\
        --variable CAPEVAL_DEMO_CHECKPOINT=my-org/pacscore-vit-b32
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from capeval.integrations.hub import REPO_URL, parse_variables, push_spaces, requirement
from capeval.registry import METRICS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("org", help="Hub organisation or user that owns the Spaces (<org>/<metric>)")
    parser.add_argument(
        "--metrics", nargs="+", default=list(METRICS), choices=METRICS, help="default: all six"
    )
    pin = parser.add_mutually_exclusive_group()
    pin.add_argument("--version", default=None, help="pin this PyPI release (default: the package's version)")
    pin.add_argument("--commit", default=None, help="pin this git commit or tag of --repo-url instead")
    parser.add_argument("--repo-url", default=REPO_URL, help=f"repository of --commit (default {REPO_URL})")
    parser.add_argument(
        "--dry-run", metavar="DIR", default=None, help="write the Space folders into DIR and upload nothing"
    )
    parser.add_argument("--variable", action="append", default=[], metavar="KEY=VALUE", help="Space variable")
    parser.add_argument("--private", action="store_true", help="create new Spaces as private")
    parser.add_argument("--token", default=None, help="Hub token (default: the logged-in one)")
    args = parser.parse_args(argv)

    pin_line = requirement(version=args.version, commit=args.commit, repo_url=args.repo_url)
    out_dir = args.dry_run or tempfile.mkdtemp(prefix="capeval-spaces-")
    published = push_spaces(
        args.org,
        out_dir,
        pin_line,
        metrics=args.metrics,
        dry_run=args.dry_run is not None,
        private=args.private,
        variables=parse_variables(args.variable),
        token=args.token,
    )
    print(f"requirement: {pin_line}")
    for item in published:
        where = item.url or "(dry run: not uploaded)"
        print(f"{item.repo_id}: {item.folder} -> {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
