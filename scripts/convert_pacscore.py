"""Convert the PAC-S authors' checkpoint into a transformers CLIP folder, and optionally push it to the Hub.

The authors publish ``clip_ViT-B-32.pth`` and ``openClip_ViT-L-14.pth`` on Google Drive (see
https://github.com/aimagelab/pacscore). Convert one once; afterwards ``checkpoint="<folder>"`` or, once
pushed, ``checkpoint="<org>/<name>"`` works everywhere, with safetensors weights and no pickle.

Examples:
    .venv/bin/python scripts/convert_pacscore.py checkpoints/clip_ViT-B-32.pth pacs-vit-b32
    .venv/bin/python scripts/convert_pacscore.py checkpoints/openClip_ViT-L-14.pth pacs-vit-l14 \\
        --push-to my-org/pacscore-vit-l14
The base model (openai/clip-vit-base-patch32 or laion/CLIP-ViT-L-14-laion2B-s32B-b82K) must be reachable
(Hub or local cache) or given as a local folder with --model.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from capeval.clip.checkpoints.convert import convert_pacscore_checkpoint, write_model_card
from capeval.clip.checkpoints.files import read_model_folder
from capeval.clip.checkpoints.locate import PROVENANCE_FILE
from capeval.integrations.hub import push_converted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint", help="the authors' .pth (or a Hub file 'org/name/file.pth')")
    parser.add_argument("output", help="folder to write the converted model to")
    parser.add_argument("--model", default=None, help="base CLIP (default: chosen from the architecture)")
    parser.add_argument("--push-to", default=None, metavar="ORG/NAME", help="Hub model repo to upload to")
    parser.add_argument("--private", action="store_true", help="create the Hub repo as private")
    parser.add_argument("--token", default=None, help="Hub token (default: the logged-in one)")
    args = parser.parse_args(argv)

    folder = convert_pacscore_checkpoint(args.checkpoint, args.output, model=args.model)
    provenance = json.loads((folder / PROVENANCE_FILE).read_text())
    write_model_card(folder, provenance, repo_id=args.push_to)
    # Read back what was written: a converted folder must hold finite fp32 tensors only.
    tensors = read_model_folder(folder)
    if not all(torch.isfinite(t).all() for t in tensors.values()):
        print(f"error: non-finite values in {folder}", file=sys.stderr)
        return 1
    print(
        f"converted {provenance['source']} ({provenance['architecture']}, sha256 {provenance['source_sha256']})"
    )
    print(f"  base model: {provenance['base_model']}")
    print(f"  written to: {folder} ({len(tensors)} tensors)")
    print(f'  use: capeval.PACScore(checkpoint="{folder}")')
    if args.push_to:
        url = push_converted(folder, args.push_to, private=args.private, token=args.token)
        print(f'  pushed to {url}; use: capeval.PACScore(checkpoint="{args.push_to}")')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
