"""``python -m capeval.shapes [FOLDER]``: the README's example files for a user of the wheel alone.

Writes the example folder (``make_example_folder``: the drawings, two systems' captions, references and a corpus
file, byte-identical to a clone's ``examples/shapes``) and prints the folder of the shapes CLIP that ships inside
the package, to give as ``--model``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from capeval.shapes import make_example_folder, shapes_clip_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capeval.shapes", description=__doc__)
    parser.add_argument("folder", nargs="?", default="examples/shapes", type=Path)
    args = parser.parse_args(argv)
    items = make_example_folder(args.folder)
    print(f"wrote {len(items)} drawings and their captions to {args.folder}", file=sys.stderr)
    print(shapes_clip_path())
    return 0


if __name__ == "__main__":
    sys.exit(main())
