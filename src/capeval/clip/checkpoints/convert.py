"""PAC-S weights as a self-contained transformers folder: safetensors, tokenizer, preprocessing, provenance.

``scripts/convert_pacscore.py`` runs this once; ``capeval.integrations.hub.push_converted`` uploads the
folder, after which ``checkpoint="<org>/<name>"`` works everywhere with no pickle involved.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from capeval.clip.checkpoints.hashes import file_sha256
from capeval.clip.checkpoints.layout import base_model_for
from capeval.clip.checkpoints.load import checkpoint_geometry
from capeval.clip.checkpoints.locate import PROVENANCE_FILE, ResolvedCheckpoint, resolve_checkpoint


def convert_pacscore_checkpoint(
    checkpoint: str | os.PathLike, output: str | os.PathLike, model: str | None = None
) -> Path:
    """Convert PAC-S weights into a self-contained transformers folder (safetensors, tokenizer, preprocessing).

    The folder loads with ``PACScore(checkpoint=folder)`` or ``CLIPModel.from_pretrained``; its
    ``pacscore.json`` records the source file's sha256 and the base model.

    Args:
        checkpoint: the authors' ``.pth`` (or any ``checkpoint=`` form).
        output: folder to write (created; existing files are overwritten).
        model: base model; ``None`` picks it from the checkpoint's architecture as ``PACScore`` does.

    Returns:
        Path: the output folder.
    """
    from capeval import __version__
    from capeval.clip.backbones import load_backbone

    resolved: ResolvedCheckpoint = resolve_checkpoint(checkpoint)
    geometry = checkpoint_geometry(resolved)
    base = model or (str(resolved.path) if resolved.kind == "model_folder" else base_model_for(geometry))
    backbone = load_backbone(base, device="cpu", dtype="float32", checkpoint=os.fspath(checkpoint))
    provenance = {
        "source": resolved.spec if resolved.kind != "state_dict" else Path(resolved.path).name,
        "source_sha256": file_sha256(resolved.path) if resolved.kind == "state_dict" else None,
        "source_tag": backbone.weights,
        "architecture": geometry.name,
        "base_model": backbone.name,
        "converted_with": f"capeval {__version__}",
    }
    return save_model_folder(backbone.model, backbone, output, provenance)


def save_model_folder(model, backbone, folder: str | os.PathLike, provenance: dict) -> Path:
    """Save a CLIPModel as a self-contained folder: safetensors weights, the backbone's tokenizer and
    preprocessing constants, and ``pacscore.json`` (where the weights came from).

    The constants written are the backbone's, as its origin decided them (OpenCLIP ViT-L/14 laion2b_s32b_b82k:
    mean = std = 0.5), and ``pacscore.json`` records that ``origin``, so a later load takes them from the same
    table even if the preprocessor file is edited (``capeval.clip.image_constants``)."""
    # Imported here: backbones imports this package (for weights), whose __init__ imports this module.
    from capeval.clip.backbones import write_preprocessor_config

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    backbone.tokenizer.save_pretrained(out)
    write_preprocessor_config(out, backbone.image_size, backbone.image_mean, backbone.image_std)
    if backbone.origin is not None:
        provenance = {"origin": backbone.origin, **provenance}
    (out / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")
    return out


def write_model_card(folder: str | os.PathLike, provenance: dict, repo_id: str | None = None) -> Path:
    """A README.md for a converted folder: where the weights come from and how to use them."""
    use = repo_id or str(folder)
    text = f"""---
library_name: transformers
pipeline_tag: zero-shot-image-classification
tags:
- clip
- pacscore
- image-captioning
- evaluation
---

# PAC-S weights ({provenance.get("architecture")}) as a transformers CLIPModel

The PAC-S checkpoint of Sarto et al., "Positive-Augmented Contrastive Learning for Image and Video
Captioning Evaluation" (CVPR 2023), converted without change of values from the authors' file
`{provenance.get("source")}` (sha256 `{provenance.get("source_sha256")}`, from the Google Drive folder
linked in https://github.com/aimagelab/pacscore) onto `{provenance.get("base_model")}`, by
{provenance.get("converted_with")}.

```python
import capeval
scorer = capeval.PACScore(checkpoint="{use}")
scorer(["a dog runs on the beach"], images=["dog.jpg"])
```

PAC-S = 2.0 * max(cos(image, "A photo depicts " + caption), 0); RefPAC-S adds references by harmonic mean.
The weights are the authors'; their repository states no licence for them: check their terms before reuse.
"""
    path = Path(folder) / "README.md"
    path.write_text(text)
    return path
